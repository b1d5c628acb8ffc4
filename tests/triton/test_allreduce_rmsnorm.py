"""Fused all-reduce + residual + RMSNorm + FP8 (programs/triton/allreduce/api.py).

CPU (CI): the fused kernels under the Triton interpreter with all ranks played by one process (phases in turn, no
barriers), and the reference path with 2, 4 and 8 gloo processes. GPU (requires_multi_gpu): the fused kernels with
their barriers over symmetric memory, many back-to-back calls with changing inputs and skewed ranks, every result
checked. This module is also the rank worker: `python -m tests.triton.test_allreduce_rmsnorm RANK WORLD PORT BACKEND`
from the repository root.
"""

from __future__ import annotations

import math
import os
import sys

if __name__ == "__main__":  # a rank worker: the interpreter for gloo, before any kernel module is imported
    if sys.argv[4] == "gloo":
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from programs.triton.allreduce import api as ar  # noqa: E402
from programs.triton.allreduce import kernels  # noqa: E402
from programs.triton.allreduce.dispatch import DISPATCH, PUSHED, dispatch_rows  # noqa: E402
from programs.triton.allreduce.launch import launch  # noqa: E402
from programs.triton.allreduce.validation import as_strategy, check_call  # noqa: E402
from programs.triton.allreduce.workspace import (  # noqa: E402
    LAMPORT2_MAX_TOKENS,
    LAMPORT_MAX_TOKENS,
    PUSH_MAX_TOKENS,
    carve,
    fitting_strategy,
    init_workspace,
    rows_held,
    workspace_bytes,
)
from tests.triton.allreduce_checks import (  # noqa: E402
    check,
    expected,
    nccl_sums,
    partials,
    same_bits_on_every_rank,
    takes_nccl,
)
from tests.triton.ranks import run_ranks, serve_rank  # noqa: E402
from tests.triton.ref64 import norm64  # noqa: E402
from tt_rmsnorm.accuracy import assert_close  # noqa: E402
from tt_rmsnorm.errors import RuleError  # noqa: E402

E4M3 = torch.float8_e4m3fn
S = ar.Strategy
FUSED = [s for s in S if s != S.NCCL]


def name(strategy) -> str:
    """A call's strategy as the messages name it (None: the dispatched one)."""
    return "dispatched" if strategy is None else strategy.value


DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the phase-by-phase simulation runs on a GPU too


def median_ub(xs, w, res, *, epsilon, weight_offset):
    """A scale_ub between the rows' maxima: about half the rows are clamped (their scales all equal ub / 448)."""
    v, _, _ = norm64(sum(x.double() for x in xs), w, epsilon=epsilon, weight_offset=weight_offset, residual=res)
    return float(v.abs().amax(-1).median())


# ---------------------------------------------------------------------------------------------------------------------
# the fused kernels under the interpreter, every rank played in turn by this process


def simulate(
    strategy,
    world,
    xs,
    w,
    res,
    *,
    epsilon=1e-6,
    weight_offset=0.0,
    scale_ub=math.inf,
    max_tokens=None,
    dtype=E4M3,
    bufs_out=None,
):
    t, h = xs[0].shape
    max_tokens = max_tokens or t
    dev = xs[0].device
    bufs = [
        init_workspace(
            torch.empty(workspace_bytes(max_tokens, h, xs[0].dtype.itemsize, world), dtype=torch.uint8, device=dev),
            max_tokens,
            h,
            xs[0].dtype,
            world,
        )
        for _ in range(world)
    ]
    if bufs_out is not None:
        bufs_out.extend(bufs)
    outs = [
        ar.RMSNormOutput(
            torch.empty(t, h, dtype=dtype, device=dev),
            None,
            torch.empty_like(res) if res is not None else None,
            torch.empty(t, device=dev),
        )
        for _ in range(world)
    ]
    epoch = torch.zeros(kernels.N_COUNTERS, dtype=torch.int32, device=dev)
    for phase in (kernels.PHASE_A, kernels.PHASE_B, kernels.PHASE_C):  # what the barriers order on the GPU
        for r in range(world):
            o = outs[r]
            launch(
                strategy,
                r,
                bufs,
                epoch,
                xs[r],
                w,
                res,
                o.y,
                o.scale,
                o.residual_out,
                epsilon=epsilon,
                weight_offset=weight_offset,
                scale_ub=scale_ub,
                sync=False,
                phases=phase,
            )
    return outs


SIM_CASES = {
    # id: (strategy, world, tokens, hidden, residual)
    "push_w2_residual": (S.ONE_SHOT_FLAGS, 2, 5, 96, True),
    "push_w3": (S.ONE_SHOT_FLAGS, 3, 4, 64, False),
    "two_shot_pulled_w2_residual": (S.TWO_SHOT_PULLED, 2, 7, 96, True),
    "two_shot_pulled_w3_uneven": (S.TWO_SHOT_PULLED, 3, 7, 80, False),
    "two_shot_pulled_w8_fewer_rows_than_ranks": (S.TWO_SHOT_PULLED, 8, 5, 48, True),
    "lamport_w2_residual": (S.ONE_SHOT_LAMPORT, 2, 5, 96, True),
    "lamport_w4": (S.ONE_SHOT_LAMPORT, 4, 6, 64, False),
    "two_shot_lamport_w2_residual": (S.TWO_SHOT_LAMPORT, 2, 5, 96, True),
    "two_shot_lamport_w3_uneven": (S.TWO_SHOT_LAMPORT, 3, 7, 80, False),
    "two_shot_lamport_w4_residual": (S.TWO_SHOT_LAMPORT, 4, 9, 64, True),
    "two_shot_lamport_w8_fewer_rows_than_ranks": (S.TWO_SHOT_LAMPORT, 8, 5, 48, False),
}


@pytest.mark.parametrize("case", list(SIM_CASES))
def test_fused_kernels_interpreted(case):
    strategy, world, t, h, with_res = SIM_CASES[case]
    xs, w, res = partials(world, t, h, seed=11, device=DEV)
    res = res if with_res else None
    outs = simulate(strategy, world, xs, w, res, epsilon=1e-6, weight_offset=0.5, max_tokens=t + 3)
    exp = expected(xs, w, res, epsilon=1e-6, weight_offset=0.5, scale_ub=math.inf)
    for r, o in enumerate(outs):
        check(o, exp, context=f"rank {r}")
        # every rank holds the same bits (rank-order sums; two-shot rows are copied from their owner)
        assert torch.equal(o.y.view(torch.uint8), outs[0].y.view(torch.uint8)), f"rank {r} fp8 bits differ from rank 0"
        assert torch.equal(o.scale, outs[0].scale)


def test_all_strategies_agree_bitwise():
    """Same row math in every path: identical bits, also with scale_ub clamping some rows and an all-zero row."""
    xs, w, res = partials(2, 6, 64, seed=12, device=DEV)
    for x in xs:
        x[3] = 0  # a zero row: scale 0, outputs 0
    v, _, _ = norm64(sum(x.double() for x in xs), w, epsilon=1e-5)
    ub = float(v.abs().amax(-1).median())
    one = simulate(S.TWO_SHOT_PULLED, 2, xs, w, None, epsilon=1e-5, scale_ub=ub)[1]
    push = simulate(S.ONE_SHOT_FLAGS, 2, xs, w, None, epsilon=1e-5, scale_ub=ub)[1]
    lamport = simulate(S.ONE_SHOT_LAMPORT, 2, xs, w, None, epsilon=1e-5, scale_ub=ub)[1]
    lamport2 = simulate(S.TWO_SHOT_LAMPORT, 2, xs, w, None, epsilon=1e-5, scale_ub=ub)[
        0
    ]  # rank 0 receives row 3 from rank 1
    for other in (push, lamport, lamport2):
        assert torch.equal(one.y.view(torch.uint8), other.y.view(torch.uint8)) and torch.equal(one.scale, other.scale)
    check(one, expected(xs, w, None, epsilon=1e-5, weight_offset=0.0, scale_ub=ub))
    assert one.scale[3].item() == 0.0 and bool((one.y[3].float() == 0).all()), "a zero row gets scale 0 and zeros"
    clamped = v.abs().amax(-1) > ub
    assert bool(clamped.any()) and bool((one.y.float().abs().amax(-1)[clamped] == 448.0).all()), (
        "rows above scale_ub saturate"
    )


@pytest.mark.parametrize("strategy", [S.ONE_SHOT_LAMPORT, S.TWO_SHOT_LAMPORT], ids=lambda s: s.value)
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
def test_lamport_keeps_every_bit_and_leaves_its_buffers_empty(strategy, with_res):
    """The Lamport strategies mark empty words with 0x8000 (-0.0) and send words inverted, so a -0.0 partial (and every
    other value) arrives as it was: the same bits as two-shot pulled. Every word a receiver read is empty again after
    the call, which the buffers' next use needs."""
    xs, w, res = partials(4, 6, 64, seed=14, device=DEV)
    res = res if with_res else None
    for x in xs:
        x[0, :8] = -0.0  # -0.0 on every rank: the words that look most like the empty mark
    xs[1][1, 8:16] = -0.0
    xs[2][4, 3] = float("nan")  # a NaN partial: the same outputs as two-shot pulled
    bufs = []
    outs = simulate(strategy, 4, xs, w, res, epsilon=1e-6, bufs_out=bufs)
    pulled = simulate(S.TWO_SHOT_PULLED, 4, xs, w, res, epsilon=1e-6)
    for r, o in enumerate(outs):
        assert torch.equal(o.y.view(torch.uint8), pulled[r].y.view(torch.uint8)), f"rank {r}"
        assert torch.equal(o.scale.view(torch.int32), pulled[r].scale.view(torch.int32))
        if with_res:
            assert torch.equal(o.residual_out.view(torch.int16), pulled[r].residual_out.view(torch.int16))
        for name in ("lamport", "rs", "ag"):
            assert bool((getattr(bufs[r], name) == kernels.LAMPORT_EMPTY).all()), f"rank {r}: words left in {name}"
        assert bool((bufs[r].ag_scale == kernels.LAMPORT_EMPTY32).all()), f"rank {r}: scales left"


# magnitudes of the rows of extreme_partials: ordinary, fp32 sum of squares overflows, sums near the bf16 maximum,
# bf16 subnormals, squares below the fp32 range, an infinity, a NaN, all zeros
EXTREME_ROWS = (1.0, 1e37, 1.1e38, 1e-39, 1e-25, 1.0, 1.0, 0.0)


def extreme_partials(world, h, seed):
    """Partials (and weight, residual) whose summed rows are those of EXTREME_ROWS: each rank's row r is randn times
    the row's magnitude / world (the residual's too), rank 0 holds +inf in row 5 and rank 1 a NaN in row 6."""
    xs, w, res = partials(world, len(EXTREME_ROWS), h, seed, device=DEV, spread=False)
    mag = torch.tensor(EXTREME_ROWS, device=DEV)[:, None] / world
    xs = [(x.float() * mag).clamp(-3e38, 3e38).to(torch.bfloat16) for x in xs]
    res = (res.float() * mag).clamp(-3e38, 3e38).to(torch.bfloat16)
    xs[0][5, 3] = float("inf")
    xs[1 % world][6, 7] = float("nan")
    return xs, w, res


@pytest.mark.parametrize("eps", [1e-6, 0.0], ids=["eps_1e-6", "eps_0"])
@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("strategy", FUSED, ids=lambda s: s.value)
def test_extreme_rows_equal_the_float64_definition(strategy, with_res, eps):
    """Rows whose fp32 sum of squares overflows, subnormal rows, rows whose squares underflow, an infinity, a NaN and
    a zero row: every strategy gives the float64 y = h * rsqrt(mean(h^2) + eps) * w, its scale and codes (NaN scale and
    codes where y holds a NaN), and all strategies the same bits."""
    xs, w, res = extreme_partials(2, 64, seed=21)
    res = res if with_res else None
    outs = simulate(strategy, 2, xs, w, res, epsilon=eps)
    exp = expected(xs, w, res, epsilon=eps, weight_offset=0.0, scale_ub=math.inf)
    pulled = simulate(S.TWO_SHOT_PULLED, 2, xs, w, res, epsilon=eps)
    for r, o in enumerate(outs):
        check(o, exp, context=f"{strategy.value} rank {r}")
        assert torch.equal(o.y.view(torch.uint8), pulled[r].y.view(torch.uint8)), f"rank {r}: two-shot pulled differs"
        assert torch.equal(o.scale.view(torch.int32), pulled[r].scale.view(torch.int32))
    scale = outs[0].scale
    assert bool(torch.isfinite(scale[:5]).all()) and bool((scale[1:5] > 0).all()), "the finite rows keep their scale"
    assert bool(scale[5:7].isnan().all()) and bool(outs[0].y[5:7].float().isnan().all()), "inf / NaN rows: all NaN"
    assert (scale[7].item() == 0.0) == (eps > 0), "a zero row: 0 with eps > 0, 0 / 0 = NaN with eps == 0"


@pytest.mark.parametrize("with_res", [False, True], ids=["plain", "residual"])
def test_reference_path_extreme_rows_equal_the_float64_definition(with_res):
    """The reference path (fp32 all_reduce, then rmsnorm_fwd) on the rows of EXTREME_ROWS, eps > 0: the same
    definition as the fused strategies."""
    from programs.triton.forward import rmsnorm_fwd

    xs, w, res = extreme_partials(2, 64, seed=21)
    res = res if with_res else None
    total = xs[0].float() + xs[1].float()  # what dist.all_reduce hands rmsnorm_fwd
    out = rmsnorm_fwd(total, w, epsilon=1e-6, residual=res, dtype=E4M3, scale_mode="row")
    check(out, expected(xs, w, res, epsilon=1e-6, weight_offset=0.0, scale_ub=math.inf), context="reference path")


def test_sum_of_partials_beyond_fp32_is_infinite():
    """The all-reduce sums in fp32: partials whose sum leaves the fp32 range give +-inf in that element, and the row
    then follows the infinity rule (NaN scale and codes), where the float64 sum would be finite. Every strategy
    agrees."""
    xs, w, _ = partials(2, 3, 64, seed=22, device=DEV, spread=False)
    for x in xs:
        x[1, 5] = 3.0e38  # 6e38 > fp32 max in the sum
    exp = expected(xs, w, None, epsilon=1e-6, weight_offset=0.0, scale_ub=math.inf)
    for strategy in FUSED:
        out = simulate(strategy, 2, xs, w, None, epsilon=1e-6)[0]
        assert bool(out.scale[1].isnan()) and bool(out.y[1].float().isnan().all()), strategy.value
        keep = torch.tensor([True, False, True])
        check(
            ar.RMSNormOutput(out.y[keep], None, None, out.scale[keep]),
            (exp[0][keep], exp[1][keep], None, None),
            context=f"{strategy.value} finite rows",
        )


def test_fused_matches_reference_path_interpreted():
    """The fused kernels and the reference path (fp32 sum, then rmsnorm_fwd) are the same function."""
    from programs.triton.forward import rmsnorm_fwd

    xs, w, res = partials(2, 5, 96, seed=13, device=DEV)
    fused = simulate(S.TWO_SHOT_PULLED, 2, xs, w, res, epsilon=1e-6)[0]
    ref = rmsnorm_fwd(xs[0].float() + xs[1].float(), w, epsilon=1e-6, residual=res, dtype=E4M3, scale_mode="row")
    assert torch.equal(fused.residual_out, ref.residual_out)
    assert_close(fused.y.float(), ref.y.double(), E4M3, context="fused vs reference fp8")
    assert_close(fused.scale, ref.scale.double(), torch.float32, context="fused vs reference scales")


def test_strategy_choice_follows_the_dispatch_table():
    h, isz = 8192, 2
    for world in (2, 3, 4, 8):
        table = dispatch_rows(world)
        assert table[-1][0] is None, "the last row takes every larger payload"
        assert [b for b, _, _ in table[:-1]] == sorted(b for b, _, _ in table[:-1])
        lo = 0
        for bound, strategy, strategy_res in table:
            for tokens in {lo // (h * isz) + 1, (bound or 16 * lo) // (h * isz)}:
                assert ar.choose_strategy(tokens, h, isz, world) == strategy, (world, tokens)
                assert ar.choose_strategy(tokens, h, isz, world, residual=True, reuse_x=True) == strategy_res, (
                    world,
                    tokens,
                )
                # nccl with a residual all-reduces in place: a call whose x must stay takes two-shot pulled
                plain_res = S.TWO_SHOT_PULLED if strategy_res == S.NCCL else strategy_res
                assert ar.choose_strategy(tokens, h, isz, world, residual=True) == plain_res, (world, tokens)
            lo = bound or lo
    assert ar.choose_strategy(2048, h, isz, 4, residual=True, reuse_x=True) == S.NCCL
    assert ar.choose_strategy(2048, h, isz, 4, residual=True) == S.TWO_SHOT_PULLED
    assert ar.choose_strategy(2048, h, isz, 4, reuse_x=True) == S.TWO_SHOT_PULLED, "reuse_x alone changes nothing"
    assert (
        ar.choose_strategy(64, h, isz, 4) == S.TWO_SHOT_LAMPORT
        and ar.choose_strategy(64, h, isz, 4, residual=True) == S.ONE_SHOT_LAMPORT
    )
    assert dispatch_rows(3) is DISPATCH[4] and dispatch_rows(8) is DISPATCH[4]
    assert (
        ar.choose_strategy(1, h, isz, 2) == S.ONE_SHOT_FLAGS and ar.choose_strategy(32, h, isz, 2) == S.ONE_SHOT_LAMPORT
    )
    assert ar.choose_strategy(8192, h, isz, 2, residual=True) == S.TWO_SHOT_PULLED
    # the pushed strategies carry 16-bit words: fp32 activations or an odd hidden size go to two-shot pulled
    for world in (2, 4):
        small = [t for t in (1, 8, 16, 32, 64, 128) if ar.choose_strategy(t, h, isz, world) != S.TWO_SHOT_PULLED]
        assert small, "some small payload is pushed"
        for t in small:
            assert ar.choose_strategy(t, h // 2, 4, world) == S.TWO_SHOT_PULLED, "fp32 activations cannot be packed"
            assert ar.choose_strategy(t, 8191, isz, world) == S.TWO_SHOT_PULLED, "odd hidden size cannot be packed"


@pytest.mark.parametrize("world", [2, 3, 4, 8], ids=lambda w: f"{w}_ranks")
def test_dispatched_strategy_fits_its_buffers_at_every_size(world):
    """For every T a workspace takes (T = 1024 and its neighbours included), the dispatched strategy's buffers hold
    the rows its kernel writes: one-shot flags and one-shot Lamport all T rows, two-shot Lamport its all-gather rows
    and ceil(T / W) rows of every source in its reduce-scatter, two-shot pulled one half of the input buffer (meta
    tensors: sizes, no memory)."""
    h, isz = 8192, 2
    for max_tokens in (1, 37, 1030, 4096):
        raw = torch.empty(workspace_bytes(max_tokens, h, isz, world), dtype=torch.uint8, device="meta")
        bufs = [carve(raw, max_tokens, h, torch.bfloat16, world)] * world
        held = rows_held(bufs, h)
        sizes = {1, 2, 8, 9, 31, 32, 33, 64, 128, 129, 511, 512, 513, 1023, 1024, 1025, 1027, 2048, 2049, max_tokens}
        for t in sorted(x for x in sizes if x <= max_tokens):
            for res in (False, True):
                strategy = fitting_strategy(ar.choose_strategy(t, h, isz, world, residual=res), t, bufs, h, True)
                if strategy == S.TWO_SHOT_LAMPORT:
                    assert t <= held[S.TWO_SHOT_LAMPORT] and math.ceil(t / world) <= bufs[0].rs.numel() // (
                        2 * world * h
                    )
                elif strategy in (S.ONE_SHOT_FLAGS, S.ONE_SHOT_LAMPORT):
                    assert t <= held[strategy], (max_tokens, t, strategy)
                else:
                    assert strategy == S.TWO_SHOT_PULLED and t <= bufs[0].inp.shape[0] // 2, (max_tokens, t)
    # bufs hold 4096 rows: the pushed strategies fall back down the chain once T passes their buffers
    assert fitting_strategy(S.ONE_SHOT_FLAGS, 8, bufs, h, False) == S.ONE_SHOT_LAMPORT, (
        "one-shot flags needs x as int32 words"
    )
    assert fitting_strategy(S.ONE_SHOT_FLAGS, PUSH_MAX_TOKENS + 1, bufs, h, True) == S.ONE_SHOT_LAMPORT
    assert fitting_strategy(S.ONE_SHOT_LAMPORT, LAMPORT_MAX_TOKENS, bufs, h, True) == S.ONE_SHOT_LAMPORT
    assert fitting_strategy(S.TWO_SHOT_LAMPORT, LAMPORT2_MAX_TOKENS, bufs, h, True) == S.TWO_SHOT_LAMPORT
    assert fitting_strategy(S.TWO_SHOT_LAMPORT, LAMPORT2_MAX_TOKENS + 1, bufs, h, True) == S.TWO_SHOT_PULLED
    assert fitting_strategy(S.ONE_SHOT_LAMPORT, max(LAMPORT_MAX_TOKENS, LAMPORT2_MAX_TOKENS) + 1, bufs, h, True) == (
        S.TWO_SHOT_PULLED
    )


RULES = {
    "x.dtype": dict(x=lambda: torch.zeros(2, 64, dtype=torch.float32)),
    "x.hidden": dict(x=lambda: torch.zeros(2, 32, dtype=torch.bfloat16)),
    "x.tokens": dict(x=lambda: torch.zeros(9, 64, dtype=torch.bfloat16)),
    "x.last_dim_stride": dict(x=lambda: torch.zeros(64, 2, dtype=torch.bfloat16).t()),
    "residual.shape": dict(residual=lambda: torch.zeros(2, 64, dtype=torch.float32)),
    "weight.shape": dict(weight=lambda: torch.zeros(63, dtype=torch.bfloat16)),
    "weight_offset.no_weight": dict(weight=lambda: None, weight_offset=1.0),
    "dtype.fp8": dict(dtype=torch.bfloat16),
    "scale_ub.range": dict(scale_ub=0.0),
    "strategy.value": dict(strategy="one_shot_pulled"),
    "strategy.push": dict(
        x=lambda: torch.zeros(2, 65, dtype=torch.bfloat16)[:, 1:], strategy=S.ONE_SHOT_FLAGS
    ),  # rows at odd offsets
    "strategy.push_tokens": dict(
        x=lambda: torch.zeros(PUSH_MAX_TOKENS + 1, 64, dtype=torch.bfloat16),
        strategy=S.ONE_SHOT_FLAGS,
        max_tokens=1000,
    ),
    "epsilon.range": dict(epsilon=-1.0),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_bad_input_names_the_rule(rule):
    c = dict(
        x=lambda: torch.zeros(2, 64, dtype=torch.bfloat16),
        weight=lambda: torch.ones(64, dtype=torch.bfloat16),
        residual=lambda: None,
        epsilon=1e-5,
        weight_offset=0.0,
        scale_ub=math.inf,
        dtype=E4M3,
        strategy=None,
    )
    c.update(RULES[rule])
    args = {k: (v() if callable(v) else v) for k, v in c.items()}
    max_tokens = args.pop("max_tokens", 8)
    with pytest.raises(RuleError) as err:
        args["strategy"] = as_strategy(args["strategy"])  # the call's first step: a name becomes a Strategy
        check_call(
            args.pop("x"),
            args.pop("weight"),
            **args,
            hidden=64,
            max_tokens=max_tokens,
            act_dtype=torch.bfloat16,
            device=torch.device("cpu"),
        )
    assert err.value.rule == rule and "Fix:" in str(err.value)


@pytest.mark.parametrize("strategy", PUSHED, ids=lambda s: s.value)
def test_pushed_strategies_take_one_row_per_program(strategy):
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    with pytest.raises(RuleError) as err:
        launch(
            strategy,
            0,
            [None, None],
            None,
            x,
            None,
            None,
            None,
            None,
            None,
            epsilon=1e-5,
            weight_offset=0.0,
            scale_ub=math.inf,
            config=(2, 16),
        )
    assert err.value.rule == "config.push_rows" and "Fix:" in str(err.value)


def test_bench_watchdog_names_the_step_that_makes_no_progress(capsys):
    """The all-reduce benchmark's watchdog prints the armed step's label while it runs too long, and nothing once
    disarmed."""
    import time

    from benchmarks.triton.allreduce_measurement import Watchdog

    dog = Watchdog(rank=1, seconds=0.05)
    dog.arm("T=1024 residual=False two_shot_pulled shape 1x16 grid default")
    time.sleep(0.3)
    dog.disarm()
    barked = capsys.readouterr().err
    assert "rank 1: T=1024 residual=False two_shot_pulled shape 1x16 grid default still running after 0 s" in barked
    assert barked.count("still running") >= 2, "it keeps naming the step"
    time.sleep(0.15)
    assert capsys.readouterr().err == "", "disarmed: silent"


# ---------------------------------------------------------------------------------------------------------------------
# rank processes: the reference path over gloo (CPU), the fused path over NCCL + symmetric memory (GPUs)


@pytest.mark.parametrize(
    "world",
    [2, pytest.param(4, marks=pytest.mark.extended), pytest.param(8, marks=pytest.mark.extended)],
    ids=["2_ranks", "4_ranks", "8_ranks"],
)
def test_reference_path_gloo(world):
    print(run_ranks(__name__, world, "gloo", timeout=120.0))


@pytest.mark.requires_multi_gpu
@pytest.mark.parametrize("world", [2, 4, 8], ids=["2_ranks", "4_ranks", "8_ranks"])
def test_fused_nccl_back_to_back(world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs, {torch.cuda.device_count()} present")
    print(run_ranks(__name__, world, "nccl", timeout=400.0))


def gloo_worker(rank, world, dist):
    """Reference path: several calls with changing inputs, checked against float64; all ranks hold the same bits."""
    calls = [(3, 64, False, False), (4, 48, True, False), (5, 64, True, True)]
    mine = {2: [0, 1, 2], 4: [2], 8: [1]}.get(world, [0])  # fewer calls on more ranks: they share two cores
    for call in mine:
        t, h, with_res, clamp = calls[call]
        xs, w, res = partials(world, t, h, seed=100 + call)
        res = res if with_res else None
        ub = median_ub(xs, w, res, epsilon=1e-6, weight_offset=1.0) if clamp else math.inf
        out = ar.reference_allreduce_rmsnorm_fp8(
            xs[rank], w, epsilon=1e-6, weight_offset=1.0, residual=res, scale_ub=ub
        )
        check(out, expected(xs, w, res, epsilon=1e-6, weight_offset=1.0, scale_ub=ub), context=f"call {call}")
        gathered = [torch.empty(t, h, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(gathered, out.y.view(torch.uint8).contiguous())
        assert all(torch.equal(g, gathered[0]) for g in gathered), "ranks disagree"
        if res is not None:  # nccl with reuse_x: the in-place all_reduce's sums on x, then the fused norm
            x = xs[rank].clone()
            out = ar.nccl_allreduce_rmsnorm_fp8(
                x, w, None, epsilon=1e-6, weight_offset=1.0, residual=res, scale_ub=ub, dtype=E4M3, reuse_x=True
            )
            sums = nccl_sums(xs[rank], dist, world, in_place=True)
            assert torch.equal(x, sums), "x holds the all-reduced sums"
            exp = expected(xs, w, res, epsilon=1e-6, weight_offset=1.0, scale_ub=ub, sums=sums)
            check(out, exp, context=f"call {call}, nccl in place", bf16_sums=True)


NCCL_CASES = [  # (strategy, tokens (call k takes tokens[k % len]), calls)
    (S.ONE_SHOT_FLAGS, 1, 12),
    (S.ONE_SHOT_FLAGS, (1, 8, 3, 40, 2), 10),
    (S.ONE_SHOT_LAMPORT, 1, 12),
    (S.ONE_SHOT_LAMPORT, (1, 37, 128, 5, 300), 10),
    (S.TWO_SHOT_LAMPORT, (1, 37, 128, 5, 512), 10),
    (None, 64, 8),
    (S.TWO_SHOT_PULLED, 33, 8),
    (S.TWO_SHOT_PULLED, 3, 8),
    (S.TWO_SHOT_PULLED, 300, 6),
    (S.TWO_SHOT_PULLED, 1027, 4),
    (S.NCCL, 256, 6),
    (S.NCCL, 37, 4),
    (None, 2048, 3),
]


def nccl_worker(rank, world, dist):
    """Fused path on GPUs: per case, many calls enqueued back to back with fresh inputs (one rank sometimes delayed
    so the other reaches the barriers first), then every result checked: against float64 by one rank (call i by rank
    i % world, so the host work does not grow with the world size) and against every other rank's bits, and, for
    repeated inputs, against itself. Then the extreme rows (overflowing, subnormal, inf, NaN, zero) through every
    strategy."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # the ranks share the host's cores
    dev = torch.device("cuda", rank)
    h = 8192
    comm = ar.AllReduceRMSNormFP8(hidden_size=h, max_tokens=4096, dtype=torch.bfloat16, device=dev)
    skew = torch.Generator().manual_seed(7 + rank)
    total = 0
    for ci, (strategy, t, calls) in enumerate(NCCL_CASES):
        ins = []
        for k in range(calls):
            tk = t[k % len(t)] if isinstance(t, tuple) else t
            xs, w, res = partials(world, tk, h, seed=1000 * ci + k, device=dev)
            res, eps, off = res if k % 2 else None, 1e-6 if k % 3 else 1e-5, 1.0 if k % 4 == 1 else 0.0
            ub = median_ub(xs, w, res, epsilon=eps, weight_offset=off) if k % 5 == 0 and tk > 2 else math.inf
            ins.append((xs, w, res, eps, off, ub))
        repeat = 1  # call `repeat` is issued twice more at the end: bitwise run-to-run check
        order = list(range(calls)) + [repeat, repeat]
        outs = []
        torch.cuda.synchronize()
        dist.barrier()
        for k in order:  # no host sync between calls
            xs, w, res, eps, off, ub = ins[k]
            if torch.randint(0, 4, (1,), generator=skew).item() == 0:
                torch.cuda._sleep(int(torch.randint(1000, 200000, (1,), generator=skew).item()))  # delay this rank
            # x is dead after the call (reuse_x): nccl with a residual all-reduces the copy in place
            x = xs[rank].clone()
            outs.append(
                comm(x, w, epsilon=eps, weight_offset=off, residual=res, scale_ub=ub, strategy=strategy, reuse_x=True)
            )
        torch.cuda.synchronize()
        for i, (k, out) in enumerate(zip(order, outs, strict=True)):
            xs, w, res, eps, off, ub = ins[k]
            context = f"{name(strategy)} T={t} call {k}"
            bf16_sums = takes_nccl(comm, strategy, xs, res)
            sums = nccl_sums(xs[rank], dist, world, res is not None) if bf16_sums else None  # every rank takes part
            if i % world == rank:
                exp = expected(xs, w, res, epsilon=eps, weight_offset=off, scale_ub=ub, sums=sums)
                check(out, exp, context=context, bf16_sums=bf16_sums)
            same_bits_on_every_rank(out, dist, world, context)
            total += 1
        first, *again = [o for k, o in zip(order, outs, strict=True) if k == repeat]
        for o in again:
            assert torch.equal(o.y.view(torch.uint8), first.y.view(torch.uint8)) and torch.equal(
                o.scale, first.scale
            ), "not bitwise stable"
            if o.residual_out is not None:
                assert torch.equal(o.residual_out, first.residual_out)
        # the fused call and the reference path (fp32 NCCL all_reduce + rmsnorm_fwd) on the same inputs
        xs, w, res, eps, off, ub = ins[repeat]
        ref = ar.reference_allreduce_rmsnorm_fp8(xs[rank], w, epsilon=eps, weight_offset=off, residual=res, scale_ub=ub)
        same = (ref.y.view(torch.uint8) == first.y.view(torch.uint8)).float().mean().item()
        if not takes_nccl(
            comm, strategy, xs, res
        ):  # nccl normalizes NCCL's bf16 sums, not the fp32 sums: held to float64 above instead
            assert_close(first.y.float(), ref.y.double(), E4M3, context="fused vs reference path")
        print(
            f"rank {rank}: {name(strategy)} T={t}: {len(order)} calls checked; "
            f"fp8 bits equal to the reference path: {same:.5f}",
            flush=True,
        )
    print(f"rank {rank}: {total} back-to-back fused calls checked", flush=True)
    xs, w, res = extreme_partials(world, h, seed=31)
    for strategy in (*FUSED, None):
        for r_ in (None, res):
            out = comm(xs[rank], w, epsilon=1e-6, residual=r_, strategy=strategy)
            context = f"extreme rows, {name(strategy)}, residual {r_ is not None}"
            check(out, expected(xs, w, r_, epsilon=1e-6, weight_offset=0.0, scale_ub=math.inf), context=context)
            same_bits_on_every_rank(out, dist, world, context)
    print(f"rank {rank}: extreme rows equal to float64 in every fused strategy and the dispatched one", flush=True)


def work(rank, world, backend):
    import torch.distributed as dist

    (gloo_worker if backend == "gloo" else nccl_worker)(rank, world, dist)


if __name__ == "__main__":
    serve_rank(work, timeout_s=120)
