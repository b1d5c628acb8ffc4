"""The reference numerics (tt_rmsnorm.reference): golden RMSNorm, the model of the two TT stages, N-device emulation.

Every numeric comparison goes through the project's one policy (tt_rmsnorm.accuracy.assert_close). ttnn's own golden
functions compute in their input's torch dtype, so they get float64 (or, for the stats, float32) copies of the device
values: bf16 tensors would add bf16 roundings that neither the device's fp32 reductions nor the model make.
"""

import math
import os
import re
import subprocess
import sys

import pytest
import torch
import ttnn as ttnn_module

from tt_rmsnorm import accuracy
from tt_rmsnorm import reference as ref
from tt_rmsnorm.accuracy import assert_close
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.hardware import MOCK_ENV, tt_hardware_present

EPS = 1e-5
HIDDEN = 8192  # Llama-70B


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(shape, seed, scale=1.0):
    return torch.randn(shape, generator=_gen(seed)) * scale


def _weight(width, seed):
    return 1.0 + 0.1 * _randn((width,), seed)


def _bf16_exact(t):
    """float32 holding bf16 values: weights and biases are bf16 on the device."""
    return ref.quantize(t, "bfloat16").to(torch.float32)


@pytest.fixture(scope="module")
def ttnn():
    """ttnn's golden functions and bfloat8_b packing (ttnn is a dependency of the package)."""
    return ttnn_module


@pytest.fixture
def host_cluster(monkeypatch, ttnn):
    """ttnn's bf8 golden helpers pack on the host and need a (mock) cluster, like reference.quantize."""
    if not os.environ.get(MOCK_ENV) and not tt_hardware_present():
        monkeypatch.setenv(MOCK_ENV, str(ref.HOST_CONVERSION_DESCRIPTOR))
    return ttnn


SHAPES = [(1, 1, 32, 1024), (1, 1, 128, 2048), (2, 1, 64, 1024), (1, 1, 32, 8192)]
SHAPE_IDS = ["1x1x32x1024", "1x1x128x2048", "2x1x64x1024", "decode_1x1x32x8192"]
AFFINE = ["no_affine", "weight", "weight_bias"]


def _affine(kind, width, seed):
    weight = _bf16_exact(_weight(width, seed)) if kind != "no_affine" else None
    bias = _bf16_exact(0.1 * _randn((width,), seed + 1)) if kind == "weight_bias" else None
    return weight, bias


# ---------------------------------------------------------------------------------------------------------- golden


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("affine", AFFINE)
def test_golden_matches_independent_formula(shape, affine):
    x = _randn(shape, 1, scale=3.0).double()
    weight, bias = _affine(affine, shape[-1], 2)
    got = ref.golden_rms_norm(x, weight, bias, epsilon=EPS)
    assert got.dtype == torch.float64
    # RMS through the vector 2-norm: ||x|| / sqrt(H) = sqrt(mean(x^2)).
    rms = torch.sqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / shape[-1] + EPS)
    want = x / rms
    if weight is not None:
        want = want * weight.double()
    if bias is not None:
        want = want + bias.double()
    assert_close(got, want, "float32", context="golden vs vector-norm formula")


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("with_residual", [False, True], ids=["no_residual", "residual"])
def test_golden_matches_torch_rms_norm(affine, with_residual):
    shape = (2, 1, 64, 1024)
    x = _randn(shape, 3).double()
    residual = _randn(shape, 4).double() if with_residual else None
    weight, bias = _affine(affine, shape[-1], 5)
    got = ref.golden_rms_norm(x, weight, bias, epsilon=EPS, residual=residual)
    h = x if residual is None else x + residual
    want = torch.nn.functional.rms_norm(h, (shape[-1],), None if weight is None else weight.double(), eps=EPS)
    if bias is not None:
        want = want + bias.double()
    assert_close(got, want, "float32", context="golden vs torch.nn.functional.rms_norm (float64)")


# ------------------------------------------------------------------------------------------ stages vs ttnn goldens


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("with_residual", [False, True], ids=["no_residual", "residual"])
def test_interleaved_pre_matches_ttnn_golden(ttnn, shape, with_residual):
    # Rows of different scale, as tokens have: sum(x^2) of same-scale rows is nearly constant, and a PCC over a
    # nearly constant column measures only its rounding noise.
    row_scale = torch.linspace(0.5, 2.0, shape[-2]).unsqueeze(-1)
    x = ref.quantize(_randn(shape, 6) * row_scale, "bfloat16")
    residual = ref.quantize(_randn(shape, 7), "bfloat16") if with_residual else None
    stats = ref.pre_all_gather(x, layout="interleaved", residual=residual)

    assert stats.shape == (*shape[:-1], 32) and stats.dtype == torch.bfloat16
    assert torch.count_nonzero(stats[..., 1:]) == 0, "columns 1..31 of the stats tile must be exactly zero"
    golden = ttnn.rms_norm_pre_all_gather.golden_function
    if residual is None:
        want = golden(x.float(), dtype=ttnn.bfloat16)
        assert torch.equal(stats, want), "col 0 must be sum(x^2) rounded to bf16, as ttnn's golden"
    else:
        # The kernel rounds x + residual to the input's dtype before squaring; the golden adds in float32.
        h = ref.quantize(x.double() + residual.double(), "bfloat16")
        assert torch.equal(stats, golden(h.float(), dtype=ttnn.bfloat16))
        want = golden(x.float(), residual_input_tensor=residual.float(), dtype=ttnn.bfloat16)
        assert_close(stats[..., 0], want[..., 0], "bfloat16", context="pre with residual vs ttnn golden")
    assert torch.count_nonzero(want[..., 1:]) == 0


@pytest.mark.parametrize("stats_dtype", ["float32", "bfloat8_b"])
def test_pre_stats_dtypes_match_ttnn_golden(host_cluster, stats_dtype):
    ttnn = host_cluster
    x = ref.quantize(_randn((1, 1, 128, 2048), 8), "bfloat16")
    stats = ref.pre_all_gather(x, stats_dtype=stats_dtype)
    want = ttnn.rms_norm_pre_all_gather.golden_function(x.float(), dtype=getattr(ttnn, stats_dtype))
    assert torch.count_nonzero(stats[..., 1:]) == 0
    assert_close(stats, want, stats_dtype, context=f"{stats_dtype} stats vs ttnn golden")
    if stats_dtype == "bfloat8_b":
        # col 0 shares its exponent with 15 zeros, so bf8 stats are sum(x^2) with a 7-bit mantissa.
        assert torch.equal(stats, want)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("affine", AFFINE)
def test_interleaved_post_matches_ttnn_golden(ttnn, shape, affine):
    num_devices = 2
    width = shape[-1]
    x_full = ref.quantize(_randn((*shape[:-1], width * num_devices), 9), "bfloat16")
    weight, bias = _affine(affine, width * num_devices, 10)
    slices = x_full.split(width, dim=-1)
    stats = ref.all_gather_stats([ref.pre_all_gather(s) for s in slices])
    assert stats.shape == (*shape[:-1], 32 * num_devices)
    golden = ttnn.rms_norm_post_all_gather.golden_function
    wants, unrounded, got = [], [], []
    for d, x in enumerate(slices):
        w = None if weight is None else weight[d * width : (d + 1) * width].double()
        b = None if bias is None else bias[d * width : (d + 1) * width].double()
        wants.append(golden(x.double(), stats.double(), epsilon=EPS, weight=w, bias=b))
        unrounded.append(ref.post_all_gather(x.double(), stats, epsilon=EPS, weight=w, bias=b))
        got.append(ref.post_all_gather(x, stats, epsilon=EPS, weight=w, bias=b))
    want = torch.cat(wants, dim=-1)
    assert all(u.dtype == torch.float64 for u in unrounded) and all(g.dtype == torch.bfloat16 for g in got)
    assert_close(torch.cat(unrounded, dim=-1), want, "float32", context="post (unrounded) vs ttnn golden")
    assert_close(torch.cat(got, dim=-1), want, "bfloat16", context="post (bf16 out: the input's dtype) vs ttnn golden")


def test_sharded_post_matches_ttnn_golden_given_sums(ttnn):
    """The sharded post averages per-device means; ttnn's golden takes sums. Same answer for the same data."""
    num_devices, width = 4, 2048
    x_full = ref.quantize(_randn((1, 1, 32, width * num_devices), 11), "bfloat16")
    weight, _ = _affine("weight", width * num_devices, 12)
    slices = x_full.split(width, dim=-1)
    means = ref.all_gather_stats([ref.pre_all_gather(s, layout="sharded") for s in slices])
    golden = ttnn.rms_norm_post_all_gather.golden_function
    want, got = [], []
    for d, x in enumerate(slices):
        w = weight[d * width : (d + 1) * width].double()
        want.append(golden(x.double(), means.double() * width, epsilon=EPS, weight=w))
        got.append(ref.post_all_gather(x, means, layout="sharded", epsilon=EPS, weight=w, dtype="float32"))
    assert_close(torch.cat(got, dim=-1), torch.cat(want, dim=-1), "float32", context="sharded post vs ttnn golden")


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("with_residual", [False, True], ids=["no_residual", "residual"])
def test_single_device_matches_ttnn_rms_norm_golden(ttnn, shape, affine, with_residual):
    x = ref.quantize(_randn(shape, 13), "bfloat16")
    residual = ref.quantize(_randn(shape, 14), "bfloat16") if with_residual else None
    weight, bias = _affine(affine, shape[-1], 15)
    golden = ttnn.rms_norm.golden_function
    w64 = None if weight is None else weight.double()
    b64 = None if bias is None else bias.double()
    r64 = None if residual is None else residual.double()
    want = golden(x.double(), w64, epsilon=EPS, bias=b64, residual_input_tensor=r64)
    # fp32 output: the sum of two bf16 values is exact in fp32, so both add the residual exactly.
    got32 = ref.single_device_rms_norm(x.float(), weight, bias, epsilon=EPS, dtype="float32", residual=r64)
    assert_close(got32, want, "float32", context="single-device model (fp32) vs ttnn.rms_norm golden")
    # bf16 output: the device rounds x + residual to bf16 first, so the golden gets that rounded sum.
    got = ref.single_device_rms_norm(x, weight, bias, epsilon=EPS, dtype="bfloat16", residual=residual)
    assert got.dtype == torch.bfloat16
    h = x if residual is None else ref.quantize(x.double() + residual.double(), "bfloat16")
    want16 = golden(h.double(), w64, epsilon=EPS, bias=b64)
    assert_close(got, want16, "bfloat16", context="single-device model (bf16) vs ttnn.rms_norm golden")


# ---------------------------------------------------------------------------------------- N-device emulation

NUM_DEVICES = [1, 2, 4, 8, 32]
NUM_DEVICE_IDS = ["n1", "n2", "n4", "n8_t3k", "n32"]


def _check_stats_layout(stats, num_devices, rows):
    assert stats.shape[-2:] == (rows, 32 * num_devices)
    tiles = stats.reshape(*stats.shape[:-1], num_devices, 32)
    assert torch.count_nonzero(tiles[..., 1:]) == 0, "only column 0 of each device's tile may be non-zero"
    assert bool((tiles[..., 0] > 0).all())


# No bias here: with y = a + bias, elements near zero carry the bf16-stats error of `a` (2^-10 |a|), which the policy's
# per-element ULP bound (relative to |y|) cannot absorb. Bias handling is checked exactly against ttnn's golden above.
@pytest.mark.parametrize("num_devices", NUM_DEVICES, ids=NUM_DEVICE_IDS)
@pytest.mark.parametrize("affine", ["no_affine", "weight"])
def test_distributed_bf16_equals_single_device(num_devices, affine):
    x = _randn((1, 1, 32, HIDDEN), 16)
    weight, bias = _affine(affine, HIDDEN, 17)
    out, stats = ref.distributed_rms_norm(x, weight, bias, num_devices=num_devices, epsilon=EPS)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    _check_stats_layout(stats, num_devices, 32)
    single = ref.single_device_rms_norm(x, weight, bias, epsilon=EPS, dtype="bfloat16")
    assert_close(out, single, "bfloat16", context=f"{num_devices} devices vs single device")
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), weight, bias, epsilon=EPS)
    assert_close(out, golden, "bfloat16", context=f"{num_devices} devices vs float64 golden")


@pytest.mark.parametrize("num_devices", NUM_DEVICES, ids=NUM_DEVICE_IDS)
def test_distributed_sharded_bf16_equals_single_device(num_devices):
    x = _randn((1, 1, 32, HIDDEN), 18)  # the sharded layout is decode-only: one tile row
    weight, _ = _affine("weight", HIDDEN, 19)
    out, means = ref.distributed_rms_norm(x, weight, num_devices=num_devices, epsilon=EPS, layout="sharded")
    _check_stats_layout(means, num_devices, 32)
    single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat16")
    assert_close(out, single, "bfloat16", context=f"sharded, {num_devices} devices vs single device")
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), weight, epsilon=EPS)
    assert_close(out, golden, "bfloat16", context=f"sharded, {num_devices} devices vs float64 golden")
    # The sharded stats are the interleaved sums divided by the local width.
    _, sums = ref.distributed_rms_norm(x, weight, num_devices=num_devices, epsilon=EPS)
    assert_close(means, sums.double() / (HIDDEN // num_devices), "bfloat16", context="local mean vs sum / W_local")


def test_galaxy_8x4_only_columns_split_hidden():
    """Galaxy: hidden sharded over the 4 mesh columns, replicated over the 8 rows; each row gathers 4 tiles."""
    mesh_rows, mesh_cols = 8, 4
    x = _randn((1, 1, 32, HIDDEN), 20)
    weight, _ = _affine("weight", HIDDEN, 21)
    single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat16")
    row_outputs = []
    for _ in range(mesh_rows):  # every row holds the same replica of x and runs its own 4-device norm
        out, stats = ref.distributed_rms_norm(x, weight, num_devices=mesh_cols, epsilon=EPS)
        _check_stats_layout(stats, mesh_cols, 32)
        row_outputs.append(out)
    assert all(torch.equal(o, row_outputs[0]) for o in row_outputs)
    assert_close(row_outputs[0], single, "bfloat16", context="Galaxy 8x4 (4 columns) vs single device")
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), weight, epsilon=EPS)
    assert_close(row_outputs[0], golden, "bfloat16", context="Galaxy 8x4 (4 columns) vs float64 golden")
    # Splitting over all 32 chips would be a different program: 32 stats tiles, 256 elements per chip.
    _, stats32 = ref.distributed_rms_norm(x, weight, num_devices=mesh_rows * mesh_cols, epsilon=EPS)
    assert stats32.shape[-1] == 32 * 32 != stats.shape[-1]


def test_distributed_non_power_of_two_width_within_policy():
    """H=3072 over 8 devices: the post's 1/(W*N) scaler is not a power of two and is truncated to bf16."""
    x = _randn((1, 1, 64, 3072), 22)
    weight, _ = _affine("weight", 3072, 23)
    out, _ = ref.distributed_rms_norm(x, weight, num_devices=8, epsilon=EPS)
    single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat16")
    assert_close(out, single, "bfloat16", context="H=3072 on 8 devices vs single device")
    golden = ref.golden_rms_norm(ref.quantize(x, "bfloat16"), weight, epsilon=EPS)
    assert_close(out, golden, "bfloat16", context="H=3072 on 8 devices vs float64 golden")


@pytest.mark.parametrize("num_devices", [1, 8, 32], ids=["n1", "n8_t3k", "n32"])
def test_distributed_bfloat8_b_within_bound(ttnn, num_devices):
    x = _randn((1, 1, 32, HIDDEN), 24)
    weight, _ = _affine("weight", HIDDEN, 25)
    out, _ = ref.distributed_rms_norm(x, weight, num_devices=num_devices, epsilon=EPS, dtype="bfloat8_b")
    assert torch.equal(out, ref.quantize(out, "bfloat8_b")), "the output holds bfloat8_b values"
    single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat8_b")
    assert_close(out, single, "bfloat8_b", context=f"bf8, {num_devices} devices vs single device")
    # Against the unquantized input: the bf8 bound covers input and output quantization.
    assert_close(out, ref.golden_rms_norm(x, weight, epsilon=EPS), "bfloat8_b", context="bf8 vs float64 golden")


def test_distributed_residual_matches_golden_of_sum():
    x = _randn((1, 1, 32, HIDDEN), 26)
    residual = _randn((1, 1, 32, HIDDEN), 27)
    weight, _ = _affine("weight", HIDDEN, 28)
    for layout in ["interleaved", "sharded"]:
        out, _ = ref.distributed_rms_norm(x, weight, num_devices=8, epsilon=EPS, layout=layout, residual=residual)
        single = ref.single_device_rms_norm(x, weight, epsilon=EPS, dtype="bfloat16", residual=residual)
        assert_close(out, single, "bfloat16", context=f"{layout} with residual vs single device")
        h = ref.quantize(ref.quantize(x, "bfloat16").double() + ref.quantize(residual, "bfloat16").double(), "bfloat16")
        assert_close(out, ref.golden_rms_norm(h, weight, epsilon=EPS), "bfloat16", context=f"{layout} vs golden")


# ------------------------------------------------------------------------- characterization: would catch a wrong model


def test_mean_stats_fed_to_interleaved_post_is_off_by_sqrt_w_local():
    num_devices, width = 8, 1024
    x = ref.quantize(_randn((1, 1, 32, width * num_devices), 29), "bfloat16")
    slices = x.split(width, dim=-1)
    means = ref.all_gather_stats([ref.pre_all_gather(s, layout="sharded") for s in slices])
    sums = ref.all_gather_stats([ref.pre_all_gather(s, layout="interleaved") for s in slices])
    golden = ref.golden_rms_norm(x, epsilon=1e-6)[..., :width]
    right = ref.post_all_gather(slices[0], sums, layout="interleaved", epsilon=1e-6, dtype="float32")
    wrong = ref.post_all_gather(slices[0], means, layout="interleaved", epsilon=1e-6, dtype="float32")
    assert_close(right, golden, "bfloat16")
    with pytest.raises(AssertionError):
        assert_close(wrong, golden, "bfloat16", context="mean stats through the interleaved post")
    # The error is exactly the missing division by W_local inside rsqrt.
    assert_close(wrong / math.sqrt(width), golden, "bfloat16")
    # And the reverse mix (sums into the sharded post) is low by the same factor.
    low = ref.post_all_gather(slices[0], sums, layout="sharded", epsilon=1e-6, dtype="float32")
    with pytest.raises(AssertionError):
        assert_close(low, golden, "bfloat16")
    assert_close(low * math.sqrt(width), golden, "bfloat16")


def test_bias_without_weight_is_dropped_by_post(ttnn):
    num_devices, width = 4, 1024
    x = ref.quantize(_randn((1, 1, 64, width * num_devices), 30), "bfloat16")
    _, bias = _affine("weight_bias", width * num_devices, 31)
    out_bias, _ = ref.distributed_rms_norm(x, None, bias, num_devices=num_devices, epsilon=EPS)
    out_plain, _ = ref.distributed_rms_norm(x, num_devices=num_devices, epsilon=EPS)
    assert torch.equal(out_bias, out_plain), "the post kernel applies beta only inside its gamma branch"
    # ttnn's golden adds the bias anyway: the device (and the model) match its bias-free answer, not that one.
    slices = x.split(width, dim=-1)
    stats = ref.all_gather_stats([ref.pre_all_gather(s) for s in slices]).double()
    golden = ttnn.rms_norm_post_all_gather.golden_function
    assert_close(out_bias[..., :width], golden(slices[0].double(), stats, epsilon=EPS), "bfloat16")
    with_bias = golden(slices[0].double(), stats, epsilon=EPS, bias=bias[:width])
    with pytest.raises(AssertionError):
        assert_close(out_bias[..., :width], with_bias, "bfloat16")
    # Single-device ttnn.rms_norm applies beta without gamma.
    single = ref.single_device_rms_norm(x, None, bias, epsilon=EPS, dtype="bfloat16")
    assert_close(single, ref.golden_rms_norm(x, None, bias, epsilon=EPS), "bfloat16")


def test_stats_columns_beyond_zero_are_summed_by_post():
    """The post reduces every stats column (the kernel's REDUCE_ROW); junk in columns 1..31 changes the answer."""
    x = ref.quantize(_randn((1, 1, 32, 1024), 32), "bfloat16")
    stats = ref.pre_all_gather(x)
    junk = stats.clone()
    junk[..., 1] = stats[..., 0]
    clean = ref.post_all_gather(x, stats, epsilon=EPS, dtype="float32")
    doubled = ref.post_all_gather(x, junk, epsilon=EPS, dtype="float32")
    assert_close(doubled * math.sqrt(2.0), clean, "bfloat16")


# ------------------------------------------------------------------------------------------------- quantization


def test_bfloat8_b_shared_exponent_flushes_small_neighbours(ttnn):
    x = torch.full((1, 1, 32, 64), 0.01)
    x[0, 0, 0, 0] = 100.0
    q = ref.quantize(x, "bfloat8_b")
    plain = ref.quantize(torch.full((1, 1, 32, 64), 0.01), "bfloat8_b")
    assert q[0, 0, 0, 0] == 100.0
    assert torch.count_nonzero(q[0, 0, 0, 1:16]) == 0, "cols 1-15 share 100.0's exponent and flush to zero"
    assert torch.equal(q[0, 0, 0, 16:], plain[0, 0, 0, 16:]), "cols 16+ are the next exponent block"
    assert torch.equal(q[0, 0, 1:], plain[0, 0, 1:]), "other rows are untouched"
    # 0.01 = 1.28 * 2^-7 keeps 6 fraction bits: 82/64 * 2^-7 (the 0.01001 the facts report).
    assert bool((plain == 82 * 2.0**-13).all())


def test_bfloat8_b_matches_ttnn_golden_packing(host_cluster):
    ttnn = host_cluster
    from ttnn.operations.golden_common import golden_to_output_dtype

    x = _randn((2, 1, 64, 1024), 33, scale=4.0)
    q = ref.quantize(x, ttnn.bfloat8_b)
    assert q.dtype == torch.float32 and q.shape == x.shape
    assert torch.equal(q, golden_to_output_dtype(x, ttnn.bfloat8_b))
    assert torch.equal(q, q.to(torch.bfloat16).float()), "bf8 values are exact in bf16"
    # A bf16 host tensor is rounded twice (to bf16, then to bf8): ttnn packs what it is given.
    xb = x.to(torch.bfloat16)
    assert torch.equal(ref.quantize(xb, "bfloat8_b"), golden_to_output_dtype(xb, ttnn.bfloat8_b))


def test_bfloat16_quantize_matches_ttnn_from_torch(host_cluster):
    ttnn = host_cluster
    x = _randn((1, 1, 64, 1024), 34, scale=3.0)
    dev = ttnn.to_torch(ttnn.from_torch(x, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT))
    assert torch.equal(ref.quantize(x, "bfloat16"), dev)
    assert torch.equal(ref.quantize(x, torch.bfloat16), dev)
    assert torch.equal(ref.quantize(x, "float32"), x)


def test_quantize_leaves_environment_as_found(ttnn):
    before = os.environ.get(MOCK_ENV)
    ref.quantize(torch.ones(32, 32), "bfloat8_b")
    assert os.environ.get(MOCK_ENV) == before


def test_reference_imports_and_runs_without_ttnn():
    """The GPU and Trainium hosts have no ttnn: the module and its bf16 paths must not need it."""
    code = (
        "import sys; sys.modules['ttnn'] = None\n"
        "import torch\n"
        "from tt_rmsnorm import reference as ref\n"
        "out, _ = ref.distributed_rms_norm(torch.randn(1, 1, 32, 1024), num_devices=4, epsilon=1e-5)\n"
        "assert out.dtype == torch.bfloat16\n"
        "try:\n"
        "    ref.quantize(torch.ones(32, 32), 'bfloat8_b')\n"
        "except ImportError:\n"
        "    print('bf8 needs ttnn')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "bf8 needs ttnn" in res.stdout


# ---------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda x: ref.pre_all_gather(x, layout="sharded", stats_dtype="bfloat8_b"), "bfloat16 stats only"),
        (lambda x: ref.pre_all_gather(x, layout="width_sharded"), "layout='width_sharded'"),
        (lambda x: ref.pre_all_gather(x, stats_dtype="float16"), "is a TT device dtype"),
        (lambda x: ref.post_all_gather(x, torch.zeros(1, 1, 32, 48), epsilon=EPS), "32 * num_devices"),
        (lambda x: ref.post_all_gather(x, torch.zeros(1, 1, 64, 32), epsilon=EPS), "agree on every dim but the last"),
        (lambda x: ref.post_all_gather(x, torch.zeros(1, 1, 32, 0), epsilon=EPS), "32 * num_devices"),
        (lambda x: ref.golden_rms_norm(x, torch.ones(2048), epsilon=EPS), "2048 elements"),
        (lambda x: ref.post_all_gather(x, ref.pre_all_gather(x), epsilon=EPS, weight=torch.ones(512)), "512 elements"),
        (lambda x: ref.distributed_rms_norm(x, num_devices=3, epsilon=EPS), "dividing the hidden dim 1024"),
        (lambda x: ref.distributed_rms_norm(x, num_devices=0, epsilon=EPS), "num_devices=0"),
        (
            lambda x: ref.distributed_rms_norm(x, num_devices=2, epsilon=EPS, residual=x[..., :512]),
            "residual (1, 1, 32, 512)",
        ),
        (lambda x: ref.quantize(x, "float16"), "quantize takes a TT device dtype"),
        (lambda x: ref.all_gather_stats([]), "got no stats"),
        (lambda x: ref.all_gather_stats([ref.pre_all_gather(x), torch.zeros(1, 1, 32, 16)]), "device 1 stats"),
        (lambda x: ref.all_gather_stats([ref.pre_all_gather(x), torch.zeros(1, 1, 64, 32)]), "[1, 1, 32, 32*k]"),
    ],
    ids=[
        "sharded_bf8_stats",
        "unknown_path",
        "fp16_stats",
        "stats_width_48",
        "stats_rows_mismatch",
        "stats_width_0",
        "weight_too_long",
        "weight_width",
        "uneven_split",
        "zero_devices",
        "residual_shape",
        "fp16_quantize",
        "empty_gather",
        "gather_width_16",
        "gather_rows_mismatch",
    ],
)
def test_bad_input_names_the_rule(call, fragment):
    x = ref.quantize(_randn((1, 1, 32, 1024), 35), "bfloat16")
    with pytest.raises(RuleError, match=re.escape(fragment)) as err:
        call(x)
    assert err.value.rule.startswith("reference.") and "Fix:" in str(err.value)


def test_fp16_tolerance_takes_ulps_at_its_smallest_normal_at_least():
    """fp16 numbers below 2^-14 are 2^-24 apart: a correctly rounded fp16 result there is more than half a bf16 ULP of
    its own magnitude off, which the fp16 policy must accept, while a wrong one still fails."""
    expected = torch.tensor([3.0e-6, -1.1e-6, 0.75, 1.5], dtype=torch.float64)
    rounded = expected.to(torch.float16)
    assert float((rounded.double() - expected).abs()[0] / accuracy.bf16_ulp(expected)[0]) > 0.5  # the case itself
    assert accuracy.compare(rounded, expected, torch.float16).passed
    wrong = rounded.clone()
    wrong[2] = 0.7578125  # 0.75 + 2^-7: one bf16 ULP off at a normal magnitude
    assert not accuracy.compare(wrong, expected, torch.float16).passed
    tiny_wrong = rounded.clone()
    tiny_wrong[0] = 3.0e-6 + 2.0**-20  # 16 fp16 subnormal steps off
    assert not accuracy.compare(tiny_wrong, expected, torch.float16).passed


def test_path_is_accepted_for_layout():
    x = torch.randn(1, 1, 32, 64, dtype=torch.float64).to(torch.bfloat16)
    assert torch.equal(ref.pre_all_gather(x, path="sharded"), ref.pre_all_gather(x, layout="sharded"))
    with pytest.raises(TypeError, match="layout="):
        ref.pre_all_gather(x, path="sharded", layout="sharded")
