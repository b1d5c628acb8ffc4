"""The FlashInfer comparison of benchmarks/triton/allreduce.py, on the CPU: the keyword arguments our call maps to
(held to flashinfer.comm.allreduce_fusion's signature, or where flashinfer does not import, to the parameter names
recorded from its source), the float64 checks under each kernel's own definition of the sum, the ratios and the table,
and the one line the benchmark prints where flashinfer does not import."""

import argparse
import inspect
import sys
from types import SimpleNamespace

import pytest
import torch

from benchmarks.triton import allreduce_peers as fip
from benchmarks.triton.allreduce_measurement import flashinfer_best, peer_ratio, render_flashinfer
from benchmarks.triton.reference import check_allreduce
from programs.triton.allreduce.dispatch import Strategy

# flashinfer-python 0.7.2.post1, flashinfer/comm/allreduce.py: the parameters of allreduce_fusion, in order
# (moe_finalize_backend is keyword-only); input, workspace and pattern have no default
ALLREDUCE_FUSION_PARAMS = [
    "input",
    "workspace",
    "pattern",
    "launch_with_pdl",
    "trigger_completion_at_end",
    "output",
    "residual_out",
    "norm_out",
    "quant_out",
    "scale_out",
    "residual_in",
    "rms_gamma",
    "rms_eps",
    "scale_factor",
    "layout_code",
    "use_oneshot",
    "fp32_acc",
    "moe_reduction_device_num_experts",
    "moe_reduction_scale_input",
    "moe_reduction_active_experts_token_input",
    "moe_reduction_token_input",
    "expanded_idx_to_permuted_idx",
    "expert_scale_factor",
    "shared_expert_output",
    "block_quant_group_size",
    "weight_bias",
    "moe_finalize_backend",
]
ALLREDUCE_FUSION_REQUIRED = {"input", "workspace", "pattern"}
# the same file: create_allreduce_fusion_workspace's parameters before its keyword-only MNNVL CuTe DSL options
CREATE_WORKSPACE_PARAMS = [
    "backend",
    "world_size",
    "rank",
    "max_token_num",
    "hidden_dim",
    "dtype",
    "gpus_per_node",
    "comm_backend",
    "force_oneshot_support",
    "group",
]
# flashinfer/comm/trtllm_ar.py: AllReduceFusionPattern's values of the patterns timed
PATTERN_CODES = {"kARResidualRMSNorm": 1, "kARResidualRMSNormFP8Quant": 2, "kARResidualRMSNormDynamicFP8Quant": 10}


def _flashinfer_comm():
    try:
        import flashinfer.comm as fi_comm
    except Exception:
        return None
    return fi_comm


def _fusion_signature():
    """(parameter names, required names) of allreduce_fusion: the installed flashinfer's, checked against the recorded
    ones, or the recorded ones where flashinfer does not import."""
    fi_comm = _flashinfer_comm()
    if fi_comm is None:
        return ALLREDUCE_FUSION_PARAMS, ALLREDUCE_FUSION_REQUIRED
    params = inspect.signature(fi_comm.allreduce_fusion).parameters
    names = list(params)
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    # the installed version drifting from the one read is itself a finding: the mapping is re-read then
    assert names == ALLREDUCE_FUSION_PARAMS and required == ALLREDUCE_FUSION_REQUIRED
    assert list(inspect.signature(fi_comm.create_allreduce_fusion_workspace).parameters)[:10] == CREATE_WORKSPACE_PARAMS
    for member, code in PATTERN_CODES.items():
        assert getattr(fi_comm.AllReduceFusionPattern, member) == code
    return names, required


def _inputs(t=6, h=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(h, generator=g)).to(torch.bfloat16)
    r = torch.randn(t, h, generator=g).to(torch.bfloat16)
    return x, w, r


def test_recorded_patterns_are_flashinfers_members():
    assert {p.member: p.code for p in fip.PATTERNS.values()} == PATTERN_CODES
    assert [p.quant for p in fip.PATTERNS.values()] == [None, "tensor", "row"]


@pytest.mark.parametrize("key", list(fip.PATTERNS))
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("use_oneshot", [True, False])
def test_fusion_kwargs_are_allreduce_fusions_parameters(key, with_residual, use_oneshot):
    """Every keyword passed is a parameter of allreduce_fusion and every required one is passed; each pattern gets the
    outputs its kernel writes (TensorRT-LLM's pattern traits: residual_out always, norm_out for the norm, quant_out
    and a float32 scale_factor for static FP8, quant_out and a contiguous float32 [T, 1] scale_out for per-row FP8),
    and a call without a residual gets a zeroed one."""
    names, required = _fusion_signature()
    p = fip.PATTERNS[key]
    x, w, r = _inputs()
    res = r if with_residual else None
    bufs = fip.buffers(p, x, with_residual)
    ws = object()
    kw = fip.fusion_kwargs(p, x, w, res, 1e-6, bufs, workspace=ws, use_oneshot=use_oneshot, pdl=True)
    assert set(kw) <= set(names), set(kw) - set(names)
    assert required <= set(kw)
    assert kw["input"] is x and kw["workspace"] is ws and kw["pattern"] == p.code
    assert kw["rms_gamma"] is w and kw["rms_eps"] == 1e-6 and kw["use_oneshot"] is use_oneshot
    assert kw["fp32_acc"] is True and kw["launch_with_pdl"] is True and kw["trigger_completion_at_end"] is True
    assert kw["residual_out"].shape == x.shape and kw["residual_out"].dtype == x.dtype
    assert kw["residual_out"].data_ptr() != x.data_ptr()  # a scratch buffer: replays never re-sum their output
    if with_residual:
        assert kw["residual_in"] is r
    else:
        assert kw["residual_in"].shape == x.shape and not kw["residual_in"].any()
    outs = {k for k in ("norm_out", "quant_out", "scale_out", "scale_factor", "output") if k in kw}
    if p.quant is None:
        assert outs == {"norm_out"} and kw["norm_out"].shape == x.shape and kw["norm_out"].dtype == x.dtype
    else:
        assert kw["quant_out"].shape == x.shape and kw["quant_out"].dtype == torch.float8_e4m3fn
    if p.quant == "tensor":
        assert outs == {"quant_out", "scale_factor"}
        assert kw["scale_factor"].dtype == torch.float32 and kw["scale_factor"].numel() == 1
    if p.quant == "row":
        assert outs == {"quant_out", "scale_out"}
        s = kw["scale_out"]
        assert s.dtype == torch.float32 and s.shape == (x.shape[0], 1) and s.is_contiguous()
    y, scale, ro = fip.outputs(p, bufs)
    assert ro is kw["residual_out"]
    assert y is (kw["norm_out"] if p.quant is None else kw["quant_out"])
    assert (scale is None) == (p.quant is None)
    if p.quant == "row":
        assert scale.shape == (x.shape[0],)


def test_two_shot_only_above_the_world_size():
    """FlashInfer's two-shot asserts token_num > world_size."""
    assert fip.shots(1, 2) == [True]
    assert fip.shots(8, 8) == [True]
    assert fip.shots(9, 8) == [True, False]


def test_unusable_names_what_is_missing():
    pattern = SimpleNamespace(**PATTERN_CODES)
    ok = SimpleNamespace(AllReduceFusionPattern=pattern, **{n: object() for n in fip.USED})
    assert fip.unusable(ok, 8) is None
    assert "runs 2, 4, 8 or 16 ranks" in fip.unusable(ok, 3)
    lacking = SimpleNamespace(AllReduceFusionPattern=pattern, allreduce_fusion=object())
    assert "lacks create_allreduce_fusion_workspace" in fip.unusable(lacking, 8)
    moved = SimpleNamespace(**{**PATTERN_CODES, "kARResidualRMSNormDynamicFP8Quant": 11})
    other = SimpleNamespace(AllReduceFusionPattern=moved, **{n: object() for n in fip.USED})
    assert "kARResidualRMSNormDynamicFP8Quant is 11, not 10" in fip.unusable(other, 8)


def _partials(world=4, t=32, h=256, seed=1):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(t, h, generator=g).to(torch.bfloat16) for _ in range(world)]
    w = (1 + 0.1 * torch.randn(h, generator=g)).to(torch.bfloat16)
    r = torch.randn(t, h, generator=g).to(torch.bfloat16)
    return xs, w, r


def _fp32_sum(xs):
    acc = xs[0].float()
    for x in xs[1:]:
        acc = acc + x.float()
    return acc


def _ours(xs, w, r):
    """What our kernels compute: h = bf16(fp32 sum + r) (the fp32 sum without r), fp32 norm, FP8 with row scales."""
    acc = _fp32_sum(xs)
    ro = None if r is None else (acc + r.float()).to(torch.bfloat16)
    h = acc if r is None else ro.float()
    v = torch.nn.functional.rms_norm(h, (h.shape[-1],), w.float(), 1e-6)
    scale = v.abs().amax(-1) / 448.0
    return (v / scale[:, None]).to(torch.float8_e4m3fn), scale, ro


def _flashinfer(xs, w, r, quant, static_scale=None):
    """What FlashInfer's kernels compute: the fp32 sum rounded to bf16, h = bf16(sum + r), the norm rounded to bf16,
    then FP8 with a static scale or a row scale from the bf16 norm."""
    s = _fp32_sum(xs).to(torch.bfloat16)
    r = torch.zeros_like(s) if r is None else r
    h = (s.float() + r.float()).to(torch.bfloat16)
    norm = torch.nn.functional.rms_norm(h.float(), (h.shape[-1],), w.float(), 1e-6).to(torch.bfloat16)
    if quant is None:
        return norm, None, h
    if quant == "tensor":
        return (norm.float() / static_scale).to(torch.float8_e4m3fn), static_scale, h
    scale = norm.float().abs().amax(-1) / 448.0
    return (norm.float() / scale[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn), scale, h


@pytest.mark.parametrize("with_residual", [False, True])
def test_each_kernel_passes_under_its_own_sum(with_residual):
    xs, w, r = _partials()
    res = r if with_residual else None
    exact = sum(x.double() for x in xs)
    y, scale, ro = _ours(xs, w, res)
    assert check_allreduce(y, scale, ro, exact, res, w).passed
    norm, _, h = _flashinfer(xs, w, res, None)
    assert check_allreduce(norm, None, h, exact, res, w, sum_dtype=torch.bfloat16).passed
    q, s, h = _flashinfer(xs, w, res, "row")
    assert check_allreduce(q, s, h, exact, res, w, sum_dtype=torch.bfloat16, norm_dtype=torch.bfloat16).passed
    static = fip.tensor_scale(_fp32_sum(xs), res, w, 1e-6)
    q, s, h = _flashinfer(xs, w, res, "tensor", static)
    assert check_allreduce(q, s, h, exact, res, w, sum_dtype=torch.bfloat16, norm_dtype=torch.bfloat16).passed


def test_the_checks_fail_wrong_outputs():
    """A wrong scale, codes quantized with another scale, a residual_out off by the sum's rounding, and FlashInfer's
    bf16-rounded sum held to ours (the exact sum) all fail."""
    xs, w, r = _partials()
    exact = sum(x.double() for x in xs)
    y, scale, ro = _ours(xs, w, r)
    assert not check_allreduce(y, scale * 1.01, ro, exact, r, w).passed
    assert not check_allreduce((y.float() * 0.9).to(y.dtype), scale, ro, exact, r, w).passed
    _, _, fi_h = _flashinfer(xs, w, r, None)
    assert not check_allreduce(y, scale, fi_h, exact, r, w).passed
    # a scale a row from the bf16 norm is not the fp32 v's: held as ours, FlashInfer's row scales fail
    q, s, h = _flashinfer(xs, w, r, "row")
    assert not check_allreduce(q, s, h, exact, r, w, sum_dtype=torch.bfloat16).passed
    # codes quantized with a static scale, checked as if the scale were twice as large
    static = fip.tensor_scale(_fp32_sum(xs), r, w, 1e-6)
    q, s, h = _flashinfer(xs, w, r, "tensor", static)
    assert not check_allreduce(q, s * 2, h, exact, r, w, sum_dtype=torch.bfloat16).passed


def test_tensor_scale_is_the_largest_row_scale():
    """The static scale FlashInfer's fp8 pattern gets is max|v| of the whole tensor / 448, v as FlashInfer forms it:
    the largest of its per-row scales."""
    xs, w, r = _partials()
    _, row_scales, _ = _flashinfer(xs, w, r, "row")
    static = fip.tensor_scale(_fp32_sum(xs), r, w, 1e-6)
    assert static.shape == (1,) and static.dtype == torch.float32
    torch.testing.assert_close(static[0], row_scales.max(), rtol=2**-8, atol=0)


def test_ratio_is_flashinfers_best_passing_time_over_ours():
    assert flashinfer_best({True: (12.0, True), False: (9.0, True)}) == (9.0, False)
    assert flashinfer_best({True: (12.0, True), False: (9.0, False)}) == (12.0, True)  # a FAIL is not best
    assert flashinfer_best({True: (None, None)}) is None
    assert flashinfer_best({}) is None
    assert peer_ratio(6.0, True, (9.0, False)) == "1.50x (2-shot)"
    assert peer_ratio(6.0, True, (3.0, True)) == "0.50x (1-shot)"
    assert peer_ratio(6.0, True, None) == "n/a"
    assert peer_ratio(6.0, False, (3.0, True)) == "FAIL (ours)"


def test_flashinfer_table_has_a_column_a_pattern_and_shot():
    rows = [
        {
            "T": 1,
            "residual": False,
            "fused": 5.0,
            "auto": Strategy.ONE_SHOT_FLAGS,
            "ours_passed": True,
            "fi": {"norm": {True: (10.0, True)}, "fp8": {True: (7.5, False)}, "fp8_row": {True: (None, None)}},
        },
        {
            "T": 8192,
            "residual": True,
            "fused": 700.0,
            "auto": Strategy.TWO_SHOT_PULLED,
            "ours_passed": True,
            "fi": {
                "norm": {True: (900.0, True), False: (770.0, True)},
                "fp8": {True: (880.0, True), False: (750.0, True)},
                "fp8_row": {True: (890.0, True), False: (760.0, True)},
            },
        },
    ]
    lines = render_flashinfer(rows, list(fip.PATTERNS), "0.7.2.post1")
    assert "FlashInfer 0.7.2.post1" in lines[0]
    text = "\n".join(lines[:4])
    assert "per-tensor" in text and "a scale per row" in text  # each one's FP8 convention in the header
    head = next(line for line in lines if line.startswith("| T "))
    names = [c.strip() for c in head.strip("|").split("|")]
    assert names[:3] == ["T", "residual", "ours (dispatched)"]
    assert names[3:6] == ["norm 1-shot", "norm 2-shot", "norm: FI best / ours"]
    assert len(names) == 3 + 3 * len(fip.PATTERNS)
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ") and line != head]
    assert all(len(cells) == len(names) for cells in body)
    first, last = body
    assert first[:3] == ["1", "no", "5.0 (one_shot_flags)"]
    assert first[3:6] == ["10.0", "-", "2.00x (1-shot)"]  # no two-shot at T <= W
    assert first[6:9] == ["7.5 FAIL", "-", "n/a"]  # a failed check gets no ratio
    assert first[9:12] == ["n/a", "-", "n/a"]  # could not run
    assert last[:3] == ["8192", "yes", "700.0 (two_shot_pulled)"]
    assert last[3:6] == ["900.0", "770.0", "1.10x (2-shot)"]
    assert last[6:9] == ["880.0", "750.0", f"{750 / 700:.2f}x (2-shot)"]


def test_benchmark_says_on_one_line_that_flashinfer_does_not_import(monkeypatch):
    from benchmarks.triton import allreduce

    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer raises ImportError
    monkeypatch.setitem(sys.modules, "flashinfer.comm", None)
    args = argparse.Namespace(no_flashinfer=False)
    fusion, line = allreduce.load_flashinfer(args, 2, 0, 8, 64, torch.device("cpu"))
    assert fusion is None
    assert line.startswith("# FlashInfer's all-reduce fusion not timed: flashinfer does not import (")
    assert "Error" in line
    assert "\n" not in line
    assert allreduce.load_flashinfer(argparse.Namespace(no_flashinfer=True), 2, 0, 8, 64, None) == (None, None)


def _recorded(names, required, body):
    """A stand-in with exactly the recorded parameters (binding any other keyword raises TypeError), running body."""
    params = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, **({} if n in required else {"default": None}))
        for n in names
    ]
    sig = inspect.Signature(params)

    def fn(**kw):
        bound = sig.bind(**kw)
        return body(bound.arguments)

    return fn


def test_workspace_and_calls_bind_to_the_recorded_signatures(monkeypatch):
    """FlashInferFusion against a flashinfer.comm stand-in whose functions take exactly the parameters recorded from
    the source (one rank, so the sum is the partial): the workspace is TensorRT-LLM's, each pattern's call binds, its
    outputs pass the float64 check under FlashInfer's definition, and close releases the IPC references."""
    made, released = [], []

    def create(a):
        made.append(a)
        return SimpleNamespace(ipc_handles=["handles"], destroy=lambda: released.append("destroy"))

    def fusion(a):
        x, code = a["input"], a["pattern"]
        quant = {1: None, 2: "tensor", 10: "row"}[code]
        r = a["residual_in"]
        y, scale, h = _flashinfer([x], a["rms_gamma"], r, quant, a.get("scale_factor"))
        a["residual_out"].copy_(h)
        if quant is None:
            a["norm_out"].copy_(y)
        else:
            a["quant_out"].copy_(y)
        if quant == "row":
            a["scale_out"].copy_(scale[:, None])
        return y

    fi_comm = SimpleNamespace(
        create_allreduce_fusion_workspace=_recorded(CREATE_WORKSPACE_PARAMS, set(), create),
        allreduce_fusion=_recorded(ALLREDUCE_FUSION_PARAMS, ALLREDUCE_FUSION_REQUIRED, fusion),
        trtllm_destroy_ipc_workspace_for_all_reduce_fusion=lambda handles: released.append(handles),
        AllReduceFusionPattern=SimpleNamespace(**PATTERN_CODES),
    )
    assert fip.unusable(fi_comm, 2) is None
    monkeypatch.setattr(fip.torch.cuda, "get_device_capability", lambda device: (9, 0))
    f = fip.FlashInferFusion(fi_comm, 2, 1, 16, 64, torch.bfloat16, torch.device("cpu"))
    assert made == [
        {
            "backend": "trtllm",
            "world_size": 2,
            "rank": 1,
            "max_token_num": 16,
            "hidden_dim": 64,
            "dtype": torch.bfloat16,
        }
    ]
    x, w, r = _inputs(t=6, h=64)
    for with_residual in (False, True):
        res = r if with_residual else None
        for p in fip.PATTERNS.values():
            bufs = fip.buffers(p, x, with_residual)
            if p.quant == "tensor":
                bufs["scale_factor"].copy_(fip.tensor_scale(x.float(), res, w, 1e-6))
            for one in fip.shots(6, 2):
                f.call(p, x, w, res, 1e-6, bufs, one)
                y, scale, ro = fip.outputs(p, bufs)
                report = check_allreduce(
                    y, scale, ro, x.double(), res, w, sum_dtype=torch.bfloat16, norm_dtype=torch.bfloat16
                )
                assert report.passed, (p.key, with_residual, report.summary())
    monkeypatch.setattr(fip.torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(fip.torch.distributed, "barrier", lambda: None)
    f.close()
    f.close()  # once only
    assert released == [["handles"], "destroy"]
