"""Emulated `neuronxcc.nki.isa`: the instructions AWS's tutorial kernels and programs/nki/kernels.py use, in the
`neuronxcc.nki` form (each instruction returns its result tile; `mask=` and `dtype=` are accepted).

Vector/Scalar/GpSimd instructions cast arithmetic inputs to float32, compute in float32 and cast the result to `dtype`
(nki.isa.tensor_reduce documentation); nc_matmul accumulates in float32 into PSUM. The standalone `nki.isa` form
(`isa_dst.py`) runs the same computations and writes them into a `dst` operand.
"""

from __future__ import annotations

import numpy as np

from programs.nki.emulator import language as nl
from programs.nki.emulator import limits
from programs.nki.emulator.constraints import fail
from programs.nki.emulator.indexing import mask_for
from programs.nki.emulator.launch import current_memory
from programs.nki.emulator.tensors import HbmAccess, HbmTensor, OnChip

# ALU operators: the nki.language functions and the NumPy ufuncs tutorials pass (np.subtract, np.multiply, ...)
_ALU = {
    nl.add: np.add,
    nl.subtract: np.subtract,
    nl.multiply: np.multiply,
    nl.divide: np.divide,
    nl.maximum: np.maximum,
    nl.minimum: np.minimum,
    nl.max: np.maximum,
    nl.min: np.minimum,
    np.add: np.add,
    np.subtract: np.subtract,
    np.multiply: np.multiply,
    np.divide: np.divide,
    np.maximum: np.maximum,
    np.minimum: np.minimum,
    np.max: np.maximum,
    np.min: np.minimum,
}

# activation functions (Scalar Engine; on hardware piece-wise polynomial approximations, here exact float32)
_ACTIVATION = {
    nl.exp: np.exp,
    nl.log: np.log,
    nl.sqrt: np.sqrt,
    nl.rsqrt: lambda a: np.float32(1.0) / np.sqrt(a),
    nl.square: np.square,
    nl.tanh: np.tanh,
    nl.copy: lambda a: a,
    nl.abs: np.abs,
    nl.reciprocal: lambda a: np.float32(1.0) / a,
    np.exp: np.exp,
    np.square: np.square,
    np.sqrt: np.sqrt,
    np.tanh: np.tanh,
}


def alu(op, api):
    if op not in _ALU:
        raise NotImplementedError(
            f"{api}: op {getattr(op, '__name__', op)!r} is not emulated (add, subtract, multiply, "
            "divide, maximum, minimum)"
        )
    return _ALU[op]


def tensor_reduce_value(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, place=True):
    return nl.reduce(
        "nisa.tensor_reduce",
        alu(op, "nisa.tensor_reduce"),
        data,
        axis,
        dtype=dtype,
        mask=mask,
        keepdims=keepdims,
        negate=negate,
        place=place,
    )


def _scalar_operand(operand, data, api, which):
    if isinstance(operand, OnChip):
        nl.require_tile(operand, f"{api} {which}")
        if operand.shape[0] != data.shape[0] or operand.data.size != data.shape[0]:
            fail(
                "tensor_scalar operands are scalars or one value per partition",
                f"{api} {which} has shape {operand.shape}, data has {data.shape[0]} partitions",
                f"pass a ({data.shape[0]}, 1) tile (e.g. a reduction with keepdims=True) or a Python number",
                limits.TENSOR_SCALAR,
            )
        return nl.aligned(operand.data.reshape(data.shape[0], 1), data.ndim).astype(np.float32), operand
    if isinstance(operand, (int, float, np.floating, np.integer)):
        return np.float32(operand), None
    raise TypeError(f"{api} {which}: expected a tile or a compile-time constant, got {type(operand).__name__}")


def tensor_scalar_value(
    data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None, mask=None, place=True
):
    api = "nisa.tensor_scalar"
    nl.require_tile(data, api)
    tiles = [data]
    x = data.data.astype(np.float32)
    a, t = _scalar_operand(operand0, data, api, "operand0")
    tiles += [t] if t is not None else []
    f0 = alu(op0, api)
    with np.errstate(all="ignore"):
        x = f0(a, x) if reverse0 else f0(x, a)
        if op1 is not None:
            b, t = _scalar_operand(operand1, data, api, "operand1")
            tiles += [t] if t is not None else []
            f1 = alu(op1, api)
            x = f1(b, x) if reverse1 else f1(x, b)
    return _finish_like(data, x, tiles[1:], mask, dtype, api, place)


def _finish_like(data, x, operands, mask, dtype, api, place):
    """The float32 result `x` of an instruction on `data` with per-partition `operands`, as a tile shaped like data."""
    rtype = nl.out_dtype(dtype, [data], api)
    m = mask_for(mask, data.shape, api, [data.layout])
    defined = _per_partition_defined(operands, data.shape)
    return nl.finish(np.asarray(x, np.float32), [data], data.shape, None, rtype, api, m=m, place=place, defined=defined)


def _per_partition_defined(operands, shape):
    defined = None
    for t in operands:
        if t.defined is not None:
            d = np.broadcast_to(t.defined.reshape(shape[0], *([1] * (len(shape) - 1))), shape)
            defined = d.copy() if defined is None else (defined & d)
    return defined


def tensor_tensor_value(data1, data2, op, *, dtype=None, mask=None, place=True):
    api = "nisa.tensor_tensor"
    nl.require_tile(data1, f"{api} data1")
    nl.require_tile(data2, f"{api} data2")
    if data1.shape[0] != data2.shape[0] or data1.data.size != data2.data.size:
        fail(
            "tensor_tensor inputs need the same partition size and the same number of elements per partition",
            f"{api}: {data1.shape} vs {data2.shape}",
            "broadcast explicitly first (tile.broadcast_to)",
            limits.TENSOR_TENSOR,
        )
    if data2.shape != data1.shape:
        data2 = OnChip(
            data2.data.reshape(data1.shape),
            None if data2.defined is None else data2.defined.reshape(data1.shape),
            0,
            data2.buffer,
            data2.name,
        )
    rtype = nl.out_dtype(dtype, [data1, data2], api)
    fn = alu(op, api)
    with np.errstate(all="ignore"):
        res = fn(data1.data.astype(np.float32), data2.data.astype(np.float32))
    return nl.finish(res, [data1, data2], data1.shape, mask, rtype, api, place=place)


def tensor_copy_value(src, *, mask=None, dtype=None, place=True):
    nl.require_tile(src, "nisa.tensor_copy")
    rtype = src.dtype if dtype is None else nl.out_dtype(dtype, [src], "nisa.tensor_copy")
    return nl.finish(src.data.astype(np.float32), [src], src.shape, mask, rtype, "nisa.tensor_copy", place=place)


def activation_value(op, data, *, bias=None, scale=1.0, mask=None, dtype=None, place=True):
    api = "nisa.activation"
    nl.require_tile(data, api)
    if op not in _ACTIVATION:
        raise NotImplementedError(f"{api}: op {getattr(op, '__name__', op)!r} is not emulated")
    x = data.data.astype(np.float32)
    tiles = [data]
    s, t = _scalar_operand(scale, data, api, "scale")
    tiles += [t] if t is not None else []
    with np.errstate(all="ignore"):
        x = x * s
        if bias is not None:
            b, t = _scalar_operand(bias, data, api, "bias")
            tiles += [t] if t is not None else []
            x = x + b
        x = _ACTIVATION[op](x)
    return _finish_like(data, x, tiles[1:], mask, dtype, api, place)


def nc_matmul_value(stationary, moving, *, mask=None, place=True, **_):
    """stationary.T @ moving on the Tensor Engine (`nl.tensor_engine_matmul`)."""
    return nl.tensor_engine_matmul("nisa.nc_matmul", stationary, moving, mask=mask, place=place)


def bn_stats_value(data, *, mask=None, dtype=None, place=True):
    """Per partition, two (count, mean, variance * count) tuples (6 values) over the free elements: the first and
    the second half of the predicated elements. Free size <= bn_stats_fmax (512)."""
    api = "nisa.bn_stats"
    nl.require_tile(data, api)
    free = data.data.size // data.shape[0]
    if free > limits.BN_STATS_FMAX:
        fail(
            "bn_stats free size exceeds nl.tile_size.bn_stats_fmax",
            f"{api} on {free} elements per partition",
            "split the free axis into chunks of at most 512 and aggregate with bn_aggr",
            limits.BN_STATS,
        )
    m = mask_for(mask, data.shape, api, [data.layout])
    nl.check_oob([data], data.shape, m, api)
    x = data.data.astype(np.float64).reshape(data.shape[0], -1)
    considered = (np.ones(data.shape, bool) if m is None else m).reshape(data.shape[0], -1)
    out = np.zeros((data.shape[0], 6), np.float64)
    for p in range(data.shape[0]):
        vals = x[p][considered[p]]
        for h, part in enumerate(np.array_split(vals, 2)):
            c = part.size
            mu = part.mean() if c else 0.0
            out[p, 3 * h : 3 * h + 3] = (c, mu, ((part - mu) ** 2).sum() if c else 0.0)
    rtype = nl.float32 if dtype is None else nl.out_dtype(dtype, [data], api)
    return nl.finish(
        out.astype(np.float32),
        [],
        out.shape,
        None,
        rtype,
        api,
        defined=_partition_defined(data, considered, 6),
        place=place,
    )


def _partition_defined(data, considered, width):
    """A partition's statistics are defined when every element it reads is (undefined rows of a partial tile give
    undefined statistics, which a masked store then skips)."""
    if data.defined is None:
        return None
    ok = (~considered | data.defined.reshape(considered.shape)).all(axis=1)
    return None if ok.all() else np.repeat(ok[:, None], width, axis=1)


def bn_aggr_value(data, *, mask=None, dtype=None, place=True):
    """Mean and (population) variance per partition from bn_stats tuples; float32 arithmetic."""
    api = "nisa.bn_aggr"
    nl.require_tile(data, api)
    flat = data.data.astype(np.float64).reshape(data.shape[0], -1)
    if flat.shape[1] % 3:
        fail(
            "bn_aggr takes (count, mean, variance * count) tuples",
            f"{flat.shape[1]} elements per partition",
            "pass whole bn_stats outputs",
            limits.BN_AGGR,
        )
    t = flat.reshape(data.shape[0], -1, 3)
    count = t[..., 0].sum(axis=1)
    mean = (t[..., 0] * t[..., 1]).sum(axis=1) / np.maximum(count, 1)
    m2 = (t[..., 2] + t[..., 0] * (t[..., 1] - mean[:, None]) ** 2).sum(axis=1)
    res = np.stack([mean, m2 / np.maximum(count, 1)], axis=1).astype(np.float32)
    rtype = data.dtype if dtype is None else nl.out_dtype(dtype, [data], api)
    defined = _partition_defined(data, np.ones(flat.shape, bool), 2)
    return nl.finish(res, [], res.shape, mask, rtype, api, defined=defined, place=place)


def dma_copy_into(dst, src, *, mask=None) -> None:
    """A DMA between HBM and on-chip memory (either direction) or within one of them; same element count, partition
    axis preserved; the source is cast to the destination's dtype."""
    api = "nisa.dma_copy"
    current_memory().count("dma")
    if isinstance(src, (HbmTensor, HbmAccess)):
        values, defined, _, _ = nl.hbm_access(src, api).load(mask, api)
    else:
        nl.require_tile(src, f"{api} src")
        values, defined = src.data, src.defined
    if isinstance(dst, (HbmTensor, HbmAccess)):
        access = nl.hbm_access(dst, api)
        access.store(values.astype(access.tensor.dtype), defined, mask, api)
        return
    if not isinstance(dst, OnChip):
        raise TypeError(f"{api}: dst must be an HBM or on-chip tensor, got {type(dst).__name__}")
    value = OnChip(values.astype(dst.dtype), defined, 0, dst.buffer, api)
    dst.write_all(value)


# ----------------------------------------------------------------------------------------------------------------------
# the neuronxcc.nki.isa signatures


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **_):
    return tensor_reduce_value(op, data, axis, mask=mask, dtype=dtype, negate=negate, keepdims=keepdims)


def tensor_scalar(
    data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None, mask=None, **_
):
    return tensor_scalar_value(data, op0, operand0, reverse0, op1, operand1, reverse1, dtype=dtype, mask=mask)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, **_):
    return tensor_tensor_value(data1, data2, op, dtype=dtype, mask=mask)


def tensor_copy(src, *, mask=None, dtype=None, **_):
    return tensor_copy_value(src, mask=mask, dtype=dtype)


def activation(op, data, *, bias=None, scale=1.0, mask=None, dtype=None, **_):
    return activation_value(op, data, bias=bias, scale=scale, mask=mask, dtype=dtype)


def nc_matmul(stationary, moving, *, mask=None, **kwargs):
    return nc_matmul_value(stationary, moving, mask=mask, **kwargs)


def bn_stats(data, *, mask=None, dtype=None, **_):
    return bn_stats_value(data, mask=mask, dtype=dtype)


def bn_aggr(data, *, mask=None, dtype=None, **_):
    return bn_aggr_value(data, mask=mask, dtype=dtype)


def dma_copy(*, dst, src, mask=None, **_):
    dma_copy_into(dst, src, mask=mask)


def __getattr__(name):
    raise AttributeError(
        f"nki.isa.{name} is not emulated: the emulator covers the instructions of AWS's tutorial kernels and "
        "programs/nki/kernels.py"
    )
