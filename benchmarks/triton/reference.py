"""Every timed contender's output held to the float64 reference, judged by the project's tolerance policy
(tt_rmsnorm.accuracy), before the tables time it: a fast wrong answer gets no ratio.

The reference is y = h * rsqrt(mean(h^2) + eps) * w in float64, h = x, or with a residual h = x + r as each kernel
defines it: rounded to r's dtype for ours (what it returns as x + r, as an HF or vLLM bf16 add gives), the exact sum
for a kernel that normalizes its fp32 sum (QuACK, FlashInfer). The two definitions differ by up to about 2 bf16 ULPs
(h's rounding and y's), so each kernel is held to its own; the returned x + r is held to the float64 sum. The rows
read are all of them up to SAMPLE_ROWS, else SAMPLE_ROWS spread over the tensor, the first and the last included, so
that the policy's CPU metrics stay cheap at 32768 rows."""

from __future__ import annotations

import torch

from benchmarks.triton.timing import EPS
from tt_rmsnorm.accuracy import Report, compare

SAMPLE_ROWS = 256


def sample_rows(m: int, device: torch.device) -> torch.Tensor:
    """Row indices the checks read: every row up to SAMPLE_ROWS, else SAMPLE_ROWS spread evenly, first and last in."""
    if m <= SAMPLE_ROWS:
        return torch.arange(m, device=device)
    return torch.linspace(0, m - 1, SAMPLE_ROWS, device=device).round().long().unique()


def _norm64(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def check_forward(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Report:
    """y = norm(x, w) against float64, on the sampled rows."""
    rows = sample_rows(x.shape[0], x.device)
    return compare(y[rows], _norm64(x[rows].double(), w), y.dtype)


def check_residual(
    y: torch.Tensor, h_out: torch.Tensor, x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, *, rounded: bool
) -> Report:
    """(y, x + r) of a fused add + norm of the original x and r against float64, on the sampled rows; the report of
    y, failed where either fails. rounded: y normalizes x + r rounded to r's dtype, else the exact sum."""
    rows = sample_rows(x.shape[0], x.device)
    exact = x[rows].double() + r[rows].double()
    h = exact.to(r.dtype).double() if rounded else exact
    ry = compare(y[rows], _norm64(h, w), y.dtype)
    rh = compare(h_out[rows], exact, h_out.dtype)
    if not rh.passed:
        ry.passed = False
        ry.failures = ry.failures + [f"x + r: {f}" for f in rh.failures]
    return ry
