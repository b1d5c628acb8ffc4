"""Tensors of the emulated NeuronCore: HBM tensors, SBUF/PSUM tensors, index expressions, masks, on-chip memory.

Every element carries a `defined` bit (stored lazily: None means all defined). Elements a masked load skipped, a masked
instruction did not compute, or an `nl.ndarray` never initialised are undefined; they also hold NaN so that misuse is
visible in values. Storing an undefined element to HBM, or returning an output with unwritten elements, is an error:
that is how the emulator makes mask mistakes fail loudly instead of leaking garbage.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from programs.nki.emulator import limits


class NkiConstraintError(SyntaxError):
    """A kernel broke an NKI rule. SyntaxError, as the NKI compiler reports tile-size violations (programming model)."""


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
    """An affine expression of nl.arange / loop variables: an integer array that broadcasts like NumPy."""

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


def mask_for(mask, shape, what: str) -> np.ndarray | None:
    """The mask broadcast to `shape` (None if absent)."""
    if mask is None:
        return None
    if not isinstance(mask, Mask):
        fail(
            "mask must be a predicate over index expressions",
            f"{what} got mask of type {type(mask).__name__}",
            "build it from comparisons of nl.arange / loop-index expressions, joined with &",
            limits.API_COMMON + "#nki-api-masking",
        )
    try:
        return np.broadcast_to(mask.values, shape)
    except ValueError:
        fail(
            "mask does not match the tile it predicates",
            f"{what}: mask shape {mask.values.shape} vs tile shape {tuple(shape)}",
            "build the mask from the same index expressions that index the tile",
            limits.API_COMMON + "#nki-api-masking",
        )


class ParDim(int):
    """nl.par_dim(n): marks the partition dimension of an on-chip tensor's shape."""


# ----------------------------------------------------------------------------------------------------------------------
# On-chip memory accounting (per kernel launch)


@dataclass
class _Allocation:
    buffer: str
    bytes_per_partition: int
    what: str


@dataclass
class Memory:
    """Live SBUF/PSUM bytes per partition. Allocations are released when their tensor is garbage collected, which
    CPython does as soon as the kernel drops its last reference: Python liveness stands in for the compiler's."""

    live: dict = field(default_factory=lambda: {"sbuf": {}, "psum": {}})
    peak: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    _next: int = 0

    def used(self, buffer: str) -> int:
        return sum(a.bytes_per_partition for a in self.live[buffer].values())

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
            largest = sorted(self.live[buffer].values(), key=lambda a: -a.bytes_per_partition)[:4]
            live = ", ".join(f"{a.what}={a.bytes_per_partition}B" for a in largest)
            fail(
                f"{buffer.upper()} capacity per partition exceeded",
                f"{what} needs {bytes_per_partition} bytes per partition with {used} already live "
                f"(largest live: {live}); capacity {capacity}",
                "tile the free axis more finely or drop references to tiles no longer needed",
                source,
            )
        key = self._next
        self._next += 1
        self.live[buffer][key] = _Allocation(buffer, bytes_per_partition, what)
        self.peak[buffer] = max(self.peak[buffer], used + bytes_per_partition)
        return key

    def release(self, buffer: str, key: int) -> None:
        self.live[buffer].pop(key, None)


_CURRENT: list[Memory] = []


def current_memory() -> Memory:
    if not _CURRENT:
        raise RuntimeError(
            "NKI language calls are only valid inside a kernel launched by nki.simulate_kernel / a jit call"
        )
    return _CURRENT[-1]


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


def _index_arrays(key, shape):
    """For an advanced key: broadcast integer index arrays (one per axis) and the access shape."""
    arrays = [k.values if isinstance(k, IndexArray) else np.asarray(k, dtype=np.int64) for k in key]
    access_shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return arrays, access_shape


def _out_of_bounds(arrays, shape, access_shape):
    oob = np.zeros(access_shape, dtype=bool)
    for a, n in zip(arrays, shape):
        oob = oob | (a < 0) | (a >= n)
    return oob


def _in_bounds_index_arrays(key, shape, name):
    """`_index_arrays` of an on-chip access, refused when any index leaves the tensor (on-chip tiles have no masks)."""
    arrays, access_shape = _index_arrays(key, shape)
    if _out_of_bounds(arrays, shape, access_shape).any():
        raise IndexError(f"{name}{shape}: index out of range")
    return arrays, access_shape


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
        raise TypeError(f"{self.name}: write HBM tensors with nl.store, not assignment")


class HbmAccess:
    """An access pattern into an HBM tensor (the argument of nl.load / nl.store)."""

    def __init__(self, tensor: HbmTensor, key):
        self.tensor = tensor
        self.key = key

    def _resolve(self):
        t = self.tensor
        if any(isinstance(k, IndexArray) for k in self.key):
            arrays, access_shape = _index_arrays(self.key, t.shape)
            return arrays, access_shape
        # basic indexing: turn slices into aranges on their own axes so both paths share the gather
        kept = [i for i, k in enumerate(self.key) if isinstance(k, slice)]
        arrays = []
        for i, k in enumerate(self.key):
            if isinstance(k, slice):
                r = np.arange(*k.indices(t.shape[i]))
                pos = kept.index(i)
                arrays.append(r.reshape([-1 if j == pos else 1 for j in range(len(kept))]))
            else:
                arrays.append(np.asarray(k, dtype=np.int64))
        return arrays, np.broadcast_shapes(*(a.shape for a in arrays))

    def load(self, mask, what: str):
        t = self.tensor
        arrays, shape = self._resolve()
        m = mask_for(mask, shape, what)
        oob = _out_of_bounds(arrays, t.shape, shape)
        if oob.any():
            bad = oob if m is None else (oob & m)
            if bad.any():
                fail(
                    "out-of-bounds HBM access",
                    f"{what} of {t.name}{t.shape} touches {int(bad.sum())} elements outside the tensor",
                    "mask the partial tile, e.g. mask=(i * 128 + ip < num_rows)",
                    limits.PROGRAMMING_MODEL + "#tile-size-considerations",
                )
        clipped = tuple(np.clip(a, 0, n - 1) for a, n in zip(arrays, t.shape))
        values = t.data[clipped]
        defined = None if t.defined is None else t.defined[clipped]
        if m is not None and not m.all():
            values = np.array(values, copy=True)
            values[~m] = poison((), values.dtype)
            defined = m.copy() if defined is None else (defined & m)
        return np.ascontiguousarray(values), defined, shape

    def store(self, values: np.ndarray, defined, mask, what: str):
        t = self.tensor
        arrays, shape = self._resolve()
        if tuple(values.shape) != tuple(shape):
            fail(
                "stored tile does not match the HBM access pattern",
                f"{what}: tile shape {tuple(values.shape)} vs access shape {tuple(shape)}",
                "index the HBM tensor with the tile's own index expressions",
                limits.NL_STORE,
            )
        m = mask_for(mask, shape, what)
        write = np.ones(shape, dtype=bool) if m is None else m
        if defined is not None:
            undefined = write & ~defined
            if undefined.any():
                fail(
                    "stores elements that were never computed (masked out or uninitialised)",
                    f"{what} into {t.name}: {int(undefined.sum())} of {int(write.sum())} stored elements are undefined",
                    "use the same mask on the store as on the loads/compute that produced the tile",
                    limits.API_COMMON + "#nki-api-masking",
                )
        oob = _out_of_bounds(arrays, t.shape, shape) & write
        if oob.any():
            fail(
                "out-of-bounds HBM access",
                f"{what} into {t.name}{t.shape} writes {int(oob.sum())} elements outside the tensor",
                "mask the partial tile, e.g. mask=(i * 128 + ip < num_rows)",
                limits.PROGRAMMING_MODEL + "#tile-size-considerations",
            )
        full = [np.broadcast_to(a, shape) for a in arrays]
        if write.all():
            t.data[tuple(full)] = values
            if t.defined is not None:
                t.defined[tuple(full)] = True
        else:
            sel = tuple(a[write] for a in full)
            t.data[sel] = values[write]
            if t.defined is not None:
                t.defined[sel] = True


# ----------------------------------------------------------------------------------------------------------------------
# SBUF / PSUM


class OnChip:
    """A tensor in SBUF or PSUM. `pdim` is its partition axis; a *tile* has pdim == 0 (what NKI compute APIs take)."""

    def __init__(self, data, defined, pdim: int, buffer: str, name: str, owner=None, readonly=False):
        self.readonly = readonly  # a gathered (advanced-indexed) view is a copy: writing it would be lost
        self.data = data
        self.defined = defined  # bool array like data, or None when every element is defined
        self.pdim = pdim
        self.buffer = buffer
        self.name = name
        self._owner = owner  # keeps the allocation alive while views exist

    @classmethod
    def allocate(cls, data: np.ndarray, defined, pdim: int, buffer: str, name: str, min_ndim: int = 2) -> OnChip:
        if pdim is None:
            fail(
                "on-chip tensor without a partition dimension",
                f"{name} has shape {data.shape}",
                "keep the partition axis (at most nl.tile_size.pmax) when indexing",
                limits.PROGRAMMING_MODEL + "#representing-data-in-nki",
            )
        if data.ndim < min_ndim:
            fail(
                "on-chip tensors are two-dimensional (partition x free)",
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

    def _root(self):
        return self._owner if self._owner is not None else self

    def _key_partition_axis(self, key):
        """Partition axis of the result of indexing with `key`, or None if the partition axis was indexed away."""
        k = key[self.pdim]
        if isinstance(k, int):
            return None
        if any(isinstance(x, IndexArray) for x in key):
            first = next(i for i, x in enumerate(key) if not isinstance(x, int))
            if first != self.pdim:
                fail(
                    "partition dimension must come first in an index tuple",
                    f"{self.name}: the first non-scalar index is on axis {first}, the partition axis is {self.pdim}",
                    "index the partition axis with the first nl.arange expression",
                    limits.PROGRAMMING_MODEL + "#representing-data-in-nki",
                )
            return 0
        return sum(1 for x in key[: self.pdim] if not isinstance(x, int))

    def __getitem__(self, key) -> OnChip:
        key = _normalize_key(key, self.data.ndim, self.name)
        pdim = self._key_partition_axis(key)
        if pdim is None:
            fail(
                "on-chip tensor indexed without its partition dimension",
                f"{self.name} indexed with a scalar on its partition axis",
                "keep the partition axis as a range",
                limits.PROGRAMMING_MODEL + "#representing-data-in-nki",
            )
        if any(isinstance(k, IndexArray) for k in key):
            arrays, shape = _in_bounds_index_arrays(key, self.shape, self.name)
            idx = tuple(arrays)
            data = self.data[idx]
            defined = None if self.defined is None else self.defined[idx]
            return OnChip(data, defined, pdim, self.buffer, self.name, owner=self._root(), readonly=True)
        data = self.data[key]
        defined = None if self.defined is None else self.defined[key]
        return OnChip(data, defined, pdim, self.buffer, self.name, owner=self._root())

    def __setitem__(self, key, value) -> None:
        key = _normalize_key(key, self.data.ndim, self.name)
        if self.readonly:
            raise TypeError(f"{self.name}: assign through the tensor itself (t[j, ip, jf] = ...), not a gathered view")
        if not isinstance(value, OnChip):
            raise TypeError(f"{self.name}: assign a tile produced by an NKI API, got {type(value).__name__}")
        if value.dtype != self.dtype:
            fail(
                "tile assigned into a tensor of another dtype",
                f"{value.dtype} tile into {self.name} ({self.dtype})",
                "produce the tile with dtype= equal to the destination's dtype",
                limits.API_COMMON + "#supported-data-types",
            )
        if any(isinstance(k, IndexArray) for k in key):
            arrays, shape = _in_bounds_index_arrays(key, self.shape, self.name)
            idx = tuple(np.broadcast_to(a, shape) for a in arrays)
        else:
            idx = key
            shape = self.data[key].shape
        if tuple(value.shape) != tuple(shape):
            fail(
                "assigned tile does not match the destination region",
                f"{value.shape} into {self.name}{list(shape)}",
                "assign a tile of exactly the indexed shape",
                limits.PROGRAMMING_MODEL + "#tensor-indexing",
            )
        if value.defined is None:
            self.data[idx] = value.data
            if self.defined is not None:
                self.defined[idx] = True
            return
        # a masked instruction writes only the elements it computed; the rest of the destination is untouched
        cur = self.data[idx]
        self.data[idx] = np.where(value.defined, value.data, cur)
        if self.defined is not None:
            self.defined[idx] = self.defined[idx] | value.defined

    def broadcast_to(self, shape):
        from programs.nki.emulator.language import broadcast_to

        return broadcast_to(self, shape)


def nbytes_per_partition(shape, pdim, dtype) -> int:
    return math.prod(s for i, s in enumerate(shape) if i != pdim) * np.dtype(dtype).itemsize
