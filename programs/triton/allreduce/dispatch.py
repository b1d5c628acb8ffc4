"""Which fused all-reduce stage serves a call: the stage ids, the measured dispatch table per world size (each row
with the numbers and the reason behind its bound) and choose_stage."""

from __future__ import annotations

MAX_WORLD = 8
PUSH, TWO_STAGE, LAMPORT, NCCL, LAMPORT2 = 0, 2, 3, 4, 5  # the values of `stage`
STAGE_NAMES = {
    PUSH: "1-stage pushed, flag words",
    TWO_STAGE: "2-stage pulled",
    LAMPORT: "1-stage pushed, flags in the data",
    NCCL: "NCCL reduce-scatter/all-gather + fused norm",
    LAMPORT2: "2-stage pushed, flags in the data",
}


# The dispatch, per world size: rows (largest payload T * H * itemsize per rank, stage, stage with a residual), the
# first row whose payload bound holds is taken. Bounds are in rows of H = 8192 bf16 (16 KiB), the shape every number
# was measured at with benchmarks/triton/allreduce.py (slowest rank, CUDA-graph replays, ratios against NCCL
# all_reduce + our fused norm/FP8 in the same run); a payload between two measured T goes to the smaller T's stage.
# The numbers: 2 and 4 x H100 (nvidia-h100-x4, NV18 between every pair), T = 1, 8, 32, 64, ..., 8192 with and without
# a residual, best launch shape of 1x8, 1x16, 2x16 (a residual: the default shape), us.
ROW = 8192 * 2
_DISPATCH_2 = (
    # T = 1: stage 0 5.3 against stage 3 5.5 (with a residual 5.9 / 6.1), 1.78-1.83x
    (1 * ROW, PUSH, PUSH),
    # stage 3 to T = 128: T = 8 6.3 (stage 0 6.3; with a residual 6.5 against 7.4), T = 32 7.1 against stage 0 8.5
    # (8.7 / 9.2), T = 64 8.8 against stage 5 9.7 (9.8 / 13.1), T = 128 11.0 against stage 5 11.7 (12.6 / 16.3);
    # 1.60-2.81x
    (128 * ROW, LAMPORT, LAMPORT),
    # stage 5 to T = 1024: T = 256 15.1 against stage 3 18.2 (21.2 / 21.3), T = 512 23.7 against stage 2 30.8
    # (33.1 / 39.8), T = 1024 47.2 against 51.3 (65.4 / 69.3); 1.54-2.47x
    (1024 * ROW, LAMPORT2, LAMPORT2),
    # stage 2 from T = 2048: 95.5 against stage 5 100.8 (126.0 / 131.1), 1.44-1.62x; T = 8192 359.0 (462.0), 1.35-1.48x
    (None, TWO_STAGE, TWO_STAGE),
)
_DISPATCH_4 = (
    # T = 1: stage 0 7.8 against stage 3 8.1 (with a residual 8.5 / 9.1), 1.66-1.85x
    (1 * ROW, PUSH, PUSH),
    # T = 8: stage 3 9.4 against stage 0 10.4 (10.2 / 10.8), 1.53-1.54x; T = 32: stage 3 12.7 against stage 5 13.2
    # (13.5 / 14.8), 1.35-1.43x
    (32 * ROW, LAMPORT, LAMPORT),
    # T = 64: stage 5 14.1 against stage 3 17.7, 1.62x; with a residual stage 3 17.3 against stage 5 17.8, 1.25x
    (64 * ROW, LAMPORT2, LAMPORT),
    # stage 5 to T = 1024: T = 128 18.6 against stage 3 26.3 (22.9 / 27.8), T = 512 50.7 against stage 2 68.1 (60.0 /
    # 77.9), T = 1024 98.2 against 104.3, 1.14-1.77x (with a residual 1.21-1.39x to T = 512)
    (512 * ROW, LAMPORT2, LAMPORT2),
    # with a residual from T = 513 no fused stage beats NCCL all_reduce + the fused norm: T = 1024 stage 2 123.2,
    # stage 5 124.6, stage 4 127.4 against 122.2; T = 2048 stage 4 216.6 against stage 2 230.7, stage 5 247.8 and
    # 220.3: stage 4 in place (that path itself) where reuse_x allows, else stage 2
    (1024 * ROW, LAMPORT2, NCCL),
    # T = 2048 stage 2 175.0 against stage 5 190.3 and stage 4 206.9 (1.13x)
    (2048 * ROW, TWO_STAGE, NCCL),
    # T = 4096 stage 2 310.8 (1.17x; a residual: stage 4 412.4 against stage 2 413.9, 412.3), T = 8192 584.8 against
    # stage 4 588.4 (1.18x; a residual 750.0 against 773.6, 1.04x)
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
    Stages 0, 3 and 5 carry 16-bit words: other activations (or an odd hidden size) take stage 2 there. Stage 4 with a
    residual is the in-place all_reduce: without reuse_x the call takes stage 2."""
    payload = tokens * hidden * itemsize
    for bound, stage, stage_res in dispatch_rows(world):
        if bound is None or payload <= bound:
            chosen = stage_res if residual else stage
            break
    if chosen == NCCL and residual and not reuse_x:
        return TWO_STAGE
    if chosen in (PUSH, LAMPORT, LAMPORT2) and not push_capable(hidden, itemsize):
        return TWO_STAGE
    return chosen


def push_capable(hidden: int, itemsize: int) -> bool:
    """Stage 0 packs two 16-bit activations per 8-byte word (with a 4-byte flag): 16-bit dtypes, even hidden size."""
    return itemsize == 2 and hidden % 2 == 0
