"""One-shot and two-shot Lamport, strategies of the fused all-reduce: rows pushed with the flags in the data
(TensorRT-LLM's Lamport one-shot and two-shot), no barrier and no atomics.

Every 16-bit word is sent inverted (~d, `lamport_word`) into the receiver's buffer, which holds LAMPORT_EMPTY (0x8000)
in every word it is not holding data in, so a word that is not empty is data of this call. The one word whose inverse
is the mark, the NaN 0x7FFF, is sent as the NaN 0x7FFE, so no other bit of any value changes. Two-shot Lamport's
scale words (fp32 >= +0.0 or NaN) use 0x80000000 (-0.0), which no scale is. A 16-bit store lands whole, so a receiver
re-reads its own (local) buffer until no word of the row is empty; after reading it writes the empty mark back (local
stores), so the buffer is empty again for its next use. Each program counts its calls (CALLS[pid], plain load and
store) and takes the buffer half from the parity; the grid is the same G programs in every call of a strategy on a
workspace.

Kernel bodies stay whole: their phases share the rows held in registers and the call's counters, and the row math
they repeat lives in row_math.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

from programs.triton.allreduce.row_math import (
    adopt_residual_out,
    finish_rows,
    one_row,
    piece_of_row,
    residual_rows,
    weight_factor,
)
from programs.triton.allreduce.sync import (
    STALLED_LAMPORT,
    STALLED_LAMPORT2,
    clock_ns,
    pick,
    report_stall,
    waiting,
)

LAMPORT_EMPTY = -32768
LAMPORT_EMPTY32 = -(2**31)
_EMPTY: tl.constexpr = tl.constexpr(LAMPORT_EMPTY)
_EMPTY32: tl.constexpr = tl.constexpr(LAMPORT_EMPTY32)


@triton.jit
def lamport_word(d):
    """The 16-bit word sent for the 16-bit value d: ~d, never LAMPORT_EMPTY (the NaN 0x7FFF goes as the NaN 0x7FFE)."""
    w = (d ^ -1).to(tl.int16)
    return tl.where(w == _EMPTY, _EMPTY + 1, w).to(tl.int16)


@triton.jit
def lamport_value(w):
    """The value of a received 16-bit word (the inverse of lamport_word)."""
    return (w ^ -1).to(tl.int16)


@triton.jit
def lamport_poll(src, mask, EMPTY: tl.constexpr, SYNC: tl.constexpr, watch):
    """Words at src (volatile loads of this GPU's memory) once none where mask holds is EMPTY (SYNC: re-read until
    then, or until the launch's deadline, when the stall is reported (sync.report_stall) and what was read is
    returned; without SYNC, the interpreter's phases, read once). Masked-off words read as -1, the word of a 0 (the
    normalization sums every column). watch = (stall record, deadline, STALLED code, call number)."""
    d = tl.load(src, mask=mask, other=-1, volatile=True)
    if SYNC:
        STALL_REC, deadline, KERNEL, calls = watch
        state = waiting((d == EMPTY) & mask, deadline)
        while state == 1:
            d = tl.load(src, mask=mask, other=-1, volatile=True)
            state = waiting((d == EMPTY) & mask, deadline)
        if state > 1:
            report_stall(STALL_REC, KERNEL, calls)
    return d


@triton.jit
def lamport_take(src, mask, EMPTY: tl.constexpr, SYNC: tl.constexpr, watch):
    """lamport_poll, then the words emptied for the buffer's next use, once every thread of the program has read them.
    A word can sit in several threads' registers (a [1, 1] scale word is held by every thread, a row narrower than
    the program by two or more): each such thread polls its own copy, and a reduction over copies of one element
    does not cross threads, so their loops end independently. The one thread that stores a replicated word's mark
    could empty it while another copy's thread had not yet seen it; that thread would then poll forever. The CTA
    barrier holds the stores until every thread has left its loop."""
    d = lamport_poll(src, mask, EMPTY, SYNC, watch)
    if SYNC:
        tl.debug_barrier()
    tl.store(src, tl.full(d.shape, EMPTY, d.dtype), mask=mask)
    return d


@triton.jit
def lamport_sum(
    X16,
    stride_x16,
    rows64,
    slot64,
    mine,
    half,
    CAP,
    H,
    cols,
    mask,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    XDT,
    SYNC,
    watch,
):
    """fp32 sum in rank order of row rows64: this rank's from x, every peer's from its words at mine[half, peer,
    slot64] (CAP slots a peer), polled until all arrived and then emptied for the buffer's next use."""
    own = tl.load(X16 + rows64 * stride_x16 + cols, mask=mask, other=0)
    acc = tl.zeros(cols.shape, dtype=tl.float32)
    for r in tl.static_range(WORLD):
        if r == RANK:
            d = own
        else:
            d = lamport_value(
                lamport_take(mine + ((half * WORLD + r) * CAP + slot64) * H + cols, mask, _EMPTY, SYNC, watch)
            )
        acc += d.to(XDT, bitcast=True).to(tl.float32)
    return acc


@triton.jit
def one_shot_lamport_kernel(
    X16,
    stride_x16,
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
    TL,
    H,
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
    """One shot: every rank stores its 16-bit rows (as lamport_word sends them) into every peer's receive buffer;
    half of one-shot flags' NVLink bytes. Buffers B_r[half, src, row, H] are double-buffered by call parity: half p is
    written again in call c + 2, which a peer starts only after it received this rank's rows of call c + 1, pushed
    after this rank's call c (and its emptying of half p) ended. The rows' words are pushed in pieces of PIECE words
    by all G programs; row r is received by program r % G, which loads the weight, its own row and the residual
    before it polls."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    calls = tl.load(CALLS + pid)
    half = (calls & 1).to(tl.int64)
    deadline = STALL_NS
    if SYNC:
        deadline = clock_ns() + STALL_NS
    watch = (STALL_REC, deadline, STALLED_LAMPORT, calls)
    if PHASES & 1:  # push this rank's rows to every peer, piece by piece
        per_row = tl.cdiv(H, PIECE)
        for piece in range(pid, T * per_row, nprog):
            row, r64, c = piece_of_row(piece, per_row, PIECE)
            ok = c < H
            d = lamport_word(tl.load(X16 + r64 * stride_x16 + c, mask=ok, other=0))
            for r in tl.static_range(WORLD):
                if r != RANK:
                    dst = pick(r, B0, B1, B2, B3, B4, B5, B6, B7) + ((half * WORLD + RANK) * TL + r64) * H
                    tl.store(dst + c, d, mask=ok)
    if PHASES & 2:
        nq = (inv_h, eps, scale_ub, fp8_max)
        out = (Y, stride_y, SC, RO, stride_ro)
        fl: tl.constexpr = (HAS_W, HAS_RES, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        mine = pick(RANK, B0, B1, B2, B3, B4, B5, B6, B7)
        cols = tl.arange(0, BLOCK_H)[None, :]
        col_ok = cols < H
        wf = weight_factor(W, cols, col_ok, w_off, HAS_W)
        for row in range(pid, T, nprog):
            rows64, mask, sc_rows, sc_ok = one_row(row, col_ok, T)
            res = residual_rows(R, stride_r, rows64, cols, mask, HAS_RES)
            acc = lamport_sum(
                X16, stride_x16, rows64, rows64, mine, half, TL, H, cols, mask, RANK, WORLD, XDT, SYNC, watch
            )
            finish_rows(acc, res, wf, (rows64, cols, mask, sc_rows, sc_ok), out, nq, fl, True)
    if SYNC:
        tl.store(CALLS + pid, calls + 1)


@triton.jit
def two_shot_lamport_kernel(
    X16,
    stride_x16,
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
    G0,
    G1,
    G2,
    G3,
    G4,
    G5,
    G6,
    G7,
    S0,
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    CALLS,
    STALL_REC,
    STALL_NS,
    T,
    TW,
    TWL,
    TL,
    H,
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
    """Two shots (reduce-scatter + all-gather with the norm between, every word sent as one_shot_lamport_kernel
    sends it). Rank r owns rows [r*TW, min(T, (r+1)*TW)).
      A  push every row this rank does not own into its owner's reduce-scatter buffer B_owner[half, src, local row].
      B  for each owned row: poll the peers' rows in its own B (then empty them), sum in rank order with its own row,
         residual, RMSNorm, FP8; write the local outputs and push to every peer's all-gather buffer G[half, row]: the
         FP8 row as pairs of bytes and its scale in S[half, row] (0x80000000 marks an empty scale word), or, with a
         residual, residual_out alone, which the peers normalize themselves (the owner's bits).
      C  for each row another rank owns: poll G (and S) for it, empty them, write the local outputs.
    Per rank it sends (W-1)/W*T*H*2 bytes in A and (W-1)/W*T*H*(1 or 2) in B, where one-shot Lamport sends
    (W-1)*T*H*2.
    Program p takes the owned rows p, p+G, ... in B and the rows p, p+G, ... that others own in C. Reuse follows
    one-shot Lamport's argument: a peer writes half p again in call c + 2 only after its call c + 1 ended, which
    needed this rank's pushes of call c + 1 (every rank's call needs every rank's reduce-scatter rows through the owner
    of row 0), so this rank's call c, with its reads and emptying of half p, had ended."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    calls = tl.load(CALLS + pid)
    half = (calls & 1).to(tl.int64)
    deadline = STALL_NS
    if SYNC:
        deadline = clock_ns() + STALL_NS
    watch = (STALL_REC, deadline, STALLED_LAMPORT2, calls)
    if PHASES & 1:  # reduce-scatter: push the rows other ranks own to their owners
        per_row = tl.cdiv(H, PIECE)
        for piece in range(pid, T * per_row, nprog):
            row, r64, c = piece_of_row(piece, per_row, PIECE)
            owner = row // TW
            ok = (c < H) & (owner != RANK)
            d = lamport_word(tl.load(X16 + r64 * stride_x16 + c, mask=ok, other=0))
            local = tl.cast(row - owner * TW, tl.int64)
            for r in tl.static_range(WORLD):
                if r != RANK:
                    dst = pick(r, B0, B1, B2, B3, B4, B5, B6, B7) + ((half * WORLD + RANK) * TWL + local) * H
                    tl.store(dst + c, d, mask=ok & (owner == r))
    nq = (inv_h, eps, scale_ub, fp8_max)
    out = (Y, stride_y, SC, RO, stride_ro)
    cols = tl.arange(0, BLOCK_H)[None, :]
    col_ok = cols < H
    wf = weight_factor(W, cols, col_ok, w_off, HAS_W)
    c2 = tl.arange(0, BLOCK_H // 2)[None, :]
    ok2 = c2 < H // 2
    if PHASES & 2:  # reduce the owned rows, normalize, quantize, all-gather them
        fl: tl.constexpr = (HAS_W, HAS_RES, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        b_mine = pick(RANK, B0, B1, B2, B3, B4, B5, B6, B7)
        n_own = tl.minimum(T - RANK * TW, TW)
        for local in range(pid, n_own, nprog):
            row = RANK * TW + local
            rows64, mask, sc_rows, sc_ok = one_row(row, col_ok, T)
            res = residual_rows(R, stride_r, rows64, cols, mask, HAS_RES)
            slot64 = tl.cast(local, tl.int64) + tl.zeros([1, 1], dtype=tl.int64)
            acc = lamport_sum(
                X16, stride_x16, rows64, slot64, b_mine, half, TWL, H, cols, mask, RANK, WORLD, XDT, SYNC, watch
            )
            q, scale, ro = finish_rows(acc, res, wf, (rows64, cols, mask, sc_rows, sc_ok), out, nq, fl, False)
            if HAS_RES:
                word = lamport_word(ro.to(tl.int16, bitcast=True))
                ro = lamport_value(word).to(RO.dtype.element_ty, bitcast=True)  # what the peers will hold
                tl.store(RO + rows64 * stride_ro + cols, ro, mask=mask)
                for r in tl.static_range(WORLD):
                    if r != RANK:
                        dst = pick(r, G0, G1, G2, G3, G4, G5, G6, G7) + (half * TL + rows64) * H + cols
                        tl.store(dst, word, mask=mask)
            else:
                b = tl.reshape(q.to(tl.uint8, bitcast=True).to(tl.int32), [BLOCK_H // 2, 2])
                lo, hi = tl.split(b)
                word = lamport_word(tl.reshape(lo | (hi << 8), [1, BLOCK_H // 2]).to(tl.int16))
                s_word = scale.to(tl.int32, bitcast=True)
                for r in tl.static_range(WORLD):
                    if r != RANK:
                        dst = pick(r, G0, G1, G2, G3, G4, G5, G6, G7) + (half * TL + rows64) * H + c2
                        tl.store(dst, word, mask=ok2 & (rows64 < T))
                        s_dst = pick(r, S0, S1, S2, S3, S4, S5, S6, S7) + half * TL + sc_rows
                        tl.store(s_dst, s_word)
    if PHASES & 4:  # all-gather: the rows the peers own
        plain: tl.constexpr = (HAS_W, False, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        g_mine = pick(RANK, G0, G1, G2, G3, G4, G5, G6, G7)
        s_mine = pick(RANK, S0, S1, S2, S3, S4, S5, S6, S7)
        n_skip = tl.maximum(tl.minimum(T - RANK * TW, TW), 0)
        for k in range(pid, T - n_skip, nprog):
            row = tl.where(k < RANK * TW, k, k + n_skip)  # the k-th row this rank does not own
            rows64, mask, sc_rows, sc_ok = one_row(row, col_ok, T)
            if HAS_RES:
                word = lamport_take(g_mine + (half * TL + rows64) * H + cols, mask, _EMPTY, SYNC, watch)
                ro = lamport_value(word).to(RO.dtype.element_ty, bitcast=True)
                adopt_residual_out(ro, wf, (rows64, cols, mask, sc_rows, sc_ok), out, nq, plain)
            else:
                m2 = ok2 & (rows64 < T)
                word = lamport_take(g_mine + (half * TL + rows64) * H + c2, m2, _EMPTY, SYNC, watch)
                v = lamport_value(word).to(tl.int32) & 0xFFFF
                pair = tl.join(v & 0xFF, v >> 8)  # [1, BLOCK_H // 2, 2]: byte 2j, byte 2j + 1
                q = tl.reshape(pair, [1, BLOCK_H]).to(tl.uint8).to(Y.dtype.element_ty, bitcast=True)
                tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
                s_sel = s_mine + half * TL + row + tl.arange(0, 1)[None, :]
                s_word = lamport_take(s_sel, rows64 < T, _EMPTY32, SYNC, watch)
                tl.store(SC + row + tl.arange(0, 1)[None, :], s_word.to(tl.float32, bitcast=True))
    if SYNC:
        tl.store(CALLS + pid, calls + 1)
