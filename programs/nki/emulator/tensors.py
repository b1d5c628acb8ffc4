"""Tensors of the emulated NeuronCore: HBM tensors, SBUF/PSUM tensors, index expressions, masks, on-chip memory and
the launch they belong to.

Every element carries a `defined` bit (stored lazily: None means all defined). Elements a masked load skipped, a masked
instruction did not compute, or an `nl.ndarray` never initialised are undefined; they also hold NaN so that misuse is
visible in values. Storing an undefined element to HBM, or returning an output with unwritten elements, is an error:
that is how the emulator makes mask mistakes fail loudly instead of leaking garbage.
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from programs.nki.emulator import limits


class NkiConstraintError(SyntaxError):
    """A kernel broke an NKI rule. SyntaxError, as the NKI compiler reports tile-size violations (programming model)."""


class NkiSpillWarning(UserWarning):
    """Live on-chip data exceeds a memory's capacity: the Neuron compiler inserts spills and refills there (programming
    model, memory hierarchy), so the kernel still runs, more slowly."""


def fail(rule: str, seen: str, fix: str, source: str) -> None:
    raise NkiConstraintError(f"{rule}: {seen}. Fix: {fix}. [source: {source}]")


def check_dtype(dtype, what: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in limits.SUPPORTED_DTYPE_SET:
        fail(
            "unsupported NKI data type",
            f"{what} has dtype {dt}",
            f"use one of {sorted(limits.SUPPORTED_DTYPES)} (cast float64 inputs before launching)",
            limits.API_COMMON,
        )
    return dt


def poison(shape, dtype: np.dtype) -> np.ndarray:
    if dtype in limits.FLOAT_DTYPES:
        return np.full(shape, np.nan, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


# ----------------------------------------------------------------------------------------------------------------------
# Index expressions and masks


class IndexArray:
    """An affine expression of nl.arange / nl.mgrid / loop variables: an integer array that broadcasts like NumPy.

    Each axis of the broadcast index space belongs to the variables that vary along it; `AccessLayout` turns that space
    into the shape of the tile an index tuple selects."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.int64)

    @property
    def shape(self):
        return self.values.shape

    def __getitem__(self, key):
        return IndexArray(self.values[key])

    def _bin(self, other, fn):
        o = other.values if isinstance(other, IndexArray) else other
        if not isinstance(o, (int, np.integer, np.ndarray)):
            return NotImplemented
        return IndexArray(fn(self.values, o))

    def __add__(self, o):
        return self._bin(o, np.add)

    __radd__ = __add__

    def __sub__(self, o):
        return self._bin(o, np.subtract)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._bin(o, np.multiply)

    __rmul__ = __mul__

    def __floordiv__(self, o):
        return self._bin(o, np.floor_divide)

    def __mod__(self, o):
        return self._bin(o, np.mod)

    def _cmp(self, other, fn):
        o = other.values if isinstance(other, IndexArray) else other
        return Mask(fn(self.values, o))

    def __lt__(self, o):
        return self._cmp(o, np.less)

    def __le__(self, o):
        return self._cmp(o, np.less_equal)

    def __gt__(self, o):
        return self._cmp(o, np.greater)

    def __ge__(self, o):
        return self._cmp(o, np.greater_equal)


class Mask:
    """A compile-time execution predicate: comparisons of index expressions joined with `&`."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, other):
        if not isinstance(other, Mask):
            return NotImplemented
        return Mask(self.values & other.values)

    def __bool__(self):
        raise TypeError("an NKI mask is a predicate over indices, not a Python bool; pass it as mask=")


def _mask_error(what, mask_shape, shape):
    fail(
        "mask does not match the tile it predicates",
        f"{what}: mask shape {tuple(mask_shape)} vs tile shape {tuple(shape)}",
        "build the mask from the same index expressions that index the tile",
        limits.API_COMMON + "#nki-api-masking",
    )


def _check_mask_type(mask, what):
    if not isinstance(mask, Mask):
        fail(
            "mask must be a predicate over index expressions",
            f"{what} got mask of type {type(mask).__name__}",
            "build it from comparisons of nl.arange / nl.mgrid / loop-index expressions, joined with &",
            limits.API_COMMON + "#nki-api-masking",
        )


def fit_to_tile(values: np.ndarray, shape) -> np.ndarray | None:
    """An index-space array laid onto a tile shape without an access pattern: axis 0 is the partition axis (tiles are
    partition-first), the remaining non-singleton axes are the free axes in order; None if it cannot fit."""
    shape = tuple(shape)
    v = values
    if v.ndim > len(shape):
        free = [d for d in v.shape[1:] if d != 1]
        k = len(shape) - 1
        if len(free) > k:
            return None
        v = v.reshape((v.shape[0],) + (1,) * (k - len(free)) + tuple(free))
    elif v.ndim < len(shape):
        v = v.reshape(v.shape + (1,) * (len(shape) - v.ndim))
    try:
        return np.broadcast_to(v, shape)
    except ValueError:
        return None


def mask_for(mask, shape, what: str, layouts=()) -> np.ndarray | None:
    """The mask laid onto a tile of `shape` (None if absent): through the access layout of an indexed operand when the
    mask lives in that index space, else partition-first (`fit_to_tile`)."""
    if mask is None:
        return None
    _check_mask_type(mask, what)
    for layout in layouts:
        if layout is not None and tuple(layout.shape) == tuple(shape):
            m = layout.arrange_if_fits(mask.values)
            if m is not None:
                return m
    m = fit_to_tile(mask.values, shape)
    if m is None:
        _mask_error(what, mask.values.shape, shape)
    return m


class ParDim(int):
    """nl.par_dim(n): marks the partition dimension of an on-chip tensor's shape."""


class AccessLayout:
    """How the broadcast index space of an index tuple becomes the shape of the tile it selects.

    The tile's first axis is the partition index's (the index at the tensor's partition position; several of its
    index-space axes flatten into one); then every index-space axis another index varies along, in index-space order;
    index-space axes of size 1 that no index varies along are dropped. A 2-D access whose free index is constant keeps
    a free axis of size 1. This is what NKI's examples rely on: `x[ip, jf]` with ip = arange(P)[:, None] and
    jf = arange(F)[None, :] selects (P, F); with `ip, iw, jf = nl.mgrid[0:P, 0:1, 0:F]`, `x[ip, jf]` selects (P, F)
    and `w[iw, jf]` (1, F); `t[ip, i * F2 + j]` with a 3-D mgrid selects (P, F1, F2) in mgrid order."""

    def __init__(self, arrays, part_pos):
        self.space = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
        nd = len(self.space)

        def varying(a):
            padded = (1,) * (nd - a.ndim) + tuple(a.shape)
            return [ax for ax in range(nd) if padded[ax] != 1]

        part = varying(arrays[part_pos]) if part_pos is not None else []
        free_axes = set()
        free_positions = 0
        for i, a in enumerate(arrays):
            if i != part_pos and a.ndim > 0:
                free_positions += 1
                free_axes |= set(varying(a))
        free = sorted(free_axes - set(part))
        rest = [ax for ax in range(nd) if ax not in part and ax not in free]
        self.order = tuple(part + free + rest)
        fshape = tuple(self.space[a] for a in free)
        if not fshape and (free_positions or nd >= 2):
            fshape = (1,)
        self.shape = (math.prod(self.space[a] for a in part),) + fshape

    def arrange(self, a: np.ndarray) -> np.ndarray:
        """An index-space array (broadcastable to the space) as a tile-shaped array."""
        a = np.broadcast_to(a, self.space)
        return np.transpose(a, self.order).reshape(self.shape)

    def arrange_if_fits(self, values: np.ndarray) -> np.ndarray | None:
        try:
            np.broadcast_shapes(values.shape, self.space)
        except ValueError:
            return None
        if len(np.broadcast_shapes(values.shape, self.space)) != len(self.space):
            return None
        return self.arrange(values)

    def mask(self, mask, what):
        if mask is None:
            return None
        _check_mask_type(mask, what)
        m = self.arrange_if_fits(mask.values)
        if m is None:
            m = fit_to_tile(mask.values, self.shape)
        if m is None:
            _mask_error(what, mask.values.shape, self.shape)
        return m


# ----------------------------------------------------------------------------------------------------------------------
# The launch: SPMD program id, shared HBM, on-chip memory, instruction counts


@dataclass
class Memory:
    """Live SBUF/PSUM bytes per partition. Allocations are released when their tensor is garbage collected, which
    CPython does as soon as the kernel drops its last reference: Python liveness stands in for the compiler's.

    Live data over a memory's capacity is a spill (NkiSpillWarning, counted in `spill_bytes`), not an error: the
    compiler inserts spills and refills. One tensor larger than a whole partition cannot be placed and is an error."""

    live: dict = field(default_factory=lambda: {"sbuf": {}, "psum": {}})
    peak: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    spill_bytes: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    counts: dict = field(default_factory=lambda: {"dma": 0, "compute": 0})
    _next: int = 0

    def used(self, buffer: str) -> int:
        return sum(a.bytes_per_partition for a in self.live[buffer].values())

    def count(self, kind: str) -> None:
        self.counts[kind] += 1

    def allocate(self, buffer: str, bytes_per_partition: int, what: str):
        capacity = limits.SBUF_BYTES_PER_PARTITION if buffer == "sbuf" else limits.PSUM_BYTES_PER_PARTITION
        source = limits.ARCH_GUIDE
        if bytes_per_partition > capacity:
            fail(
                f"{buffer.upper()} tile larger than one partition",
                f"{what} needs {bytes_per_partition} bytes per partition, a partition holds {capacity}",
                "tile the free axis",
                source,
            )
        used = self.used(buffer)
        if used + bytes_per_partition > capacity:
            over = used + bytes_per_partition - capacity
            if over > self.spill_bytes[buffer]:
                largest = sorted(self.live[buffer].values(), key=lambda a: -a.bytes_per_partition)[:4]
                live = ", ".join(f"{a.what}={a.bytes_per_partition}B" for a in largest)
                warnings.warn(
                    NkiSpillWarning(
                        f"{buffer.upper()} live data exceeds the {capacity} bytes per partition by {over}: {what} "
                        f"needs {bytes_per_partition} with {used} live (largest: {live}); the compiler spills "
                        f"[source: {limits.PROGRAMMING_MODEL}#memory-hierarchy]"
                    ),
                    stacklevel=4,
                )
            self.spill_bytes[buffer] = max(self.spill_bytes[buffer], over)
        key = self._next
        self._next += 1
        self.live[buffer][key] = _Allocation(buffer, bytes_per_partition, what)
        self.peak[buffer] = max(self.peak[buffer], used + bytes_per_partition)
        return key

    def release(self, buffer: str, key: int) -> None:
        self.live[buffer].pop(key, None)


@dataclass
class _Allocation:
    buffer: str
    bytes_per_partition: int
    what: str


@dataclass
class Launch:
    """One kernel launch: its SPMD grid, the current program's id, the HBM tensors all programs share (the k-th
    `nl.ndarray(buffer=nl.shared_hbm)` of every program is the same tensor) and each program's on-chip memory."""

    grid: tuple = ()
    program_id: tuple = ()
    memory: Memory = field(default_factory=Memory)
    shared_hbm: list = field(default_factory=list)
    hbm_cursor: int = 0
    peak: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    spill_bytes: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    counts: dict = field(default_factory=lambda: {"dma": 0, "compute": 0})

    def start_program(self, program_id) -> None:
        self.fold_memory()
        self.program_id = tuple(program_id)
        self.memory = Memory()
        self.hbm_cursor = 0

    def fold_memory(self) -> None:
        m = self.memory
        for b in ("sbuf", "psum"):
            self.peak[b] = max(self.peak[b], m.peak[b])
            self.spill_bytes[b] = max(self.spill_bytes[b], m.spill_bytes[b])
        for k, v in m.counts.items():
            self.counts[k] += v
        m.counts = {k: 0 for k in m.counts}


_CURRENT: list[Launch] = []


def current_launch() -> Launch:
    if not _CURRENT:
        raise RuntimeError(
            "NKI language calls are only valid inside a kernel launched by nki.simulate_kernel / a jit call"
        )
    return _CURRENT[-1]


def current_memory() -> Memory:
    return current_launch().memory


# ----------------------------------------------------------------------------------------------------------------------
# Indexing


def _normalize_key(key, ndim: int, what: str):
    """A tuple of ndim entries, each an int, a slice or an IndexArray."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise IndexError(f"{what}: {len(key)} indices for a {ndim}-d tensor")
    key = key + (slice(None),) * (ndim - len(key))
    out = []
    for k in key:
        if isinstance(k, (int, np.integer)):
            out.append(int(k))
        elif isinstance(k, (slice, IndexArray)):
            out.append(k)
        else:
            raise TypeError(f"{what}: unsupported index {k!r} (use ints, slices or nl.arange expressions)")
    has_slice = any(isinstance(k, slice) for k in out)
    has_adv = any(isinstance(k, IndexArray) for k in out)
    if has_slice and has_adv:
        fail(
            "basic (slice) and advanced (nl.arange) indexing mixed in one index tuple",
            f"{what} indexed with {tuple(type(k).__name__ for k in out)}",
            "index every axis with nl.arange expressions (or every axis with slices)",
            limits.PROGRAMMING_MODEL + "#tensor-indexing",
        )
    return tuple(out)


def _key_arrays(key, shape):
    """One integer index array per axis: IndexArrays as they are, slices as aranges on axes of their own (an open
    grid, so that basic indexing shares the advanced path), ints as 0-d arrays."""
    if any(isinstance(k, IndexArray) for k in key):
        return [k.values if isinstance(k, IndexArray) else np.asarray(k, dtype=np.int64) for k in key]
    kept = [i for i, k in enumerate(key) if isinstance(k, slice)]
    arrays = []
    for i, k in enumerate(key):
        if isinstance(k, slice):
            r = np.arange(*k.indices(shape[i]))
            pos = kept.index(i)
            arrays.append(r.reshape([-1 if j == pos else 1 for j in range(len(kept))]))
        else:
            arrays.append(np.asarray(k, dtype=np.int64))
    return arrays


def _out_of_bounds(arrays, shape, space):
    oob = np.zeros(space, dtype=bool)
    for a, n in zip(arrays, shape, strict=True):
        oob = oob | (a < 0) | (a >= n)
    return oob


class Access:
    """An index tuple resolved against a tensor: per-axis index arrays (tile-shaped), the tile layout, bounds."""

    def __init__(self, key, shape, part_pos):
        arrays = _key_arrays(key, shape)
        self.layout = AccessLayout(arrays, part_pos)
        space = self.layout.space
        self.oob = self.layout.arrange(_out_of_bounds(arrays, shape, space))
        if self.layout.shape == space and self.layout.order == tuple(range(len(space))):
            # the tile is the index space itself: NumPy broadcasts the compact per-axis arrays during the gather
            self.index = tuple(np.clip(a, 0, n - 1) for a, n in zip(arrays, shape, strict=True))
        else:
            self.index = tuple(
                self.layout.arrange(np.clip(np.broadcast_to(a, space), 0, n - 1))
                for a, n in zip(arrays, shape, strict=True)
            )

    def selected(self, write: np.ndarray):
        """The index arrays restricted to the elements `write` selects."""
        return tuple(np.broadcast_to(a, self.shape)[write] for a in self.index)

    @property
    def shape(self):
        return self.layout.shape


def _first_varying(key):
    return next((i for i, k in enumerate(key) if not isinstance(k, int)), None)


# ----------------------------------------------------------------------------------------------------------------------
# HBM


class HbmTensor:
    """A tensor in device memory (kernel argument or nl.ndarray(buffer=nl.shared_hbm))."""

    def __init__(self, data: np.ndarray, defined: np.ndarray | None = None, name: str = "hbm"):
        self.data = data
        self.defined = defined
        self.name = name

    @property
    def shape(self):
        return tuple(self.data.shape)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    def reshape(self, shape):
        d = None if self.defined is None else self.defined.reshape(shape)
        return HbmTensor(self.data.reshape(shape), d, self.name)

    def __getitem__(self, key):
        return HbmAccess(self, _normalize_key(key, self.ndim, self.name))

    def __setitem__(self, key, value):
        raise TypeError(f"{self.name}: write HBM tensors with nl.store / nisa.dma_copy, not assignment")


def _oob_error(what, t, n, verb):
    fail(
        "out-of-bounds HBM access",
        f"{what} of {t.name}{t.shape} {verb} {n} elements outside the tensor",
        "mask the partial tile, e.g. mask=(i * 128 + ip < num_rows), or slice it to the rows that exist",
        limits.PROGRAMMING_MODEL + "#tile-size-considerations",
    )


class HbmAccess:
    """An access pattern into an HBM tensor (the argument of nl.load / nl.store / nisa.dma_copy)."""

    def __init__(self, tensor: HbmTensor, key):
        self.tensor = tensor
        self.key = key

    def resolve(self) -> Access:
        return Access(self.key, self.tensor.shape, _first_varying(self.key))

    @property
    def shape(self):
        return self.resolve().shape

    @property
    def dtype(self):
        return self.tensor.dtype

    def load(self, mask, what: str):
        t = self.tensor
        acc = self.resolve()
        m = acc.layout.mask(mask, what)
        bad = acc.oob if m is None else (acc.oob & m)
        if bad.any():
            _oob_error(what, t, int(bad.sum()), "touches")
        values = t.data[acc.index]
        defined = None if t.defined is None else t.defined[acc.index]
        if m is not None and not m.all():
            values = np.array(values, copy=True)
            values[~m] = poison((), values.dtype)
            defined = m.copy() if defined is None else (defined & m)
        return np.ascontiguousarray(values), defined, acc.shape, acc.layout

    def store(self, values: np.ndarray, defined, mask, what: str):
        t = self.tensor
        acc = self.resolve()
        if values.size == math.prod(acc.shape) and tuple(values.shape) != tuple(acc.shape):
            # a tile written through a differently grouped but equally sized access (e.g. (P, F1, F2) into (P, F))
            if values.shape[0] == acc.shape[0]:
                values = values.reshape(acc.shape)
                defined = None if defined is None else defined.reshape(acc.shape)
        if tuple(values.shape) != tuple(acc.shape):
            fail(
                "stored tile does not match the HBM access pattern",
                f"{what}: tile shape {tuple(values.shape)} vs access shape {tuple(acc.shape)}",
                "index the HBM tensor with the tile's own index expressions",
                limits.NL_STORE,
            )
        m = acc.layout.mask(mask, what)
        write = np.ones(acc.shape, dtype=bool) if m is None else m
        if defined is not None:
            undefined = write & ~defined
            if undefined.any():
                fail(
                    "stores elements that were never computed (masked out or uninitialised)",
                    f"{what} into {t.name}: {int(undefined.sum())} of {int(write.sum())} stored elements are undefined",
                    "use the same mask on the store as on the loads/compute that produced the tile",
                    limits.API_COMMON + "#nki-api-masking",
                )
        oob = acc.oob & write
        if oob.any():
            _oob_error(what, t, int(oob.sum()), "writes")
        if write.all():
            t.data[acc.index] = values
            if t.defined is not None:
                t.defined[acc.index] = True
            return
        sel = acc.selected(write)
        t.data[sel] = values[write]
        if t.defined is not None:
            t.defined[sel] = True


# ----------------------------------------------------------------------------------------------------------------------
# SBUF / PSUM


def _promote_for_write(value, dtype, name):
    if value.dtype != dtype:
        fail(
            "tile assigned into a tensor of another dtype",
            f"{value.dtype} tile into {name} ({dtype})",
            "produce the tile with dtype= equal to the destination's dtype",
            limits.API_COMMON + "#supported-data-types",
        )


class OnChip:
    """A tensor in SBUF or PSUM. `pdim` is its partition axis; a *tile* has pdim == 0 (what NKI compute APIs take).

    A view made by indexing with index expressions remembers its `layout` (so a mask written in the same index space
    predicates it) and which of its elements fell outside the tensor (`oob`): an instruction must mask those out."""

    def __init__(self, data, defined, pdim: int, buffer: str, name: str, owner=None, readonly=False):
        self.readonly = readonly  # a gathered (advanced-indexed) view is a copy: writing it would be lost
        self.data = data
        self.defined = defined  # bool array like data, or None when every element is defined
        self.pdim = pdim
        self.buffer = buffer
        self.name = name
        self._owner = owner  # keeps the allocation alive while views exist
        self.layout = None
        self.oob = None

    @classmethod
    def allocate(cls, data: np.ndarray, defined, pdim: int, buffer: str, name: str, min_ndim: int = 1) -> OnChip:
        if data.ndim < min_ndim:
            fail(
                "declared on-chip tensors are at least two-dimensional (partition x free)",
                f"{name} has shape {data.shape}",
                "give the tensor a partition axis and a free axis, e.g. reshape a vector to (1, n)",
                limits.RMSNORM_TUTORIAL,
            )
        if data.shape[pdim] > limits.PMAX:
            n = data.shape[pdim]
            fail(
                "partition dimension exceeds nki.language.tile_size.pmax",
                f"Size of partition dimension {n} of {name} exceeds architecture limitation of {limits.PMAX}",
                "process at most 128 rows per tile (loop over row tiles, mask the last)",
                limits.PROGRAMMING_MODEL + "#tile-size-considerations",
            )
        free_bytes = (data.size // max(data.shape[pdim], 1)) * data.dtype.itemsize
        if buffer == "psum":
            free_elems = data.size // max(data.shape[pdim], 1)
            if free_bytes > limits.PSUM_BANK_BYTES:
                fail(
                    "PSUM tile free size exceeds nki.language.tile_size.psum_fmax",
                    f"{name} has {free_elems} elements ({free_bytes} bytes) per partition, a PSUM tile holds "
                    f"{limits.PSUM_FMAX} fp32 elements ({limits.PSUM_BANK_BYTES} bytes, one bank)",
                    "split the free axis into chunks of at most 512 fp32 elements",
                    limits.PROGRAMMING_MODEL + "#tile-size-considerations",
                )
        mem = current_memory()
        key = mem.allocate(buffer, free_bytes, name)
        t = cls(data, defined, pdim, buffer, name)
        weakref.finalize(t, mem.release, buffer, key)
        return t

    @property
    def shape(self):
        return tuple(self.data.shape)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    def _root(self):
        return self._owner if self._owner is not None else self

    def _basic_partition_axis(self, key):
        if isinstance(key[self.pdim], int):
            fail(
                "on-chip tensor indexed without its partition dimension",
                f"{self.name} indexed with a scalar on its partition axis",
                "keep the partition axis as a range",
                limits.PROGRAMMING_MODEL + "#representing-data-in-nki",
            )
        return sum(1 for x in key[: self.pdim] if not isinstance(x, int))

    def __getitem__(self, key) -> OnChip:
        key = _normalize_key(key, self.data.ndim, self.name)
        if any(isinstance(k, IndexArray) for k in key):
            if isinstance(key[self.pdim], int):
                self._basic_partition_axis(key)
            acc = Access(key, self.shape, self.pdim)
            data = self.data[acc.index]
            defined = None if self.defined is None else self.defined[acc.index]
            if acc.oob.any():
                data = np.array(data, copy=True)
                data[acc.oob] = poison((), data.dtype)
                defined = (~acc.oob) if defined is None else (defined & ~acc.oob)
            view = OnChip(data, defined, 0, self.buffer, self.name, owner=self._root(), readonly=True)
            view.layout = acc.layout
            view.oob = acc.oob if acc.oob.any() else None
            return view
        pdim = self._basic_partition_axis(key)
        data = self.data[key]
        defined = None if self.defined is None else self.defined[key]
        return OnChip(data, defined, pdim, self.buffer, self.name, owner=self._root())

    def __setitem__(self, key, value) -> None:
        key = _normalize_key(key, self.data.ndim, self.name)
        if self.readonly:
            raise TypeError(f"{self.name}: assign through the tensor itself (t[j, ip, jf] = ...), not a gathered view")
        if not isinstance(value, OnChip):
            raise TypeError(f"{self.name}: assign a tile produced by an NKI API, got {type(value).__name__}")
        _promote_for_write(value, self.dtype, self.name)
        acc = None
        if any(isinstance(k, IndexArray) for k in key):
            acc = Access(key, self.shape, self.pdim)
            shape, idx, oob = acc.shape, acc.index, acc.oob
        else:
            idx, shape, oob = key, self.data[key].shape, None
        vdata, vdefined = value.data, value.defined
        if tuple(vdata.shape) != tuple(shape) and vdata.size == math.prod(shape) and vdata.shape[:1] == shape[:1]:
            vdata = vdata.reshape(shape)
            vdefined = None if vdefined is None else vdefined.reshape(shape)
        if tuple(vdata.shape) != tuple(shape):
            fail(
                "assigned tile does not match the destination region",
                f"{value.shape} into {self.name}{list(shape)}",
                "assign a tile of exactly the indexed shape",
                limits.PROGRAMMING_MODEL + "#tensor-indexing",
            )
        write = np.ones(shape, dtype=bool) if vdefined is None else vdefined
        if oob is not None and (oob & write).any():
            raise IndexError(f"{self.name}{self.shape}: assignment index out of range where the value is computed")
        if oob is not None and oob.any():
            write = write & ~oob
        # a masked instruction writes only the elements it computed; the rest of the destination is untouched
        if write.all():
            self.data[idx] = vdata
            if self.defined is not None:
                self.defined[idx] = True
            return
        if acc is not None:
            sel = acc.selected(write)
            self.data[sel] = vdata[write]
            if self.defined is not None:
                self.defined[sel] = True
            return
        cur = self.data[idx]
        self.data[idx] = np.where(write, vdata, cur)
        if self.defined is not None:
            self.defined[idx] = self.defined[idx] | write

    def write_all(self, value: OnChip) -> None:
        """dst-style instruction output: the whole tensor (a tile) receives `value`, cast to its dtype."""
        self[...] = value if value.dtype == self.dtype else value.cast(self.dtype)

    def cast(self, dtype) -> OnChip:
        out = OnChip(self.data.astype(dtype), self.defined, self.pdim, self.buffer, self.name, owner=self._root())
        return out

    def ap(self, pattern, offset: int = 0) -> OnChip:
        """An access-pattern view: pattern[0] = [partition stride, partitions], then [stride, count] per free axis,
        strides in elements of the per-partition data (nki.language tensor.ap)."""
        if self.pdim != 0:
            fail(
                "access patterns apply to partition-first tensors",
                f"{self.name} has its partition axis at {self.pdim}",
                "index the tensor to a tile first",
                limits.NKI_TENSOR,
            )
        parts = int(pattern[0][1])
        flat = self.data.reshape(self.shape[0], -1)
        dflat = None if self.defined is None else self.defined.reshape(self.shape[0], -1)
        counts = [int(n) for _, n in pattern[1:]]
        offsets = np.full(counts, int(offset), dtype=np.int64)
        for axis, (stride, n) in enumerate(pattern[1:]):
            shape = [1] * len(counts)
            shape[axis] = int(n)
            offsets = offsets + int(stride) * np.arange(int(n)).reshape(shape)
        if parts > flat.shape[0] or offsets.min(initial=0) < 0 or offsets.max(initial=0) >= flat.shape[1]:
            fail(
                "access pattern leaves the tensor",
                f"{self.name}{self.shape}: pattern {pattern} reaches element {int(offsets.max(initial=0))} of "
                f"{flat.shape[1]} per partition",
                "keep every [stride, count] pair inside the tensor's per-partition elements",
                limits.NKI_TENSOR,
            )
        data = flat[:parts][:, offsets]
        defined = None if dflat is None else dflat[:parts][:, offsets]
        return OnChip(data, defined, 0, self.buffer, self.name, owner=self._root(), readonly=True)

    def broadcast_to(self, shape):
        from programs.nki.emulator.language import broadcast_to

        return broadcast_to(self, shape=shape)

    # tile arithmetic: the nki.language element-wise APIs (docs: "Tile arithmetic operators")
    def _op(self, name, other, reverse=False):
        from programs.nki.emulator import language

        fn = getattr(language, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._op("add", o)

    def __radd__(self, o):
        return self._op("add", o, reverse=True)

    def __sub__(self, o):
        return self._op("subtract", o)

    def __rsub__(self, o):
        return self._op("subtract", o, reverse=True)

    def __mul__(self, o):
        return self._op("multiply", o)

    def __rmul__(self, o):
        return self._op("multiply", o, reverse=True)

    def __truediv__(self, o):
        return self._op("divide", o)

    def __rtruediv__(self, o):
        return self._op("divide", o, reverse=True)

    def __pow__(self, o):
        return self._op("power", o)

    def __neg__(self):
        from programs.nki.emulator import language

        return language.negative(self)

    def _inplace(self, name, o):
        result = self._op(name, o)
        if self.readonly or result.shape != self.shape:
            return result  # Python rebinds the name to the new tile
        self.write_all(result)
        return self

    def __iadd__(self, o):
        return self._inplace("add", o)

    def __isub__(self, o):
        return self._inplace("subtract", o)

    def __imul__(self, o):
        return self._inplace("multiply", o)

    def __itruediv__(self, o):
        return self._inplace("divide", o)
