"""The same cases at real sizes on a GPU (skipped without CUDA): long rows, > 2^31 elements, CUDA graphs, NCCL."""

import pytest
import torch

from programs.triton import backward as bwd_module
from programs.triton import forward as fwd_module
from programs.triton import launch
from programs.triton.autograd import RMSNorm
from programs.triton.backward import rmsnorm_bwd
from programs.triton.backward_config import BwdConfig
from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import FwdConfig, split_default
from tests.triton.ranks import run_ranks
from tests.triton.ref64 import assert_close_cancelling, fp8_expected, grads64, norm64
from tests.triton.support import DIST_WORKER, cuda_rand
from tt_rmsnorm.accuracy import assert_close


@pytest.mark.requires_cuda
@pytest.mark.parametrize(
    "shape",
    [(4096, 8192), (333, 32768), (64, 65536), (33, 40000), (16, 262144), (7, 70001)],
    ids=lambda s: f"{s[0]}x{s[1]}",
)
def test_forward_real_sizes(shape):
    x, w, r = cuda_rand(*shape, seed=1), cuda_rand(shape[1], seed=2), cuda_rand(*shape, seed=3)
    o = rmsnorm_fwd(x, w, epsilon=1e-6, residual=r, return_rsigma=True)
    v, rs, h = norm64(x, w, epsilon=1e-6, residual=r)
    assert_close(o.y, v, torch.bfloat16, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")
    assert torch.equal(o.residual_out, (x.float() + r.float()).to(torch.bfloat16))
    for fmt in (torch.float8_e4m3fn, torch.float8_e5m2):
        for mode in ("row", "tensor"):
            q = rmsnorm_fwd(x, w, epsilon=1e-6, residual=r, dtype=fmt, scale_mode=mode)
            q_exp, s_exp = fp8_expected(v, fmt, mode)
            assert_close(q.y.float(), q_exp, fmt, context=f"{fmt} {mode}")


@pytest.mark.requires_cuda
@pytest.mark.parametrize(
    "shape", [(16384, 8192), (32768, 4096), (8193, 2048), (16384, 1024)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_forward_two_pass_default(shape, dtype):
    """fwd_config's launch of tall tensors of plain 16-bit rows (a row a program, two halves, the second pass re-read
    from L1/L2): with a zero-centered weight and without one, rsigma stored, repeated bit for bit."""
    m, n = shape
    x = cuda_rand(m, n, dtype=dtype, seed=40)
    # without cp.async (which the default takes for rows of 4096 and 8192 where it runs): the two-pass launch
    cfg = fwd_module.fwd_config(m, n, x.device, words_ok=launch.wordable_rows(x))
    assert cfg.kernel == "looped" and cfg.programs == m
    for w, off in ((cuda_rand(n, dtype=dtype, seed=41), 1.0), (None, 0.0)):
        o = rmsnorm_fwd(x, w, epsilon=1e-6, weight_offset=off, return_rsigma=True, config=cfg)
        v, rs, _ = norm64(x, w, epsilon=1e-6, weight_offset=off)
        assert_close(o.y, v, dtype, context="y")
        assert_close(o.rsigma, rs, torch.float32, context="rsigma")
        again = rmsnorm_fwd(x, w, epsilon=1e-6, weight_offset=off, return_rsigma=True, config=cfg)
        assert torch.equal(o.y, again.y) and torch.equal(o.rsigma, again.rsigma)


# The split forward holding x, y and the weight as words, at real widths: fwd_config's defaults (4 stages at 262144
# with 37 rows over 8 lanes, 3 at 131072, 25 chunks at 200000 with the last partial), fp16 without a weight, and 4
# stages over two-row blocks.
WORDS_FWD = {
    "default_262144_4_stages": ((37, 262144), torch.bfloat16, True, None),
    "default_131072": ((301, 131072), torch.bfloat16, True, None),
    "default_200000_partial_chunk": ((97, 200000), torch.bfloat16, True, None),
    "default_fp16_no_weight_262144": ((64, 262144), torch.float16, False, None),
    "two_rows_a_block_4_stages": (
        (301, 131072),
        torch.bfloat16,
        True,
        FwdConfig("split", 8, block_m=2, chunk=8192, programs=264, maxnreg=128, words=True, stages=4),
    ),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(WORDS_FWD))
def test_forward_split_words_at_real_widths(case):
    (m, n), dt, has_w, cfg = WORDS_FWD[case]
    x = cuda_rand(m, n, dtype=dt, seed=70)
    w = cuda_rand(n, dtype=dt, seed=71) if has_w else None
    if cfg is None:
        assert fwd_module.fwd_config(
            m, n, x.device, split_words_ok=fwd_module.split_words_fit(x, x.dtype, w, True)
        ).words
    off = 1.0 if has_w else 0.0
    o = rmsnorm_fwd(x, w, epsilon=1e-6, weight_offset=off, return_rsigma=True, config=cfg)
    v, rs, _ = norm64(x, w, epsilon=1e-6, weight_offset=off)
    assert_close(o.y, v, dt, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")
    again = rmsnorm_fwd(x, w, epsilon=1e-6, weight_offset=off, return_rsigma=True, config=cfg)
    assert torch.equal(o.y, again.y) and torch.equal(o.rsigma, again.rsigma)


BIG = {
    "rows_kernel": ((262145, 8192), FwdConfig("rows", 16, block_m=1, maxnreg=32)),
    "two_pass_row_a_program": ((262145, 8192), None),  # the default there (fwd_config): the looped kernel, ONE_ROW
    "default_at_65536": ((32769, 65536), None),  # the cluster kernel where clusters run (fwd_config)
    "cluster_kernel_masked": ((33100, 65000), FwdConfig("cluster", 4, chunk=4096)),
    "looped_kernel": ((32769, 65536), FwdConfig("looped", 32, chunk=32768, programs=264)),
    "looped_kernel_head": ((32769, 65536), FwdConfig("looped", 32, chunk=8192, programs=264, head=16384)),
    "looped_kernel_words": ((32769, 65536), FwdConfig("looped", 32, chunk=16384, programs=264, maxnreg=64, words=True)),
    "split_words_kernel_4_stages": ((8193, 262144), None),  # the default there: x and y as words, int64 offsets
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(BIG))
def test_forward_beyond_2_31_elements(case):
    (m, n), cfg = BIG[case]
    assert m * n > 2**31
    x = torch.empty(m, n, dtype=torch.bfloat16, device="cuda").normal_()
    w = cuda_rand(n, seed=4)
    y = rmsnorm_fwd(x, w, config=cfg).y
    for rows in (slice(0, 2), slice(m - 3, m)):  # the last rows sit past 2^31 elements
        v, _, _ = norm64(x[rows], w)
        assert_close(y[rows], v, torch.bfloat16, context=f"rows {rows}")


@pytest.mark.requires_cuda
@pytest.mark.parametrize(
    "shape",
    [(4096, 8192), (8192, 4096), (20000, 1024), (512, 16384), (256, 65536), (8, 262144)],
    ids=lambda s: f"{s[0]}x{s[1]}",
)
def test_backward_real_sizes(shape):
    x, w, dy = cuda_rand(*shape, seed=5), cuda_rand(shape[1], seed=6), cuda_rand(*shape, seed=7)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    dx, dw, db = rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True)
    ref = grads64(x, w, dy, bias=torch.zeros(shape[1], device="cuda"))
    assert_close_cancelling(dx, ref["x"], torch.bfloat16, context="dx")
    assert_close_cancelling(dw, ref["weight"], torch.bfloat16, context="dweight")
    assert_close_cancelling(db, ref["bias"], torch.bfloat16, context="dbias")
    dx2, dw2, db2 = rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True)
    assert torch.equal(dw, dw2) and torch.equal(db, db2) and torch.equal(dx, dx2)


LONG_BWD = {
    # the streaming rows kernel with its L2 look-ahead (bwd_config), 700 rows over 132 programs
    "default_16384": ((700, 16384), None),
    "default_12000_stream": ((301, 12000), None),
    # rows of 24002 bytes: no bulk prefetch (l2_prefetchable), the stream without it
    "default_12001_no_l2": ((301, 12001), None),
    # rows ahead past the end of the tensor are not prefetched
    "stream_l2_two_ahead": ((200, 16384), BwdConfig("rows", 32, block_m=1, programs=132, stream=True, l2_ahead=2)),
    "cols_65000_partial_tile": ((300, 65000), BwdConfig("cols", 4, block_m=8, programs=8, block_n=2048)),
    # 16 programs share a row (the last chunk partial), 2 rows per exchange, 8 row blocks in flight
    "split_65000_two_rows": ((301, 65000), BwdConfig("split", 16, block_m=2, programs=132, block_n=4096)),
    # the lean-DRAM launches (bwd_config on H100): 8 warps over whole rows of 8192, and two rows of 4096 a tile
    "rows_8_warps_8192": ((1000, 8192), BwdConfig("rows", 8, block_m=1, programs=132)),
    "rows_8_warps_two_rows_4001": ((1001, 4001), BwdConfig("rows", 8, block_m=2, programs=132)),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(LONG_BWD))
def test_backward_long_row_kernels(case):
    """The long-row backward paths, and the rows launch another GPU's bandwidth picks, at real widths, several rows
    per row group, every option on."""
    (m, n), cfg = LONG_BWD[case]
    x, w, dy, dres = cuda_rand(m, n, seed=20), cuda_rand(n, seed=21), cuda_rand(m, n, seed=22), cuda_rand(m, n, seed=23)
    rs = rmsnorm_fwd(x, w, weight_offset=1.0, return_rsigma=True).rsigma
    dx, dw, db = rmsnorm_bwd(dy, x, w, rs, weight_offset=1.0, dresidual=dres, need_bias_grad=True, config=cfg)
    ref = grads64(
        x, w, dy, weight_offset=1.0, bias=torch.zeros(n, device="cuda"), residual=torch.zeros_like(x), dresidual=dres
    )
    assert_close_cancelling(dx, ref["x"], torch.bfloat16, context="dx")
    assert_close_cancelling(dw, ref["weight"], torch.bfloat16, context="dweight")
    assert_close_cancelling(db, ref["bias"], torch.bfloat16, context="dbias")
    dx2, dw2, db2 = rmsnorm_bwd(dy, x, w, rs, weight_offset=1.0, dresidual=dres, need_bias_grad=True, config=cfg)
    assert torch.equal(dw, dw2) and torch.equal(db, db2) and torch.equal(dx, dx2)


# The split backward holding its blocks as words, at real widths: bwd_config's defaults (3 stages at 65536, a partial
# last chunk at 65000, 4 stages at 262144 with 37 rows over 4 lanes), fp16 without a weight, and 4 stages over
# two-row blocks. weight_offset on with a weight, so the weight's words are unpacked with it.
WORDS_BWD = {
    "default_65536": ((301, 65536), torch.bfloat16, True, None),
    "default_65000_partial_chunk": ((301, 65000), torch.bfloat16, True, None),
    "default_262144_4_stages": ((37, 262144), torch.bfloat16, True, None),
    "default_fp16_no_weight_131072": ((97, 131072), torch.float16, False, None),
    "two_rows_a_block_4_stages": (
        (301, 65536),
        torch.bfloat16,
        True,
        BwdConfig("split", 16, block_m=2, programs=132, block_n=8192, words=True, stages=4),
    ),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(WORDS_BWD))
def test_backward_split_words_at_real_widths(case):
    (m, n), dt, has_w, cfg = WORDS_BWD[case]
    x, dy = cuda_rand(m, n, dtype=dt, seed=60), cuda_rand(m, n, dtype=dt, seed=61)
    w = cuda_rand(n, dtype=dt, seed=62) if has_w else None
    if cfg is None:
        assert bwd_module.bwd_config(m, n, x.device, words_ok=bwd_module.words_fit(x, dy, x, w, False, None)).words
    off = 1.0 if has_w else 0.0
    rs = rmsnorm_fwd(x, w, weight_offset=off, return_rsigma=True).rsigma
    dx, dw, _ = rmsnorm_bwd(dy, x, w, rs, weight_offset=off, config=cfg)
    ref = grads64(x, w, dy, weight_offset=off)
    assert_close_cancelling(dx, ref["x"], dt, context="dx")
    if has_w:
        assert_close_cancelling(dw, ref["weight"], dt, context="dweight")
    dx2, dw2, _ = rmsnorm_bwd(dy, x, w, rs, weight_offset=off, config=cfg)
    assert torch.equal(dx, dx2) and (not has_w or torch.equal(dw, dw2))


@pytest.mark.requires_cuda
def test_cuda_graph_capture_forward_and_backward():
    mod = RMSNorm(8192, eps=1e-6, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        mod.weight.copy_(cuda_rand(8192, seed=8))
    x = cuda_rand(32, 8192, seed=9).requires_grad_()
    graphed = torch.cuda.make_graphed_callables(mod, (x,))
    for seed in (10, 11):
        xin = cuda_rand(32, 8192, seed=seed).requires_grad_()
        dy = cuda_rand(32, 8192, seed=seed + 100)
        mod.weight.grad = None
        y = graphed(xin)
        y.backward(dy)
        v, _, _ = norm64(xin.detach(), mod.weight.detach(), epsilon=1e-6)
        ref = grads64(xin.detach(), mod.weight.detach(), dy, epsilon=1e-6)
        assert_close(y.detach(), v, torch.bfloat16, context="graphed forward")
        assert_close_cancelling(xin.grad, ref["x"], torch.bfloat16, context="graphed dx")
        assert_close_cancelling(mod.weight.grad, ref["weight"], torch.bfloat16, context="graphed dweight")

    # FP8 forward with a dynamic per-tensor scale, replayed from a graph on new data
    xs, w = cuda_rand(64, 4096, seed=12), cuda_rand(4096, seed=13)
    rmsnorm_fwd(xs, w, dtype=torch.float8_e4m3fn, scale_mode="tensor")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = rmsnorm_fwd(xs, w, dtype=torch.float8_e4m3fn, scale_mode="tensor")
    xs.copy_(cuda_rand(64, 4096, seed=14))
    g.replay()
    v, _, _ = norm64(xs, w)
    q_exp, _ = fp8_expected(v, torch.float8_e4m3fn, "tensor")
    assert_close(out.y.float(), q_exp, torch.float8_e4m3fn, context="graphed fp8")


@pytest.mark.requires_multi_gpu
def test_distributed_nccl_two_gpus():
    run_ranks(DIST_WORKER, 2, "nccl", timeout=300.0)


@pytest.mark.requires_cuda
def test_split_kernels_under_cuda_graph_replay():
    """Rows split over programs (cooperative launch, exchange counters zeroed per call) replayed from one graph on new
    data, several times: forward with FP8 row scales and backward, both checked on every replay."""
    m, n = 300, 65536
    x, w, dy = cuda_rand(m, n, seed=30), cuda_rand(n, seed=31), cuda_rand(m, n, seed=32)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    rmsnorm_fwd(x, w, dtype=torch.float8_e4m3fn)
    rmsnorm_bwd(dy, x, w, rs)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fo = rmsnorm_fwd(x, w, return_rsigma=True)
        q = rmsnorm_fwd(x, w, dtype=torch.float8_e4m3fn)
        dx, dw, _ = rmsnorm_bwd(dy, x, w, fo.rsigma)
    for seed in (33, 34, 35):
        x.copy_(cuda_rand(m, n, seed=seed))
        dy.copy_(cuda_rand(m, n, seed=seed + 10))
        g.replay()
        v, _, _ = norm64(x, w)
        assert_close(fo.y, v, torch.bfloat16, context=f"graphed split forward, replay {seed}")
        q_exp, _ = fp8_expected(v, torch.float8_e4m3fn, "row")
        assert_close(q.y.float(), q_exp, torch.float8_e4m3fn, context=f"graphed split fp8, replay {seed}")
        ref = grads64(x, w, dy)
        assert_close_cancelling(dx, ref["x"], torch.bfloat16, context=f"graphed split dx, replay {seed}")
        assert_close_cancelling(dw, ref["weight"], torch.bfloat16, context=f"graphed split dweight, replay {seed}")


@pytest.mark.requires_cuda
@pytest.mark.parametrize("block_m", [1, 2], ids=["1_row", "2_rows"])
def test_split_fp8_row_scales(block_m):
    """FP8 with per-row scales through the split kernel (explicit config: the default keeps FP8 rows on the looped
    kernel), one row per exchange (the scalar-factor form) and two."""
    m, n = 257, 65536
    x, w = cuda_rand(m, n, seed=40), cuda_rand(n, seed=41)
    cfg = FwdConfig("split", 16, block_m=block_m, chunk=16384, programs=132)
    for fmt in (torch.float8_e4m3fn, torch.float8_e5m2):
        q = rmsnorm_fwd(x, w, epsilon=1e-6, dtype=fmt, config=cfg)
        v, _, _ = norm64(x, w, epsilon=1e-6)
        q_exp, s_exp = fp8_expected(v, fmt, "row")
        assert_close(q.y.float(), q_exp, fmt, context=f"split {fmt}")
        assert_close(q.scale, s_exp, torch.float32, context=f"split {fmt} scales")


SPLIT_REPEATS = {
    # a tile of 4 rows x 32 words, smaller than the CTA: threads hold copies of each exchange word (split_reduce)
    "4_rows_32_chunks": (
        FwdConfig("split", 16, block_m=4, chunk=2048, programs=132),
        BwdConfig("split", 16, block_m=4, programs=132, block_n=2048),
    ),
    "default": (None, None),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(SPLIT_REPEATS), ids=list(SPLIT_REPEATS))
def test_split_exchange_repeats_bit_for_bit(case):
    """The split kernels' exchange, repeated 20 times on the same inputs: every run has the bits of the first, and the
    first agrees with float64. It caught a stale copy of an exchange word in the first fence-free exchange that the
    single-run tests missed; split_reduce's re-read of stale copies is what it holds."""
    fcfg, bcfg = SPLIT_REPEATS[case]
    m, n = 1000, 65536
    x, w, dy = cuda_rand(m, n, seed=50), cuda_rand(n, seed=51), cuda_rand(m, n, seed=52)
    # the default launch of N > 65536, here at 65536 (fwd_config keeps 65536 on the looped kernel)
    fcfg = fcfg or split_default(x.device)
    first = rmsnorm_fwd(x, w, return_rsigma=True, config=fcfg)
    v, _, _ = norm64(x, w)
    assert_close(first.y, v, torch.bfloat16, context=f"split forward {case}")
    ref = grads64(x, w, dy)
    dx0, dw0, _ = rmsnorm_bwd(dy, x, w, first.rsigma, config=bcfg)
    assert_close_cancelling(dx0, ref["x"], torch.bfloat16, context=f"split dx {case}")
    assert_close_cancelling(dw0, ref["weight"], torch.bfloat16, context=f"split dweight {case}")
    for i in range(20):
        out = rmsnorm_fwd(x, w, return_rsigma=True, config=fcfg)
        dx, dw, _ = rmsnorm_bwd(dy, x, w, first.rsigma, config=bcfg)
        assert torch.equal(out.y, first.y) and torch.equal(out.rsigma, first.rsigma), f"forward run {i} differs"
        assert torch.equal(dx, dx0) and torch.equal(dw, dw0), f"backward run {i} differs"


@pytest.mark.requires_cuda
def test_benchmark_captures_eager_backward():
    """The benchmark's backward contenders run their forward on the capture stream: with the forward on the default
    stream, the eager backward's capture failed ("operation failed due to a previous error during capture", H100),
    and the table showed eager as n/a."""
    from benchmarks.triton import timing

    xs = [cuda_rand(256, 4096, seed=s) for s in (60, 61)]
    dys = [cuda_rand(256, 4096, seed=s) for s in (62, 63)]
    w = cuda_rand(4096, seed=64)

    def eager(a, b):
        return torch.nn.functional.rms_norm(a, (4096,), b, 1e-6)

    t = timing.graph_time(timing.rotating(timing.autograd_calls(eager, xs, w, dys), 2, 4), 3)
    assert 0 < t < 1e-3
