"""Which strategy of the fused all-reduce serves a call: the strategies, the measured dispatch table per world size
(each row with the numbers and the reason behind its bound) and choose_strategy."""

from __future__ import annotations

import enum

MAX_WORLD = 8


class Strategy(enum.Enum):
    """How a call moves the ranks' partial rows; the value is the name the command lines take. One shot: every rank
    gets every row and normalizes all of them; two shots: reduce-scatter to the rows' owners, who normalize them, then
    all-gather of the results."""

    ONE_SHOT_FLAGS = "one_shot_flags"
    ONE_SHOT_LAMPORT = "one_shot_lamport"
    TWO_SHOT_LAMPORT = "two_shot_lamport"
    TWO_SHOT_PULLED = "two_shot_pulled"
    NCCL = "nccl"

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Strategy.ONE_SHOT_FLAGS: "one shot, pushed as flag words",
    Strategy.ONE_SHOT_LAMPORT: "one shot, pushed with the flags in the data",
    Strategy.TWO_SHOT_LAMPORT: "two shots, pushed with the flags in the data",
    Strategy.TWO_SHOT_PULLED: "two shots, pulled between barriers",
    Strategy.NCCL: "NCCL reduce-scatter/all-gather + fused norm",
}
# the strategies that push 16-bit words (push_capable)
PUSHED = (Strategy.ONE_SHOT_FLAGS, Strategy.ONE_SHOT_LAMPORT, Strategy.TWO_SHOT_LAMPORT)


# The dispatch, per world size: rows (largest payload T * H * itemsize per rank, strategy, strategy with a residual),
# the first row whose payload bound holds is taken. Bounds are in rows of H = 8192 bf16 (16 KiB), the shape every number
# was measured at with benchmarks/triton/allreduce.py (slowest rank, CUDA-graph replays, ratios against NCCL
# all_reduce + our fused norm/FP8 in the same run); a payload between two measured T goes to the smaller T's strategy.
# The numbers: 2 and 4 x H100 (nvidia-h100-x4, NV18 between every pair), T = 1, 8, 32, 64, ..., 8192 with and without
# a residual, best launch shape of 1x8, 1x16, 2x16 (a residual: the default shape), us. The same command
# repeated with this table (docs/allreduce.md, "Dispatch") keeps the order at every bound but near-ties (within 0.5 us
# at 4 ranks T = 32, and T = 64 with a residual), two-shot Lamport 100.9 against two-shot pulled 103.0 at 2 ranks
# T = 2048 (the dispatched call 97.7) and one-shot flags with a residual at 4 ranks T = 1 (18.8 against 8.8 of
# one-shot Lamport; the dispatched call 8.9).
ROW = 8192 * 2
_S = Strategy
_DISPATCH_2 = (
    # T = 1: one-shot flags 5.3 against one-shot Lamport 5.5 (with a residual 5.9 / 6.1), 1.78-1.83x
    (1 * ROW, _S.ONE_SHOT_FLAGS, _S.ONE_SHOT_FLAGS),
    # one-shot Lamport to T = 128: T = 8 6.3 against one-shot flags 6.3 (with a residual 6.5 / 7.4), T = 32 7.1 / 8.5
    # (8.7 / 9.2), T = 64 8.8 against two-shot Lamport 9.7 (9.8 / 13.1), T = 128 11.0 / 11.7 (12.6 / 16.3); 1.60-2.81x
    (128 * ROW, _S.ONE_SHOT_LAMPORT, _S.ONE_SHOT_LAMPORT),
    # two-shot Lamport to T = 1024: T = 256 15.1 against one-shot Lamport 18.2 (21.2 / 21.3), T = 512 23.7 against
    # two-shot pulled 30.8 (33.1 / 39.8), T = 1024 47.2 / 51.3 (65.4 / 69.3); 1.54-2.47x
    (1024 * ROW, _S.TWO_SHOT_LAMPORT, _S.TWO_SHOT_LAMPORT),
    # two-shot pulled from T = 2048: 95.5 against two-shot Lamport 100.8 (126.0 / 131.1), 1.44-1.62x; T = 8192 359.0
    # (462.0), 1.35-1.48x
    (None, _S.TWO_SHOT_PULLED, _S.TWO_SHOT_PULLED),
)
_DISPATCH_4 = (
    # T = 1: one-shot flags 7.8 against one-shot Lamport 8.1 (with a residual 8.5 / 9.1), 1.66-1.85x
    (1 * ROW, _S.ONE_SHOT_FLAGS, _S.ONE_SHOT_FLAGS),
    # T = 8: one-shot Lamport 9.4 against one-shot flags 10.4 (10.2 / 10.8), 1.53-1.54x; T = 32: 12.7 against two-shot
    # Lamport 13.2 (13.5 / 14.8), 1.35-1.43x
    (32 * ROW, _S.ONE_SHOT_LAMPORT, _S.ONE_SHOT_LAMPORT),
    # T = 64: two-shot Lamport 14.1 against one-shot Lamport 17.7, 1.62x; with a residual 17.8 / 17.3, 1.25x
    (64 * ROW, _S.TWO_SHOT_LAMPORT, _S.ONE_SHOT_LAMPORT),
    # two-shot Lamport to T = 1024: T = 128 18.6 against one-shot Lamport 26.3 (22.9 / 27.8), T = 512 50.7 against
    # two-shot pulled 68.1 (60.0 / 77.9), T = 1024 98.2 / 104.3; 1.14-1.77x (with a residual 1.21-1.39x to T = 512)
    (512 * ROW, _S.TWO_SHOT_LAMPORT, _S.TWO_SHOT_LAMPORT),
    # with a residual from T = 513 no fused strategy beats NCCL all_reduce + the fused norm: T = 1024 two-shot pulled
    # 123.2, two-shot Lamport 124.6, NCCL 127.4 against 122.2; T = 2048 NCCL 216.6 against two-shot pulled 230.7 and
    # 220.3: NCCL in place (that path itself) where reuse_x allows, else two-shot pulled
    (1024 * ROW, _S.TWO_SHOT_LAMPORT, _S.NCCL),
    # T = 2048 two-shot pulled 175.0 against two-shot Lamport 190.3 and NCCL 206.9 (1.13x); T = 4096 two-shot
    # pulled 310.8 against NCCL 339.3 (1.17x). With a residual at T = 4096 NCCL in place 412.4 / 408.5 against
    # two-shot pulled 413.9 / 413.9 and 412.3 / 402.3 (two runs)
    (4096 * ROW, _S.TWO_SHOT_PULLED, _S.NCCL),
    # T = 8192 two-shot pulled 584.8 against NCCL 588.4 (1.18x; with a residual 750.0 against 773.6, 1.04x)
    (None, _S.TWO_SHOT_PULLED, _S.TWO_SHOT_PULLED),
)
# 3 ranks and 5-8 ranks take the 4-rank rows (not measured: 8-GPU machines were not available)
DISPATCH = {2: _DISPATCH_2, 4: _DISPATCH_4}


def dispatch_rows(world: int) -> tuple:
    return DISPATCH[2] if world == 2 else DISPATCH[4]


def choose_strategy(
    tokens: int, hidden: int, itemsize: int, world: int, *, residual: bool = False, reuse_x: bool = False
) -> Strategy:
    """The measured strategy (DISPATCH) for a call of [tokens, hidden] elements of `itemsize` bytes over `world`
    ranks. The pushed strategies carry 16-bit words: other activations (or an odd hidden size) take two-shot pulled
    there. NCCL with a residual is the in-place all_reduce: without reuse_x the call takes two-shot pulled."""
    payload = tokens * hidden * itemsize
    for bound, plain, with_res in dispatch_rows(world):
        if bound is None or payload <= bound:
            chosen = with_res if residual else plain
            break
    if chosen == Strategy.NCCL and residual and not reuse_x:
        return Strategy.TWO_SHOT_PULLED
    if chosen in PUSHED and not push_capable(hidden, itemsize):
        return Strategy.TWO_SHOT_PULLED
    return chosen


def push_capable(hidden: int, itemsize: int) -> bool:
    """The pushed strategies carry 16-bit words (one-shot flags: two a 8-byte word with a 4-byte flag): 16-bit dtypes,
    even hidden size."""
    return itemsize == 2 and hidden % 2 == 0
