"""Two-shot pulled, a strategy of the fused all-reduce: every rank publishes its partial rows in its symmetric input
buffer and the owners pull them over NVLink, with cross-rank barriers (sync.py) between the phases.

Two-shot pulled launches the same grid in every call: G = the SM count, whatever T, so all programs are resident at once
and every program takes part in every call (programs without rows only meet their peers).

Phases (PHASES bit mask; all set on the GPU, with SYNC): A publish the rows other ranks own -> start barrier -> B sum
+ normalize + quantize the owned rows and post them (FP8 rows and scales, or with a residual residual_out alone) in
this rank's symmetric scratch -> middle barrier -> C copy the peers' owned rows from their scratch into the local
outputs (with a residual: copy residual_out and normalize it, the owner's bits).
Start barrier: no rank reads a peer row before the peer wrote it (the start barrier of call k orders program b's
writes of call k before the peers' program b reads of call k). Middle barrier: the same for the owners' results.
Reuse, without an end barrier and without atomics across programs: the symmetric buffers are double-buffered. Call k
uses half k % 2, k being the program's own start-barrier epoch (read once at its start; equal in every program and on
every rank). A rank overwrites half k % 2 again only in call k + 2, which starts after its call k + 1 ended; in call
k + 1 its program b passed the start barrier, so the peers' program b had started call k + 1, so (stream order) every
peer had finished call k and all its reads of that half. Outputs are local. Without SYNC (CPU tests under the
interpreter, ranks simulated in one process) the phases run in separate launches and the counters stay 0.

Rank-order fp32 summation makes every rank compute the same bits, run to run and rank to rank.

Kernel bodies stay whole: their phases share the rows held in registers and the call's counters, and the row math
they repeat lives in row_math.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

from programs.triton.allreduce.row_math import adopt_residual_out, finish_rows, residual_rows, weight_factor
from programs.triton.allreduce.sync import STALLED_PULLED, clock_ns, cross_rank_barrier, pick


@triton.jit
def sum_partials(
    X,
    stride_x,
    I0,
    I1,
    I2,
    I3,
    I4,
    I5,
    I6,
    I7,
    rows64,
    half,
    H,
    cols,
    mask,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """fp32 sum of the ranks' rows in rank order; this rank's own rows come from x, the others' from their buffers."""
    acc = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32)
    for r in tl.static_range(WORLD):
        if r == RANK:
            v = tl.load(X + rows64 * stride_x + cols, mask=mask, other=0.0)
        else:
            v = tl.load(pick(r, I0, I1, I2, I3, I4, I5, I6, I7) + (rows64 + half) * H + cols, mask=mask, other=0.0)
        acc += v.to(tl.float32)
    return acc


@triton.jit
def publish_rows(X, stride_x, mine, rows, mask, half, H, cols):
    """Copy these rows of x into this rank's symmetric input buffer, half `half` (an offset in rows)."""
    rows64 = rows.to(tl.int64)
    tl.store(mine + (rows64 + half) * H + cols, tl.load(X + rows64 * stride_x + cols, mask=mask), mask=mask)


@triton.jit
def two_shot_pulled_kernel(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    SC,
    W,
    I0,
    I1,
    I2,
    I3,
    I4,
    I5,
    I6,
    I7,
    Q0,
    Q1,
    Q2,
    Q3,
    Q4,
    Q5,
    Q6,
    Q7,
    S0,
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    O0,
    O1,
    O2,
    O3,
    O4,
    O5,
    O6,
    O7,
    F0,
    F1,
    F2,
    F3,
    F4,
    F5,
    F6,
    F7,
    EPOCH,
    STALL_REC,
    STALL_NS,
    T,
    TW,
    TMAX,
    H,
    inv_h,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    SYNC: tl.constexpr,
    PHASES: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """Rank r owns rows [r*TW, min(T, (r+1)*TW)); program b handles the same local row blocks of every owner."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)[None, :]
    col_ok = cols < H
    n_blocks = tl.cdiv(TW, BLOCK_M)
    ep = tl.load(EPOCH + pid) + 1
    ep_mid = tl.load(EPOCH + 1024 + pid) + 1
    half = (ep & 1).to(tl.int64) * TMAX
    deadline = STALL_NS
    if SYNC:
        deadline = clock_ns() + STALL_NS
    watch = (STALL_REC, deadline, STALLED_PULLED, ep - 1)  # ep - 1: this program's earlier calls
    nq = (inv_h, eps, scale_ub, fp8_max)
    out = (Y, stride_y, SC, RO, stride_ro)
    if PHASES & 1:  # publish the rows the other ranks own
        mine = pick(RANK, I0, I1, I2, I3, I4, I5, I6, I7)
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            for r in tl.static_range(WORLD):
                if r != RANK:
                    rows = r * TW + local
                    publish_rows(X, stride_x, mine, rows, (local < TW) & (rows < T) & col_ok, half, H, cols)
    wf = weight_factor(W, cols, col_ok, w_off, HAS_W)
    if SYNC:
        cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, pid, ep, RANK, WORLD, watch)
    if PHASES & 2:  # reduce-scatter + normalize + quantize the owned rows, post them for the peers
        fl: tl.constexpr = (HAS_W, HAS_RES, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        q_mine = pick(RANK, Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7)
        s_mine = pick(RANK, S0, S1, S2, S3, S4, S5, S6, S7)
        o_mine = pick(RANK, O0, O1, O2, O3, O4, O5, O6, O7)
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            rows = RANK * TW + local
            mask = (local < TW) & (rows < T) & col_ok
            rows64 = rows.to(tl.int64)
            res = residual_rows(R, stride_r, rows64, cols, mask, HAS_RES)
            h = sum_partials(
                X, stride_x, I0, I1, I2, I3, I4, I5, I6, I7, rows64, half, H, cols, mask, RANK, WORLD, BLOCK_M, BLOCK_H
            )
            l1 = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            r1 = RANK * TW + l1
            ok1 = (l1 < TW) & (r1 < T)
            q, scale, ro = finish_rows(h, res, wf, (rows64, cols, mask, r1, ok1), out, nq, fl, True)
            if HAS_RES:  # the peers take residual_out and normalize it themselves (its 2 bytes, not FP8 + bf16)
                tl.store(o_mine + (rows64 + half) * H + cols, ro, mask=mask)
            else:
                tl.store(q_mine + (rows64 + half) * H + cols, q, mask=mask)
                tl.store(s_mine + half + r1, scale, mask=ok1)
    if SYNC:
        cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, 1024 + pid, ep_mid, RANK, WORLD, watch)
    if PHASES & 4:  # all-gather the rows the peers own
        plain: tl.constexpr = (HAS_W, False, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            l1 = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            for r in tl.static_range(WORLD):
                if r != RANK:
                    rows = r * TW + local
                    mask = (local < TW) & (rows < T) & col_ok
                    rows64 = rows.to(tl.int64)
                    r1 = r * TW + l1
                    ok1 = (l1 < TW) & (r1 < T)
                    if HAS_RES:  # residual_out from its owner; its norm as the owner computed it (same bits)
                        o = tl.load(pick(r, O0, O1, O2, O3, O4, O5, O6, O7) + (rows64 + half) * H + cols, mask=mask)
                        adopt_residual_out(o, wf, (rows64, cols, mask, r1, ok1), out, nq, plain)
                    else:
                        q = tl.load(pick(r, Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7) + (rows64 + half) * H + cols, mask=mask)
                        tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
                        s_r = tl.load(pick(r, S0, S1, S2, S3, S4, S5, S6, S7) + half + r1, mask=ok1)
                        tl.store(SC + r1, s_r, mask=ok1)
