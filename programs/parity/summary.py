"""The parity summary at the end of the demo: the demo case set through every numeric backend, printed as a few table
rows by the same code as tt-rmsnorm-parity (the ttnn mock dry run is left out: the demo runs its own)."""

from __future__ import annotations

from programs.parity import report
from programs.parity.backends import TTNNMock, all_backends
from programs.parity.cases import DEFAULT_SEED, demo_cases
from programs.parity.runner import run_parity  # sets TRITON_INTERPRET before Triton loads, when there is no CUDA


def print_demo_summary(seed: int = DEFAULT_SEED) -> report.ParityRun:
    backends = [b for b in all_backends() if not isinstance(b, TTNNMock)]
    run = run_parity(demo_cases(seed), backends, seed=seed, progress=False)
    print(report.short_report(run), flush=True)
    return run
