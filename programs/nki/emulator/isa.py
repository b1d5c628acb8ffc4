"""Emulated `neuronxcc.nki.isa`: the three instructions programs/nki/kernels.py uses.

tensor_reduce, tensor_scalar and tensor_tensor run on the Vector/Scalar/GpSimd engines, which cast arithmetic inputs
to float32, compute in float32 and cast the result to `dtype` (nki.isa.tensor_reduce documentation).
"""

from __future__ import annotations

import numpy as np

from programs.nki.emulator import language as nl
from programs.nki.emulator import limits
from programs.nki.emulator.tensors import OnChip, fail, mask_for

_ARITHMETIC = {nl.add: np.add, nl.multiply: np.multiply}


def _op(op, api):
    if op not in _ARITHMETIC:
        raise NotImplementedError(
            f"{api}: op {getattr(op, '__name__', op)!r} is not emulated (only nl.add, nl.multiply)"
        )
    return _ARITHMETIC[op]


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False):
    api = "nisa.tensor_reduce"
    nl._require_tile(data, api)
    fn = _op(op, api)
    axes = sorted([axis] if isinstance(axis, int) else list(axis))
    nd = len(data.shape)
    if 0 in axes or axes != list(range(nd - len(axes), nd)) or not axes:
        fail(
            "reduction axes must be free axes ending at the last one ([1], [1, 2], ...); never the partition axis 0",
            f"{api} over axis {axis} of a {nd}-d tile",
            "map the reduced axis to the free dimension (rows on partitions, reduce along axis=[1])",
            limits.TENSOR_REDUCE,
        )
    out_dtype = nl._out_dtype(dtype, [data], api)
    x = data.data.astype(np.float32)
    m = mask_for(mask, data.shape, api)
    considered = np.ones(data.shape, dtype=bool) if m is None else m
    if m is not None:
        x = np.where(m, x, np.float32(0.0))
    ax = tuple(axes)
    with np.errstate(all="ignore"):
        res = fn.reduce(x, axis=ax, keepdims=True, dtype=np.float32)
    if negate:
        res = -res
    # an output element is defined when its slice had at least one predicated-in element, all of them defined
    defined = None
    if m is not None or data.defined is not None:
        defined = considered.any(axis=ax, keepdims=True)
        if data.defined is not None:
            defined = defined & (~considered | data.defined).all(axis=ax, keepdims=True)
        if defined.all():
            defined = None
    out_shape = res.shape if keepdims else tuple(s for i, s in enumerate(res.shape) if i not in ax)
    res = res.reshape(out_shape)
    if defined is not None:
        defined = defined.reshape(out_shape)
    return nl.finish(res, [], out_shape, None, out_dtype, api, min_ndim=1, defined=defined)


def _scalar_operand(operand, data, api, which):
    if isinstance(operand, OnChip):
        nl._require_tile(operand, f"{api} {which}")
        if tuple(operand.shape) != (data.shape[0], 1):
            fail(
                "tensor_scalar operands are scalars or one value per partition",
                f"{api} {which} has shape {operand.shape}, data has {data.shape[0]} partitions",
                f"pass a ({data.shape[0]}, 1) tile (e.g. a reduction with keepdims=True) or a Python number",
                limits.TENSOR_SCALAR,
            )
        return operand.data.astype(np.float32), operand
    if isinstance(operand, (int, float, np.floating, np.integer)):
        return np.float32(operand), None
    raise TypeError(f"{api} {which}: expected a tile or a compile-time constant, got {type(operand).__name__}")


def tensor_scalar(
    data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None, mask=None, engine=None
):
    api = "nisa.tensor_scalar"
    nl._require_tile(data, api)
    tiles = [data]
    x = data.data.astype(np.float32)
    a, t = _scalar_operand(operand0, data, api, "operand0")
    tiles += [t] if t is not None else []
    f0 = _op(op0, api)
    with np.errstate(all="ignore"):
        x = f0(a, x) if reverse0 else f0(x, a)
        if op1 is not None:
            b, t = _scalar_operand(operand1, data, api, "operand1")
            tiles += [t] if t is not None else []
            f1 = _op(op1, api)
            x = f1(b, x) if reverse1 else f1(x, b)
    out_dtype = nl._out_dtype(dtype, [data], api)
    return nl.finish(np.asarray(x, dtype=np.float32), tiles, data.shape, mask, out_dtype, api)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None):
    api = "nisa.tensor_tensor"
    nl._require_tile(data1, f"{api} data1")
    nl._require_tile(data2, f"{api} data2")
    if data1.shape != data2.shape:
        fail(
            "tensor_tensor inputs must have the same shape",
            f"{api}: {data1.shape} vs {data2.shape}",
            "broadcast explicitly first (tile.broadcast_to)",
            limits.TENSOR_SCALAR.replace("tensor_scalar", "tensor_tensor"),
        )
    out_dtype = nl._out_dtype(dtype, [data1, data2], api)
    fn = _op(op, api)
    with np.errstate(all="ignore"):
        res = fn(data1.data.astype(np.float32), data2.data.astype(np.float32))
    return nl.finish(res, [data1, data2], data1.shape, mask, out_dtype, api)


def __getattr__(name):
    raise AttributeError(
        f"nki.isa.{name} is not emulated: the emulator covers only the subset programs/nki/kernels.py uses"
    )
