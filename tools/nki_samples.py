"""Runs AWS's own NKI tutorial kernels, unchanged, on the emulator from a local checkout of aws-neuron/nki-samples,
and checks them against NumPy (float64) with the project's tolerance for each dtype.

    python -m tools.nki_samples /path/to/nki-samples          # every kernel in SAMPLES
    python -m tools.nki_samples /path/to/nki-samples --only average_pool2d

AWS's files are not part of this repository (tests/nki/tutorial_kernels/ holds the project's own kernels with the
same constructs); this runner reads them from the checkout given, executes each file with its `neuronxcc.nki` or
`nki` imports bound to the emulator (`programs.nki.emulator.nki_modules`) and calls the kernels named in SAMPLES on
generated inputs. It prints one row per call and exits 1 if any call fails or errs, 2 if no file was found.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

from programs.nki.emulator import nki, nki_modules
from tt_rmsnorm.accuracy import compare


@dataclass(frozen=True)
class Call:
    """One call of a kernel: its positional arguments are built by `inputs(rng)`, `expected` is the float64 answer."""

    label: str
    inputs: object  # rng -> tuple of positional arguments
    expected: object  # arguments -> float64 ndarray
    dtype: str
    kwargs: dict = field(default_factory=dict)
    cancelling: bool = False


@dataclass(frozen=True)
class Sample:
    name: str
    paths: tuple[str, ...]  # candidate paths inside the checkout (the layout moved between releases)
    calls: tuple[tuple[str, Call], ...]  # (kernel function name, call)


def _cast(a: np.ndarray, dtype: str) -> np.ndarray:
    return a.astype(np.float32).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def _pool_call(shape, size, dtype, arange=False):
    def inputs(rng):
        x = np.arange(np.prod(shape)).reshape(shape) if arange else rng.standard_normal(shape) * 4
        return _cast(x, dtype), size

    def expected(args):
        x, k = args
        c, h, w = x.shape
        return x.astype(np.float64).reshape(c, h // k, k, w // k, k).mean(axis=(2, 4))

    return Call(f"{shape} pool {size}", inputs, expected, dtype)


def _matmul_call(k_dim, m_dim, n_dim, dtype, **kwargs):
    def inputs(rng):
        return _cast(rng.standard_normal((k_dim, m_dim)), dtype), _cast(rng.standard_normal((k_dim, n_dim)), dtype)

    def expected(args):
        lhs_t, rhs = args
        return lhs_t.astype(np.float64).T @ rhs.astype(np.float64)

    label = f"K={k_dim} M={m_dim} N={n_dim}" + "".join(f" {k}={v}" for k, v in kwargs.items())
    return Call(label, inputs, expected, dtype, kwargs, cancelling=True)


_MATMULS = (
    # kernel, (K, M, N), keyword arguments: the tutorial's sizes, multiples of its tiles and blocks
    ("nki_matmul_basic_", (128, 64, 512), {}),
    ("nki_matmul_tiled_", (256, 256, 1024), {}),
    ("nki_matmul_hoist_load_", (256, 256, 1024), {}),
    ("nki_matmul_block_free_dimension_", (256, 512, 2048), {}),
    ("nki_matmul_fully_optimized_", (256, 256, 1024), dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2)),
    ("nki_matmul_fully_optimized_", (1024, 2048, 1024), {}),
)

SAMPLES = (
    Sample(
        "average_pool2d",
        (
            "src/tutorials/average_pool2d/average_pool2d_nki_kernels.py",
            "src/nki_samples/tutorials/average_pool2d/average_pool2d_nki_kernels.py",
        ),
        (
            ("tensor_avgpool_kernel", _pool_call((2, 6, 6), 2, "float16", arange=True)),
            ("tensor_avgpool_kernel", _pool_call((128, 12, 18), 3, "float32")),
        ),
    ),
    Sample(
        "matrix_multiplication",
        (
            "src/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py",
            "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py",
        ),
        tuple(
            (name, _matmul_call(*sizes, dtype, **kwargs))
            for dtype in ("float32", "bfloat16")
            for name, sizes, kwargs in _MATMULS
        ),
    ),
)


def find(checkout: Path, sample: Sample) -> Path | None:
    """The sample's file: a known path, else the only file of that name anywhere in the checkout."""
    for rel in sample.paths:
        if (checkout / rel).is_file():
            return checkout / rel
    found = sorted(checkout.rglob(Path(sample.paths[0]).name))
    return found[0] if len(found) == 1 else None


def load(path: Path) -> types.ModuleType:
    """Execute the file as a module (not as __main__, so its benchmark block stays out) with NKI bound to the
    emulator; its directory is importable meanwhile, for files that import their neighbours."""
    module = types.ModuleType(f"nki_samples.{path.stem}")
    module.__file__ = str(path)
    sys.path.insert(0, str(path.parent))
    try:
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102 - the user's checkout
    finally:
        sys.path.remove(str(path.parent))
    return module


def run_call(kernel, call: Call, seed: int, show_traceback: bool = False) -> tuple[str, str]:
    """(status, detail) of one call: ok / FAIL with the comparison's summary / ERROR with the exception."""
    args = call.inputs(np.random.default_rng(seed))
    try:
        result = nki.simulate_kernel(kernel, *args, **call.kwargs)
    except Exception as e:  # noqa: BLE001 - every failure of AWS's code is a row of the table
        if show_traceback:
            traceback.print_exc()
        return "ERROR", f"{type(e).__name__}: {e}".splitlines()[0]
    if result is None:
        return "ERROR", "the kernel returned no output"
    expected = call.expected(args)
    actual = np.asarray(result)
    if actual.shape != expected.shape:
        return "FAIL", f"shape {actual.shape}, expected {expected.shape}"
    if actual.dtype != args[0].dtype:
        return "FAIL", f"dtype {actual.dtype}, expected {args[0].dtype}"
    report = compare(
        torch.from_numpy(actual.astype(np.float64)),
        torch.from_numpy(expected),
        call.dtype,
        cancelling=call.cancelling,
    )
    return ("ok", f"max {report.headline()}") if report.passed else ("FAIL", report.summary())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nki_samples", description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a local checkout of aws-neuron/nki-samples")
    parser.add_argument("--only", choices=[s.name for s in SAMPLES], action="append", help="run only these samples")
    parser.add_argument("--traceback", action="store_true", help="print the traceback of an ERROR row")
    opts = parser.parse_args(argv)

    rows, missing = [], []
    for sample in SAMPLES:
        if opts.only and sample.name not in opts.only:
            continue
        path = find(opts.checkout, sample)
        if path is None:
            missing.append(sample.name)
            print(f"{sample.name}: no {Path(sample.paths[0]).name} in {opts.checkout}", file=sys.stderr)
            continue
        with nki_modules():
            try:
                module = load(path)
            except Exception as e:  # noqa: BLE001
                rows.append((sample.name, "(import)", "", "", "ERROR", f"{type(e).__name__}: {e}"))
                continue
            for seed, (name, call) in enumerate(sample.calls):
                kernel = getattr(module, name, None)
                if kernel is None:
                    rows.append((sample.name, name, call.label, call.dtype, "ERROR", "not defined in the file"))
                    continue
                start = time.perf_counter()
                status, detail = run_call(kernel, call, seed, opts.traceback)
                detail = f"{detail} ({time.perf_counter() - start:.1f} s)"
                rows.append((sample.name, name, call.label, call.dtype, status, detail))

    if not rows:
        return 2
    head = ("sample", "kernel", "call", "dtype", "result", "detail")
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(5)]
    for r in (head, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5])
    bad = sum(r[4] != "ok" for r in rows)
    print(
        f"\n{len(rows) - bad}/{len(rows)} ok on the emulator"
        + (f"; not found: {', '.join(missing)}" if missing else "")
    )
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
