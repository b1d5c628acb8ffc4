"""The accuracy policy itself (tt_rmsnorm.accuracy): every tolerance entry at its boundary, the units, the reports.

Boundary cases put exactly one metric at 0.98x (inside: passes) or 1.02x (outside: fails, naming that metric) of its
bound while every other metric stays well inside, for each dtype the entry exists for. The units (bf16 ULP, FP8 ULP,
bfloat8_b block step) are checked against independent computations.
"""

import math

import pytest
import torch

from tt_rmsnorm import accuracy
from tt_rmsnorm import reference as ref
from tt_rmsnorm.accuracy import TOLERANCES, compare

INSIDE, OUTSIDE = 0.98, 1.02
N = 4096


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _signed_unit(n, seed):
    """n float64 values with magnitudes in [1, 2) and random signs."""
    g = _gen(seed)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return sign * (1.0 + torch.rand(n, generator=g, dtype=torch.float64))


def _ulp_bf16(v: float) -> float:
    """bf16 spacing at |v| (normal v), from math.frexp: 2^(exponent - 8) for |v| = m * 2^exponent, m in [0.5, 1)."""
    return 2.0 ** (math.frexp(abs(v))[1] - 8)


def _entries(metric):
    return [name for name, t in TOLERANCES.items() if getattr(t, metric) is not None]


def _failure_names(report, prefix):
    assert len(report.failures) == 1 and report.failures[0].startswith(prefix), report.summary()


# ------------------------------------------------------------------------------------------------------ max ULP


@pytest.mark.parametrize("dtype", _entries("max_ulp"))
@pytest.mark.parametrize("factor", [INSIDE, OUTSIDE], ids=["inside", "outside"])
def test_max_ulp_boundary(dtype, factor):
    bound = TOLERANCES[dtype].max_ulp
    expected = _signed_unit(N, 1)
    expected[7] = 0.09375  # 1.5 * 2^-4: one bf16 ULP is 2^-11 there
    actual = expected.clone()
    actual[7] += factor * bound * 2.0**-11
    report = compare(actual, expected, dtype)
    assert report.max_ulp == pytest.approx(factor * bound, rel=1e-9)
    if factor < 1:
        assert report.passed, report.summary()
    else:
        _failure_names(report, "max bf16 ULP")
        # the same element is not judged per element when the result cancels (gradients)
        assert compare(actual, expected, dtype, cancelling=True).passed


# ----------------------------------------------------------------------------------------------------- mean ULP


@pytest.mark.parametrize("dtype", _entries("mean_ulp"))
@pytest.mark.parametrize("factor", [INSIDE, OUTSIDE], ids=["inside", "outside"])
def test_mean_ulp_boundary(dtype, factor):
    bound = TOLERANCES[dtype].mean_ulp
    g = _gen(2)
    expected = torch.randn(N, generator=g, dtype=torch.float64)
    expected = expected.sign() * (0.1 + expected.abs())  # no element near 0, below fp16's ULP floor
    sign = torch.tensor([(-1.0) ** i for i in range(N)], dtype=torch.float64)
    ulps = torch.tensor([_ulp_bf16(v) for v in expected.tolist()], dtype=torch.float64)
    actual = expected + sign * factor * bound * ulps  # every element the same number of ULPs off
    report = compare(actual, expected, dtype)
    assert report.mean_ulp == pytest.approx(factor * bound, rel=1e-9)
    assert report.max_ulp == pytest.approx(factor * bound, rel=1e-9)
    if factor < 1:
        assert report.passed, report.summary()
    else:
        _failure_names(report, "mean bf16 ULP")


# ------------------------------------------------------------------------------------------------- max abs (rel)


@pytest.mark.parametrize("dtype", _entries("max_abs_rel"))
@pytest.mark.parametrize("factor", [INSIDE, OUTSIDE], ids=["inside", "outside"])
def test_max_abs_rel_boundary(dtype, factor):
    """One element off by factor * bound * max|expected| (judged with cancelling=True, as gradients are, so that the
    per-element ULP bound, tighter there, does not decide)."""
    bound = TOLERANCES[dtype].max_abs_rel
    expected = _signed_unit(N, 3)
    expected[0], expected[5] = 4.0, 1.0
    actual = expected.clone()
    actual[5] += factor * bound * 4.0
    report = compare(actual, expected, dtype, cancelling=True)
    assert report.max_abs_rel == pytest.approx(factor * bound, rel=1e-9)
    assert report.max_abs == pytest.approx(factor * bound * 4.0, rel=1e-9)
    if factor < 1:
        assert report.passed, report.summary()
    else:
        _failure_names(report, "max abs error")


# ------------------------------------------------------------------------------------------------------------ PCC


def _correlated(expected, one_minus_pcc, seed):
    """expected + noise orthogonal to it (and to a constant) with exactly 1 - PCC = one_minus_pcc; the noise is a
    +-1 pattern, so no element is off by much more than the noise's RMS."""
    e = expected - expected.mean()
    sign = torch.where(torch.rand(expected.numel(), generator=_gen(seed)) < 0.5, -1.0, 1.0).double()
    noise = sign - sign.mean()
    noise = noise - (noise @ e) / (e @ e) * e
    p = 1.0 - one_minus_pcc
    scale = e.norm() * math.sqrt(1.0 / p**2 - 1.0) / noise.norm()
    return expected + scale * noise


@pytest.mark.parametrize("dtype", _entries("pcc_min"))
@pytest.mark.parametrize("factor", [INSIDE, OUTSIDE], ids=["inside", "outside"])
def test_pcc_boundary(dtype, factor):
    """Values 200 + 4 z: they vary (std 4 > 2^-7 * 200), and noise that moves the PCC by 1e-6 is a few thousandths
    of a bf16 ULP there (ULP 1), so only the PCC bound decides."""
    bound = TOLERANCES[dtype].pcc_min
    expected = 200.0 + 4.0 * torch.randn(N, generator=_gen(4), dtype=torch.float64)
    actual = _correlated(expected, factor * (1.0 - bound), seed=5)
    report = compare(actual, expected, dtype)
    assert 1.0 - report.pcc == pytest.approx(factor * (1.0 - bound), rel=1e-6)
    if factor < 1:
        assert report.passed, report.summary()
    else:
        _failure_names(report, "pcc")


def test_pcc_is_not_judged_on_near_constant_data():
    """Where the expected values vary by less than bf16 resolution, the PCC measures rounding noise: not judged."""
    expected = 1.0 + 2.0**-10 * torch.randn(N, generator=_gen(6), dtype=torch.float64)
    actual = _correlated(expected, 0.5, seed=7)
    report = compare(actual, expected, "bfloat16")
    assert report.pcc < 0.6 and report.max_ulp < 0.5
    assert report.passed, report.summary()


# ------------------------------------------------------------------------------------------ FP8: within one ULP


@pytest.mark.parametrize("dtype", _entries("fp8_frac_within_1ulp"))
@pytest.mark.parametrize("off", [10, 11], ids=["at_bound", "one_past"])
def test_fp8_within_one_ulp_boundary(dtype, off):
    """10 000 elements, `off` of them 1.5 FP8 ULPs off: 10 is exactly 99.9 % within one ULP (passes), 11 is not."""
    n = 10_000
    bound = TOLERANCES[dtype].fp8_frac_within_1ulp
    mbits = accuracy.FP8_FORMATS[dtype][0]
    expected = _signed_unit(n, 8)
    expected[:off] = 1.0  # an FP8 ULP is 2^-mbits there
    actual = expected.clone()
    actual[:off] += 1.5 * 2.0**-mbits
    report = compare(actual, expected, dtype)
    assert report.fp8_frac_within_1ulp == pytest.approx(1.0 - off / n, abs=1e-12)
    if off / n <= 1 - bound + 1e-12:
        assert report.passed, report.summary()
    else:
        _failure_names(report, "only")


@pytest.mark.parametrize("dtype", _entries("fp8_frac_within_1ulp"))
def test_fp8_ulp_is_the_formats_own_spacing(dtype):
    mbits, min_exp, fmax = accuracy.FP8_FORMATS[dtype]
    assert (mbits, fmax) == {"float8_e4m3fn": (3, 448.0), "float8_e5m2": (2, 57344.0)}[dtype]
    assert min_exp == {"float8_e4m3fn": -6, "float8_e5m2": -14}[dtype]

    def one_ulp_at(v):
        above = torch.tensor([v + 2.0 ** (math.frexp(v)[1] - 1 - mbits)])
        return float(accuracy.fp8_ulp_distance(above, torch.tensor([v]), dtype))

    assert one_ulp_at(1.0) == 1.0 and one_ulp_at(3.0) == 1.0 and one_ulp_at(0.75) == 1.0
    # below the smallest normal the spacing stays the smallest normal's; above the maximum, expected is clamped
    tiny = 2.0 ** (min_exp - 3)
    d = accuracy.fp8_ulp_distance(torch.tensor([tiny + 2.0 ** (min_exp - mbits)]), torch.tensor([tiny]), dtype)
    assert float(d) == pytest.approx(1.0)
    assert float(accuracy.fp8_ulp_distance(torch.tensor([fmax]), torch.tensor([2 * fmax]), dtype)) == 0.0


# --------------------------------------------------------------------------------------------- fp16's ULP floor


@pytest.mark.parametrize("factor", [INSIDE, OUTSIDE], ids=["inside", "outside"])
def test_fp16_ulps_are_taken_at_its_smallest_normal(factor):
    """Below 2^-14 fp16 numbers are 2^-24 apart: a bf16 ULP is taken at 2^-14 (2^-21) there, not at the value."""
    tol = TOLERANCES["float16"]
    assert tol.ulp_floor == 2.0**-14
    expected = _signed_unit(N, 9)
    expected[3] = 1e-6
    actual = expected.clone()
    actual[3] += factor * tol.max_ulp * 2.0**-21
    report = compare(actual, expected, "float16")
    assert report.max_ulp == pytest.approx(factor * tol.max_ulp, rel=1e-6)
    assert report.passed == (factor < 1), report.summary()
    # bf16 has no floor: the same error is ~30 ULPs of 1e-6
    assert TOLERANCES["bfloat16"].ulp_floor == 0.0
    assert compare(actual, expected, "bfloat16").max_ulp > 15


# -------------------------------------------------------------------------------------------------------- units


def test_bf16_ulp_at_powers_of_two_and_subnormals():
    values = torch.tensor([1.0, 1.99, 2.0, -3.0, 0.5, 2.0**-126, 2.0**-130, 0.0, 3.0e38], dtype=torch.float64)
    want = [2.0**-7, 2.0**-7, 2.0**-6, 2.0**-6, 2.0**-8, 2.0**-133, 2.0**-133, 2.0**-133, 2.0**120]
    assert accuracy.bf16_ulp(values).tolist() == want
    # bf16's own neighbours are one ULP apart
    x = torch.tensor([1.0, 3.0, 1000.0, 1e-20])
    nxt = torch.nextafter(x.to(torch.bfloat16), torch.tensor(math.inf, dtype=torch.bfloat16))
    assert accuracy.bf16_ulp_distance(nxt, x.to(torch.bfloat16)).tolist() == [1.0] * 4


def test_bf8_block_step_bounds_ttnns_own_rounding():
    """A value packed to bfloat8_b by ttnn is within half a block step of the original: the step is the unit."""
    x = torch.randn(2, 32, 64, generator=_gen(10)) * torch.logspace(-3, 3, 64)
    q = ref.quantize(x, "bfloat8_b").double()
    steps = (q - x.double()).abs() / accuracy.bf8_block_step(x)
    # half a step, or one where the block's largest value rounds up to the next power of two (its exponent with it)
    assert float(steps.max()) <= 1.0 and 0.45 < float(steps[steps <= 0.5].max())
    assert float((steps <= 0.5).double().mean()) > 0.99


def test_bf8_block_step_is_shared_by_16_columns():
    e = torch.full((2, 40), 0.01, dtype=torch.float64)
    e[0, 17] = 100.0  # block 16..31 of row 0: 100 = 1.5625 * 2^6, so the step is 2^0
    e[1] = 0.0
    step = accuracy.bf8_block_step(e)
    assert step.shape == e.shape
    assert bool((step[0, 16:32] == 1.0).all())
    assert bool((step[0, :16] == 2.0**-13).all()) and bool((step[0, 32:] == 2.0**-13).all())  # 0.01: 1.28 * 2^-7
    assert bool((step[1] == 2.0**-132).all())  # an all-zero block: the smallest normal's step
    assert float(accuracy.bf8_block_step(torch.tensor(3.0))) == 2.0**-5


# ------------------------------------------------------------------------------------------------------ reports


def test_bfloat8_b_reports_block_steps_not_ulps():
    """A bfloat8_b output flushes values far below its block's maximum to zero: thousands of bf16 ULPs of their own
    magnitude, which is not an error of bfloat8_b. Its report has no ULPs, only block steps."""
    x = torch.randn(1, 1, 32, 1024, generator=_gen(11))
    x[..., ::16] *= 1000.0  # every block's first value dominates it
    q = ref.quantize(x, "bfloat8_b")
    report = compare(q, x.double(), "bfloat8_b")
    assert report.max_ulp is None and report.mean_ulp is None
    assert report.max_bf8_step <= 1.0 and 0 < report.mean_bf8_step < 0.25
    assert report.passed, report.summary()
    assert "max_ulp" not in report.summary() and f"max_bf8_step={report.max_bf8_step:.3g}" in report.summary()
    assert report.headline() == f"{report.max_bf8_step:.2f} step"
    bf16 = compare(x.to(torch.bfloat16), x.double(), "bfloat16")
    assert bf16.max_bf8_step is None and bf16.headline() == f"{bf16.max_ulp:.2f} ULP"


def test_bf8_block_steps_skip_non_finite_expected_values():
    """A NaN among small values: the block's step comes from its finite values (0.01: 2^-13), not from a stand-in."""
    expected = torch.full((1, 32), 0.01, dtype=torch.float64)
    expected[0, 3] = math.nan
    actual = expected + 2.0**-14
    report = compare(actual, expected, "bfloat8_b")
    assert report.max_bf8_step == pytest.approx(0.5) and report.mean_bf8_step == pytest.approx(0.5)


def test_fp8_reports_its_own_ulps_not_bf16_ulps():
    x = torch.randn(1024, generator=_gen(12))
    report = compare(x.to(torch.float8_e4m3fn).float(), x.double(), torch.float8_e4m3fn)
    assert report.max_ulp is None and report.max_bf8_step is None
    assert report.fp8_frac_within_1ulp == 1.0 and report.passed
    assert report.headline() == "100.00% <=1ulp" and "fp8_within_1ulp=1.00000" in report.summary()


def test_non_finite_values():
    expected = torch.tensor([1.0, -2.0, math.nan, math.inf, -math.inf, 0.5], dtype=torch.float64)
    same = compare(expected.clone(), expected, "bfloat16")
    assert same.passed and same.nonfinite == 0, same.summary()
    for i, v, kind in [
        (0, math.inf, "non-finite values where the reference is finite"),
        (1, math.nan, "non-finite values where the reference is finite"),
        (2, 0.0, "differ from the reference's NaN/Inf"),
        (3, -math.inf, "differ from the reference's NaN/Inf"),
        (4, math.nan, "differ from the reference's NaN/Inf"),
    ]:
        actual = expected.clone()
        actual[i] = v
        report = compare(actual, expected, "bfloat16")
        assert not report.passed and report.nonfinite == 1, (i, report.summary())
        assert len(report.failures) == 1 and kind in report.failures[0], report.failures  # the rest are exact


def test_all_nan_result_where_all_nan_is_expected_passes():
    nan = torch.full((2, 16), math.nan, dtype=torch.float64)
    for dtype in TOLERANCES:
        report = compare(nan.clone(), nan, dtype)
        assert report.passed and report.nonfinite == 0, (dtype, report.summary())
    assert all(math.isnan(v) for v in (report.max_abs, report.max_abs_rel, report.rel_rms))
    mixed = torch.tensor([math.nan, 1.0, 2.0, 3.0], dtype=torch.float64)
    report = compare(mixed.clone(), mixed, "float8_e4m3fn")
    assert report.fp8_frac_within_1ulp == 1.0 and report.passed  # over the finite elements only


def test_pcc_is_judged_from_two_elements():
    """Only PCC judged (a tolerance of PCC alone): two anti-correlated values fail, one value is never judged."""
    only_pcc = accuracy.Tolerance(dtype="bfloat16", pcc_min=0.9, max_ulp=None, mean_ulp=None, max_abs_rel=None)
    two = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert not compare(two.flip(0), two, "bfloat16", tolerance=only_pcc).passed
    assert compare(two, two, "bfloat16", tolerance=only_pcc).passed
    assert compare(torch.tensor([5.0]), torch.tensor([1.0]), "bfloat16", tolerance=only_pcc).passed


def test_a_tolerance_with_a_max_ulp_bound_only():
    only_max = accuracy.Tolerance(dtype="bfloat16", pcc_min=0.0, max_ulp=1.0, mean_ulp=None, max_abs_rel=None)
    expected = _signed_unit(64, 13)
    off = expected.clone()
    off[0] += 2.0 * _ulp_bf16(float(expected[0]))
    report = compare(off, expected, "bfloat16", tolerance=only_max)
    assert report.max_ulp == pytest.approx(2.0) and report.mean_ulp == pytest.approx(2.0 / 64)
    _failure_names(report, "max bf16 ULP")


def test_zero_expected_and_constant_tensors():
    zeros = torch.zeros(64, dtype=torch.float64)
    assert compare(zeros, zeros, "bfloat16").passed
    assert accuracy.pcc(zeros, zeros) == 1.0 and accuracy.pcc(zeros + 1.0, zeros) == 0.0
    ramp = torch.arange(64, dtype=torch.float64)
    assert accuracy.pcc(zeros + 1.0, ramp) == 0.0 and accuracy.pcc(ramp, zeros + 1.0) == 0.0  # one side constant
    off = compare(torch.full((64,), 1e-30), zeros, "bfloat8_b")
    assert off.max_abs_rel == math.inf and off.rel_rms == math.inf and not off.passed
    assert compare(zeros, zeros, "bfloat16").rel_rms == 0.0
    assert math.isnan(accuracy.pcc(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0])))


def test_rel_rms_and_max_abs():
    expected = torch.tensor([1.0, -1.0, 2.0, -2.0], dtype=torch.float64)
    actual = expected * 1.001
    report = compare(actual, expected, "bfloat16")
    assert report.rel_rms == pytest.approx(1e-3, rel=1e-9)
    assert report.max_abs == pytest.approx(2e-3, rel=1e-9) and report.max_abs_rel == pytest.approx(1e-3, rel=1e-9)
    with pytest.raises(ValueError, match="shape mismatch"):
        compare(actual[:3], expected, "bfloat16")


def test_ulp_reference_takes_ulps_at_the_larger_magnitude():
    """y = a + bias near zero: the error scales with |a|, not |y|."""
    expected = torch.tensor([1e-3, 1.0, -1.0], dtype=torch.float64)
    actual = expected + torch.tensor([2.0**-8, 0.0, 0.0], dtype=torch.float64)  # half a ULP of 1.0
    assert not compare(actual, expected, "bfloat16").passed
    report = compare(actual, expected, "bfloat16", ulp_reference=torch.tensor([1.0, 1.0, 1.0]))
    assert report.max_ulp == pytest.approx(0.5) and report.passed


def test_assert_close_raises_with_context_and_every_metric():
    expected = torch.ones(8, dtype=torch.float64)
    assert accuracy.assert_close(expected, expected, "float32").passed
    with pytest.raises(AssertionError, match=r"^ctx: pcc=.* max_ulp=.* FAIL: max bf16 ULP"):
        accuracy.assert_close(expected * 1.01, expected, "float32", context="ctx")


@pytest.mark.parametrize(
    "given, name",
    [
        ("bf16", "bfloat16"),
        ("fp32", "float32"),
        ("half", "float16"),
        ("bfloat8b", "bfloat8_b"),
        ("bf8_b", "bfloat8_b"),
        (torch.bfloat16, "bfloat16"),
        (torch.float8_e5m2, "float8_e5m2"),
        ("float8_e4m3fn", "float8_e4m3fn"),
    ],
    ids=str,
)
def test_dtype_names(given, name):
    assert accuracy.dtype_name(given) == name
    assert accuracy.tolerance_for(given).dtype == name


def test_ttnn_dtype_names():
    import ttnn

    assert accuracy.tolerance_for(ttnn.bfloat8_b).dtype == "bfloat8_b"
    assert accuracy.tolerance_for(ttnn.bfloat16).dtype == "bfloat16"
    assert accuracy.tolerance_for(ttnn.float32).dtype == "float32"
    with pytest.raises(KeyError, match="no tolerance for dtype 'int8'"):
        accuracy.tolerance_for(torch.int8)
    with pytest.raises(KeyError, match="no tolerance for dtype '42'"):
        accuracy.tolerance_for(42)


# The policy itself, entry by entry: (PCC min, max ULP, mean ULP, max abs / max|expected|, FP8 share within 1 ULP, ULP
# floor). The boundary tests above show `compare` applies whatever the table says; this pins what it says, so that a
# looser (or tighter) bound is a change made here too, with its reason in the entry's `why`.
POLICY = {
    "float32": (0.999999, 0.05, 0.01, 1e-4, None, 0.0),
    "bfloat16": (0.9999, 2.0, 0.5, 2.0**-6, None, 0.0),
    "float16": (0.99999, 0.5, 0.1, 2.0**-9, None, 2.0**-14),
    "bfloat8_b": (0.999, None, None, 2.0**-5, None, 0.0),
    "float8_e4m3fn": (0.999, None, None, 2.0**-3, 0.999, 0.0),
    "float8_e5m2": (0.995, None, None, 2.0**-2, 0.999, 0.0),
}


@pytest.mark.parametrize("dtype", list(POLICY))
def test_policy_values(dtype):
    t = TOLERANCES[dtype]
    assert (t.pcc_min, t.max_ulp, t.mean_ulp, t.max_abs_rel, t.fp8_frac_within_1ulp, t.ulp_floor) == POLICY[dtype]
    assert set(TOLERANCES) == set(POLICY)


def test_every_entry_is_named_after_its_dtype_and_says_why():
    for name, tol in TOLERANCES.items():
        assert tol.dtype == name and len(tol.why) > 40
        assert 0.99 <= tol.pcc_min < 1.0
        assert (tol.max_ulp is None) == (tol.mean_ulp is None)
        assert (tol.fp8_frac_within_1ulp is not None) == name.startswith("float8")


def test_inputs_as_python_sequences_and_keyword_only_options():
    assert compare([1.0, 2.0, 3.0], (1.0, 2.0, 3.0), "float32").passed
    assert accuracy.pcc([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    with pytest.raises(TypeError):
        compare([1.0], [1.0], "float32", TOLERANCES["float32"])  # tolerance, ulp_reference, cancelling by keyword
