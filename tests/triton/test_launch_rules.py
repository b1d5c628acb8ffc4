"""The launch shapes the forward and backward choose on a GPU (read without one: the device's SM count and DRAM
bandwidth a SM are stood in for), and the rules that refuse a launch shape before any allocation or launch."""

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from programs.triton import forward_config as fwd_mod
from programs.triton import fp8
from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import FwdConfig
from tests.triton.support import DEV, rand
from tt_rmsnorm.errors import RuleError


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device as the launch rules see it, without a GPU: 132 SMs and H200's DRAM bandwidth a SM (36.5 GB/s;
    only these are read from the device)."""
    from programs.triton import backward_config

    monkeypatch.setattr(fwd_mod, "sm_count", lambda device: 132)
    monkeypatch.setattr(backward_config, "sm_count", lambda device: 132)
    monkeypatch.setattr(backward_config, "dram_gbps_per_sm", lambda device: 36.5)  # H200 (H100: below)
    monkeypatch.setattr(fwd_mod, "dram_gbps_per_sm", lambda device: 36.5)
    return torch.device("cuda")


def test_cuda_split_forward_only_past_65536_columns(gpu):
    """On a GPU the split kernels serve the plain forward past 65536 columns (H200); the looped forward keeps
    N = 65536 and every fused variant."""
    assert fwd_mod.fwd_config(1024, 262144, gpu).kernel == "split"
    assert fwd_mod.fwd_config(2048, 65536, gpu).kernel == "looped"

    assert fwd_mod.fwd_config(1024, 262144, gpu, fused=True).kernel == "looped"
    assert fwd_mod.fwd_config(1024, 262144, gpu, split_ok=False).kernel == "looped"


def test_cluster_forward_launches(gpu):
    def cl(m, n, **kw):
        return fwd_mod.fwd_config(m, n, gpu, cluster_ok=True, **kw)

    # where clusters run (forward_cluster.supported): the plain forward of power-of-two rows of 32768 to 131072 columns
    # takes a row a cluster, 32 elements a thread (H100); 16-bit rows of 262144: 64 elements a thread
    # under a cap of 64 registers; not other widths or fp32 rows of 262144. FP8 output too (cluster_ok: the caller
    # has ruled out a residual and distributed stats); with FP8 row scales rows of 262144 take a looser cap (the
    # weight beside x for the row max spilled under the cap of 64). 16-bit x without a bias: 64 elements a
    # thread past 65536 columns, and from 32M elements at 65536 or into FP8; FP8 row scales at 8 warps, capped
    # at 80 registers (3 CTAs a SM).
    assert cl(2048, 65536) == cl(511, 65536, words_ok=True) == FwdConfig("cluster", 4, chunk=4096)
    assert (
        cl(2048, 65536, words_ok=True)
        == cl(512, 65536, words_ok=True)
        == FwdConfig("cluster", 4, chunk=8192, maxnreg=64)
    )
    assert cl(2048, 65536, words_ok=True, bias=True) == FwdConfig("cluster", 4, chunk=4096)
    assert cl(4096, 32768) == cl(65536, 32768, words_ok=True) == FwdConfig("cluster", 4, chunk=4096)
    assert cl(1, 131072) == cl(1, 131072, words_ok=True, bias=True) == FwdConfig("cluster", 8, chunk=8192)
    assert cl(1, 131072, words_ok=True) == FwdConfig("cluster", 4, chunk=8192, maxnreg=64)
    assert (
        cl(1024, 262144, words_ok=True)
        == cl(1024, 262144, words_ok=True, bias=True)
        == FwdConfig("cluster", 8, chunk=16384, maxnreg=64)
    )
    assert cl(2048, 65536, bias=True).kernel == "cluster"
    assert (
        cl(2048, 65536, fused=True) == cl(2048, 65536, fused=True, row_max=True) == FwdConfig("cluster", 4, chunk=4096)
    )
    assert cl(1024, 32768, fused=True, words_ok=True) == FwdConfig("cluster", 4, chunk=8192, maxnreg=64)
    assert cl(1024, 32768, fused=True, words_ok=True, row_max=True) == FwdConfig("cluster", 8, chunk=16384, maxnreg=80)
    assert cl(1023, 32768, fused=True, words_ok=True) == cl(1023, 32768, fused=True, words_ok=True, row_max=True)
    assert cl(1023, 32768, fused=True, words_ok=True) == FwdConfig("cluster", 4, chunk=4096)
    assert cl(1, 131072, fused=True, words_ok=True, row_max=True) == FwdConfig("cluster", 8, chunk=16384, maxnreg=80)
    assert cl(1024, 262144, fused=True, words_ok=True) == FwdConfig("cluster", 8, chunk=16384, maxnreg=64)
    assert cl(1024, 262144, fused=True, words_ok=True, row_max=True) == FwdConfig("cluster", 8, chunk=16384, maxnreg=80)
    assert fwd_mod.fwd_config(2048, 65536, gpu, fused=True).kernel == "looped"
    assert (
        cl(2048, 49152).kernel == "looped" and cl(1024, 262144).kernel == "split" and cl(4096, 16384).kernel == "rows"
    )


def test_fp8_forward_over_cluster_pairs(gpu):
    def cl(m, n, **kw):
        return fwd_mod.fwd_config(m, n, gpu, cluster_ok=True, **kw)

    # FP8 output at 8192 and 16384 columns from 8M elements: a row over two CTAs; 64 elements a thread at 16384
    # with row scales (capped at 80) and from 32M elements with a tensor scale (capped at 64); not bf16 output, a
    # bias, fp32 rows or smaller tensors
    def f8(m, n, **kw):
        return cl(m, n, fused=True, **{"words_ok": True, **kw})

    assert f8(1024, 8192) == f8(16384, 8192) == f8(1024, 8192, row_max=True) == FwdConfig("cluster", 4, chunk=4096)
    assert (
        f8(512, 16384, row_max=True) == f8(8192, 16384, row_max=True) == FwdConfig("cluster", 4, chunk=8192, maxnreg=80)
    )
    assert f8(512, 16384) == f8(2047, 16384) == FwdConfig("cluster", 8, chunk=8192)
    assert f8(2048, 16384) == f8(8192, 16384) == FwdConfig("cluster", 4, chunk=8192, maxnreg=64)
    assert f8(1023, 8192).kernel == f8(511, 16384).kernel == f8(1024, 4096 * 2 + 2).kernel == "rows"
    assert f8(4096, 8192, bias=True).kernel == f8(4096, 8192, words_ok=False).kernel == "rows"
    assert cl(4096, 8192, words_ok=True).kernel != "cluster"
    assert fwd_mod.fwd_config(4096, 8192, gpu, fused=True, words_ok=True).kernel == "rows"
    assert cl(1024, 524288, words_ok=True).kernel == "split"


def test_async_forward_launches(gpu):
    # where cp.async runs: plain 16-bit rows of 4096 and 8192 columns past decode sizes take whole rows with x moved
    # into shared memory, 32 elements a thread; not with a bias, fused, fp32 rows, other widths or decode rows;
    # from 16384 rows the two-pass launch takes tensors it serves
    def asy(m, n, **kw):
        return fwd_mod.fwd_config(m, n, gpu, async_ok=True, **{"words_ok": True, **kw})

    assert asy(4096, 4096) == FwdConfig("async", 4, block_m=1)
    assert asy(16383, 8192) == FwdConfig("async", 8, block_m=1)
    assert asy(16384, 8192) == FwdConfig("looped", 16, chunk=4096, programs=16384, reverse=False, maxnreg=32)
    assert asy(4096, 4096, bias=True).kernel == asy(4096, 4096, fused=True).kernel == "rows"
    assert asy(4096, 4096, words_ok=False).kernel == asy(4096, 16384).kernel == asy(4096, 2048).kernel == "rows"
    assert asy(32, 8192).kernel == asy(528, 4096).kernel == "rows" and asy(529, 4096).kernel == "async"
    assert asy(4096, 6144).kernel == "rows"


def test_rows_forward_register_cap(gpu):
    # a full SM of rows programs needs <= 32 registers a thread: capped for the plain kernel on rows of >= 4096
    # columns at 16 elements a thread (a bias, a fused variant or shorter rows in taller tiles would spill under the
    # cap, ptx_report), not at 32 elements a thread
    assert fwd_mod.fwd_config(4096, 16384, gpu).maxnreg == 32
    assert fwd_mod.fwd_config(8192, 8192, gpu).maxnreg == 32
    assert fwd_mod.fwd_config(4096, 16384, gpu, bias=True).maxnreg == 0
    assert fwd_mod.fwd_config(4096, 16384, gpu, fused=True).maxnreg == 0
    assert fwd_mod.fwd_config(65536, 1024, gpu).maxnreg == 0
    assert fwd_mod.fwd_config(4096, 32768, gpu).maxnreg == 0


def test_fused_rows_forward_tiles(gpu, monkeypatch):
    # the fused variants past decode sizes: tiles of 2048 elements, a row a program from 2048 columns; the plain
    # kernel with a bias keeps 8192-element tiles; rows under 1024 columns keep theirs
    def fz(m, n, **kw):
        return fwd_mod.fwd_config(m, n, gpu, fused=True, **kw)

    assert fz(32768, 4096) == fz(32768, 4096, row_max=True) == FwdConfig("rows", 8, block_m=1)
    assert fz(65536, 2048) == FwdConfig("rows", 4, block_m=1) and fz(65536, 1024) == FwdConfig("rows", 4, block_m=2)
    assert fz(8192, 8192) == FwdConfig("rows", 16, block_m=1)
    assert fz(65536, 512) == FwdConfig("rows", 16, block_m=16)
    assert fwd_mod.fwd_config(32768, 4096, gpu, bias=True) == FwdConfig("rows", 16, block_m=2)

    # FP8 output of 16-bit x as given (fused with words_ok): 32 elements a thread; under 4096 columns only where
    # DRAM per SM is not lean (H200 here; on H100 16 a thread); a residual or distributed stats (words_ok False) keep 16
    def f8(m, n, **kw):
        return fz(m, n, words_ok=True, **kw)

    assert f8(32768, 4096) == f8(32768, 4096, row_max=True) == FwdConfig("rows", 4, block_m=1)
    assert f8(600, 8192) == FwdConfig("rows", 8, block_m=1)
    assert f8(65536, 2048) == FwdConfig("rows", 2, block_m=1) and f8(65536, 1024) == FwdConfig("rows", 2, block_m=2)
    assert f8(65536, 512) == fz(65536, 512) and f8(32768, 4096, bias=True) == fz(32768, 4096, bias=True)
    monkeypatch.setattr(fwd_mod, "dram_gbps_per_sm", lambda device: 25.4)  # H100
    assert f8(32768, 4096) == FwdConfig("rows", 4, block_m=1) and f8(65536, 2048) == fz(65536, 2048)
    assert f8(65536, 1024) == fz(65536, 1024) == FwdConfig("rows", 4, block_m=2)
    monkeypatch.setattr(fwd_mod, "dram_gbps_per_sm", lambda device: 36.5)


def test_two_pass_forward_of_tall_plain_tensors(gpu):
    # tall tensors of plain 16-bit rows of 1024..8192 columns: a row a program in two halves (H200 and H100);
    # not for fewer rows or elements, other widths, fp32 or odd strides (words_ok False), a bias or fused variants
    def two(m, n, **kw):
        return fwd_mod.fwd_config(m, n, gpu, words_ok=True, **kw)

    assert two(16384, 8192) == FwdConfig("looped", 16, chunk=4096, programs=16384, reverse=False, maxnreg=32)
    assert two(32768, 4096) == FwdConfig("looped", 8, chunk=2048, programs=32768, reverse=False, maxnreg=32)
    assert two(16384, 1024) == FwdConfig("looped", 2, chunk=512, programs=16384, reverse=False, maxnreg=32)
    for m, n, kw in (
        (4096, 8192, {}),
        (8192, 1024, {}),
        (16384, 5120, {}),
        (16384, 16384, {}),
        (65536, 512, {}),
        (16384, 8192, {"bias": True}),
        (16384, 8192, {"fused": True}),
    ):
        assert two(m, n, **kw).kernel == "rows", (m, n, kw)
    assert fwd_mod.fwd_config(16384, 8192, gpu).kernel == "rows"


def test_decode_rows_sliced(gpu):
    # decode rows cut into 2048-column programs (H100 sweep), but not where a slice would need the whole
    # row's residual sum or row max (fused), nor past the measured sizes
    assert fwd_mod.fwd_config(32, 8192, gpu) == FwdConfig("rows", 8, block_m=1, chunk=2048)
    assert fwd_mod.fwd_config(1, 4096, gpu).chunk == 2048
    assert fwd_mod.fwd_config(32, 8192, gpu, fused=True).chunk == 0
    assert fwd_mod.fwd_config(256, 8192, gpu).chunk == 0 and fwd_mod.fwd_config(1, 16384, gpu).chunk == 0
    assert fwd_mod.fwd_config(1, 2048, gpu).chunk == 0


def test_backward_streams_rows_up_to_16384_columns(gpu):
    """The backward streams rows up to 16384 columns, with the L2 look-ahead on CUDA where the rows allow a bulk
    prefetch, and cuts longer rows over split programs (CPU: the two-kernel path)."""
    from programs.triton import backward_config as bwd_cfg

    streaming = bwd_cfg.BwdConfig("rows", 32, block_m=1, programs=132, stream=True, l2_ahead=1)
    assert bwd_cfg.bwd_config(4096, 16384, gpu) == streaming
    assert bwd_cfg.bwd_config(4096, 12288, gpu) == streaming
    assert bwd_cfg.bwd_config(4096, 16384, gpu, l2_ok=False).l2_ahead == 0
    assert bwd_cfg.bwd_config(4096, 16384, torch.device("cpu")).l2_ahead == 0
    assert bwd_cfg.bwd_config(2048, 65536, gpu).kernel == "split"
    assert bwd_cfg.bwd_config(8192, 8192, gpu) == bwd_cfg.BwdConfig("rows", 32, block_m=1, programs=132)
    assert bwd_cfg.bwd_config(2048, 65536, torch.device("cpu")).kernel == "cols"


def test_backward_rows_take_8_warps_where_dram_per_sm_is_lean(monkeypatch):
    """H100 (25 GB/s of DRAM a SM) ran the backward rows kernel 2-5% faster at 8 warps on rows of 4096-8192 columns
    with >= 32 tiles a program; H200 (36.5) lost 5% that way, and fewer tiles a program or other widths kept their
    warps on both."""
    from programs.triton import backward_config as bwd_cfg

    assert fwd_mod.dram_gbps_per_sm(torch.device("cpu")) is None
    monkeypatch.setattr(bwd_cfg, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    monkeypatch.setattr(bwd_cfg, "dram_gbps_per_sm", lambda device: 25.4)
    assert bwd_cfg.bwd_config(8192, 8192, gpu) == bwd_cfg.BwdConfig("rows", 8, block_m=1, programs=132)
    assert bwd_cfg.bwd_config(32768, 4096, gpu) == bwd_cfg.BwdConfig("rows", 8, block_m=2, programs=132)
    assert bwd_cfg.bwd_config(2048, 8192, gpu).num_warps == 32  # 15.5 tiles a program
    assert bwd_cfg.bwd_config(4096, 4096, gpu).num_warps == 16
    assert bwd_cfg.bwd_config(65536, 1024, gpu).num_warps == 16
    assert bwd_cfg.bwd_config(8192, 16384, gpu).num_warps == 32  # the streaming kernel: 32 warps measured best
    for unknown in (None, 36.5):
        monkeypatch.setattr(bwd_cfg, "dram_gbps_per_sm", lambda device, gbps=unknown: gbps)
        assert bwd_cfg.bwd_config(8192, 8192, gpu).num_warps == 32


def test_backward_split_holds_words_where_a_row_is_cut_in_a_power_of_two_chunks(monkeypatch):
    """Words measured faster at 4, 8, 16 and 32 chunks of 8192 and 3-4% slower at 3, 5, 6, 7, 9, 12 and 24; 4 stages
    only at 32 (H200 and H100). Never where words do not fit, nor under the interpreter."""
    from programs.triton import backward_config as bwd_cfg

    monkeypatch.setattr(bwd_cfg, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    cfg = bwd_cfg.bwd_config
    assert cfg(2048, 65536, gpu, words_ok=True) == bwd_cfg.BwdConfig(
        "split", 16, block_m=1, programs=132, block_n=8192, words=True, stages=3
    )
    assert [
        (cfg(1024, n, gpu, words_ok=True).words, cfg(1024, n, gpu, words_ok=True).stages)
        for n in (32768, 131072, 262144, 524288)
    ] == [(True, 3), (True, 3), (True, 4), (True, 4)]
    for n in (24576, 40960, 57344, 73728, 98304, 196608):
        assert cfg(2048, n, gpu, words_ok=True) == bwd_cfg.BwdConfig("split", 16, block_m=1, programs=132, block_n=8192)
    assert cfg(2048, 65000, gpu, words_ok=True).words  # 8 chunks, the last partial (268.1 us against 410.8)
    assert not cfg(2048, 65536, gpu).words
    assert cfg(2048, 65536, torch.device("cpu"), words_ok=True).kernel == "cols"


def test_long_plain_rows_split_as_words_with_4_stages_from_32_chunks(monkeypatch):
    """The split forward holds plain 16-bit rows as words wherever they fit (faster at 10-64 chunks),
    with 4 stages from 32 chunks (at 16 and 24 chunks 4 stages were slower than 3)."""
    monkeypatch.setattr(fwd_mod, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    cfg = fwd_mod.fwd_config
    assert cfg(1024, 262144, gpu, split_words_ok=True) == replace(fwd_mod.split_default(gpu), words=True, stages=4)
    assert [
        (cfg(1024, n, gpu, split_words_ok=True).words, cfg(1024, n, gpu, split_words_ok=True).stages)
        for n in (81920, 131072, 196608, 253952, 262144, 524288)
    ] == [(True, 3), (True, 3), (True, 3), (True, 3), (True, 4), (True, 4)]
    assert cfg(1024, 262144, gpu) == fwd_mod.split_default(gpu)  # words do not fit
    assert cfg(1024, 262144, gpu, fused=True, split_words_ok=True).kernel == "looped"
    assert not cfg(2048, 65536, gpu, words_ok=True, split_words_ok=True).kernel == "split"  # the looped words kernel


GLUON_REFUSALS = {
    "cluster-interpreter": (dict(), FwdConfig("cluster", 4, chunk=4096), r"\[config.cluster\].*compute capability"),
    "cluster-residual": (dict(residual=True), FwdConfig("cluster", 4, chunk=4096), r"\[config.cluster\].*no residual"),
    "cluster-fp8-interpreter": (
        dict(dtype=torch.float8_e4m3fn),
        FwdConfig("cluster", 4, chunk=4096),
        r"\[config.cluster\].*compute capability",
    ),
    "cluster-stats": (dict(stats=True), FwdConfig("cluster", 4, chunk=4096), r"\[config.cluster\].*distributed stats"),
    "cluster-fp8-row-bias": (
        dict(dtype=torch.float8_e4m3fn, bias=True),
        FwdConfig("cluster", 4, chunk=4096),
        r"\[config.cluster_bias_rowmax\]",
    ),
    "cluster-fp8-dynamic-bias": (
        dict(dtype=torch.float8_e5m2, scale_mode="tensor", bias=True),
        FwdConfig("cluster", 4, chunk=4096),
        r"\[config.cluster_bias_rowmax\]",
    ),
    "async-interpreter": (dict(), FwdConfig("async", 8, block_m=1), r"\[config.async\].*compute capability"),
    "async-residual": (dict(residual=True), FwdConfig("async", 8, block_m=1), r"\[config.async\].*no residual"),
    "async-fp8": (dict(dtype=torch.float8_e5m2), FwdConfig("async", 8, block_m=1), r"\[config.async\].*FP8"),
}


@pytest.mark.parametrize("case", list(GLUON_REFUSALS))
def test_gluon_kernels_refuse_what_they_cannot_run(case):
    """The cluster and cp.async kernels (Gluon: compiled only, never interpreted) normalize x itself (the cluster
    kernel into a float or FP8 output, without a bias beside a row max; the cp.async kernel into a float dtype);
    anything else, or a device without them, is refused by name before any launch."""
    from programs.triton.kernels import forward_async, forward_cluster

    family = forward_cluster if case.startswith("cluster") else forward_async
    if case.endswith("-interpreter") and family.supported(torch.device(DEV)):
        pytest.skip("refused where the Gluon kernel cannot run (the interpreter, before sm_90): this device runs it")
    kw, cfg, match = dict(GLUON_REFUSALS[case][0]), *GLUON_REFUSALS[case][1:]
    x = rand(2, 8192, dtype=torch.bfloat16, seed=31)
    if kw.pop("residual", False):
        kw["residual"] = rand(2, 8192, dtype=torch.bfloat16, seed=32)
    if kw.pop("bias", False):
        kw["bias"] = rand(8192, dtype=torch.bfloat16, seed=33)
    if kw.pop("stats", False):
        kw["stats"] = torch.ones(2, 2, device=DEV)
    with pytest.raises(RuleError, match=match):
        rmsnorm_fwd(x, config=cfg, **kw)


CLUSTER_ROUTES = {  # rmsnorm_fwd's options -> (cluster_ok, row_max) it hands fwd_config where clusters run
    "plain": (dict(), (True, False)),
    "fp8-row": (dict(dtype=torch.float8_e4m3fn), (True, True)),
    "fp8-static-bias": (dict(dtype=torch.float8_e4m3fn, scale_mode="tensor", scale=True, bias=True), (True, False)),
    "fp8-dynamic": (dict(dtype=torch.float8_e5m2, scale_mode="tensor"), (True, False)),
    "fp8-row-bias": (dict(dtype=torch.float8_e4m3fn, bias=True), (False, True)),
    "fp8-dynamic-bias": (dict(dtype=torch.float8_e5m2, scale_mode="tensor", bias=True), (False, False)),
    "residual": (dict(residual=True), (False, False)),
    "stats": (dict(stats=True), (False, False)),
}


@pytest.mark.parametrize("case", list(CLUSTER_ROUTES))
def test_cluster_kernel_offered_for_x_as_given(monkeypatch, case):
    """Where clusters run, rmsnorm_fwd offers the cluster kernel for x normalized as given, into a float or FP8 output,
    except a bias beside a row max (FP8 row or dynamic tensor scales), and says when the row max is taken."""
    from programs.triton import forward
    from programs.triton.kernels import forward_cluster

    seen = {}

    class Chosen(Exception):
        pass

    def record(m, n, device, **kw):
        seen.update(kw)
        raise Chosen

    monkeypatch.setattr(forward_cluster, "supported", lambda device: True)
    monkeypatch.setattr(forward, "fwd_config", record)
    kw, want = dict(CLUSTER_ROUTES[case][0]), CLUSTER_ROUTES[case][1]
    x = rand(2, 64, dtype=torch.bfloat16, seed=34)
    for name, make in (
        ("residual", lambda: rand(2, 64, dtype=torch.bfloat16, seed=35)),
        ("bias", lambda: rand(64, dtype=torch.bfloat16, seed=36)),
        ("stats", lambda: torch.ones(2, 2, device=DEV)),
        ("scale", lambda: torch.ones(1, device=DEV)),
    ):
        if kw.pop(name, False):
            kw[name] = make()
    with pytest.raises(Chosen):
        rmsnorm_fwd(x, rand(64, dtype=torch.bfloat16, seed=37), **kw)
    assert (seen["cluster_ok"], seen["row_max"]) == want


def test_cluster_register_cap_dropped_once_it_spilled(monkeypatch):
    """A cluster launch's register cap asks for occupancy; where the compiler at hand meets it only by spilling (Triton
    3.8's code for FP8 row scales needs more than the 80 registers that Triton 3.6's fits), the launch compiles
    uncapped from the next call on, for that launch only; a cap with no spill, or one of at most SPILL_OK_BYTES,
    stays."""
    from programs.triton.kernels import forward_cluster as rc

    monkeypatch.setattr(rc, "_SPILLED", set())
    row, plain = (65536, 16384, 8, 80, 1), (65536, 8192, 4, 64, 0)
    assert rc.register_cap(row, 80) == 80 and rc.register_cap(plain, 64) == 64
    rc.note_spills(plain, 64, 0)
    rc.note_spills(plain, 64, rc.SPILL_OK_BYTES)
    rc.note_spills(row, 0, 96)  # an uncapped compile's spills drop nothing
    assert rc.register_cap(row, 80) == 80 and rc.register_cap(plain, 64) == 64
    rc.note_spills(row, 80, 160)
    assert rc.register_cap(row, 80) == 0 and rc.register_cap(plain, 64) == 64


def test_async_launch_shape_rules(monkeypatch):
    """An async launch's tile is a power of two of rows, holds a 16-byte load for every thread, and fits shared
    memory (x waits there)."""
    from programs.triton.kernels import forward_async as ra

    monkeypatch.setattr(ra, "supported", lambda device: True)
    cpu = torch.device("cpu")

    def bf(m, n, **kw):
        return torch.empty(m, n, dtype=torch.bfloat16, **kw)

    ra.check(4096, 1, 4, bf(2, 4096), cpu)
    ra.check(5000, 2, 8, torch.empty(2, 5000), cpu)  # fp32: masked to 8192 columns, copied 4 bytes at a time
    with pytest.raises(RuleError, match=r"\[config.block_m\].*power of two"):
        ra.check(4096, 3, 4, bf(2, 4096), cpu)
    with pytest.raises(RuleError, match=r"\[config.block_m\].*16-byte load for each of its 1024 threads.*block_m=2"):
        ra.check(4096, 1, 32, bf(2, 4096), cpu)
    with pytest.raises(RuleError, match=r"\[config.block_m\].*shared memory"):
        ra.check(32768, 4, 32, bf(4, 32768), cpu)
    # 16-bit rows: base, stride and length multiples of 16 (the row of 5000 that failed to compile on the GPU)
    with pytest.raises(RuleError, match=r"\[config.async\].*multiples of 16.*N 5000"):
        ra.check(5000, 1, 8, bf(2, 5000), cpu)
    with pytest.raises(RuleError, match=r"\[config.async\].*stride 4104"):
        ra.check(4096, 1, 4, bf(2, 4104)[:, :4096], cpu)
    assert ra.aligned(bf(2, 5008)) and not ra.aligned(bf(2, 4112)[:, 4:4100])  # a base 8 bytes off


def test_cluster_launch_shape_rules(monkeypatch):
    """A cluster launch's chunk is a power of two of whole 16-byte loads a thread, a row takes 2 to 16 CTAs, and a CTA's
    chunk of the weight and bias fits its shared memory."""
    from programs.triton.kernels import cluster_staging as cs
    from programs.triton.kernels import forward_cluster as rc

    monkeypatch.setattr(rc, "supported", lambda device: True)
    assert [cs.cluster_size(n, 4096) for n in (8192, 12288, 65536, 65537)] == [2, 4, 16, 32]
    with pytest.raises(RuleError, match=r"\[config.chunk\]"):
        rc.check(65536, 3000, 4, torch.device("cpu"))
    with pytest.raises(RuleError, match=r"\[config.chunk\].*at least 8 elements a thread"):
        rc.check(65536, 512, 4, torch.device("cpu"))
    with pytest.raises(RuleError, match=r"\[config.cluster_size\].*takes 32 CTAs"):
        rc.check(131072, 4096, 4, torch.device("cpu"))
    with pytest.raises(RuleError, match=r"\[config.cluster_size\].*takes 1 CTAs"):
        rc.check(4096, 4096, 4, torch.device("cpu"))
    assert rc.check(40000, 4096, 4, torch.device("cpu")) == 16  # the last CTAs masked
    # the bias and the weight (at 64 elements a thread in a row of 16 CTAs, a 16-bit weight and no bias: x) wait in
    # shared memory: 16384 columns of an fp32 weight and bias take 128 KB, 65536 more than a CTA has
    assert cs.x_staged(262144, 16384, 8, 2, 0) and cs.x_staged(262144, 16384, 8, 0, 0)
    assert cs.x_staged(131072, 8192, 4, 2, 0) and not cs.x_staged(65536, 8192, 4, 2, 0)  # 16 CTAs a row, not 8
    assert not any(
        cs.x_staged(262144, 16384, 8, 2, 0, out_mode=om) for om in (fp8.OUT_FP8_STATIC, fp8.OUT_FP8_ROW, fp8.OUT_AMAX)
    )
    assert not (
        cs.x_staged(262144, 16384, 8, 4, 0)
        or cs.x_staged(262144, 16384, 8, 2, 2)
        or cs.x_staged(131072, 8192, 8, 2, 0)
        or cs.x_staged(262144, 16384, 8, 2, 0, busy=False)
    )
    assert cs.shared_bytes(262144, 16384, 8, 2, 4, 4) == 16384 * 8
    assert (
        cs.shared_bytes(262144, 16384, 8, 4, 2, 0) == 16384 * 4 and cs.shared_bytes(65536, 8192, 4, 4, 2, 0) == 8192 * 2
    )
    assert rc.check(262144, 16384, 8, torch.device("cpu"), cs.shared_bytes(262144, 16384, 8, 2, 4, 4)) == 16
    with pytest.raises(RuleError, match=r"\[config.chunk\].*shared memory, 8 bytes a column.*chunk=16384 or less"):
        rc.check(131072, 65536, 16, torch.device("cpu"), cs.shared_bytes(131072, 65536, 16, 2, 4, 4))


class Allocations(TorchDispatchMode):
    """Every aten op run inside it that returns a tensor on storage none of its inputs holds (an allocation: a
    factory such as empty or zeros, or a new result); views and in-place ops share their input's storage."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        held = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        if any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in held for t in tree_leaves(out)):
            self.ops.append(str(func))
        return out


def test_the_allocation_finder_sees_factories_and_results_not_views():
    x = torch.ones(4, 8)
    with Allocations() as seen:
        x.view(-1, 4)
        x.mul_(2.0)
        torch.empty(3)
        torch.zeros_like(x)
        x + 1
    assert seen.ops == ["aten.empty.memory_format", "aten.zeros_like.default", "aten.add.Tensor"]


# refused launches of rmsnorm_fwd on a [4, 100] bf16 x: (extra arguments, the launch, the rule)
REFUSED_LAUNCHES = {
    "kernel_name": (dict(), FwdConfig("tiled", 4), "config.kernel"),
    "rows_chunk_not_a_power_of_two": (dict(), FwdConfig("rows", 4, chunk=48), "config.chunk"),
    "looped_head_past_the_row": (dict(), FwdConfig("looped", 4, chunk=64, head=128), "config.head"),
    "looped_head_not_a_power_of_two": (dict(), FwdConfig("looped", 4, chunk=64, head=48), "config.head"),
    "split_chunk_not_a_power_of_two": (dict(), FwdConfig("split", 4, chunk=48, programs=8), "config.chunk"),
    "split_programs_not_resident": (dict(), FwdConfig("split", 4, chunk=32, programs=2), "config.chunk"),
    "split_exchange_interpreted": (dict(), FwdConfig("split", 4, chunk=32, programs=8), "config.split_interpreter"),
    "split_bias_row_max": (
        dict(bias=True, dtype=torch.float8_e4m3fn),
        FwdConfig("split", 4, chunk=128, programs=8),
        "config.split_bias_rowmax",
    ),
    "split_words_fp32_output": (
        dict(dtype=torch.float32),
        FwdConfig("split", 4, chunk=128, programs=8, words=True),
        "config.words",
    ),
    "looped_words_with_a_head": (dict(), FwdConfig("looped", 4, chunk=64, head=64, words=True), "config.words"),
    "stages": (dict(), FwdConfig("looped", 4, chunk=64, stages=4), "config.stages"),
    "cluster_interpreted": (dict(), FwdConfig("cluster", 4, chunk=4096), "config.cluster"),
    "cluster_residual": (dict(residual=True), FwdConfig("cluster", 4, chunk=4096), "config.cluster"),
    "async_interpreted": (dict(), FwdConfig("async", 8), "config.async"),
    "async_fp8": (dict(dtype=torch.float8_e5m2), FwdConfig("async", 8), "config.async"),
}
# refused by the interpreter only: a GPU runs a split exchange, and the Gluon kernels refuse these shapes by other rules
INTERPRETED = {"split_exchange_interpreted", "cluster_interpreted", "async_interpreted"}


@pytest.mark.parametrize("case", list(REFUSED_LAUNCHES))
def test_a_refused_launch_allocates_nothing(case):
    """Every launch rule of the forward holds before its first allocation: a refused call leaves nothing behind."""
    if case in INTERPRETED and DEV == "cuda":
        pytest.skip("refused under the interpreter only")
    kw, cfg, rule = dict(REFUSED_LAUNCHES[case][0]), *REFUSED_LAUNCHES[case][1:]
    x, w = rand(4, 100, dtype=torch.bfloat16, seed=41), rand(100, dtype=torch.bfloat16, seed=44)
    if kw.pop("residual", False):
        kw["residual"] = rand(4, 100, dtype=torch.bfloat16, seed=42)
    if kw.pop("bias", False):
        kw["bias"] = rand(100, dtype=torch.bfloat16, seed=43)
    with Allocations() as seen, pytest.raises(RuleError) as refused:
        rmsnorm_fwd(x, w, config=cfg, **kw)
    assert refused.value.rule == rule
    assert seen.ops == [], f"allocated before the refusal: {seen.ops}"
