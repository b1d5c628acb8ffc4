"""The project's one accuracy policy: metrics against a float64 reference, and the tolerance for each result dtype.

Every test, the demo and the parity runner call `compare(actual, expected, dtype)`; no tolerance is written anywhere
else. This module needs only torch, so the GPU and NKI ports can use it on machines without ttnn.

Units. ULP distances are continuous and measured in **bfloat16 ULPs of the expected value** (the spacing of bf16
numbers at |expected|, with subnormals clamped to the smallest normal spacing), whatever the dtype under test: a
correctly rounded bf16 result is within 0.5, an fp32 result is within ~2^-16. They are reported only for the dtypes
whose policy bounds them (float32, bfloat16, float16): a bf16 ULP of an FP8 or bfloat8_b value says nothing (a
bfloat8_b element far below its block's maximum is flushed to zero, thousands of bf16 ULPs of its own magnitude).
Those dtypes are reported in their own terms: FP8 results as the share of elements within one ULP of their FP8
format, bfloat8_b results in steps of their shared-exponent block (`bf8_block_step`; a correctly rounded bfloat8_b
value is within 0.5 step, or 1 step in a block whose largest value rounds up to the next power of two).

Non-finite values: an element where the expected value is finite must be finite; where the expected value is NaN or
+-Inf (NaN or Inf inputs), the actual one must be the same NaN or the same signed Inf. Both kinds of mismatch are
counted in `Report.nonfinite` and fail; the metrics are taken over the elements finite in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

BF16_MANTISSA_BITS = 7
BF16_MIN_NORMAL_EXP = -126
# bfloat8_b: 16 consecutive values of a tile face row (a row's columns 16k..16k+15) share one exponent; each keeps a
# sign and a 7-bit mantissa whose leading bit is explicit, so the block's largest value keeps 6 fraction bits.
BF8_BLOCK = 16
BF8_FRACTION_BITS = 6


def _fp8_format(dtype: torch.dtype) -> tuple[int, int, float]:
    """(mantissa bits, smallest normal exponent, largest finite) of an FP8 format, from torch's own description."""
    fi = torch.finfo(dtype)
    return round(-math.log2(fi.eps)), round(math.log2(fi.smallest_normal)), float(fi.max)


FP8_FORMATS = {name: _fp8_format(getattr(torch, name)) for name in ("float8_e4m3fn", "float8_e5m2")}


@dataclass(frozen=True)
class Tolerance:
    """Pass criteria for one result dtype. `why` carries the justification that the rest of the project quotes."""

    dtype: str
    pcc_min: float
    max_ulp: float | None  # bf16 ULPs of the expected value, per element
    mean_ulp: float | None
    max_abs_rel: float | None  # max |actual-expected| / max |expected|
    fp8_frac_within_1ulp: float | None = None  # share of elements within one ULP of their own FP8 format
    ulp_floor: float = 0.0  # ULPs are taken at no less than this magnitude: the format's smallest normal
    why: str = ""


# Per result dtype. The bounds are for RMSNorm outputs y = x * rsqrt(mean(x^2) + eps) * w computed with fp32 (or wider)
# reductions, compared to the float64 evaluation of the *same* (already rounded) inputs.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(
        dtype="float32",
        pcc_min=0.999999,
        max_ulp=0.05,
        mean_ulp=0.01,
        max_abs_rel=1e-4,
        why=(
            "fp32 carries 16 more mantissa bits than bf16; a length-N fp32 sum of squares has relative error about "
            "sqrt(N)*2^-24 (N=262144: 3e-5), i.e. far under 0.05 bf16 ULP of the output"
        ),
    ),
    "bfloat16": Tolerance(
        dtype="bfloat16",
        pcc_min=0.9999,
        max_ulp=2.0,
        mean_ulp=0.5,
        max_abs_rel=2.0**-6,
        why=(
            "a bf16 output is rounded once (0.5 ULP); bf16 stats (TT stores sum(x^2) in bf16: 2^-9 relative, so "
            "rsqrt is off by 2^-10, 1/8 ULP) and a bf16 product with the weight (0.5 ULP) add at most ~1 ULP more; "
            "2 ULPs leaves one ULP of margin (measured: <= 1.0 with fp32_dest_acc_en, the project default; ttnn's "
            "bf16-accumulation default reaches 2.7 at N=8 and 6.5 at N=1, which is why configs turns fp32 on). "
            "PCC 0.9999 is the project requirement for distributed-vs-single-device"
        ),
    ),
    "float16": Tolerance(
        dtype="float16",
        pcc_min=0.99999,
        max_ulp=0.5,
        mean_ulp=0.1,
        max_abs_rel=2.0**-9,
        ulp_floor=2.0**-14,
        why="fp16 has 3 more mantissa bits than bf16: the bf16 budget divided by 8, rounded up to half a bf16 ULP; "
        "below its smallest normal (2^-14) fp16 numbers are 2^-24 apart, coarser than bf16's ULP there (a correctly "
        "rounded 3e-6 is 2 bf16 ULPs off; seen on H200 at 16.7M fp16 outputs), so ULPs are taken at 2^-14 at least",
    ),
    "bfloat8_b": Tolerance(
        dtype="bfloat8_b",
        pcc_min=0.999,
        max_ulp=None,
        mean_ulp=None,
        max_abs_rel=2.0**-5,
        why=(
            "bfloat8_b stores 16 consecutive values of a tile face row with one shared exponent and 7 mantissa bits: "
            "each value is exact only to 2^-6 of its block's largest magnitude (a value far below the block max loses "
            "all bits), so per-element ULP bounds do not apply; the error is bounded relative to the largest value "
            "(2^-6 from quantization, doubled for the bf16 stats and output rounding) and PCC stays >= 0.999 on "
            "randn-like rows"
        ),
    ),
    "float8_e4m3fn": Tolerance(
        dtype="float8_e4m3fn",
        pcc_min=0.999,
        max_ulp=None,
        mean_ulp=None,
        max_abs_rel=2.0**-3,
        fp8_frac_within_1ulp=0.999,
        why=(
            "e4m3 has 3 mantissa bits: a correctly rounded result is within half an FP8 ULP; an fp32 difference "
            "before the cast can flip a rounding, so one FP8 ULP on >= 99.9% of elements (the issue's criterion)"
        ),
    ),
    "float8_e5m2": Tolerance(
        dtype="float8_e5m2",
        pcc_min=0.995,
        max_ulp=None,
        mean_ulp=None,
        max_abs_rel=2.0**-2,
        fp8_frac_within_1ulp=0.999,
        why="e5m2 has 2 mantissa bits: as e4m3, one FP8 ULP on >= 99.9% of elements",
    ),
}


def tolerance_for(dtype) -> Tolerance:
    """The tolerance for a result dtype given as a torch dtype, a ttnn DataType or a name ('bfloat16', 'bfloat8_b')."""
    name = dtype_name(dtype)
    if name not in TOLERANCES:
        raise KeyError(f"no tolerance for dtype {name!r}; known: {sorted(TOLERANCES)}")
    return TOLERANCES[name]


def dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:  # ttnn.DataType.BFLOAT16 and friends
        name = str(dtype).rsplit(".", 1)[-1].lower()
    return {
        "bfloat8b": "bfloat8_b",
        "bf8_b": "bfloat8_b",
        "bf16": "bfloat16",
        "fp32": "float32",
        "half": "float16",
    }.get(name, name)


def _f64(t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    return t.detach().to("cpu").to(torch.float64)


def pcc(actual, expected) -> float:
    """Pearson correlation of the flattened tensors. Equal constant tensors (e.g. all-zero rows) count as 1.0."""
    a, e = _f64(actual).flatten(), _f64(expected).flatten()
    finite = torch.isfinite(a) & torch.isfinite(e)
    if not bool(finite.all()):
        return float("nan")
    a, e = a - a.mean(), e - e.mean()
    na, ne = a.norm(), e.norm()
    if na == 0 or ne == 0:
        return 1.0 if torch.equal(_f64(actual).flatten(), _f64(expected).flatten()) else 0.0
    return float((a @ e) / (na * ne))


def bf16_ulp(expected) -> torch.Tensor:
    """Spacing of bfloat16 numbers at |expected| (float64), subnormals clamped to the smallest normal spacing."""
    mag = _f64(expected).abs().clamp_min(2.0**BF16_MIN_NORMAL_EXP)
    _, exp = torch.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1): floor(log2(mag)) = exp - 1
    return torch.ldexp(torch.ones_like(mag), exp - 1 - BF16_MANTISSA_BITS)


def bf16_ulp_distance(actual, expected) -> torch.Tensor:
    """|actual - expected| in bf16 ULPs of the expected value (continuous; correctly rounded bf16 gives <= 0.5)."""
    return (_f64(actual) - _f64(expected)).abs() / bf16_ulp(expected)


def bf8_block_step(expected) -> torch.Tensor:
    """The quantization step of bfloat8_b at each element of `expected` (float64, same shape): 2^-6 of the power of two
    at or below the largest magnitude of its 16-column block, the smallest normal's where the block is all zero."""
    e = _f64(expected)
    e = e.reshape(1) if e.dim() == 0 else e
    width = e.shape[-1]
    padded = torch.nn.functional.pad(e.abs(), (0, -width % BF8_BLOCK))
    block_max = padded.reshape(*e.shape[:-1], -1, BF8_BLOCK).amax(-1).clamp_min(2.0**BF16_MIN_NORMAL_EXP)
    _, exp = torch.frexp(block_max)
    step = torch.ldexp(torch.ones_like(block_max), exp - 1 - BF8_FRACTION_BITS)
    return step.repeat_interleave(BF8_BLOCK, -1)[..., :width].reshape(_f64(expected).shape)


def fp8_ulp_distance(actual, expected, fmt: str) -> torch.Tensor:
    """|actual - expected| in ULPs of the FP8 format at |expected| (expected clamped to the format's range)."""
    mbits, min_exp, fmax = FP8_FORMATS[fmt]
    e = _f64(expected).clamp(-fmax, fmax)
    mag = e.abs().clamp_min(2.0**min_exp)
    ulp = torch.pow(2.0, torch.floor(torch.log2(mag)) - mbits)
    return (_f64(actual) - e).abs() / ulp


@dataclass
class Report:
    """Every metric of one comparison. `max_ulp`/`mean_ulp` (bf16 ULPs) are None for the dtypes whose policy has no
    ULP bound (FP8, bfloat8_b); `max_bf8_step`/`mean_bf8_step` are set for bfloat8_b only, `fp8_frac_within_1ulp` for
    FP8 only."""

    dtype: str
    pcc: float
    max_abs: float
    max_abs_rel: float
    max_ulp: float | None
    mean_ulp: float | None
    rel_rms: float
    nonfinite: int
    fp8_frac_within_1ulp: float | None
    passed: bool
    failures: list[str] = field(default_factory=list)
    max_bf8_step: float | None = None
    mean_bf8_step: float | None = None

    def summary(self) -> str:
        s = f"pcc={self.pcc:.6f} max_abs={self.max_abs:.3g} max_abs_rel={self.max_abs_rel:.3g}"
        if self.max_ulp is not None:
            s += f" max_ulp={self.max_ulp:.3g} mean_ulp={self.mean_ulp:.3g}"
        if self.max_bf8_step is not None:
            s += f" max_bf8_step={self.max_bf8_step:.3g} mean_bf8_step={self.mean_bf8_step:.3g}"
        if self.fp8_frac_within_1ulp is not None:
            s += f" fp8_within_1ulp={self.fp8_frac_within_1ulp:.5f}"
        s += f" rel_rms={self.rel_rms:.3g} nonfinite={self.nonfinite}"
        return s + (" PASS" if self.passed else " FAIL: " + "; ".join(self.failures))

    def headline(self) -> str:
        """The largest error in the dtype's own unit, for one table column: bf16 ULPs, bfloat8_b block steps, or (FP8)
        the share of elements within one FP8 ULP."""
        if self.max_ulp is not None:
            return f"{self.max_ulp:.2f} ULP"
        if self.max_bf8_step is not None:
            return f"{self.max_bf8_step:.2f} step"
        if self.fp8_frac_within_1ulp is not None:
            return f"{100 * self.fp8_frac_within_1ulp:.2f}% <=1ulp"
        return f"{self.max_abs_rel:.2g} rel"


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else math.nan


def _mean(t: torch.Tensor) -> float:
    return float(t.mean()) if t.numel() else math.nan


def _same_special(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Where `e` is NaN or +-Inf: does `a` hold the same NaN or the same signed Inf."""
    return (torch.isnan(a) & torch.isnan(e)) | (torch.isinf(a) & (a == e))


def _failures(
    tol: Tolerance, r: Report, became_nonfinite: int, special_lost: int, judged: int, varies: bool, cancelling: bool
) -> list[str]:
    """The policy's verdict on the metrics `compare` measured in `r`: one line per bound not met. `judged`: how many
    elements are finite in both; `varies`: whether PCC means anything for them."""
    p, max_ulp, mean_ulp, frac = r.pcc, r.max_ulp, r.mean_ulp, r.fp8_frac_within_1ulp
    max_abs, max_abs_rel = r.max_abs, r.max_abs_rel
    failures = []
    if became_nonfinite:
        failures.append(f"{became_nonfinite} non-finite values where the reference is finite")
    if special_lost:
        failures.append(f"{special_lost} values differ from the reference's NaN/Inf there")
    if judged:  # the bounds judge the elements finite in both (there are none where all-NaN is expected and returned)
        if varies and not (p >= tol.pcc_min):
            failures.append(f"pcc {p:.6f} < {tol.pcc_min}")
        if tol.max_ulp is not None and not cancelling and not (max_ulp <= tol.max_ulp):
            failures.append(f"max bf16 ULP {max_ulp:.3g} > {tol.max_ulp}")
        if tol.mean_ulp is not None and not (mean_ulp <= tol.mean_ulp):
            failures.append(f"mean bf16 ULP {mean_ulp:.3g} > {tol.mean_ulp}")
        if tol.max_abs_rel is not None and not (max_abs_rel <= tol.max_abs_rel):
            failures.append(
                f"max abs error {max_abs:.3g} is {max_abs_rel:.3g} of max|expected|, > {tol.max_abs_rel:.3g}"
            )
        if frac is not None and not (frac >= tol.fp8_frac_within_1ulp):
            failures.append(f"only {frac:.5f} of elements within 1 FP8 ULP (< {tol.fp8_frac_within_1ulp})")
    return failures


def compare(
    actual, expected, dtype, *, tolerance: Tolerance | None = None, ulp_reference=None, cancelling: bool = False
) -> Report:
    """All metrics of `actual` against the float64 `expected`, judged by the policy for `dtype` (the result's dtype).

    `ulp_reference`: the magnitude the error scales with, where it differs from the result's (y = x*r*w + bias: the
    error of x*r*w is not smaller because the bias cancels it); ULPs are then taken at max(|expected|, |ulp_reference|).
    PCC is reported always but judged only where `expected` varies by more than bf16 resolution: a correlation of
    near-constant data measures rounding noise, not agreement (the ULP and abs bounds judge those).
    `cancelling=True` is for results formed by subtracting O(1) terms whose scale is not at hand (gradients:
    dx = rs * (g - xhat * c)): an element that lands near zero carries the fp32 rounding of those terms, which is many
    ULPs of its own tiny magnitude (seen on H200 at 16M elements: 25-90 ULPs at mean 0.25), so the per-element max-ULP
    bound is not judged; PCC, mean ULP, max abs error relative to max|expected| and finiteness still are.
    Non-finite values in `actual` where `expected` is finite, and anything but the same NaN / signed Inf where
    `expected` is not, always fail."""
    tol = tolerance or tolerance_for(dtype)
    a, e = _f64(actual), _f64(expected)
    if a.shape != e.shape:
        raise ValueError(f"shape mismatch: actual {tuple(a.shape)} vs expected {tuple(e.shape)}")
    fin_a, fin_e = torch.isfinite(a), torch.isfinite(e)
    became_nonfinite = int((~fin_a & fin_e).sum())
    special_lost = int((~fin_e & ~_same_special(a, e)).sum())
    nonfinite = became_nonfinite + special_lost
    both = fin_a & fin_e
    if bool(both.all()):  # the common case: no masking copies
        af, ef = a.flatten(), e.flatten()
        rf = None if ulp_reference is None else _f64(ulp_reference).flatten()
    else:
        af, ef = a[both], e[both]
        rf = None if ulp_reference is None else _f64(ulp_reference).expand_as(e)[both]
    n = af.numel()
    diff = (af - ef).abs()
    max_abs = _max(diff)
    max_abs_rel = rel_rms = math.nan  # nothing to measure where no element is finite in both
    if n:
        scale = float(ef.abs().max())
        max_abs_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        rms, denom = float(diff.pow(2).mean().sqrt()), float(ef.pow(2).mean().sqrt())
        rel_rms = rms / denom if denom > 0 else (0.0 if rms == 0 else math.inf)
    max_ulp = mean_ulp = None
    if tol.max_ulp is not None or tol.mean_ulp is not None:
        mag = ef.abs() if rf is None else torch.maximum(ef.abs(), rf.abs())
        ulps = diff / bf16_ulp(mag.clamp_min(tol.ulp_floor))
        max_ulp, mean_ulp = _max(ulps), _mean(ulps)
    max_step = mean_step = None
    if tol.dtype == "bfloat8_b":  # the block of a non-finite expected value is stepped by its finite values
        steps = ((a - e).abs() / bf8_block_step(torch.where(fin_e, e, 0.0)))[both]
        max_step, mean_step = _max(steps), _mean(steps)
    p = pcc(af, ef)  # over the elements finite in both: non-finite ones are judged above
    frac = None
    if tol.fp8_frac_within_1ulp is not None:
        frac = _mean((fp8_ulp_distance(a, e, tol.dtype) <= 1.0)[both].to(torch.float64))
    varies = n > 1 and float(ef.std()) > 2.0**-BF16_MANTISSA_BITS * float(ef.abs().mean())

    r = Report(
        dtype=tol.dtype,
        pcc=p,
        max_abs=max_abs,
        max_abs_rel=max_abs_rel,
        max_ulp=max_ulp,
        mean_ulp=mean_ulp,
        rel_rms=rel_rms,
        nonfinite=nonfinite,
        fp8_frac_within_1ulp=frac,
        passed=False,
        max_bf8_step=max_step,
        mean_bf8_step=mean_step,
    )
    r.failures = _failures(tol, r, became_nonfinite, special_lost, n, varies, cancelling)
    r.passed = not r.failures
    return r


def assert_close(actual, expected, dtype, *, context: str = "", ulp_reference=None, cancelling: bool = False) -> Report:
    """`compare` for tests: raises AssertionError with every metric when the policy is not met."""
    report = compare(actual, expected, dtype, ulp_reference=ulp_reference, cancelling=cancelling)
    if not report.passed:
        raise AssertionError(f"{context + ': ' if context else ''}{report.summary()}")
    return report
