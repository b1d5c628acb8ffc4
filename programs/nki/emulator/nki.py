"""Emulated `neuronxcc.nki`: `jit` and `simulate_kernel`, which run a kernel's Python on emulated HBM/SBUF/PSUM.

A launch takes NumPy arrays (as nki.simulate_kernel does), gives the kernel a fresh on-chip memory, and returns the
kernel's HBM outputs as NumPy arrays. An output element the kernel never stored is an error.
"""

from __future__ import annotations

import functools

import numpy as np

from programs.nki.emulator import isa as isa  # noqa: F401 - exposed as nki.isa
from programs.nki.emulator import language as language  # noqa: F401 - exposed as nki.language
from programs.nki.emulator import limits, tensors
from programs.nki.emulator.tensors import HbmTensor, check_dtype, fail

last_launch: dict = {}


class Kernel:
    """What @nki.jit returns. Calling it runs the kernel (in the real toolchain a call with NumPy arrays runs it on
    the device; here there is only the emulator)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return _launch(self.fn, args, kwargs)


def jit(fn=None, **options):
    if fn is None:
        return lambda f: Kernel(f)
    return Kernel(fn)


def simulate_kernel(kernel, *args, **kwargs):
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    return _launch(fn, args, kwargs)


def _to_hbm(i, a):
    if isinstance(a, np.ndarray):
        check_dtype(a.dtype, f"kernel argument {i}")
        return HbmTensor(a, None, name=f"arg{i}")
    if type(a).__module__.startswith("torch"):
        raise TypeError(f"kernel argument {i}: nki.simulate_kernel takes numpy.ndarray inputs, got a torch tensor")
    return a


def _from_hbm(t):
    if isinstance(t, HbmTensor):
        if t.defined is not None and not t.defined.all():
            missing = int((~t.defined).sum())
            fail(
                "kernel output has elements no nl.store wrote",
                f"{missing} of {t.defined.size} elements of {t.name}{t.shape} were never stored",
                "cover every row tile (including the last, partial one) and every free-axis chunk",
                limits.PROGRAMMING_MODEL,
            )
        return np.array(t.data, copy=True)
    if isinstance(t, tuple):
        return tuple(_from_hbm(x) for x in t)
    if t is None:
        return None
    raise TypeError(
        f"kernel returned a {type(t).__name__}; return HBM tensors created with nl.ndarray(buffer=nl.shared_hbm)"
    )


def _launch(fn, args, kwargs):
    memory = tensors.Memory()
    tensors._CURRENT.append(memory)
    try:
        hbm_args = [_to_hbm(i, a) for i, a in enumerate(args)]
        hbm_kwargs = {k: _to_hbm(k, v) for k, v in kwargs.items()}
        result = _from_hbm(fn(*hbm_args, **hbm_kwargs))
    finally:
        tensors._CURRENT.pop()
    last_launch.clear()
    last_launch.update(
        kernel=fn.__name__,
        sbuf_peak_bytes_per_partition=memory.peak["sbuf"],
        psum_peak_bytes_per_partition=memory.peak["psum"],
    )
    return result
