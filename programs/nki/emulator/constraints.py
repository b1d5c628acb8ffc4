"""How the emulator reports a broken NKI rule: `NkiConstraintError` (raised through `fail`, naming the rule, the value
seen, the fix and the documentation source), `NkiSpillWarning` for live data over on-chip capacity, and the data-type
rule every tensor passes (`check_dtype`)."""

from __future__ import annotations

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
