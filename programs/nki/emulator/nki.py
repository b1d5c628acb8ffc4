"""Emulated kernel launch: `jit`, `baremetal`, `benchmark`, `simulate_kernel` (the `neuronxcc.nki` entry points),
`simulate` (the standalone `nki` one) and SPMD grids (`kernel[grid](...)`), which run a kernel's Python on emulated
HBM/SBUF/PSUM.

A launch takes NumPy arrays (as nki.simulate_kernel and nki.baremetal do; an `nki.typing.tensor[shape, dtype]` stands
for zeros of that shape), runs every program of the grid in order with a fresh on-chip memory, shares the kernel's
`shared_hbm` outputs between the programs, and returns the HBM outputs as NumPy arrays. An output element no program
stored is an error. `last_launch` records the on-chip peaks, spills and instruction counts of the latest launch.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from programs.nki.emulator import isa as isa  # noqa: F401 - exposed as nki.isa
from programs.nki.emulator import language as language  # noqa: F401 - exposed as nki.language
from programs.nki.emulator import limits
from programs.nki.emulator.constraints import check_dtype, fail
from programs.nki.emulator.launch import ACTIVE_LAUNCHES, Launch
from programs.nki.emulator.nki_typing import TensorType
from programs.nki.emulator.tensors import HbmTensor

last_launch: dict = {}


class Kernel:
    """What @nki.jit / @nki.baremetal return. Calling it runs the kernel (in the real toolchain a call with NumPy
    arrays runs it on the device; here there is only the emulator); `kernel[g0, g1](...)` runs an SPMD grid."""

    def __init__(self, fn, grid=()):
        self.fn = fn
        self.grid = grid
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        grid = tuple(grid) if isinstance(grid, tuple) else (grid,)
        if not all(isinstance(g, (int, np.integer)) and g >= 1 for g in grid):
            raise TypeError(f"an SPMD launch grid is a tuple of positive ints, got {grid!r}")
        return type(self)(self.fn, tuple(int(g) for g in grid))

    def __call__(self, *args, **kwargs):
        return _launch(self.fn, args, kwargs, self.grid)


def jit(fn=None, **options):
    if fn is None:
        return lambda f: Kernel(f)
    return Kernel(fn)


baremetal = jit


class Benchmark(Kernel):
    """What @nki.benchmark returns. On a NeuronDevice a call compiles the kernel, runs it in neuron-bench's loop
    (warmup, iters) and leaves latency statistics in `benchmark_result`; here a call runs the kernel once on the
    emulator (its results, limits and `last_launch` counts) and there is no latency to report."""

    @property
    def benchmark_result(self):
        raise AttributeError(
            "benchmark_result: the emulator measures no device latency (nki.benchmark's statistics come from "
            "neuron-bench on a NeuronDevice); the call ran the kernel on the emulator, see nki.last_launch"
        )


def benchmark(kernel=None, **options):
    """@nki.benchmark / nki.benchmark(warmup=..., iters=..., save_neff_name=...)(kernel), also of a jit kernel."""

    def wrap(k):
        return Benchmark(k.fn, k.grid) if isinstance(k, Kernel) else Benchmark(k)

    return wrap if kernel is None else wrap(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    if isinstance(kernel, Kernel):
        return _launch(kernel.fn, args, kwargs, kernel.grid)
    return _launch(kernel, args, kwargs, ())


def simulate(kernel):
    """The standalone nki API: a CPU-simulated callable of the kernel (supports kernel[grid] as well)."""
    return kernel if isinstance(kernel, Kernel) else Kernel(kernel)


def _to_hbm(i, a):
    if isinstance(a, TensorType):
        a = a.placeholder(i)
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


def _check_annotations(fn, args, kwargs):
    """Arguments annotated with nki.typing.tensor[shape, dtype] must have that shape and dtype."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return
    for name, value in bound.arguments.items():
        ann = fn.__annotations__.get(name)
        if isinstance(ann, str):
            try:
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the kernel's own annotation expression
            except Exception:
                continue
        if isinstance(ann, TensorType):
            ann.check(name, value)


def _launch(fn, args, kwargs, grid):
    launch = Launch(grid=grid)
    ACTIVE_LAUNCHES.append(launch)
    try:
        hbm_args = [_to_hbm(i, a) for i, a in enumerate(args)]
        hbm_kwargs = {k: _to_hbm(k, v) for k, v in kwargs.items()}
        _check_annotations(fn, hbm_args, hbm_kwargs)
        result = None
        for pid in np.ndindex(*grid) if grid else [()]:
            launch.start_program(pid)
            result = fn(*hbm_args, **hbm_kwargs)
        launch.fold_memory()
        result = _from_hbm(result)
    finally:
        ACTIVE_LAUNCHES.pop()
    last_launch.clear()
    last_launch.update(
        kernel=fn.__name__,
        grid=grid,
        sbuf_peak_bytes_per_partition=launch.peak["sbuf"],
        psum_peak_bytes_per_partition=launch.peak["psum"],
        sbuf_spill_bytes_per_partition=launch.spill_bytes["sbuf"],
        psum_spill_bytes_per_partition=launch.spill_bytes["psum"],
        dma_instructions=launch.counts["dma"],
        compute_instructions=launch.counts["compute"],
    )
    return result
