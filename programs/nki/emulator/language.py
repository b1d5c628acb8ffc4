"""Emulated `neuronxcc.nki.language`: exactly the subset programs/nki/kernels.py uses.

Arithmetic follows the engines' documented behaviour: inputs are cast to float32, the math runs in float32 and the
result is cast (round to nearest even) to the output dtype. Any other name raises AttributeError, so a kernel that
starts using an API the emulator does not model fails at once instead of running on a guess.
"""

from __future__ import annotations

import numpy as np

from programs.nki.emulator import limits
from programs.nki.emulator.tensors import (
    HbmAccess,
    HbmTensor,
    IndexArray,
    OnChip,
    ParDim,
    check_dtype,
    fail,
    mask_for,
    poison,
)

# data types (the nki.language names map onto NumPy / ml_dtypes dtypes, as in neuronxcc)
uint8 = limits.SUPPORTED_DTYPES["uint8"]
int8 = limits.SUPPORTED_DTYPES["int8"]
uint16 = limits.SUPPORTED_DTYPES["uint16"]
int16 = limits.SUPPORTED_DTYPES["int16"]
uint32 = limits.SUPPORTED_DTYPES["uint32"]
int32 = limits.SUPPORTED_DTYPES["int32"]
float8_e4m3 = limits.SUPPORTED_DTYPES["float8_e4m3"]
float8_e5m2 = limits.SUPPORTED_DTYPES["float8_e5m2"]
float16 = limits.SUPPORTED_DTYPES["float16"]
bfloat16 = limits.SUPPORTED_DTYPES["bfloat16"]
float32 = limits.SUPPORTED_DTYPES["float32"]
bool_ = limits.SUPPORTED_DTYPES["bool"]

# memory locations
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
shared_hbm = "shared_hbm"
private_hbm = "private_hbm"
_HBM_BUFFERS = (hbm, shared_hbm, private_hbm)


class tile_size:  # noqa: N801 - the NKI name
    pmax = limits.PMAX
    psum_fmax = limits.PSUM_FMAX
    gemm_stationary_fmax = limits.GEMM_STATIONARY_FMAX
    gemm_moving_fmax = limits.GEMM_MOVING_FMAX


def par_dim(n: int) -> ParDim:
    return ParDim(n)


def arange(start, stop=None, step=1) -> IndexArray:
    return IndexArray(np.arange(start, stop, step) if stop is not None else np.arange(start))


def affine_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


def sequential_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


# ----------------------------------------------------------------------------------------------------------------------
# allocation


def _layout(shape):
    shape = tuple(shape)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    if len(pdims) > 1:
        raise ValueError(f"shape {shape} marks {len(pdims)} partition dimensions")
    return tuple(int(s) for s in shape), (pdims[0] if pdims else 0)


def _allocate(shape, dtype, buffer, name, init):
    dtype = check_dtype(dtype, f"nl.ndarray {name or shape}")
    dims, pdim = _layout(shape)
    buffer = sbuf if buffer is None else buffer
    if init == "zeros":
        data, defined = np.zeros(dims, dtype=dtype), None
    else:
        data, defined = poison(dims, dtype), np.zeros(dims, dtype=bool)
    if buffer in _HBM_BUFFERS:
        return HbmTensor(data, defined, name=name or "hbm_tensor")
    if buffer not in (sbuf, psum):
        raise ValueError(f"unknown buffer {buffer!r}")
    return OnChip.allocate(data, defined, pdim, buffer, name or f"{buffer}{list(dims)}")


def ndarray(shape, dtype, *, buffer=None, name=""):
    return _allocate(shape, dtype, buffer, name, "uninitialised")


def zeros(shape, dtype, *, buffer=None, name=""):
    return _allocate(shape, dtype, buffer, name, "zeros")


# ----------------------------------------------------------------------------------------------------------------------
# data movement


def _hbm_access(t, api):
    if isinstance(t, HbmTensor):
        return t[...]
    if isinstance(t, HbmAccess):
        return t
    fail(
        f"{api} moves data between HBM and SBUF",
        f"{api} got a {type(t).__name__}",
        "pass an HBM tensor (kernel argument or nl.ndarray(buffer=nl.shared_hbm)) or an index of one",
        limits.PROGRAMMING_MODEL + "#memory-hierarchy",
    )


def load(src, *, mask=None, dtype=None):
    access = _hbm_access(src, "nl.load")
    values, defined, _ = access.load(mask, "nl.load")
    if dtype is not None:
        values = values.astype(check_dtype(dtype, "nl.load dtype"))
    return OnChip.allocate(values, defined, 0, sbuf, f"load({access.tensor.name})")


def store(dst, value, *, mask=None):
    access = _hbm_access(dst, "nl.store")
    _require_tile(value, "nl.store value")
    if value.dtype != access.tensor.dtype:
        fail(
            "stored tile dtype differs from the HBM tensor's",
            f"{value.dtype} tile into {access.tensor.name} ({access.tensor.dtype})",
            "produce the tile with dtype= equal to the output tensor's dtype",
            limits.NL_STORE,
        )
    access.store(value.data, value.defined, mask, "nl.store")


# ----------------------------------------------------------------------------------------------------------------------
# compute (engine arithmetic in float32)


def _require_tile(t, what):
    if not isinstance(t, OnChip):
        fail(
            "NKI compute APIs take on-chip tiles",
            f"{what} is a {type(t).__name__}",
            "nl.load the data into SBUF first",
            limits.PROGRAMMING_MODEL + "#memory-hierarchy",
        )
    if t.pdim != 0:
        fail(
            "NKI APIs take a Tile: the partition dimension must be the first dimension",
            f"{what} ({t.name}) has its partition axis at position {t.pdim}",
            "index the tensor (t[j] / t[j, ip, jf]) to get a partition-first tile",
            limits.PROGRAMMING_MODEL + "#tile-based-operations",
        )


def _out_dtype(dtype, tiles, api):
    if dtype is not None:
        return check_dtype(dtype, f"{api} dtype")
    kinds = {t.dtype for t in tiles}
    if len(kinds) > 1:
        fail(
            "mixed input dtypes without an explicit output dtype",
            f"{api} got {sorted(str(k) for k in kinds)}",
            "pass dtype= (the emulator does not guess a promotion rule; see LIMITS.md)",
            limits.API_COMMON + "#supported-data-types",
        )
    return next(iter(kinds))


def finish(result32: np.ndarray, tiles, shape, mask, dtype, api: str, min_ndim: int = 2, defined=None) -> OnChip:
    """Cast an fp32 result to `dtype`, apply the mask and the inputs' definedness, allocate the SBUF result."""
    shape = tuple(shape)
    for t in tiles:
        if t.defined is not None:
            d = np.broadcast_to(t.defined, shape)
            defined = d.copy() if defined is None else (defined & d)
    m = mask_for(mask, shape, api)
    if m is not None and not m.all():
        defined = m.copy() if defined is None else (defined & m)
    out = np.broadcast_to(result32, shape).astype(dtype)
    if defined is not None:
        out[~defined] = poison((), dtype)
    return OnChip.allocate(out, defined, 0, sbuf, api, min_ndim=min_ndim)


def elementwise(api: str, fn, operands, dtype, mask) -> OnChip:
    tiles = [o for o in operands if isinstance(o, OnChip)]
    if not tiles:
        raise TypeError(f"{api}: at least one operand must be a tile")
    for i, t in enumerate(tiles):
        _require_tile(t, f"{api} operand {i}")
    shape = np.broadcast_shapes(*(t.shape for t in tiles))
    if any(t.shape[0] != shape[0] for t in tiles):
        fail(
            "partition-axis broadcast is not implicit",
            f"{api} operands have partition sizes {[t.shape[0] for t in tiles]}",
            "broadcast across partitions explicitly with tile.broadcast_to((P, F))",
            limits.RMSNORM_TUTORIAL,
        )
    out_dtype = _out_dtype(dtype, tiles, api)
    args = [o.data.astype(np.float32) if isinstance(o, OnChip) else np.float32(o) for o in operands]
    with np.errstate(all="ignore"):
        res = fn(*args).astype(np.float32)
    return finish(res, tiles, shape, mask, out_dtype, api)


def square(x, *, dtype=None, mask=None):
    return elementwise("nl.square", np.square, [x], dtype, mask)


def rsqrt(x, *, dtype=None, mask=None):
    return elementwise("nl.rsqrt", lambda a: np.float32(1.0) / np.sqrt(a), [x], dtype, mask)


def add(x, y, *, dtype=None, mask=None):
    return elementwise("nl.add", np.add, [x, y], dtype, mask)


def multiply(x, y, *, dtype=None, mask=None):
    return elementwise("nl.multiply", np.multiply, [x, y], dtype, mask)


def broadcast_to(src, shape):
    """Partition-axis broadcast of a one-partition tile. Lowered to a TensorE matmul with a ones vector whose output
    lands in one PSUM bank (architecture guide, 'Alternative Use Case'), so the free size obeys gemm_moving_fmax and
    psum_fmax."""
    _require_tile(src, "broadcast_to source")
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(src.shape) or shape[1:] != src.shape[1:]:
        fail(
            "broadcast_to only broadcasts the partition axis here",
            f"{src.shape} -> {shape}",
            "keep the free shape; broadcast scalars along the free axis with nisa.tensor_scalar",
            limits.ARCH_GUIDE,
        )
    if src.shape[0] == shape[0]:
        return finish(src.data.astype(np.float32), [src], shape, None, src.dtype, "broadcast_to")
    if src.shape[0] != 1:
        fail(
            "partition broadcast needs a one-partition source",
            f"{src.shape} -> {shape}",
            "load the vector as a (1, F) tile",
            limits.ARCH_GUIDE,
        )
    free = int(np.prod(shape[1:]))
    limit = min(limits.GEMM_MOVING_FMAX, limits.PSUM_FMAX)
    if free > limit:
        fail(
            "partition broadcast free size exceeds gemm_moving_fmax / psum_fmax",
            f"broadcast of {free} elements per partition; one TensorE matmul into one PSUM bank moves at most {limit}",
            "broadcast in chunks of at most 512 columns",
            limits.ARCH_GUIDE + "#tensor-engine",
        )
    # the matmul's fp32 result occupies a PSUM bank until it is copied back to SBUF
    staging = OnChip.allocate(
        np.broadcast_to(src.data.astype(np.float32), shape).copy(), None, 0, psum, "broadcast_psum"
    )
    out = finish(staging.data, [src], shape, None, src.dtype, "broadcast_to")
    del staging
    return out


def __getattr__(name):
    raise AttributeError(
        f"nki.language.{name} is not emulated: the emulator covers only the subset programs/nki/kernels.py uses "
        "(extend programs/nki/emulator with its documented semantics and limits first)"
    )
