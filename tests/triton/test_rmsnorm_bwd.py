"""Backward kernels (register-resident rows, the decode kernel, the two-kernel and the split long-row paths) against
float64 autograd."""

from dataclasses import replace

import pytest
import torch

from programs.triton import backward as bwd_module
from programs.triton.backward import rmsnorm_bwd
from programs.triton.backward_config import DECODE_M, BwdConfig
from programs.triton.forward import rmsnorm_fwd
from tests.triton.ref64 import assert_close_cancelling, grads64
from tests.triton.support import BWD_KERNELS, DEV, rand
from tt_rmsnorm.errors import RuleError

CASES = {
    "plain": dict(),
    "offset_bias": dict(weight_offset=1.0, bias=True),
    "residual": dict(residual=True),
    "no_weight": dict(weight=False),
    "strided_rows": dict(strided=True),
}


@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("case", list(CASES))
def test_backward_matches_float64_autograd(kernel, dtype, case):
    check_backward(BWD_KERNELS[kernel], dtype, case, 41, 67)


# decode: rows as dx programs, then 32-column dweight programs over all rows (one launch); M up to DECODE_M
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("m", [1, 7, 32], ids=["M1", "M7", "M32"])
def test_decode_kernel_matches_float64_autograd(m, case, dtype):
    check_backward(BwdConfig("decode", 4, block_n=32), dtype, case, m, 67)


def test_l2_look_ahead_needs_cuda_and_rows_a_bulk_prefetch_can_take():
    x, dy, w = rand(8, 67, seed=30), rand(8, 67, seed=31), rand(67, seed=32)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    # 67 fp32 = 268 bytes a row, not a 16-byte multiple (and no bulk prefetch under the interpreter)
    with pytest.raises(RuleError, match=r"\[config.l2_ahead\]"):
        rmsnorm_bwd(dy, x, w, rs, config=BwdConfig("rows", 4, block_m=1, programs=2, stream=True, l2_ahead=1))
    with pytest.raises(RuleError, match=r"\[config.stream\]"):
        rmsnorm_bwd(dy, x, w, rs, config=BwdConfig("cols", 4, block_m=2, programs=3, block_n=32, stream=True))
    assert not bwd_module.l2_prefetchable(x)
    wide = rand(8, 64, seed=33)
    assert bwd_module.l2_prefetchable(wide)
    assert not bwd_module.l2_prefetchable(wide[:, 1:61])  # rows start 4 bytes past a 16-byte boundary


def test_pdl_asked_for_where_it_cannot_run_names_the_rule():
    """enable_pdl=True on a CPU tensor (no griddepcontrol) is refused before any work, as the forward refuses it;
    False gives the default's bits."""
    x, dy, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    with pytest.raises(RuleError, match=r"\[enable_pdl.device\].*device cpu.*enable_pdl=None"):
        rmsnorm_bwd(dy, x, w, rs, enable_pdl=True)
    plain = rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True, enable_pdl=False)
    for got, want in zip(plain, rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True), strict=True):
        assert torch.equal(got, want)


def test_decode_kernel_refuses_more_rows_than_it_holds():
    x, dy, w = rand(DECODE_M + 1, 64, seed=7), rand(DECODE_M + 1, 64, seed=8), rand(64, seed=9)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    with pytest.raises(RuleError, match="config.decode"):
        rmsnorm_bwd(dy, x, w, rs, config=BwdConfig("decode", 4, block_n=32))


def check_backward(cfg, dtype, case, m, n):
    c = CASES[case]
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    if c.get("strided"):
        x = rand(m, n + 5, dtype=dt, seed=1)[:, 2 : 2 + n]
    else:
        x = rand(m, n, dtype=dt, seed=1)
    w = rand(n, dtype=dt, seed=2) if c.get("weight", True) else None
    b = rand(n, dtype=dt, seed=3) if c.get("bias") else None
    r = rand(m, n, dtype=dt, seed=4) if c.get("residual") else None
    dres = rand(m, n, dtype=dt, seed=5) if r is not None else None
    dy = rand(m, n, dtype=dt, seed=6)
    off = c.get("weight_offset", 0.0)
    fwd = rmsnorm_fwd(x, w, epsilon=1e-5, weight_offset=off, bias=b, residual=r, return_rsigma=True)
    h = fwd.residual_out if r is not None else x
    dx, dw, db = rmsnorm_bwd(
        dy, h, w, fwd.rsigma, weight_offset=off, dresidual=dres, need_bias_grad=b is not None, config=cfg
    )
    ref = grads64(x, w, dy, epsilon=1e-5, weight_offset=off, bias=b, residual=r, dresidual=dres)
    assert dx.dtype == dt
    assert_close_cancelling(dx, ref["x"], dt, context="dx")
    if w is not None:
        assert dw.dtype == w.dtype
        assert_close_cancelling(dw, ref["weight"], dt, context="dweight")
    else:
        assert dw is None
    if b is not None:
        assert_close_cancelling(db, ref["bias"], dt, context="dbias")


@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_dweight_is_bitwise_reproducible(kernel):
    x, dy, w = rand(33, 80, seed=7), rand(33, 80, seed=8), rand(80, seed=9)
    rs = rmsnorm_fwd(x, w, return_rsigma=True).rsigma
    runs = [rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True, config=BWD_KERNELS[kernel]) for _ in range(3)]
    for dx, dw, db in runs[1:]:
        assert torch.equal(dw, runs[0][1]) and torch.equal(db, runs[0][2]) and torch.equal(dx, runs[0][0])


@pytest.mark.parametrize(
    "rows, reduces",
    [(1, False), (9, False), (41, True)],
    ids=["M1_decode_kernel", "M9_decode_kernel", "M41_partial_sum"],
)
def test_partial_sum_kernel_only_with_several_programs(rows, reduces, monkeypatch):
    """Default launch at N = 67: up to DECODE_M rows take the decode kernel (dweight columns over all rows, final, no
    second kernel); more rows are several rows-kernel programs summed by the partial-sum kernel. All agree with
    float64, dbias in the asked dtype."""
    calls = []
    real = bwd_module._reduce
    monkeypatch.setattr(bwd_module, "_reduce", lambda p, dtype, pdl=False: calls.append(p.shape) or real(p, dtype, pdl))
    x, dy = rand(rows, 67, dtype=torch.bfloat16, seed=10), rand(rows, 67, dtype=torch.bfloat16, seed=11)
    w, b = rand(67, dtype=torch.bfloat16, seed=12), rand(67, dtype=torch.bfloat16, seed=13)
    rs = rmsnorm_fwd(x, w, epsilon=1e-5, bias=b, return_rsigma=True).rsigma
    dx, dw, db = rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True, bias_dtype=torch.float32)
    assert bool(calls) == reduces, calls
    ref = grads64(x, w, dy, epsilon=1e-5, bias=b)
    assert (dw.dtype, dw.shape, db.dtype, db.shape) == (torch.bfloat16, (67,), torch.float32, (67,))
    assert_close_cancelling(dx, ref["x"], torch.bfloat16, context="dx")
    assert_close_cancelling(dw, ref["weight"], torch.bfloat16, context="dweight")
    assert_close_cancelling(db, ref["bias"], torch.float32, context="dbias")


# The split kernel with its blocks held as 32-bit words (two 16-bit values each; the default for 16-bit rows cut in a
# power-of-two number of chunks, bwd_config). On CUDA 32-column chunks: 3 programs share a row of 80; under the
# interpreter one 128-column chunk holds it. Block pairs of rows, 9 programs, so lanes end at different rows.
WORDS_CASES = {
    "plain": dict(),
    "weight_offset": dict(weight_offset=1.0),
    "no_weight": dict(weight=False),
    "strided_rows": dict(strided=True),  # row stride 86, rows 4 bytes past the base: still word-aligned
}


def words_config(stages: int) -> BwdConfig:
    return BwdConfig("split", 4, block_m=2, programs=9, block_n=32 if DEV == "cuda" else 128, words=True, stages=stages)


def words_inputs(case: str, dt, m: int = 41, n: int = 80):
    c = WORDS_CASES[case]
    x = rand(m, n + 6, dtype=dt, seed=40)[:, 2 : 2 + n] if c.get("strided") else rand(m, n, dtype=dt, seed=40)
    w = rand(n, dtype=dt, seed=41) if c.get("weight", True) else None
    dy = rand(m, n, dtype=dt, seed=42)
    off = c.get("weight_offset", 0.0)
    return x, w, dy, off, rmsnorm_fwd(x, w, epsilon=1e-5, weight_offset=off, return_rsigma=True).rsigma


@pytest.mark.parametrize("stages", [3, 4], ids=["3_stages", "4_stages"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", list(WORDS_CASES))
def test_split_words_kernel_matches_float64_autograd_and_the_element_kernel(case, dtype, stages):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    x, w, dy, off, rs = words_inputs(case, dt)
    dx, dw, _ = rmsnorm_bwd(dy, x, w, rs, weight_offset=off, config=words_config(stages))
    ref = grads64(x, w, dy, epsilon=1e-5, weight_offset=off)
    assert dx.dtype == dt
    assert_close_cancelling(dx, ref["x"], dt, context="dx")
    el_dx, el_dw, _ = rmsnorm_bwd(
        dy, x, w, rs, weight_offset=off, config=replace(words_config(stages), words=False, stages=3)
    )
    # the same sums in another order (the row dot pairs columns): within a rounding of dx, dweight summed alike
    assert (dx.float() - el_dx.float()).abs().max() <= 2 * torch.finfo(dt).eps * el_dx.float().abs().max()
    if w is None:
        assert dw is None
    else:
        assert_close_cancelling(dw, ref["weight"], dt, context="dweight")
        assert torch.allclose(dw.float(), el_dw.float(), rtol=torch.finfo(dt).eps, atol=0)
    again = rmsnorm_bwd(dy, x, w, rs, weight_offset=off, config=words_config(stages))
    assert torch.equal(again[0], dx) and (w is None or torch.equal(again[1], dw))


def test_split_words_refuses_what_it_cannot_hold_as_words():
    x, w, dy, _, rs = words_inputs("plain", torch.bfloat16)
    cfg = words_config(3)
    refusals = {
        "dbias": dict(need_bias_grad=True),
        "dresidual": dict(dresidual=rand(41, 80, dtype=torch.bfloat16, seed=43)),
        "fp32 weight": dict(weight=w.float()),
        "weight 2 bytes past a word": dict(weight=rand(82, dtype=torch.bfloat16, seed=44)[1:81]),
        "rows kernel": dict(config=BwdConfig("rows", 4, block_m=1, programs=2, words=True)),
    }
    for kw in refusals.values():  # the keys name each refusal
        args = dict(weight=w, config=cfg) | kw
        with pytest.raises(RuleError, match=r"\[config.words\]"):
            rmsnorm_bwd(dy, x, args.pop("weight"), rs, **args)
    x32, dy32 = x.float(), dy.float()
    with pytest.raises(RuleError, match=r"\[config.words\]"):
        rmsnorm_bwd(dy32, x32, w, rmsnorm_fwd(x32, w, return_rsigma=True).rsigma, config=cfg)
    xo, dyo = rand(41, 81, dtype=torch.bfloat16, seed=45), rand(41, 81, dtype=torch.bfloat16, seed=46)
    wo = rand(81, dtype=torch.bfloat16, seed=47)
    with pytest.raises(RuleError, match=r"\[config.words\]"):  # odd N: a row ends inside a word
        rmsnorm_bwd(dyo, xo, wo, rmsnorm_fwd(xo, wo, return_rsigma=True).rsigma, config=cfg)
    with pytest.raises(RuleError, match=r"\[config.stages\]"):
        rmsnorm_bwd(dy, x, w, rs, config=replace(cfg, words=False, stages=4))
    with pytest.raises(RuleError, match=r"\[config.stages\]"):
        rmsnorm_bwd(dy, x, w, rs, config=replace(cfg, stages=5))


def test_words_fit_names_what_the_words_kernel_takes():
    x, w, dy, _, _ = words_inputs("strided_rows", torch.bfloat16)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    assert bwd_module.words_fit(x, dy, dx, w, False, None)
    assert bwd_module.words_fit(x, dy, dx, None, False, None)
    assert not bwd_module.words_fit(x, dy, dx, w, True, None)
    assert not bwd_module.words_fit(x, dy, dx, w, False, dy)
    assert not bwd_module.words_fit(x, dy, dx, w.float(), False, None)
    assert not bwd_module.words_fit(x, dy.float(), dx, w, False, None)
    odd = rand(41, 88, dtype=torch.bfloat16, seed=48)[:, 1:81]  # rows 2 bytes past a word
    assert not bwd_module.words_fit(odd, dy, dx, w, False, None)


def test_default_launch_is_told_whether_words_fit(monkeypatch):
    """rmsnorm_bwd hands bwd_config words_fit of its own tensors (the split kernel's words are a default only where
    they fit)."""
    seen = []
    real = bwd_module.bwd_config
    monkeypatch.setattr(
        bwd_module,
        "bwd_config",
        lambda m, n, device, l2_ok=True, words_ok=False: seen.append(words_ok) or real(m, n, device, l2_ok, words_ok),
    )
    x, w, dy, _, rs = words_inputs("plain", torch.bfloat16)
    rmsnorm_bwd(dy, x, w, rs)
    rmsnorm_bwd(dy, x, w, rs, need_bias_grad=True)
    rmsnorm_bwd(dy, x, w.float(), rs)
    assert seen == [True, False, False]
