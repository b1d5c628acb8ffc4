"""One rank's symmetric workspace of the fused all-reduce: its regions and sizes, the typed views (RankBuffers) and
the state it must start in."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from programs.triton.allreduce import kernels
from programs.triton.allreduce.dispatch import Strategy, push_capable

# One-shot flags: its receive buffers hold PUSH_MAX_TOKENS rows. One-shot Lamport (rows pushed as they are, -0.0
# marking an empty word): LAMPORT_MAX_TOKENS rows.
PUSH_MAX_TOKENS = 128
LAMPORT_MAX_TOKENS = 512
# Two-shot Lamport's all-gather buffers hold LAMPORT2_MAX_TOKENS rows, its reduce-scatter buffers 1/W of them: the
# rows its calls were run to on 2 and 4 x H100 (eager, side stream and graph replays, with and without a residual).
# The dispatch serves it up to 1024 rows (dispatch.DISPATCH); a larger call takes two-shot pulled (fitting_strategy).
LAMPORT2_MAX_TOKENS = 2048
# One-shot flags runs the same grid in every call of a workspace (its per-program call counters need that): at most
# this many programs push the rows' words in pieces of at most PUSH_PIECE words (a row in at least 4 pieces), and
# program r % grid normalizes row r. One-shot Lamport likewise, with one program per SM (up to MAX_PROGRAMS).
PUSH_PROGRAMS = 32
PUSH_PIECE = 1024
_ALIGN = 256


@dataclass
class RankBuffers:
    """One rank's symmetric workspace as typed views (seen from the local GPU: a peer's are NVLink mappings)."""

    inp: torch.Tensor  # [2 * T_max, H] x dtype: the published partial rows (two halves, alternate calls)
    q: torch.Tensor  # [2 * T_max, H] uint8: two-shot pulled: FP8 rows of the owner
    s: torch.Tensor  # [2 * T_max] float32: two-shot pulled: scales of the owner
    o: torch.Tensor  # [2 * T_max, H] x dtype: two-shot pulled: residual_out rows of the owner
    flags: torch.Tensor  # [N_SLOTS * 1024 * W] int32: barrier flags, written by the peers
    recv: torch.Tensor  # [2 * W * min(T_max, PUSH_MAX_TOKENS) * H/2] int64: one-shot flags words pushed by the peers
    lamport: (
        torch.Tensor
    )  # [2 * W * min(T_max, LAMPORT_MAX_TOKENS) * H] int16: one-shot Lamport rows pushed by the peers
    rs: torch.Tensor  # [2 * W * ceil(TL / W) * H] int16, TL = min(T_max, LAMPORT2_MAX_TOKENS): two-shot Lamport
    # reduce-scatter
    ag: torch.Tensor  # [2 * TL * H] int16: two-shot Lamport all-gather rows (FP8 byte pairs or residual_out)
    ag_scale: torch.Tensor  # [2 * TL] int32: two-shot Lamport all-gather scales


def workspace_bytes(max_tokens: int, hidden: int, itemsize: int, world: int) -> int:
    sizes = _region_sizes(max_tokens, hidden, itemsize, world)
    return sum(_round_up(s) for s in sizes)


def _round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _region_sizes(max_tokens, hidden, itemsize, world):
    t2 = 2 * max_tokens  # double-buffered: call k uses half k % 2 (pulled.py says why)
    ok = push_capable(hidden, itemsize)
    push = 2 * world * min(max_tokens, PUSH_MAX_TOKENS) * (hidden // 2) * 8 if ok else 0
    lamport = 2 * world * min(max_tokens, LAMPORT_MAX_TOKENS) * hidden * 2 if ok else 0
    tl2 = min(max_tokens, LAMPORT2_MAX_TOKENS) if ok else 0
    return (
        kernels.N_SLOTS * kernels.MAX_PROGRAMS * world * 4,
        t2 * hidden * itemsize,
        t2 * hidden,
        t2 * 4,
        t2 * hidden * itemsize,
        push,
        lamport,
        2 * world * math.ceil(tl2 / world) * hidden * 2,
        2 * tl2 * hidden * 2,
        2 * tl2 * 4,
    )


def carve(raw: torch.Tensor, max_tokens: int, hidden: int, dtype: torch.dtype, world: int) -> RankBuffers:
    """Typed views of one rank's uint8 workspace (same layout on every rank)."""
    sizes = _region_sizes(max_tokens, hidden, dtype.itemsize, world)
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + _round_up(s))

    def region(i, dt, shape):
        return raw[offs[i] : offs[i] + sizes[i]].view(dt).view(shape)

    return RankBuffers(
        flags=region(0, torch.int32, (-1,)),
        inp=region(1, dtype, (2 * max_tokens, hidden)),
        q=region(2, torch.uint8, (2 * max_tokens, hidden)),
        s=region(3, torch.float32, (2 * max_tokens,)),
        o=region(4, dtype, (2 * max_tokens, hidden)),
        recv=region(5, torch.int64, (-1,)),
        lamport=region(6, torch.int16, (-1,)),
        rs=region(7, torch.int16, (-1,)),
        ag=region(8, torch.int16, (-1,)),
        ag_scale=region(9, torch.int32, (-1,)),
    )


def init_workspace(raw: torch.Tensor, max_tokens: int, hidden: int, dtype: torch.dtype, world: int) -> RankBuffers:
    """A rank's workspace as it must be before its first call: flags and counters zero, the Lamport buffers empty."""
    raw.zero_()
    bufs = carve(raw, max_tokens, hidden, dtype, world)
    for words in (bufs.lamport, bufs.rs, bufs.ag):
        words.fill_(kernels.LAMPORT_EMPTY)
    bufs.ag_scale.fill_(kernels.LAMPORT_EMPTY32)
    return bufs


def lamport_rows(bufs: list[RankBuffers], hidden: int) -> int:
    """Rows one-shot Lamport's receive buffers hold."""
    return bufs[0].lamport.numel() // (2 * len(bufs) * hidden)


def rows_held(bufs: list[RankBuffers], hidden: int) -> dict[int, int]:
    """Rows a call may have for each pushed strategy on these buffers (two-shot Lamport: its all-gather rows; its
    reduce-scatter
    holds ceil(rows / W) of every source, which is all a call of that many rows sends an owner)."""
    world = len(bufs)
    return {
        Strategy.ONE_SHOT_FLAGS: bufs[0].recv.numel() // (2 * world * (hidden // 2)) if bufs[0].recv.numel() else 0,
        Strategy.ONE_SHOT_LAMPORT: lamport_rows(bufs, hidden),
        Strategy.TWO_SHOT_LAMPORT: bufs[0].ag.numel() // (2 * hidden),
    }


def fitting_strategy(strategy: Strategy, tokens: int, bufs: list[RankBuffers], hidden: int, int32_ok: bool) -> Strategy:
    """The dispatched strategy, or the next one down this chain whose buffers hold `tokens` rows: one-shot flags (also
    needing x as int32 words) -> one-shot Lamport -> two-shot Lamport -> two-shot pulled."""
    held = rows_held(bufs, hidden)
    s = Strategy
    if strategy == s.ONE_SHOT_FLAGS and not (tokens <= held[s.ONE_SHOT_FLAGS] and int32_ok):
        strategy = s.ONE_SHOT_LAMPORT
    if strategy == s.ONE_SHOT_LAMPORT and tokens > held[s.ONE_SHOT_LAMPORT]:
        strategy = s.TWO_SHOT_LAMPORT
    if strategy == s.TWO_SHOT_LAMPORT and tokens > held[s.TWO_SHOT_LAMPORT]:
        strategy = s.TWO_SHOT_PULLED
    return strategy
