"""Tensors of the emulated NeuronCore: HBM tensors and the access patterns nl.load / nl.store take, and SBUF/PSUM
tensors (tiles and their views).

Every element carries a `defined` bit (stored lazily: None means all defined). Elements a masked load skipped, a masked
instruction did not compute, or an `nl.ndarray` never initialised are undefined; they also hold NaN (`poison`) so that
misuse is visible in values. Storing an undefined element to HBM, or returning an output with unwritten elements, is an
error: that is how the emulator makes mask mistakes fail loudly instead of leaking garbage. Index expressions and masks
live in `indexing`, the launch and its memory accounting in `launch`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

import numpy as np

from programs.nki.emulator import limits
from programs.nki.emulator.constraints import fail
from programs.nki.emulator.indexing import Access, IndexArray, first_varying, normalize_key
from programs.nki.emulator.launch import current_memory


def poison(shape, dtype: np.dtype) -> np.ndarray:
    if dtype in limits.FLOAT_DTYPES:
        return np.full(shape, np.nan, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


class ParDim(int):
    """nl.par_dim(n): marks the partition dimension of an on-chip tensor's shape."""


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
        return HbmAccess(self, normalize_key(key, self.ndim, self.name))

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
        return Access(self.key, self.tensor.shape, first_varying(self.key))

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


# The nki.language functions a tile's operators and `broadcast_to` stand for, by name. language.py builds on this module
# and fills the table when it loads, so this module never imports it.
TILE_FUNCTIONS: dict[str, Callable] = {}


class OnChip:
    """A tensor in SBUF or PSUM. `pdim` is its partition axis; a *tile* has pdim == 0 (what NKI compute APIs take).

    A view made by indexing with index expressions remembers its `layout` (so a mask written in the same index space
    predicates it) and which of its elements fell outside the tensor (`oob`): an instruction must mask those out. Such a
    view is an access pattern the compiler builds from the expressions (`expression_view`), not a stored layout."""

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
        self.expression_view = False

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
        key = normalize_key(key, self.data.ndim, self.name)
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
            view.expression_view = True
            return view
        pdim = self._basic_partition_axis(key)
        data = self.data[key]
        defined = None if self.defined is None else self.defined[key]
        return OnChip(data, defined, pdim, self.buffer, self.name, owner=self._root())

    def __setitem__(self, key, value) -> None:
        key = normalize_key(key, self.data.ndim, self.name)
        if self.readonly:
            raise TypeError(f"{self.name}: assign through the tensor itself (t[j, ip, jf] = ...), not a gathered view")
        if not isinstance(value, OnChip):
            raise TypeError(f"{self.name}: assign a tile produced by an NKI API, got {type(value).__name__}")
        if value.dtype != self.dtype:
            # the write casts to the destination's dtype, rounding to nearest even (AWS's matmul tutorial accumulates
            # a float32 PSUM tile into bfloat16 SBUF tiles with `+=`)
            value = value.cast(self.dtype)
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
        return TILE_FUNCTIONS["broadcast_to"](self, shape=shape)

    # tile arithmetic: the nki.language element-wise APIs (docs: "Tile arithmetic operators")
    def _op(self, name, other, reverse=False):
        fn = TILE_FUNCTIONS[name]
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
        return TILE_FUNCTIONS["negative"](self)

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
