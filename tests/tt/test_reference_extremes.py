"""The reference model where its numbers are decided by a detail: the post's bf16-truncated scaler and epsilon's
place, each against an independent computation, and extreme values (rows whose squares overflow fp32, NaN and Inf)."""

import math

import pytest
import torch

from tt_rmsnorm import reference as ref
from tt_rmsnorm.accuracy import assert_close

EPS = 1e-5


def _randn(shape, seed, scale=1.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def _bf16_floor(value: float) -> float:
    """The largest bf16 value at or below a positive `value` (8 significant bits), from its binary exponent."""
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2^exponent, mantissa in [0.5, 1)
    return math.floor(mantissa * 2**8) / 2**8 * 2.0**exponent


@pytest.mark.parametrize(
    "w_local, num_devices", [(384, 8), (1024, 8), (96, 1), (160, 3), (1000, 1)], ids=lambda v: str(v)
)
def test_post_scaler_is_truncated_to_bf16(w_local, num_devices):
    """The interleaved post multiplies the summed stats by 1/(W_padded * N) truncated to bf16 (exact for powers of two;
    1/3072 is 0.39 % low): checked against an independent floor to 8 significant bits, and shown to differ from the
    exact scaler where it is not a power of two."""
    x = ref.quantize(_randn((1, 1, 32, w_local), 40), "bfloat16").double()
    stats = torch.zeros(1, 1, 32, 32 * num_devices, dtype=torch.float64)
    stats[..., ::32] = x.pow(2).sum(-1, keepdim=True) * torch.linspace(0.5, 1.5, num_devices)
    padded = -(-w_local // 32) * 32
    scaler = _bf16_floor(1.0 / (padded * num_devices))
    got = ref.post_all_gather(x, stats, epsilon=EPS)
    assert got.dtype == torch.float64
    want = x * torch.rsqrt(stats.sum(-1, keepdim=True) * scaler + EPS)
    assert_close(got, want, "float32", context="post vs the bf16-floored scaler")
    exact = x * torch.rsqrt(stats.sum(-1, keepdim=True) / (padded * num_devices) + EPS)
    if scaler == 1.0 / (padded * num_devices):
        assert_close(got, exact, "float32")
    else:
        with pytest.raises(AssertionError, match="max bf16 ULP"):
            assert_close(got, exact, "float32", context="post vs the exact scaler")


@pytest.mark.parametrize("num_devices", [1, 2, 8], ids=["n1", "n2", "n8"])
def test_sharded_post_scaler_is_one_over_num_devices(num_devices):
    x = ref.quantize(_randn((1, 1, 32, 256), 41), "bfloat16").double()
    means = torch.zeros(1, 1, 32, 32 * num_devices, dtype=torch.float64)
    means[..., ::32] = torch.linspace(0.25, 4.0, num_devices)
    got = ref.post_all_gather(x, means, layout="sharded", epsilon=EPS)
    want = x * torch.rsqrt(means.sum(-1, keepdim=True) / num_devices + EPS)  # 1/N is a power of two or bf16-exact
    assert_close(got, want, "float32", context="sharded post: mean of the per-device means")


def _tiny_rows(seed):
    """Rows with mean(x^2) ~ 1e-8: epsilon (1e-5) dominates the denominator, so its placement decides the output."""
    return 1e-4 * _randn((1, 1, 32, 1024), seed)


@pytest.mark.parametrize("layout", list(ref.LAYOUTS))
def test_epsilon_inside_the_square_root_on_tiny_rows(layout):
    x = _tiny_rows(42)
    xq = ref.quantize(x, "bfloat16").double()
    inside = xq / torch.sqrt(xq.pow(2).mean(-1, keepdim=True) + EPS)
    outside = xq / (torch.sqrt(xq.pow(2).mean(-1, keepdim=True)) + EPS)
    assert_close(ref.golden_rms_norm(xq, epsilon=EPS), inside, "float32", context="golden, eps inside sqrt")
    out, _ = ref.distributed_rms_norm(x, num_devices=4, epsilon=EPS, layout=layout)
    single = ref.single_device_rms_norm(x, epsilon=EPS, dtype="bfloat16")
    for got, what in ((out, f"{layout}, 4 devices"), (single, "single device")):
        assert_close(got, inside, "bfloat16", context=f"{what} vs eps inside sqrt")
        with pytest.raises(AssertionError):
            assert_close(got, outside, "bfloat16", context=f"{what} vs eps outside sqrt")
    # eps dominates: a result that ignored it (x / rms) would be ~30x larger
    assert float(inside.abs().max()) < 0.2 < float((xq / xq.pow(2).mean(-1, keepdim=True).sqrt()).abs().max())


def test_epsilon_value_is_used_exactly_on_tiny_rows():
    """The float32 policy (0.05 bf16 ULP) sees a 1 % change of epsilon where epsilon dominates."""
    x = _tiny_rows(43)
    xq = ref.quantize(x, "bfloat16").double()
    stats = ref.pre_all_gather(xq)
    got = ref.post_all_gather(xq, stats, epsilon=EPS)
    ex2 = stats.double().sum(-1, keepdim=True) / 1024
    assert_close(got, xq * torch.rsqrt(ex2 + EPS), "float32")
    with pytest.raises(AssertionError):
        assert_close(got, xq * torch.rsqrt(ex2 + 1.01 * EPS), "float32")


def _rows_with(values):
    """[1, 1, len(values), 1024] randn rows, row i's column 5 replaced by values[i] (None: left as is)."""
    x = _randn((1, 1, len(values), 1024), 44)
    for i, v in enumerate(values):
        if v is not None:
            x[0, 0, i, 5] = v
    return x


@pytest.mark.parametrize("layout", list(ref.LAYOUTS))
def test_rows_overflowing_fp32_come_out_as_zeros(layout):
    """A square past the fp32 maximum (|x| = 2^65) makes the device's stats Inf, so the post's rsqrt is 0: the row is
    zeros where the float64 golden is finite. Other rows are untouched."""
    x = _rows_with([None, 2.0**65, None, 2.0**126])
    x[0, 0, 3] = 2.0**126  # a whole row near the bf16 maximum, as the parity runner's huge rows
    weight = ref.quantize(1.0 + 0.1 * _randn((1024,), 45), "bfloat16").float()
    out, stats = ref.distributed_rms_norm(x, weight, num_devices=2, epsilon=EPS, layout=layout)
    rows = ref.overflow_rows(x, num_devices=2, layout=layout)
    assert rows.tolist() == [[[False, True, False, True]]]
    assert bool(stats[0, 0, 1].isinf().any()) and bool(stats[0, 0, 0].isfinite().all())
    assert bool((out[0, 0, 1] == 0).all()) and bool((out[0, 0, 3] == 0).all())
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), weight, epsilon=EPS)
    assert bool(golden[0, 0, 1].abs().max() > 0.5), "the golden is finite and non-zero there"
    assert_close(out[0, 0, ::2], golden[0, 0, ::2], "bfloat16", context="rows without overflow")
    # single-device ttnn.rms_norm squares in fp32 as well
    single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat16")
    assert bool((single[0, 0, 1] == 0).all()) and bool((single[0, 0, 3] == 0).all())


def test_sharded_pre_overflows_on_squares_not_on_the_mean():
    """2^63.5 squared (2^127) is finite in fp32; 2^63.5 in 64 columns sums to 2^133 (Inf for the interleaved fp32
    accumulation) but averages to 2^127 (finite for the sharded pre, which scales each square by 1/W first)."""
    x = torch.full((1, 1, 32, 64), 2.0**63.5)
    interleaved = ref.pre_all_gather(x.to(torch.float32), stats_dtype="float32")
    sharded = ref.pre_all_gather(x.to(torch.bfloat16), layout="sharded")
    assert bool(interleaved[..., 0].isinf().all())
    assert bool(sharded[..., 0].isfinite().all())
    assert torch.equal(sharded[..., 0].double(), ref.quantize(torch.full((1, 1, 32), 2.0**127), "bfloat16").double())
    assert not bool(ref.overflow_rows(x, num_devices=1, layout="sharded").any())
    assert bool(ref.overflow_rows(x, num_devices=1, layout="interleaved").all())


@pytest.mark.parametrize("layout", list(ref.LAYOUTS))
def test_nan_and_inf_inputs(layout):
    """NaN in a row: the whole row NaN on every device. Inf in a row: stats Inf, the row +-0 with NaN (Inf * 0) at
    the Inf. The float64 golden gives the same, and the policy accepts it (same NaN, same zeros); no row overflows."""
    x = _rows_with([None, float("nan"), float("inf"), float("-inf")])
    out, _ = ref.distributed_rms_norm(x, num_devices=2, epsilon=EPS, layout=layout)
    assert not bool(out[0, 0, 0].isnan().any())
    assert bool(out[0, 0, 1].isnan().all())
    for r in (2, 3):
        assert out[0, 0, r].isnan().nonzero().flatten().tolist() == [5]
        assert bool((out[0, 0, r, :5] == 0).all()) and bool((out[0, 0, r, 6:] == 0).all())
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), epsilon=EPS)
    assert_close(out, golden, "bfloat16", context="NaN/Inf rows vs golden")
    assert not bool(ref.overflow_rows(x, num_devices=2, layout=layout).any())


def test_overflow_is_per_device_sum():
    """Each device sums only its slice: a row whose whole sum of squares is 1.2x the fp32 maximum overflows on one
    device, not on four (0.3x each; the post scales before it adds)."""
    value = math.sqrt(1.2 * torch.finfo(torch.float32).max / 128)
    x = torch.full((1, 1, 32, 128), value)
    assert bool(ref.overflow_rows(x, num_devices=1, dtype="float32").all())
    assert not bool(ref.overflow_rows(x, num_devices=4, dtype="float32").any())
    out, _ = ref.distributed_rms_norm(x, num_devices=4, epsilon=EPS, dtype="float32")
    assert_close(out, ref.golden_rms_norm(x, epsilon=EPS), "bfloat16", context="4 devices, bf16 stats, no overflow")


def test_weight_and_bias_on_every_device_slice():
    """Each device gets its own slice of the weight and the bias: the N-device output is the golden's."""
    x = _randn((1, 1, 32, 4096), 46)
    weight = ref.quantize(1.0 + 0.1 * _randn((4096,), 47), "bfloat16").float()
    bias = ref.quantize(_randn((4096,), 48), "bfloat16").float()
    xq = ref.quantize(x, "bfloat16")
    scaled = ref.golden_rms_norm(xq, weight, epsilon=EPS)
    for num_devices in (2, 8):
        out, _ = ref.distributed_rms_norm(x, weight, bias, num_devices=num_devices, epsilon=EPS)
        golden = ref.golden_rms_norm(xq, weight, bias, epsilon=EPS)
        # near-zero outputs (the bias cancelling x * r * w) carry the error of x * r * w: ULPs at its magnitude
        assert_close(out, golden, "bfloat16", ulp_reference=scaled, context=f"{num_devices} devices, weight + bias")


def test_post_output_dtype_given_as_a_torch_dtype():
    """dtype=torch.float64 (as the golden comparisons pass it) means unrounded, as a float64 input with dtype=None."""
    x = ref.quantize(_randn((1, 1, 32, 256), 49), "bfloat16").double()
    stats = ref.pre_all_gather(x)
    unrounded = ref.post_all_gather(x, stats, epsilon=EPS)
    assert unrounded.dtype == torch.float64
    assert torch.equal(ref.post_all_gather(x, stats, epsilon=EPS, dtype=torch.float64), unrounded)
    assert ref.post_all_gather(x, stats, epsilon=EPS, dtype=torch.bfloat16).dtype == torch.bfloat16
