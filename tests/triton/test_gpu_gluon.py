"""The Gluon kernels (the cluster and cp.async forwards) and PDL launch chains on a GPU (skipped without CUDA),
against float64 and against plain launches."""

import pytest
import torch

from programs.triton import backward as bwd_module
from programs.triton import forward as fwd_module
from programs.triton import launch
from programs.triton.backward import rmsnorm_bwd
from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import FwdConfig
from tests.triton.ref64 import assert_close_cancelling, fp8_expected, norm64
from tests.triton.support import cuda_rand
from tt_rmsnorm.accuracy import assert_close


def skip_without_clusters():
    from programs.triton.kernels import forward_cluster

    if not forward_cluster.supported(torch.device("cuda")):
        pytest.skip("clusters need compute capability >= 9 and Gluon with CTA-split layouts")


CLUSTER = {  # (M, N), x dtype, options, launch (None: the default, which must be the cluster kernel)
    "64x65536-bf16-default": ((64, 65536), torch.bfloat16, {}, None),
    "333x32768-fp16-no-weight": ((333, 32768), torch.float16, {"weight": None}, None),
    "7x131072-bias-zero-centered": ((7, 131072), torch.bfloat16, {"bias": True, "weight_offset": 1.0}, None),
    "5x65536-fp32": ((5, 65536), torch.float32, {}, None),
    "9x65536-strided-rows": ((9, 65536), torch.bfloat16, {"stride": 65600}, None),
    "33x40000-masked": ((33, 40000), torch.bfloat16, {}, FwdConfig("cluster", 4, chunk=4096)),
    "3x65536-bf16-to-fp32": ((3, 65536), torch.bfloat16, {"dtype": torch.float32}, FwdConfig("cluster", 8, chunk=8192)),
    "48x262144-bf16-default": ((48, 262144), torch.bfloat16, {}, None),  # x staged through the exchange
    "40x65536-bf16-64-a-thread": (
        (40, 65536),
        torch.bfloat16,
        {},
        FwdConfig("cluster", 4, chunk=8192, maxnreg=64),
    ),  # 8 CTAs a row: the weight staged
    "8x262144-bf16-few-rows": ((8, 262144), torch.bfloat16, {}, None),  # 128 CTAs: the weight staged instead
    "6x262144-fp16-bias": ((6, 262144), torch.float16, {"bias": True}, None),
    "4x262144-fp32-weight": (
        (4, 262144),
        torch.bfloat16,
        {"weight": "fp32"},
        FwdConfig("cluster", 8, chunk=16384, maxnreg=64),
    ),
}


def assert_forward_matches_float64(case, kernel: str, seed: int):
    """A CLUSTER or ASYNC case against float64, rsigma included, and the same bits on a second call; with no launch
    given, the default must be `kernel`. y + bias is judged as a cancelling result (ref64)."""
    (m, n), dt, kw, cfg = case
    kw = dict(kw)
    stride = kw.pop("stride", n)
    x = cuda_rand(m, stride, dtype=dt, seed=seed)[:, :n]
    w = kw.pop("weight", "x")
    w = None if w is None else cuda_rand(n, dtype=torch.float32 if w == "fp32" else dt, seed=seed + 1)
    b = cuda_rand(n, dtype=dt, seed=seed + 2) if kw.pop("bias", False) else None
    if cfg is None:
        words = launch.wordable_rows(x)
        assert (
            fwd_module.fwd_config(
                m,
                n,
                x.device,
                bias=b is not None,
                words_ok=words,
                cluster_ok=kernel == "cluster",
                async_ok=kernel == "async",
            ).kernel
            == kernel
        )
    o = rmsnorm_fwd(x, w, bias=b, epsilon=1e-6, return_rsigma=True, config=cfg, **kw)
    v, rs, _ = norm64(x, w, bias=b, epsilon=1e-6, weight_offset=kw.get("weight_offset", 0.0))
    (assert_close_cancelling if b is not None else assert_close)(o.y, v, kw.get("dtype", dt), context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")
    again = rmsnorm_fwd(x, w, bias=b, epsilon=1e-6, return_rsigma=True, config=cfg, **kw)
    assert torch.equal(again.y, o.y) and torch.equal(again.rsigma, o.rsigma)


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(CLUSTER))
def test_cluster_forward_matches_float64(case):
    """The cluster kernel (a row over 2-16 CTAs, partials exchanged in distributed shared memory; the weight and bias
    staged in shared memory) against float64, and the same bits on a second call (the K partials summed in rank order
    in every CTA)."""
    skip_without_clusters()
    assert_forward_matches_float64(CLUSTER[case], "cluster", seed=40)


CLUSTER_FP8 = {  # (M, N), x dtype, options, launch (None: the default, which must be the cluster kernel)
    "2048x65536-default": ((2048, 65536), torch.bfloat16, {}, None),
    "48x262144-default": ((48, 262144), torch.bfloat16, {}, None),  # row scales: 8 warps, 64 elements a thread
    "8x262144-few-rows": ((8, 262144), torch.bfloat16, {}, None),
    "7x131072-zero-centered-scale-ub": ((7, 131072), torch.bfloat16, {"weight_offset": 1.0, "scale_ub": 2.0}, None),
    "33x40000-masked-fp16": ((33, 40000), torch.float16, {}, FwdConfig("cluster", 4, chunk=4096)),
    "5x65536-fp32-no-weight": ((5, 65536), torch.float32, {"weight": None}, None),
    "6x262144-bias-static-only": ((6, 262144), torch.bfloat16, {"bias": True, "modes": ("static",)}, None),
    "1024x8192-default": ((1024, 8192), torch.bfloat16, {}, None),  # two CTAs a row, 32 elements a thread
    "2048x16384-default": ((2048, 16384), torch.bfloat16, {}, None),  # 64 a thread, the weight staged
    "512x16384-default": ((512, 16384), torch.bfloat16, {}, None),  # 64 a thread for row scales, 32 for a tensor scale
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(CLUSTER_FP8))
def test_cluster_fp8_forward_matches_float64_and_the_looped_kernel(case):
    """FP8 output through the cluster kernel, both formats, with a scale a row (the row max exchanged beside the sum),
    a given tensor scale and a dynamic one (the row max alone, then the given-scale pass): against float64, against
    the looped kernel's bytes (at most one FP8 code apart: the row max is rs * max|x*w| in both, the same products in
    the same order), and the same bits on a second call. With a bias only the given scale (a row max would need the
    bias, which the exchange does not carry: refused by name)."""
    skip_without_clusters()
    (m, n), dt, kw, cfg = CLUSTER_FP8[case]
    kw = dict(kw)
    modes = kw.pop("modes", ("row", "static", "dynamic"))
    x = cuda_rand(m, n, dtype=dt, seed=50)
    w = cuda_rand(n, dtype=dt, seed=51) if kw.pop("weight", "x") is not None else None
    b = cuda_rand(n, dtype=dt, seed=52) if kw.pop("bias", False) else None
    off, ub = kw.get("weight_offset", 0.0), kw.get("scale_ub", float("inf"))
    v, rs, _ = norm64(x, w, bias=b, epsilon=1e-6, weight_offset=off)
    given = torch.tensor([float(v.abs().amax()) / 300.0], dtype=torch.float32, device="cuda")
    looped = fwd_module.fwd_config(m, n, x.device, fused=True, words_ok=launch.wordable_rows(x), bias=b is not None)
    assert looped.kernel != "cluster"
    for fmt in (torch.float8_e4m3fn, torch.float8_e5m2):
        for mode in modes:
            args = dict(
                epsilon=1e-6,
                bias=b,
                dtype=fmt,
                return_rsigma=True,
                scale_mode="row" if mode == "row" else "tensor",
                **kw,
            )
            if mode == "static":
                args["scale"] = given
            if cfg is None:
                assert (
                    fwd_module.fwd_config(
                        m,
                        n,
                        x.device,
                        fused=True,
                        bias=b is not None,
                        cluster_ok=True,
                        words_ok=launch.wordable_rows(x),
                        row_max=mode == "row",
                    ).kernel
                    == "cluster"
                )
            q = rmsnorm_fwd(x, w, config=cfg, **args)
            q_exp, s_exp = fp8_expected(
                v, fmt, "row" if mode == "row" else "tensor", scale_ub=ub, scale=given if mode == "static" else None
            )
            where = f"cluster {fmt} {mode}"
            (assert_close_cancelling if b is not None else assert_close)(q.y.float(), q_exp, fmt, context=where)
            assert_close(q.scale, s_exp.reshape(q.scale.shape), torch.float32, context=f"{where} scales")
            assert_close(q.rsigma, rs, torch.float32, context=f"{where} rsigma")
            ref = rmsnorm_fwd(x, w, config=looped, **args)
            codes = (q.y.view(torch.uint8).int() - ref.y.view(torch.uint8).int()).abs()
            assert int(codes.max()) <= 1, (where, int(codes.max()))  # same sign: codes one apart are neighbours
            again = rmsnorm_fwd(x, w, config=cfg, **args)
            assert torch.equal(again.y.view(torch.uint8), q.y.view(torch.uint8)) and torch.equal(again.scale, q.scale)


ASYNC = {  # (M, N), x dtype, options, launch (None: the default, which must be the cp.async kernel)
    "4096x4096-bf16-default": ((4096, 4096), torch.bfloat16, {}, None),
    "1000x8192-fp16-default": ((1000, 8192), torch.float16, {}, None),
    "77x5008-masked-bias": ((77, 5008), torch.bfloat16, {"bias": True}, FwdConfig("async", 8, block_m=1)),
    "33x4096-fp32-two-rows": ((33, 4096), torch.float32, {}, FwdConfig("async", 8, block_m=2)),
    "64x4096-strided-no-weight": (
        (64, 4096),
        torch.bfloat16,
        {"stride": 4160, "weight": None},
        FwdConfig("async", 4, block_m=1),
    ),
    "16x8192-bf16-to-fp32": ((16, 8192), torch.bfloat16, {"dtype": torch.float32}, FwdConfig("async", 8, block_m=1)),
    "512x4096-zero-centered": ((512, 4096), torch.bfloat16, {"weight_offset": 1.0}, FwdConfig("async", 4, block_m=1)),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(ASYNC))
def test_async_forward_matches_float64(case):
    """The cp.async rows kernel (x moved into shared memory, whole rows a CTA) against float64, and the same bits on a
    second call; masked columns and rows, strides, fp32 x and output, with and without a weight."""
    from programs.triton.kernels import forward_async

    if not forward_async.supported(torch.device("cuda")):
        pytest.skip("cp.async needs compute capability >= 8 and Gluon")
    (m, _), _, _, cfg = ASYNC[case]
    if cfg is None:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert m > 4 * sms, "the default takes the async kernel past decode sizes only"
    assert_forward_matches_float64(ASYNC[case], "async", seed=60)


PDL = {  # (M, N), options of the chain's last call, the kernel the default launches
    "1x8192-decode-slices": ((1, 8192), {}, "rows"),
    "32x8192-fp8-row": ((32, 8192), {"dtype": torch.float8_e4m3fn}, "rows"),
    "300x4096-residual": ((300, 4096), {"residual": True}, "rows"),
    "4096x4096-async": ((4096, 4096), {}, "async"),
    "8192x8192-async": ((8192, 8192), {}, "async"),
    "8193x2048-two-pass": ((8193, 2048), {}, "looped"),
    "64x40000-words": ((64, 40000), {}, "looped"),
    "64x65536-cluster": ((64, 65536), {}, "cluster"),
    "512x131072-cluster-fp8-row": ((512, 131072), {"dtype": torch.float8_e4m3fn}, "cluster"),
}


def pdl_chain(x, w, r, kw, pdl: bool) -> list:
    """Three forwards, each reading the one before's y (and residual_out), the last with kw's output dtype: every
    output, rsigma included."""
    outs, h = [], x
    for step in range(3):
        o = rmsnorm_fwd(h, w, epsilon=1e-6, residual=r, return_rsigma=True, enable_pdl=pdl, **(kw if step == 2 else {}))
        outs += [t for t in o if t is not None]
        h, r = o.y, o.residual_out
    return outs


def assert_graph_chain_matches_plain(chain, src, seeds) -> None:
    """chain(input, pdl) -> outputs, its first kernel reading input: launched with PDL and captured in one graph after
    a plain copy into its input buffer, then replayed on new data in src (rand of src's shape, each seed); every
    output equals, bit for bit, the same chain launched without PDL on that data."""
    buf = torch.empty_like(src)
    chain(src, True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        buf.copy_(src)
        outs = chain(buf, True)
    for seed in seeds:
        src.copy_(cuda_rand(*src.shape, dtype=src.dtype, seed=seed))
        g.replay()
        expected = chain(src, False)
        torch.cuda.synchronize()
        assert len(outs) == len(expected)
        for i, (got, want) in enumerate(zip(outs, expected, strict=True)):
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), f"output {i} differs on replay {seed}"


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(PDL))
def test_pdl_chain_in_a_graph_matches_plain_launches(case):
    """Forwards launched with PDL read what the kernel before them wrote: a copy into x (launched plainly), then each
    forward the previous one's y, captured in one graph and replayed on new data; every output equals, bit for bit,
    the same chain launched without PDL. A forward that read before its griddepcontrol.wait would see the previous
    replay's values."""
    if not launch.pdl_supported(torch.device("cuda")):
        pytest.skip("PDL needs compute capability >= 9 and Triton's launch_pdl")
    (m, n), kw, kernel = PDL[case]
    kw = dict(kw)
    x, w = cuda_rand(m, n, seed=70), cuda_rand(n, seed=71)
    r = cuda_rand(m, n, seed=72) if kw.pop("residual", False) else None
    words = launch.wordable_rows(x)
    assert (
        fwd_module.fwd_config(
            m, n, x.device, fused=r is not None, words_ok=words and r is None, async_ok=True, cluster_ok=True
        ).kernel
        == kernel
    )
    assert_graph_chain_matches_plain(lambda src, pdl: pdl_chain(src, w, r, kw, pdl), x, (73, 74, 75))


BWD_PDL = {  # (M, N), the kernel the default launches
    "8x8192-decode": ((8, 8192), "decode"),
    "4096x4096-rows": ((4096, 4096), "rows"),
    "700x16384-stream": ((700, 16384), "rows"),
    "256x65536-split": ((256, 65536), "split"),
}


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(BWD_PDL))
def test_pdl_backward_chain_in_a_graph_matches_plain_launches(case):
    """Backwards launched with PDL (the rows or decode kernel, then the partials' sum) read what the kernel before
    them wrote: a copy into dy (launched plainly), then each backward takes the one before's dx as its dy; captured
    in one graph and replayed on new data, dx, dweight and dbias equal, bit for bit, the same chain launched
    without PDL."""
    if not launch.pdl_supported(torch.device("cuda")):
        pytest.skip("PDL needs compute capability >= 9 and Triton's launch_pdl")
    (m, n), kernel = BWD_PDL[case]
    x, w, dy0 = cuda_rand(m, n, seed=80), cuda_rand(n, seed=81), cuda_rand(m, n, seed=82)
    rs = rmsnorm_fwd(x, w, epsilon=1e-6, return_rsigma=True).rsigma
    assert (
        bwd_module.bwd_config(
            m, n, x.device, bwd_module.l2_prefetchable(x, dy0), bwd_module.words_fit(x, dy0, x, w, True, None)
        ).kernel
        == kernel
    )

    def chain(dy, pdl):
        outs = []
        for _ in range(3):
            dx, dw, db = rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True, enable_pdl=pdl)
            outs += [dx, dw, db]
            dy = dx
        return outs

    assert_graph_chain_matches_plain(chain, dy0, (83, 84))


@pytest.mark.requires_cuda
def test_cluster_forward_under_cuda_graph_replay():
    """Captured once, replayed on new data: each replay re-initializes the mbarriers (phase 0 again)."""
    skip_without_clusters()
    x, w = cuda_rand(96, 65536, seed=50), cuda_rand(65536, seed=51)
    rmsnorm_fwd(x, w)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = rmsnorm_fwd(x, w)
    for seed in (52, 53):
        x.copy_(cuda_rand(96, 65536, seed=seed))
        g.replay()
        v, _, _ = norm64(x, w)
        assert_close(out.y, v, torch.bfloat16, context=f"replay {seed}")
