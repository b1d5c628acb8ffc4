"""Rows at the edges of the number formats (programs/triton/kernels/row_stats.py's rule) against the float64 reference,
mixed with ordinary rows in one batch: sums of squares past fp32's range (bf16 and fp32 values near their maximum),
subnormal and tiny rows (eps > 0 and eps = 0), +-inf, NaN and all-zero rows; forward over every kernel the
interpreter runs (and the Gluon kernels on a GPU), FP8, backward and the distributed post."""

import warnings

import pytest
import torch

from programs.triton.backward import rmsnorm_bwd
from programs.triton.backward_config import BwdConfig
from programs.triton.distributed import post, pre_stats
from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import FwdConfig
from tests.triton.ref64 import assert_close_cancelling, fp8_expected, grads64, norm64
from tests.triton.support import BWD_KERNELS, FWD_KERNELS, ROWS, SPLIT_CHUNK, extreme_batch, positive_weight
from tt_rmsnorm.accuracy import assert_close

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# the 16-bit word kernels (looped stats pass, split) beside the element kernels
WORDS = {
    "looped_words": FwdConfig("looped", 4, chunk=32, programs=3, words=True),
    "split_words": FwdConfig("split", 4, block_m=2, chunk=SPLIT_CHUNK, programs=8, words=True),
}
FINITE = ("huge", "one_huge", "tiny", "subnormal")


@pytest.fixture(autouse=True)
def quiet_numpy():
    """The interpreter computes with NumPy, which warns where x^2 overflows fp32: that overflow is under test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def rows_for(eps: float):
    """With eps = 0 a subnormal row's rms is below 2^-128 and its rstd past fp32's range (the documented limit,
    test_eps_zero_subnormal_row_is_the_documented_limit)."""
    return ROWS if eps > 0 else tuple(r for r in ROWS if r != "subnormal")


def forward_kernels():
    kernels = dict(FWD_KERNELS)
    kernels.update(WORDS)
    if DEV == "cuda":  # the default launches of the Gluon kernels at widths they serve
        kernels["default"] = None
    return kernels


@pytest.mark.parametrize("eps", [1e-5, 0.0], ids=["eps_1e-5", "eps_0"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", list(forward_kernels()))
def test_forward_extreme_rows_match_float64(kernel, dtype, eps):
    dt = DTYPES[dtype]
    cfg = forward_kernels()[kernel]
    if cfg is not None and cfg.words and dt != torch.bfloat16:
        pytest.skip("the word kernels hold 16-bit rows")
    n = 70 if cfg is not None else 4096
    x, w = extreme_batch(dt, n, rows_for(eps)), positive_weight(n, dt)
    o = rmsnorm_fwd(x, w, epsilon=eps, return_rsigma=True, config=cfg)
    v, rs, _ = norm64(x, w, epsilon=eps)
    assert_close(o.y, v, dt, context=f"y ({kernel})")
    assert_close(o.rsigma, rs, torch.float32, context=f"rsigma ({kernel})")


@pytest.mark.skipif(DEV != "cuda", reason="the Gluon kernels (cluster, cp.async) run on a GPU only")
@pytest.mark.parametrize(
    "shape", [(16, 4096), (600, 4096), (600, 8192), (64, 65536), (16, 262144)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gpu_default_launches_extreme_rows(shape, dtype):
    """The default launches: rows (16 x 4096), cp.async (600 rows of 4096, 8192), cluster (65536; 262144 of 16-bit
    rows) and split kernels, with FP8 row scales beside (no subnormal row there: test_fp8_subnormal_scale_saturates)."""
    dt = DTYPES[dtype]
    m, n = shape
    for eps in (1e-6, 0.0):
        x, w = extreme_batch(dt, n, rows_for(eps), m=m), positive_weight(n, dt)
        o = rmsnorm_fwd(x, w, epsilon=eps, return_rsigma=True)
        v, rs, _ = norm64(x, w, epsilon=eps)
        assert_close(o.y, v, dt, context=f"y eps={eps}")
        assert_close(o.rsigma, rs, torch.float32, context=f"rsigma eps={eps}")
        x = extreme_batch(dt, n, tuple(r for r in ROWS if r != "subnormal"), m=m)
        v, _, _ = norm64(x, w, epsilon=eps)
        q = rmsnorm_fwd(x, w, epsilon=eps, dtype=torch.float8_e4m3fn, scale_mode="row")
        q_exp, s_exp = fp8_expected(v, torch.float8_e4m3fn, "row")
        assert_close(q.y.float(), q_exp, torch.float8_e4m3fn, context=f"fp8 eps={eps}")
        assert_close(q.scale, s_exp, torch.float32, context=f"fp8 row scales eps={eps}")


@pytest.mark.parametrize("kernel", ["rows", "looped", "split", "split_1row"])
def test_forward_extreme_rows_with_residual_and_bias(kernel):
    """x + residual (rounded to the residual's dtype) is what overflows; the split kernel's second pass forms it
    again from x and the residual. y + bias is judged as a cancelling result."""
    dt = torch.bfloat16
    x = extreme_batch(dt, 70, FINITE + ("inf",))
    r = extreme_batch(dt, 70, FINITE + ("inf",), seed=3) * 0.5
    w, b = positive_weight(70, dt), positive_weight(70, dt, seed=2) - 1.0
    o = rmsnorm_fwd(x, w, epsilon=1e-5, residual=r, bias=b, return_rsigma=True, config=FWD_KERNELS[kernel])
    v, rs, h = norm64(x, w, epsilon=1e-5, residual=r, bias=b)
    assert torch.equal(o.residual_out.cpu().double(), h)
    assert_close_cancelling(o.y, v, dt, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")


def test_eps_zero_subnormal_row_is_the_documented_limit():
    """eps = 0 and a row whose rms is below 2^-128: the rstd is past fp32's range (row_stats), so y is +-inf where x
    is not 0, and the rest of the batch is untouched."""
    x = extreme_batch(torch.float32, 70, ("subnormal",))
    o = rmsnorm_fwd(x, positive_weight(70, torch.float32), epsilon=0.0, return_rsigma=True)
    assert torch.isinf(o.rsigma[1]) and bool(torch.isfinite(o.rsigma[[0, 2]]).all())
    row = o.y[1]
    assert bool(torch.isinf(row[x[1] != 0]).all()) and bool(torch.isnan(row[x[1] == 0]).all())
    v, _, _ = norm64(x, positive_weight(70, torch.float32), epsilon=0.0)
    assert_close(o.y[[0, 2]], v[[0, 2]], torch.float32, context="the other rows")


FP8_KERNELS = ["rows", "rows_sliced", "looped", "looped_head", "split", "split_1row", "looped_words"]


@pytest.mark.parametrize("kernel", FP8_KERNELS)
@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
def test_fp8_row_scales_of_extreme_rows(kernel, fmt):
    """Row scales from max|y| as float64 takes it: finite for the rows past fp32's range (x * w overflows there
    too), NaN for the rows holding a NaN or an infinity (y is NaN there), and NaN kept through the clamp."""
    cfg = FWD_KERNELS.get(kernel) or WORDS.get(kernel)
    rows = tuple(r for r in ROWS if r != "subnormal")  # a scale below 2^-126: test_fp8_subnormal_scale_saturates
    x, w = extreme_batch(torch.bfloat16, 70, rows), positive_weight(70, torch.bfloat16) * 2.0
    o = rmsnorm_fwd(x, w, epsilon=1e-5, dtype=fmt, scale_mode="row", config=cfg)
    v, _, _ = norm64(x, w, epsilon=1e-5)
    q_exp, s_exp = fp8_expected(v, fmt, "row")
    assert_close(o.y.float(), q_exp, fmt, context="fp8 values")
    assert_close(o.scale, s_exp, torch.float32, context="row scales")
    assert bool(torch.isnan(o.scale[[7, 9]]).all()), "the inf and NaN rows"


def test_fp8_subnormal_scale_saturates():
    """The documented FP8 limit (row_stats): a row whose max|y| is below 448 * 2^-126 has an fp32-subnormal scale
    whose reciprocal is past fp32's range; its values saturate to +-448 where float64 keeps them, its scale is
    right, and the other rows are untouched."""
    x = extreme_batch(torch.bfloat16, 70, ("subnormal",))
    w = positive_weight(70, torch.bfloat16)
    o = rmsnorm_fwd(x, w, epsilon=1e-5, dtype=torch.float8_e4m3fn, scale_mode="row")
    v, _, _ = norm64(x, w, epsilon=1e-5)
    q_exp, s_exp = fp8_expected(v, torch.float8_e4m3fn, "row")
    assert_close(o.scale, s_exp, torch.float32, context="row scales")
    assert float(o.scale[1]) < 2.0**-126
    big = q_exp[1].abs() > 1
    assert bool((o.y[1].float()[big].abs() == 448).all())
    assert_close(o.y[[0, 2]].float(), q_exp[[0, 2]], torch.float8_e4m3fn, context="the other rows")


@pytest.mark.parametrize("kernel", ["rows", "looped", "split"])
def test_fp8_tensor_scale_of_extreme_finite_rows(kernel):
    """A dynamic tensor scale (the row maxima of a first pass) over rows past fp32's range and tiny ones."""
    fmt = torch.float8_e4m3fn
    x, w = extreme_batch(torch.bfloat16, 70, FINITE), positive_weight(70, torch.bfloat16)
    o = rmsnorm_fwd(x, w, epsilon=1e-5, dtype=fmt, scale_mode="tensor", config=FWD_KERNELS[kernel])
    v, _, _ = norm64(x, w, epsilon=1e-5)
    q_exp, s_exp = fp8_expected(v, fmt, "tensor")
    assert_close(o.y.float(), q_exp, fmt, context="fp8 values")
    assert_close(o.scale, s_exp, torch.float32, context="tensor scale")


def backward_kernels():
    kernels = dict(BWD_KERNELS)
    kernels["split_words"] = BwdConfig(
        "split", 4, block_m=2, programs=9, block_n=32 if DEV == "cuda" else 128, words=True
    )
    return kernels


@pytest.mark.parametrize("eps", [1e-5, 0.0], ids=["eps_1e-5", "eps_0"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", list(backward_kernels()))
def test_backward_of_extreme_finite_rows(kernel, dtype, eps):
    """dx and dweight from the saved rsigma where h * dy passes fp32's range (rows near the maximum) or underflows
    (tiny rows): the kernels take the row's dot product with xhat = h * rsigma."""
    dt = DTYPES[dtype]
    cfg = backward_kernels()[kernel]
    if cfg is not None and cfg.words and dt != torch.bfloat16:
        pytest.skip("the word kernels hold 16-bit rows")
    rows = tuple(r for r in FINITE if eps > 0 or r != "subnormal")
    x, w = extreme_batch(dt, 68, rows), positive_weight(68, dt)  # even: the word kernel
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(dt).to(DEV)
    fwd = rmsnorm_fwd(x, w, epsilon=eps, return_rsigma=True)
    dx, dw, _ = rmsnorm_bwd(dy, x, w, fwd.rsigma, config=cfg)
    ref = grads64(x, w, dy, epsilon=eps)
    assert_close_cancelling(dx, ref["x"], dt, context="dx")
    assert_close_cancelling(dw, ref["weight"], dt, context="dweight")


def test_backward_of_a_non_finite_row_stays_in_that_row():
    """An inf or NaN row's dx is NaN in that row only (float64 gives the same); the other rows' dx is unaffected."""
    x, w = extreme_batch(torch.float32, 67, ("inf", "nan")), positive_weight(67, torch.float32)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(DEV)
    fwd = rmsnorm_fwd(x, w, return_rsigma=True)
    dx, _, _ = rmsnorm_bwd(dy, x, w, fwd.rsigma)
    ref = grads64(x, w, dy)
    assert bool(torch.isnan(dx[[1, 3]]).all())
    assert_close_cancelling(dx[[0, 2, 4]], ref["x"][[0, 2, 4]], torch.float32, context="dx of the other rows")


@pytest.mark.parametrize("eps", [1e-5, 0.0], ids=["eps_1e-5", "eps_0"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("world", [2, 3])
def test_distributed_post_of_extreme_rows(world, dtype, eps):
    """pre_stats sums each shard in float64 (no shard's sum leaves its range), post takes the rstd from the gathered
    sums in float64: the shards of every extreme row reassemble into the float64 RMSNorm of the full rows."""
    dt = DTYPES[dtype]
    n_local = 24
    x, w = extreme_batch(dt, n_local * world, rows_for(eps)), positive_weight(n_local * world, dt)
    xs, ws = x.split(n_local, dim=-1), w.split(n_local)
    stats = torch.stack([pre_stats(s) for s in xs])
    assert stats.dtype == torch.float64
    assert_close(stats, torch.stack([s.cpu().double().pow(2).sum(-1) for s in xs]), torch.float32, context="stats")
    y = torch.cat([post(s, stats, wl, epsilon=eps) for s, wl in zip(xs, ws, strict=True)], dim=-1)
    v, _, _ = norm64(x, w, epsilon=eps)
    assert_close(y, v, dt, context="reassembled post")
