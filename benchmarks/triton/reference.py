"""Every timed contender's output held to the float64 reference, judged by the project's tolerance policy
(tt_rmsnorm.accuracy), before the tables time it: a fast wrong answer gets no ratio.

The reference is y = h * rsqrt(mean(h^2) + eps) * w in float64, h = x, or with a residual h = x + r as each kernel
defines it: rounded to r's dtype for ours (what it returns as x + r, as an HF or vLLM bf16 add gives), the exact sum
for a kernel that normalizes its fp32 sum (QuACK, FlashInfer). The two definitions differ by up to about 2 bf16 ULPs
(h's rounding and y's), so each kernel is held to its own; the returned x + r is held to the float64 sum. The rows
read are all of them up to SAMPLE_ROWS, else SAMPLE_ROWS spread over the tensor, the first and the last included, so
that the policy's CPU metrics stay cheap at 32768 rows.

The all-reduce contenders (check_allreduce) are held the same way, each to the sum it defines: ours adds the residual
to the fp32 sum of the partials, FlashInfer's fusion rounds that sum to bf16 first; FP8 codes are held to v / scale
under the FP8 policy, with a scale per row (ours, FlashInfer's dynamic pattern) or the one static scale given."""

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


def check_allreduce(
    y: torch.Tensor,
    scale: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    sums: torch.Tensor,
    residual: torch.Tensor | None,
    w: torch.Tensor,
    *,
    sum_dtype: torch.dtype | None = None,
    norm_dtype: torch.dtype = torch.float32,
) -> Report:
    """A fused all-reduce + residual + norm (+ FP8) against float64, on rows already picked (sample_rows): the report of
    y, failed where the scale or residual_out fails.

    sums: the float64 sum of the ranks' partials on those rows (or the sums the transport delivered). sum_dtype: None
    where the kernel adds the residual to the fp32 sum (ours), else the dtype it rounds the sum to first (FlashInfer:
    bf16); h = sum + residual rounded to the residual's dtype, or the sum itself without one. y: the bf16 norm, or FP8
    codes with `scale`: one element (a static per-tensor scale: codes = v / scale) or one a row, max|v| / fp8 max
    with v in norm_dtype: float32 (ours: the fp32 v, its scale held to the fp32 policy) or bfloat16 (FlashInfer: the
    norm rounded to bf16, whose max is the float64 max rounded likewise, held to the bf16 policy: a rounding tie
    decided the other way by the kernel's fp32 v is one bf16 ULP). residual_out: held to the float64 sum + residual
    under its dtype's policy."""
    s = sums.double() if sum_dtype is None else sums.to(sum_dtype).double()
    r = None if residual is None else residual.double()
    h = s if r is None else (s + r).to(residual.dtype).double()
    v = _norm64(h, w)
    extra = []
    if y.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        fmax = torch.finfo(y.dtype).max
        if scale.numel() == 1:
            expected_scale = None
            sb = scale.double().reshape(1, 1).to(v.device)
        else:
            amax = v.abs().amax(-1)
            expected_scale = amax.to(norm_dtype).double() / fmax
            sb = (amax / fmax).unsqueeze(-1)
            extra.append(("row scales", compare(scale.flatten(), expected_scale, norm_dtype)))
        recip = torch.where(sb == 0, torch.zeros_like(sb), 1.0 / sb)
        report = compare(y.float(), (v * recip).clamp(-fmax, fmax), y.dtype)
    else:
        report = compare(y, v, y.dtype)
    if residual_out is not None:
        exact = s if r is None else s + r
        extra.append(("residual_out", compare(residual_out, exact, residual_out.dtype)))
    for name, rep in extra:
        if not rep.passed:
            report.passed = False
            report.failures = report.failures + [f"{name}: {f}" for f in rep.failures]
    return report
