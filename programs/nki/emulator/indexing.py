"""Index expressions, masks and access layouts of the emulated NeuronCore.

`IndexArray` is an affine expression of nl.arange / nl.mgrid / loop variables; comparisons of them joined with `&`
make a `Mask`. An index tuple resolved against a tensor's shape is an `Access`: per-axis index arrays, the bounds it
leaves, and its `AccessLayout`, which turns the broadcast index space into the shape of the tile it selects (and lays
a mask written in the same space onto that tile).
"""

from __future__ import annotations

import math

import numpy as np

from programs.nki.emulator import limits
from programs.nki.emulator.constraints import fail


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


def normalize_key(key, ndim: int, what: str):
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


def first_varying(key):
    return next((i for i, k in enumerate(key) if not isinstance(k, int)), None)
