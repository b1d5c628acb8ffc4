"""Emulated `nki.language` (both the `neuronxcc.nki.language` and the standalone `nki.language` spellings): the
subset AWS's public tutorial kernels and programs/nki/kernels.py use.

Arithmetic follows the engines' documented behaviour: inputs are cast to float32, the math runs in float32 and the
result is cast (round to nearest even) to the output dtype. Operands broadcast partition-first: a (P,) or (P, 1) tile
against a (P, F) tile supplies one value per partition; a (1, F) tile is broadcast across partitions (nl.add docs).
Any name not defined here raises AttributeError, so a kernel that starts using an API the emulator does not model fails
at once instead of running on a guess.
"""

from __future__ import annotations

import builtins

import numpy as np

from programs.nki.emulator import limits
from programs.nki.emulator.constraints import check_dtype, fail
from programs.nki.emulator.indexing import IndexArray, mask_for
from programs.nki.emulator.launch import current_launch, current_memory
from programs.nki.emulator.tensors import TILE_FUNCTIONS, HbmAccess, HbmTensor, OnChip, ParDim, poison

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
    bn_stats_fmax = limits.BN_STATS_FMAX


def par_dim(n: int) -> ParDim:
    return ParDim(n)


def arange(start, stop=None, step=1) -> IndexArray:
    return IndexArray(np.arange(start, stop, step) if stop is not None else np.arange(start))


class _Grid(tuple):
    """The index expressions nl.mgrid returns; `grid.p` / `grid.x` name the first two (nl.mgrid docs)."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]


class _MGrid:
    """nl.mgrid[0:P, 0:F, ...]: one index expression per grid axis, each varying along its own axis only (an open grid;
    broadcast together they give NumPy's dense mgrid, which is what the docs describe)."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(k, slice) for k in key):
            raise TypeError("nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
        return _Grid(IndexArray(a) for a in np.ogrid[key])


mgrid = _MGrid()


def affine_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


def sequential_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


def static_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


# ----------------------------------------------------------------------------------------------------------------------
# SPMD


def program_id(axis=0) -> int:
    """Index of the current program along `axis` of the launch grid (nl.program_id)."""
    launch = current_launch()
    if axis >= len(launch.grid):
        if not launch.grid and axis == 0:
            return 0
        fail(
            "program_id axis outside the launch grid",
            f"axis {axis} of a {len(launch.grid)}-d grid {launch.grid}",
            "launch the kernel with kernel[grid](...) covering that axis",
            limits.PROGRAM_ID,
        )
    return launch.program_id[axis]


def num_programs(axes=None) -> int:
    """Programs along `axes` of the launch grid, or in the whole grid (nl.num_programs)."""
    grid = current_launch().grid or (1,)
    if axes is None:
        return int(np.prod(grid))
    axes = [axes] if isinstance(axes, int) else list(axes)
    return int(np.prod([grid[a] for a in axes]))


def program_ndim() -> int:
    return len(current_launch().grid)


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
        return _hbm_tensor(data, defined, name, shared=buffer != private_hbm)
    if buffer not in (sbuf, psum):
        raise ValueError(f"unknown buffer {buffer!r}")
    return OnChip.allocate(data, defined, pdim, buffer, name or f"{buffer}{list(dims)}", min_ndim=2)


def _hbm_tensor(data, defined, name, shared):
    """A new HBM tensor; in an SPMD launch the k-th shared one of every program is the same tensor."""
    if not shared:
        return HbmTensor(data, defined, name=name or "hbm_tensor")
    launch = current_launch()
    k = launch.hbm_cursor
    launch.hbm_cursor += 1
    if k < len(launch.shared_hbm):
        t = launch.shared_hbm[k]
        if t.shape != data.shape or t.dtype != data.dtype:
            fail(
                "SPMD programs disagree on a shared HBM tensor",
                f"program {launch.program_id} declares {data.shape} {data.dtype}, another {t.shape} {t.dtype}",
                "declare shared_hbm outputs identically in every program",
                limits.PROGRAM_ID,
            )
        return t
    t = HbmTensor(data, defined, name=name or "hbm_tensor")
    launch.shared_hbm.append(t)
    return t


def ndarray(shape, dtype, *, buffer=None, name=""):
    return _allocate(shape, dtype, buffer, name, "uninitialised")


def zeros(shape, dtype, *, buffer=None, name=""):
    return _allocate(shape, dtype, buffer, name, "zeros")


# ----------------------------------------------------------------------------------------------------------------------
# data movement


def hbm_access(t, api):
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
    access = hbm_access(src, "nl.load")
    values, defined, _, layout = access.load(mask, "nl.load")
    current_memory().count("dma")
    if dtype is not None:
        values = values.astype(check_dtype(dtype, "nl.load dtype"))
    t = OnChip.allocate(values, defined, 0, sbuf, f"load({access.tensor.name})", min_ndim=2)
    t.layout = layout
    return t


def store(dst, value, *, mask=None):
    access = hbm_access(dst, "nl.store")
    require_tile(value, "nl.store value")
    if value.dtype != access.tensor.dtype:
        fail(
            "stored tile dtype differs from the HBM tensor's",
            f"{value.dtype} tile into {access.tensor.name} ({access.tensor.dtype})",
            "produce the tile with dtype= equal to the output tensor's dtype",
            limits.NL_STORE,
        )
    current_memory().count("dma")
    access.store(value.data, value.defined, mask, "nl.store")


# ----------------------------------------------------------------------------------------------------------------------
# compute (engine arithmetic in float32)


def require_tile(t, what):
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


_FLOAT_RANK = {float8_e4m3: 0, float8_e5m2: 0, float16: 1, bfloat16: 1, float32: 2}


def promote(dtypes) -> np.dtype:
    """NKI type promotion of an instruction's inputs: the higher-precision type; float16 with bfloat16 gives float32;
    a float with an integer gives the float (API common fields, 'NKI Type Promotion')."""
    kinds = list(dict.fromkeys(np.dtype(d) for d in dtypes))
    if len(kinds) == 1:
        return kinds[0]
    floats = [d for d in kinds if d in _FLOAT_RANK]
    if not floats:
        return builtins.max(kinds, key=lambda d: d.itemsize)
    top = builtins.max(_FLOAT_RANK[d] for d in floats)
    best = [d for d in floats if _FLOAT_RANK[d] == top]
    return best[0] if len(best) == 1 else float32


def out_dtype(dtype, tiles, api):
    if dtype is not None:
        return check_dtype(dtype, f"{api} dtype")
    return promote(t.dtype for t in tiles)


def aligned(t, ndim: int) -> np.ndarray:
    """A tile's data (or an array) with trailing size-1 axes up to `ndim`: partition-first broadcasting, so that a
    (P,) statistic meets a (P, F) tile one value per partition (NumPy's trailing-axis rule would spread it along F)."""
    a = t.data if isinstance(t, OnChip) else t
    return a.reshape(a.shape + (1,) * (ndim - a.ndim))


def _aligned_mask(a, ndim):
    return None if a is None else a.reshape(a.shape + (1,) * (ndim - a.ndim))


def check_oob(tiles, shape, m, api):
    for t in tiles:
        if t.oob is None:
            continue
        oob = np.broadcast_to(_aligned_mask(t.oob, len(shape)), shape)
        bad = oob if m is None else (oob & m)
        if bad.any():
            fail(
                "out-of-bounds on-chip access",
                f"{api} reads {int(bad.sum())} elements of {t.name} outside the tensor",
                "mask the instruction with the predicate that keeps the index inside the tile",
                limits.API_COMMON + "#nki-api-masking",
            )


def finish(result32: np.ndarray, tiles, shape, mask, dtype, api: str, defined=None, m=None, place=True) -> OnChip:
    """Cast an fp32 result to `dtype`, apply the mask and the inputs' definedness, allocate the SBUF result."""
    shape = tuple(shape)
    if m is None:
        m = mask_for(mask, shape, api, [t.layout for t in tiles])
    check_oob(tiles, shape, m, api)
    for t in tiles:
        if t.defined is not None:
            d = np.broadcast_to(_aligned_mask(t.defined, len(shape)), shape)
            defined = d.copy() if defined is None else (defined & d)
    if m is not None and not m.all():
        defined = m.copy() if defined is None else (defined & m)
    out = np.broadcast_to(result32, shape).astype(dtype)
    if defined is not None:
        out[~defined] = poison((), dtype)
    current_memory().count("compute")
    if not place:  # a dst-style instruction: the value goes straight into its destination
        return OnChip(out, defined, 0, sbuf, api)
    return OnChip.allocate(out, defined, 0, sbuf, api)


def elementwise(api: str, fn, operands, dtype, mask, place=True) -> OnChip:
    tiles = [o for o in operands if isinstance(o, OnChip)]
    if not tiles:
        raise TypeError(f"{api}: at least one operand must be a tile")
    for i, o in enumerate(operands):
        if isinstance(o, OnChip):
            require_tile(o, f"{api} operand {i}")
        elif not isinstance(o, (int, float, np.integer, np.floating)):
            require_tile(o, f"{api} operand {i}")
    ndim = builtins.max(t.ndim for t in tiles)
    try:
        shape = np.broadcast_shapes(*(aligned(t, ndim).shape for t in tiles))
    except ValueError:
        fail(
            "operand shapes do not broadcast",
            f"{api} got {[t.shape for t in tiles]}",
            "match the shapes, or give one operand size 1 on the axis to broadcast (partition axis first)",
            limits.NL_ADD,
        )
    rtype = out_dtype(dtype, tiles, api)
    args = [aligned(o, ndim).astype(np.float32) if isinstance(o, OnChip) else np.float32(o) for o in operands]
    with np.errstate(all="ignore"):
        res = np.asarray(fn(*args), dtype=np.float32)
    return finish(res, tiles, shape, mask, rtype, api, place=place)


def _unary(name, fn):
    def api(x, *, dtype=None, mask=None, **_):
        return elementwise(f"nl.{name}", fn, [x], dtype, mask)

    api.__name__ = name
    api.__doc__ = f"nl.{name}: element-wise, computed in float32."
    return api


def _binary(name, fn):
    def api(x, y, *, dtype=None, mask=None, **_):
        return elementwise(f"nl.{name}", fn, [x, y], dtype, mask)

    api.__name__ = name
    api.__doc__ = f"nl.{name}: element-wise, operands broadcast partition-first, computed in float32."
    return api


exp = _unary("exp", np.exp)
log = _unary("log", np.log)
sqrt = _unary("sqrt", np.sqrt)
rsqrt = _unary("rsqrt", lambda a: np.float32(1.0) / np.sqrt(a))
square = _unary("square", np.square)
abs = _unary("abs", np.abs)  # noqa: A001 - the NKI name
negative = _unary("negative", np.negative)
reciprocal = _unary("reciprocal", lambda a: np.float32(1.0) / a)
tanh = _unary("tanh", np.tanh)
add = _binary("add", np.add)
subtract = _binary("subtract", np.subtract)
multiply = _binary("multiply", np.multiply)
divide = _binary("divide", np.divide)
maximum = _binary("maximum", np.maximum)
minimum = _binary("minimum", np.minimum)
power = _binary("power", np.power)


def copy(src, *, dtype=None, mask=None, **_):
    """nl.copy: an element-wise copy of a tile (to `dtype` if given)."""
    require_tile(src, "nl.copy")
    return elementwise("nl.copy", lambda a: a, [src], dtype, mask)


# ----------------------------------------------------------------------------------------------------------------------
# reductions along the free axes


_IDENTITY = {np.add: 0.0, np.maximum: -np.inf, np.minimum: np.inf, np.multiply: 1.0}


def reduction_axes(api, x, axis) -> list:
    """The free axes a reduction of tile `x` may take (nl.sum, nisa.tensor_reduce): never the partition axis 0; of a
    tile with at most four free axes, the hardware access pattern's limit (NKI access patterns). A stored tile reduces
    its last contiguous free axes ([2] or [1, 2] of a 3-d tile). A view selected by index expressions is an access
    pattern the compiler builds, whose axes it orders so that the reduced ones come innermost: any of its free axes
    reduce, as AWS's average_pool2d tutorial reduces axes [2, 4] of its 5-d pooling view."""
    axes = sorted([axis] if isinstance(axis, int) else list(axis))
    nd = x.ndim
    if not axes or len(set(axes)) != len(axes) or any(a < 1 or a >= nd for a in axes):
        fail(
            "reduction axes are free axes of the tile, never the partition axis 0",
            f"{api} over axis {axis} of a {nd}-d tile",
            "map the reduced axis to the free dimension (rows on partitions, reduce along axis=[1])",
            limits.NL_SUM,
        )
    free = [n for n in x.shape[1:] if n != 1]
    if len(free) > limits.MAX_FREE_AXES:
        fail(
            "a reduction reads at most four free axes (one hardware access pattern)",
            f"{api} on a tile of shape {x.shape} with {len(free)} free axes",
            "reduce in two steps, or fold free axes together in the index expressions",
            limits.NKI_TENSOR,
        )
    if not x.expression_view and axes != list(range(nd - len(axes), nd)):
        fail(
            "reduction axes of a stored tile must be its last contiguous free axes ([2] or [1, 2] of a 3-d tile)",
            f"{api} over axis {axis} of a stored {nd}-d tile {x.shape}",
            "reduce a view indexed with nl.arange / nl.mgrid expressions (its axes are an access pattern), or lay "
            "the reduced axes out last",
            limits.NL_SUM,
        )
    return axes


def reduce(
    api, ufunc, x, axis, *, dtype=None, mask=None, keepdims=False, negate=False, mean=False, place=True
) -> OnChip:
    """Reduce a tile along free axes (`reduction_axes`), in float32."""
    require_tile(x, api)
    axes = reduction_axes(api, x, axis)
    rtype = out_dtype(dtype, [x], api)
    m = mask_for(mask, x.shape, api, [x.layout])
    check_oob([x], x.shape, m, api)
    considered = np.ones(x.shape, dtype=bool) if m is None else m
    x32 = x.data.astype(np.float32)
    if m is not None:
        x32 = np.where(m, x32, np.float32(_IDENTITY[ufunc]))
    ax = tuple(axes)
    with np.errstate(all="ignore"):
        res = ufunc.reduce(x32, axis=ax, keepdims=True, dtype=np.float32)
        if mean:
            res = res / np.maximum(considered.sum(axis=ax, keepdims=True), 1).astype(np.float32)
    if negate:
        res = -res
    # an output element is defined when its slice had at least one predicated-in element, all of them defined
    defined = None
    if m is not None or x.defined is not None:
        defined = considered.any(axis=ax, keepdims=True)
        if x.defined is not None:
            defined = defined & (~considered | x.defined).all(axis=ax, keepdims=True)
        if defined.all():
            defined = None
    out_shape = res.shape if keepdims else tuple(s for i, s in enumerate(res.shape) if i not in ax)
    res = res.reshape(out_shape)
    if defined is not None:
        defined = defined.reshape(out_shape)
    return finish(res, [], out_shape, None, rtype, api, defined=defined, place=place)


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **_):  # noqa: A001 - the NKI name
    return reduce("nl.sum", np.add, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **_):
    return reduce("nl.mean", np.add, x, axis, dtype=dtype, mask=mask, keepdims=keepdims, mean=True)


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **_):  # noqa: A001 - the NKI name
    return reduce("nl.max", np.maximum, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **_):  # noqa: A001 - the NKI name
    return reduce("nl.min", np.minimum, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


# ----------------------------------------------------------------------------------------------------------------------
# matrix multiplication on the Tensor Engine


def tensor_engine_matmul(api, stationary, moving, *, mask=None, place=True) -> OnChip:
    """stationary.T @ moving (nki.isa.nc_matmul): SBUF inputs, contraction over the partition axis (equal sizes,
    <= 128), stationary free size <= 128, moving free size <= 512; float32 accumulation, result in PSUM."""
    for name, t in (("stationary", stationary), ("moving", moving)):
        require_tile(t, f"{api} {name}")
        if t.ndim != 2:
            fail(
                "nc_matmul operands are 2-D tiles",
                f"{api} {name} has shape {t.shape}",
                "index a 2-D tile",
                limits.NC_MATMUL,
            )
        if t.buffer != sbuf:
            fail(
                "the nc_matmul instruction must read inputs from SBUF",
                f"{api} {name} ({t.name}) is in {t.buffer.upper()}",
                "copy the tile to SBUF first (nl.copy of a PSUM tile)",
                limits.NC_MATMUL,
            )
    k, m_ = stationary.shape
    k2, n = moving.shape
    if k != k2:
        fail(
            "nc_matmul contraction (partition) sizes differ",
            f"{api}: stationary {stationary.shape}, moving {moving.shape}",
            "load both operands with the contraction dimension on the partitions",
            limits.NC_MATMUL,
        )
    if m_ > limits.GEMM_STATIONARY_FMAX or n > limits.GEMM_MOVING_FMAX:
        fail(
            "nc_matmul free sizes exceed gemm_stationary_fmax (128) / gemm_moving_fmax (512)",
            f"{api}: stationary free {m_}, moving free {n}",
            "tile M by 128 and N by 512",
            limits.NC_MATMUL,
        )
    with np.errstate(all="ignore"):
        res = stationary.data.astype(np.float32).T @ moving.data.astype(np.float32)
    defined = None
    if stationary.defined is not None or moving.defined is not None:
        sd = np.ones(stationary.shape, bool) if stationary.defined is None else stationary.defined
        md = np.ones(moving.shape, bool) if moving.defined is None else moving.defined
        defined = sd.all(axis=0)[:, None] & md.all(axis=0)[None, :]
    out = finish(res, [], (m_, n), mask, float32, api, defined=defined, place=False)
    if not place:
        return out
    return OnChip.allocate(out.data, out.defined, 0, psum, api)


def _matmul_operand(t, which, pmax, fmax):
    """nl.matmul's operand rule, in the documentation's words: a tile on SBUF with the given dimension bounds."""
    require_tile(t, f"nl.matmul {which}")
    if t.ndim != 2 or t.buffer != sbuf or t.shape[0] > pmax or t.shape[1] > fmax:
        fail(
            f"nl.matmul {which} must be a tile on SBUF (partition dimension <= {pmax}, free dimension <= {fmax})",
            f"{which} ({t.name}) is a {t.buffer.upper()} tile of shape {t.shape}",
            "tile the operands: contraction and M by 128, N by 512 (nl.tile_size.pmax / gemm_stationary_fmax / "
            "gemm_moving_fmax)",
            limits.NL_MATMUL,
        )


def matmul(x, y, *, transpose_x=False, mask=None, **_):
    """nl.matmul: x @ y, or x.T @ y with transpose_x=True (x already transposed, its partition axis the
    contraction). It lowers to nc_matmul(transpose(x), y), so without transpose_x the compiler inserts a transpose
    instruction; the result is a float32 PSUM tile."""
    _matmul_operand(x, "x", limits.PMAX, limits.GEMM_STATIONARY_FMAX)
    _matmul_operand(y, "y", limits.PMAX, limits.GEMM_MOVING_FMAX)
    contraction = x.shape[0] if transpose_x else x.shape[1]
    if contraction != y.shape[0]:
        rule = (
            "with transpose_x=True x is treated as already transposed: its partition dimension must match y's"
            if transpose_x
            else "x's free dimension must match y's partition dimension"
        )
        fail(f"nl.matmul: {rule}", f"x {x.shape}, y {y.shape}", "contract over the same dimension", limits.NL_MATMUL)
    stationary = x
    if not transpose_x:
        stationary = OnChip(x.data.T, None if x.defined is None else x.defined.T, 0, sbuf, f"transpose({x.name})")
        current_memory().count("compute")  # the transpose instruction the compiler inserts
    return tensor_engine_matmul("nl.matmul", stationary, y, mask=mask)


# ----------------------------------------------------------------------------------------------------------------------
# broadcast


def broadcast_to(src, shape=None, *, dtype=None):
    """A tile broadcast to `shape` by NumPy's rules on equal ranks: a (1, F) tile across partitions, a (P, 1) tile
    along the free axis. The result is a new SBUF tile; the documentation sets no size limit beyond the tile's."""
    require_tile(src, "broadcast_to source")
    shape = tuple(int(s) for s in shape)
    if len(shape) != src.ndim or any(a != b and a != 1 for a, b in zip(src.shape, shape, strict=True)):
        fail(
            "broadcast_to needs the same rank and size-1 axes where the shape grows",
            f"{src.shape} -> {shape}",
            "load the vector as a (1, F) tile (or a (P, 1) column) and broadcast that",
            limits.BROADCAST_TO,
        )
    rtype = src.dtype if dtype is None else check_dtype(dtype, "broadcast_to dtype")
    return finish(src.data.astype(np.float32), [src], shape, None, rtype, "broadcast_to")


TILE_FUNCTIONS.update(
    add=add,
    subtract=subtract,
    multiply=multiply,
    divide=divide,
    power=power,
    negative=negative,
    broadcast_to=broadcast_to,
)


def __getattr__(name):
    raise AttributeError(
        f"nki.language.{name} is not emulated: the emulator covers the API of AWS's tutorial kernels and "
        "programs/nki/kernels.py (extend programs/nki/emulator with its documented semantics and limits first)"
    )
