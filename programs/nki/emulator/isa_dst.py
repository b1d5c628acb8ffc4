"""Emulated standalone `nki.isa` (the `import nki` namespace): every instruction writes its result into a `dst`
operand, and instructions take no `mask=` or `dtype=` (NKI release notes: "all nki.isa APIs have dst as an input
param", "all nki.isa APIs removed dtype and mask support"); the result is cast to dst's dtype.

The computations are those of `isa.py`; nc_matmul accumulates into its PSUM destination where it already holds
values (the tutorials' k loop) and writes it where it is fresh, unless accumulate= says otherwise.
"""

from __future__ import annotations

import numpy as np

from programs.nki.emulator import isa, limits
from programs.nki.emulator.constraints import fail
from programs.nki.emulator.tensors import OnChip


def _no_mask_or_dtype(api, kwargs):
    banned = sorted(set(kwargs) & {"mask", "dtype"})
    if banned:
        fail(
            f"the standalone nki.isa takes no {'/'.join(banned)} argument",
            f"{api} got {banned}",
            "write the result into a dst of the wanted dtype; restrict the work by slicing the operands",
            limits.NKI_RELEASE_NOTES,
        )


def _into(dst, value, api):
    if not isinstance(dst, OnChip):
        fail(
            f"{api} writes an on-chip dst",
            f"dst is a {type(dst).__name__}",
            "allocate dst with nl.ndarray",
            limits.NKI_RELEASE_NOTES,
        )
    dst.write_all(value)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, **kwargs):
    _no_mask_or_dtype("nisa.tensor_reduce", kwargs)
    _into(
        dst,
        isa.tensor_reduce_value(op, data, axis, negate=negate, keepdims=keepdims, place=False),
        "nisa.tensor_reduce",
    )


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, **kwargs):
    _no_mask_or_dtype("nisa.tensor_scalar", kwargs)
    value = isa.tensor_scalar_value(data, op0, operand0, reverse0, op1, operand1, reverse1, place=False)
    _into(dst, value, "nisa.tensor_scalar")


def tensor_tensor(dst, data1, data2, op, **kwargs):
    _no_mask_or_dtype("nisa.tensor_tensor", kwargs)
    _into(dst, isa.tensor_tensor_value(data1, data2, op, place=False), "nisa.tensor_tensor")


def tensor_copy(dst, src, **kwargs):
    _no_mask_or_dtype("nisa.tensor_copy", kwargs)
    _into(dst, isa.tensor_copy_value(src, place=False), "nisa.tensor_copy")


def activation(dst, op, data, bias=None, scale=1.0, **kwargs):
    _no_mask_or_dtype("nisa.activation", kwargs)
    _into(dst, isa.activation_value(op, data, bias=bias, scale=scale, place=False), "nisa.activation")


def bn_stats(dst, data, **kwargs):
    _no_mask_or_dtype("nisa.bn_stats", kwargs)
    _into(dst, isa.bn_stats_value(data, place=False), "nisa.bn_stats")


def bn_aggr(dst, data, **kwargs):
    _no_mask_or_dtype("nisa.bn_aggr", kwargs)
    _into(dst, isa.bn_aggr_value(data, place=False), "nisa.bn_aggr")


def nc_matmul(dst, stationary, moving, accumulate=None, **kwargs):
    _no_mask_or_dtype("nisa.nc_matmul", kwargs)
    if not isinstance(dst, OnChip) or dst.buffer != "psum":
        fail(
            "nc_matmul writes PSUM",
            f"dst is {getattr(dst, 'buffer', type(dst).__name__)}",
            "allocate dst with nl.ndarray(..., dtype=nl.float32, buffer=nl.psum)",
            limits.NC_MATMUL,
        )
    value = isa.nc_matmul_value(stationary, moving, place=False)
    if accumulate is False or (accumulate is None and dst.defined is not None and not dst.defined.any()):
        dst.write_all(value)
        return
    if dst.defined is not None and not dst.defined.all() and accumulate is True:
        fail(
            "nc_matmul accumulates into an uninitialised PSUM tile",
            f"{dst.name}{dst.shape}",
            "zero it first or let the first matmul write it",
            limits.NC_MATMUL,
        )
    current = dst.data.astype(np.float32)
    if dst.defined is not None:
        current = np.where(dst.defined, current, np.float32(0))
    summed = OnChip((current + value.data.astype(np.float32)).astype(dst.dtype), value.defined, 0, "psum", "nc_matmul")
    dst.write_all(summed)


def dma_copy(dst, src, **kwargs):
    _no_mask_or_dtype("nisa.dma_copy", {k: v for k, v in kwargs.items() if k != "dge_mode"})
    isa.dma_copy_into(dst, src)


def __getattr__(name):
    raise AttributeError(f"nki.isa.{name} is not emulated (standalone nki namespace)")
