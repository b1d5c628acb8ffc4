"""Which fused all-reduce stage serves a call: the stage ids, the measured dispatch table per world size (each row
with the numbers and the reason behind its bound) and choose_stage."""

from __future__ import annotations

MAX_WORLD = 8
PUSH, PULL, TWO_STAGE, LAMPORT, NCCL, LAMPORT2 = 0, 1, 2, 3, 4, 5  # the values of `stage`
STAGE_NAMES = {
    PUSH: "1-stage pushed, flag words",
    PULL: "1-stage pulled",
    TWO_STAGE: "2-stage pulled",
    LAMPORT: "1-stage pushed, flags in the data",
    NCCL: "NCCL reduce-scatter/all-gather + fused norm",
    LAMPORT2: "2-stage pushed, flags in the data",
}


# The dispatch, per world size: rows (largest payload T * H * itemsize per rank, stage, stage with a residual), the
# first row whose payload bound holds is taken. Bounds are in rows of H = 8192 bf16 (16 KiB), the shape every number
# was measured at with benchmarks/triton/allreduce.py (slowest rank, CUDA-graph replays, ratios against NCCL
# all_reduce + our fused norm/FP8 in the same run); a payload between two measured T goes to the smaller T's stage.
ROW = 8192 * 2
_DISPATCH_2 = (
    # 2 x H100 and 2 x H200: stage 0 led stage 1 at T = 1..32 in every same-run pair on 2 x H100 (7.9-8.9 against
    # 8.9-10.0 us at T = 32) and tied at T = 32 on 2 x H200 (8.6 / 8.5)
    (32 * ROW, PUSH, PUSH),
    # stage 1 up to 1 MiB per rank (T = 128: 12.4 against stage 2's 14.4 us, 2 x H200); stage 2 from T = 256 (a tie
    # there, 21.0 / 20.7 us on 2 x H100), 1.55x at T = 8192. With a residual stage 1 led at every T up to 8192 (1.18x
    # there) while stage 2 all-gathered FP8 + bf16 rows; stages 3 and 5 and the residual_out-only all-gather of stage
    # 2 are not measured on 2 ranks
    (254 * ROW, PULL, PULL),
    (None, TWO_STAGE, PULL),
)
_DISPATCH_4 = (
    # 4 x H100 (NV18 between every pair), five runs. T = 1: stage 0 7.7-8.9 us against stage 3 7.9-9.5 (1.79-2.00x);
    # T = 8: stage 0 9.8-10.6 against stage 3 9.3-11.2, a tie (1.38-1.85x); with a residual T = 1 1.71-2.11x, T = 8
    # 1.40-1.48x
    (8 * ROW, PUSH, PUSH),
    # T = 32: stage 5 11.9-12.5 us against stage 3 12.7-14.1 (14.5 at its default shape: 1.26x), 1.44-1.67x; with a
    # residual stage 3 13.1-15.3 against stage 5 14.4-16.8 (1.08-1.43x)
    (32 * ROW, LAMPORT2, LAMPORT),
    # stage 5 from T = 64: 13.3 us against stage 3 18.0 (1.67x), T = 128 17.2-19.4 against stage 3 25.6-27.9 and
    # stage 2 33.3-35.2 (1.75-2.03x), T = 256 25.9 (1.72x), T = 512 46.8-51.4 against stage 2 63.5-69.0
    # (1.39-1.40x); with a residual (it all-gathers residual_out) T = 64 1.32x, 128 1.41-1.54x, 256 1.34x, 512
    # 1.18-1.24x. Stage 5 past 512 rows is not timed on 4 ranks
    # since its stall was fixed (docs/allreduce.md)
    (512 * ROW, LAMPORT2, LAMPORT2),
    # stage 2 (2 rows x 16 warps from 512 rows a rank): T = 2048 170.2-173.9 us (1.12-1.14x). With a residual no
    # fused stage beats NCCL all_reduce + the fused norm at T = 2048 (stage 2 223.8-232.8 against 223.0, 0.96-1.00x;
    # stage 4 reduce-scatter + all-gather 265.2): stage 4 in place where reuse_x allows, else stage 2
    (2048 * ROW, TWO_STAGE, NCCL),
    # T = 8192 574.3-592.6 (1.15-1.20x; stage 4's reduce-scatter + all-gather 592.5-593.1); with a residual
    # 736.9-759.9 (1.02-1.05x)
    (None, TWO_STAGE, TWO_STAGE),
)
# 3 ranks and 5-8 ranks take the 4-rank rows (not measured: 8-GPU machines were not available)
DISPATCH = {2: _DISPATCH_2, 4: _DISPATCH_4}


def dispatch_rows(world: int) -> tuple:
    return DISPATCH[2] if world == 2 else DISPATCH[4]


def choose_stage(
    tokens: int, hidden: int, itemsize: int, world: int, *, residual: bool = False, reuse_x: bool = False
) -> int:
    """The measured stage (DISPATCH) for a call of [tokens, hidden] elements of `itemsize` bytes over `world` ranks.
    Stages 0 and 3 carry 16-bit words: other activations (or an odd hidden size) take stage 1 there. Stage 4 with a
    residual is the in-place all_reduce: without reuse_x the call takes stage 2."""
    payload = tokens * hidden * itemsize
    for bound, stage, stage_res in dispatch_rows(world):
        if bound is None or payload <= bound:
            chosen = stage_res if residual else stage
            break
    if chosen == NCCL and residual and not reuse_x:
        return TWO_STAGE
    if chosen in (PUSH, LAMPORT, LAMPORT2) and not push_capable(hidden, itemsize):
        return PULL
    return chosen


def push_capable(hidden: int, itemsize: int) -> bool:
    """Stage 0 packs two 16-bit activations per 8-byte word (with a 4-byte flag): 16-bit dtypes, even hidden size."""
    return itemsize == 2 and hidden % 2 == 0
