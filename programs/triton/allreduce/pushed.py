"""One-shot flags, a strategy of the fused all-reduce: rows pushed into the peers' receive buffers as 8-byte flag words
(NCCL's LL idea), no barrier and no atomics.

Every 8-byte word a rank pushes into a peer's receive buffer carries 4 bytes of data (two 16-bit activations) and 4
bytes of flag = the call number + 1. An aligned 8-byte store lands whole, so a receiver that sees its call's flag in a
word also sees that word's data: it re-reads its own (local) receive buffer until every word of the row carries the
flag, with no fence and no separate signal. The flag is matched exactly, so stale words of an older call in the same
half are never taken.

The grid is the same G programs in every one-shot flags call of a workspace, whatever T, so each program counts the
calls itself (CALLS[pid]: a plain load at the start, a plain store at the end): every program of every rank holds the
same number, and no program waits on another program of its own rank. The rows' words are pushed in pieces of PIECE
words spread over all G programs (more SMs issue the NVLink stores); row r is then received and normalized by program r
% G, which loads its own row, the weight and the residual before it polls. The receive buffer B_r[half, src, row, H/2]
is double-buffered by call parity: a rank rewrites half p in call c + 2 only after it received every peer's words of
call c + 1, so every peer had finished call c.

Kernel bodies stay whole: their phases share the rows held in registers and the call's counters, and the row math
they repeat lives in row_math.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

from programs.triton.allreduce.row_math import finish_rows, one_row, piece_of_row, residual_rows, weight_factor
from programs.triton.allreduce.sync import STALLED_FLAGS, clock_ns, pick, report_stall, waiting


@triton.jit
def unpack_pair(d, XDT: tl.constexpr):
    """Two 16-bit activations packed in an int32 (little end first) -> (even, odd) columns in fp32."""
    lo = (d & 0xFFFF).to(tl.int16).to(XDT, bitcast=True).to(tl.float32)
    hi = (d >> 16).to(tl.int16).to(XDT, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def one_shot_flags_kernel(
    X32,
    stride_x32,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    SC,
    W,
    B0,
    B1,
    B2,
    B3,
    B4,
    B5,
    B6,
    B7,
    CALLS,
    STALL_REC,
    STALL_NS,
    T,
    TLL,
    H,
    H2,
    inv_h,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PIECE: tl.constexpr,
    XDT: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    SYNC: tl.constexpr,
    PHASES: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    calls = tl.load(CALLS + pid)
    half = (calls & 1).to(tl.int64)
    flag = calls + 1
    deadline = STALL_NS
    if SYNC:
        deadline = clock_ns() + STALL_NS
    if PHASES & 1:  # push this rank's rows to every peer, piece by piece
        per_row = tl.cdiv(H2, PIECE)
        for piece in range(pid, T * per_row, nprog):
            row, r64, c = piece_of_row(piece, per_row, PIECE)
            ok = c < H2
            d = tl.load(X32 + r64 * stride_x32 + c, mask=ok, other=0)
            word = (d.to(tl.int64) & 0xFFFFFFFF) | (flag.to(tl.int64) << 32)
            for r in tl.static_range(WORLD):
                if r != RANK:
                    dst = pick(r, B0, B1, B2, B3, B4, B5, B6, B7) + ((half * WORLD + RANK) * TLL + r64) * H2
                    tl.store(dst + c, word, mask=ok)
    if PHASES & 2:
        nq = (inv_h, eps, scale_ub, fp8_max)
        out = (Y, stride_y, SC, RO, stride_ro)
        fl: tl.constexpr = (HAS_W, HAS_RES, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        mine = pick(RANK, B0, B1, B2, B3, B4, B5, B6, B7)
        c2 = tl.arange(0, BLOCK_H // 2)
        ok2 = c2 < H2
        cols = tl.arange(0, BLOCK_H)[None, :]
        col_ok = cols < H
        wf = weight_factor(W, cols, col_ok, w_off, HAS_W)
        for row in range(pid, T, nprog):
            rows64, mask, sc_rows, sc_ok = one_row(row, col_ok, T)
            r64 = tl.cast(row, tl.int64)
            own = tl.load(X32 + r64 * stride_x32 + c2, mask=ok2, other=0)
            res = residual_rows(R, stride_r, rows64, cols, mask, HAS_RES)
            even = tl.zeros([BLOCK_H // 2], dtype=tl.float32)
            odd = tl.zeros([BLOCK_H // 2], dtype=tl.float32)
            for r in tl.static_range(WORLD):  # rank order: every rank sums the same way
                if r == RANK:
                    d = own
                else:
                    src = mine + ((half * WORLD + r) * TLL + r64) * H2 + c2
                    wv = tl.load(src, mask=ok2, other=0, volatile=True)
                    if SYNC:
                        state = waiting((ok2 & ((wv >> 32).to(tl.int32) != flag))[None, :], deadline)
                        while state == 1:
                            wv = tl.load(src, mask=ok2, other=0, volatile=True)
                            state = waiting((ok2 & ((wv >> 32).to(tl.int32) != flag))[None, :], deadline)
                        if state > 1:
                            report_stall(STALL_REC, STALLED_FLAGS, calls)
                    d = wv.to(tl.int32)
                lo, hi = unpack_pair(d, XDT)
                even += lo
                odd += hi
            h = tl.reshape(tl.join(even, odd), [1, BLOCK_H])
            finish_rows(h, res, wf, (rows64, cols, mask, sc_rows, sc_ok), out, nq, fl, True)
    if SYNC:
        tl.store(CALLS + pid, flag)
