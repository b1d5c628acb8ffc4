"""Triton kernels of the fused all-reduce + residual + RMSNorm + per-row FP8, reading peer buffers over NVLink.

Every rank launches the same grid G (a function of T only, G <= SM count so all programs are resident at once).
Program b of a rank works on a fixed set of row blocks and meets only program b of the other ranks: the barriers
are per program, never grid-wide.

Barrier (`_cross_rank_barrier`, at each phase boundary): program b of rank i
  1. waits for its own threads' stores to be issued (CTA barrier),
  2. raises flag[slot, i] in every peer's symmetric flag array to its epoch (atomic max, release, system scope),
  3. spins until flag[slot, j] in its own flag array reached the epoch for every peer j (acquire, system scope),
  4. stores the epoch and lets its threads go on (CTA barrier).
The epoch is a per-(rank, slot) counter in ordinary device memory: it counts this program's uses of the slot. Every
rank makes the same sequence of calls with the same grids, so the counters of program b agree on all ranks; nothing
is reset, the flags only grow, and CUDA-graph replays stay correct (no host-side state).

Phases (PHASES bit mask; all set on the GPU, with SYNC):
  one stage: A publish this rank's rows into its symmetric input -> start barrier -> B read every rank's rows, sum in
             fp32 in rank order, residual, RMSNorm, FP8, write the local outputs.
  two stage: A publish the rows other ranks own -> start barrier -> B sum + normalize + quantize the owned rows and
             post them (FP8 rows, scales, residual_out) in this rank's symmetric scratch -> middle barrier -> C copy
             the peers' owned rows from their scratch into the local outputs.
Start barrier: no rank reads a peer row before the peer wrote it (the start barrier of call k orders program b's
writes of call k before the peers' program b reads of call k). Middle barrier: the same for the owners' results.
Reuse, without an end barrier: the symmetric buffers are double-buffered. Call k uses half k % 2, k being a per-rank
call counter on the device (advanced by the last program of each launch, so every program of one launch sees the same
k, and all ranks count the same calls). A rank overwrites half k % 2 again only in call k + 2, which starts after its
call k + 1 ended; call k + 1 passed its start barrier, so every peer had started call k + 1, so (stream order) every
peer had finished call k and all its reads of that half. Outputs are local. Kernels of one call run on every rank
(collective), one program per SM at most, so all programs of a launch are resident together and the spins end.
Without SYNC (CPU tests under the interpreter, ranks simulated in one process) the phases run in separate launches
and the call counter stays 0.

Rank-order fp32 summation makes every rank compute the same bits, run to run and rank to rank.
"""

from __future__ import annotations

import triton
import triton.language as tl

from programs.triton.rmsnorm_fwd import fp8_recip, pre_round

PHASE_A, PHASE_B, PHASE_C = 1, 2, 4
N_SLOTS = 2  # barrier slots per program: start, middle (two stages)
MAX_PROGRAMS = 1024  # flag slots per barrier (the kernels write it as the literal 1024); grids are capped at the SM count
# the per-rank counter array: N_SLOTS * MAX_PROGRAMS epochs, then the call counter (its parity picks the buffer half)
# at 2048 and the finished-programs counter at 2049 (the kernels write these literals)
N_COUNTERS = N_SLOTS * MAX_PROGRAMS + 2


@triton.jit
def _pick(r: tl.constexpr, P0, P1, P2, P3, P4, P5, P6, P7):
    """Rank r's pointer of eight (ranks >= world are None and never picked)."""
    p = P0
    if r == 1:
        p = P1
    if r == 2:
        p = P2
    if r == 3:
        p = P3
    if r == 4:
        p = P4
    if r == 5:
        p = P5
    if r == 6:
        p = P6
    if r == 7:
        p = P7
    return p


@triton.jit
def _cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, slot, RANK: tl.constexpr, WORLD: tl.constexpr):
    ep = tl.load(EPOCH + slot) + 1
    tl.debug_barrier()
    for r in tl.static_range(WORLD):
        if r != RANK:
            peer = _pick(r, F0, F1, F2, F3, F4, F5, F6, F7)
            tl.atomic_max(peer + slot * WORLD + RANK, ep, sem="release", scope="sys")
    mine = _pick(RANK, F0, F1, F2, F3, F4, F5, F6, F7)
    for r in tl.static_range(WORLD):
        if r != RANK:
            seen = tl.atomic_max(mine + slot * WORLD + r, 0, sem="acquire", scope="sys")
            while seen < ep:
                seen = tl.atomic_max(mine + slot * WORLD + r, 0, sem="acquire", scope="sys")
    tl.store(EPOCH + slot, ep)
    tl.debug_barrier()


@triton.jit
def _buffer_half(EPOCH, TMAX):
    """Row offset of this call's half of the double-buffered symmetric buffers (call counter parity)."""
    return (tl.load(EPOCH + 2048) & 1).to(tl.int64) * TMAX


@triton.jit
def _count_call(EPOCH, nprog):
    """The last program of the call to finish advances the call counter: every program of this call read the old
    value at its start, every program of the next launch reads the new one."""
    tl.debug_barrier()
    done = tl.atomic_add(EPOCH + 2049, 1, sem="acq_rel", scope="gpu")
    if done == nprog - 1:
        tl.atomic_xchg(EPOCH + 2049, 0, sem="relaxed", scope="gpu")
        tl.atomic_add(EPOCH + 2048, 1, sem="release", scope="gpu")


@triton.jit
def _sum_partials(X, stride_x, I0, I1, I2, I3, I4, I5, I6, I7, rows64, half, H, cols, mask,
                  RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr):
    """fp32 sum of the ranks' rows in rank order; this rank's own rows come from x, the others' from their buffers."""
    acc = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32)
    for r in tl.static_range(WORLD):
        if r == RANK:
            v = tl.load(X + rows64 * stride_x + cols, mask=mask, other=0.0)
        else:
            v = tl.load(_pick(r, I0, I1, I2, I3, I4, I5, I6, I7) + (rows64 + half) * H + cols, mask=mask, other=0.0)
        acc += v.to(tl.float32)
    return acc


@triton.jit
def _norm_quant(h, R, stride_r, W, rows64, cols, mask, col_ok, inv_h, eps, w_off, scale_ub, fp8_max,
                HAS_W: tl.constexpr, HAS_RES: tl.constexpr, RO_DTYPE: tl.constexpr,
                RO_DROP: tl.constexpr, Y_DTYPE: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr,
                Y_SUB: tl.constexpr):
    """(fp8 rows, per-row scales, residual_out rows) of the fp32 sums h [BLOCK_M, BLOCK_H], as rmsnorm_fwd computes
    them: with a residual the sum is rounded to the residual's dtype, returned, and that rounded value normalized."""
    ro = h
    if HAS_RES:
        h += tl.load(R + rows64 * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        ro = pre_round(h, RO_DROP, 0.0, 0.0).to(RO_DTYPE)
        h = ro.to(tl.float32)
    rs = tl.rsqrt(tl.sum(h * h, axis=1) * inv_h + eps)
    v = h * rs[:, None]
    if HAS_W:
        v = v * (tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + w_off)
    amax = tl.max(tl.where(mask, tl.abs(v), 0.0), axis=1)
    scale = tl.minimum(amax, scale_ub) / fp8_max
    q = tl.minimum(tl.maximum(v * fp8_recip(scale)[:, None], -fp8_max), fp8_max)
    q = pre_round(q, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y_DTYPE)
    return q, scale, ro


@triton.jit
def one_stage_kernel(
    X, stride_x, R, stride_r, RO, stride_ro, Y, stride_y, SC, W,
    I0, I1, I2, I3, I4, I5, I6, I7,
    F0, F1, F2, F3, F4, F5, F6, F7, EPOCH,
    T, TMAX, H, inv_h, eps, w_off, scale_ub, fp8_max,
    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
    HAS_W: tl.constexpr, HAS_RES: tl.constexpr, SYNC: tl.constexpr, PHASES: tl.constexpr,
    RO_DROP: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)[None, :]
    col_ok = cols < H
    n_blocks = tl.cdiv(T, BLOCK_M)
    half = _buffer_half(EPOCH, TMAX)
    if PHASES & 1:
        mine = _pick(RANK, I0, I1, I2, I3, I4, I5, I6, I7)
        for blk in range(pid, n_blocks, nprog):
            rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            mask = (rows < T) & col_ok
            rows64 = rows.to(tl.int64)
            tl.store(mine + (rows64 + half) * H + cols, tl.load(X + rows64 * stride_x + cols, mask=mask), mask=mask)
    if SYNC:
        _cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, pid, RANK, WORLD)
    if PHASES & 2:
        for blk in range(pid, n_blocks, nprog):
            rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            mask = (rows < T) & col_ok
            rows64 = rows.to(tl.int64)
            h = _sum_partials(X, stride_x, I0, I1, I2, I3, I4, I5, I6, I7, rows64, half, H, cols, mask, RANK, WORLD, BLOCK_M, BLOCK_H)
            q, scale, ro = _norm_quant(h, R, stride_r, W, rows64, cols, mask, col_ok, inv_h, eps, w_off, scale_ub, fp8_max,
                                       HAS_W, HAS_RES, RO.dtype.element_ty, RO_DROP, Y.dtype.element_ty, Y_DROP, Y_MIN_NORMAL, Y_SUB)
            tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
            r1 = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            tl.store(SC + r1, scale, mask=r1 < T)
            if HAS_RES:
                tl.store(RO + rows64 * stride_ro + cols, ro, mask=mask)
    if SYNC:
        _count_call(EPOCH, nprog)


@triton.jit
def two_stage_kernel(
    X, stride_x, R, stride_r, RO, stride_ro, Y, stride_y, SC, W,
    I0, I1, I2, I3, I4, I5, I6, I7,
    Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7,
    S0, S1, S2, S3, S4, S5, S6, S7,
    O0, O1, O2, O3, O4, O5, O6, O7,
    F0, F1, F2, F3, F4, F5, F6, F7, EPOCH,
    T, TW, TMAX, H, inv_h, eps, w_off, scale_ub, fp8_max,
    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
    HAS_W: tl.constexpr, HAS_RES: tl.constexpr, SYNC: tl.constexpr, PHASES: tl.constexpr,
    RO_DROP: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr,
):
    """Rank r owns rows [r*TW, min(T, (r+1)*TW)); program b handles the same local row blocks of every owner."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)[None, :]
    col_ok = cols < H
    n_blocks = tl.cdiv(TW, BLOCK_M)
    half = _buffer_half(EPOCH, TMAX)
    if PHASES & 1:  # publish the rows the other ranks own
        mine = _pick(RANK, I0, I1, I2, I3, I4, I5, I6, I7)
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            for r in tl.static_range(WORLD):
                if r != RANK:
                    rows = r * TW + local
                    mask = (local < TW) & (rows < T) & col_ok
                    rows64 = rows.to(tl.int64)
                    tl.store(mine + (rows64 + half) * H + cols, tl.load(X + rows64 * stride_x + cols, mask=mask), mask=mask)
    if SYNC:
        _cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, pid, RANK, WORLD)
    if PHASES & 2:  # reduce-scatter + normalize + quantize the owned rows, post them for the peers
        q_mine = _pick(RANK, Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7)
        s_mine = _pick(RANK, S0, S1, S2, S3, S4, S5, S6, S7)
        o_mine = _pick(RANK, O0, O1, O2, O3, O4, O5, O6, O7)
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            rows = RANK * TW + local
            mask = (local < TW) & (rows < T) & col_ok
            rows64 = rows.to(tl.int64)
            h = _sum_partials(X, stride_x, I0, I1, I2, I3, I4, I5, I6, I7, rows64, half, H, cols, mask, RANK, WORLD, BLOCK_M, BLOCK_H)
            q, scale, ro = _norm_quant(h, R, stride_r, W, rows64, cols, mask, col_ok, inv_h, eps, w_off, scale_ub, fp8_max,
                                       HAS_W, HAS_RES, RO.dtype.element_ty, RO_DROP, Y.dtype.element_ty, Y_DROP, Y_MIN_NORMAL, Y_SUB)
            tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
            tl.store(q_mine + (rows64 + half) * H + cols, q, mask=mask)
            l1 = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            r1 = RANK * TW + l1
            ok1 = (l1 < TW) & (r1 < T)
            tl.store(SC + r1, scale, mask=ok1)
            tl.store(s_mine + half + r1, scale, mask=ok1)
            if HAS_RES:
                tl.store(RO + rows64 * stride_ro + cols, ro, mask=mask)
                tl.store(o_mine + (rows64 + half) * H + cols, ro, mask=mask)
    if SYNC:
        _cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, 1024 + pid, RANK, WORLD)
    if PHASES & 4:  # all-gather the rows the peers own
        for blk in range(pid, n_blocks, nprog):
            local = blk * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
            l1 = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            for r in tl.static_range(WORLD):
                if r != RANK:
                    rows = r * TW + local
                    mask = (local < TW) & (rows < T) & col_ok
                    rows64 = rows.to(tl.int64)
                    q = tl.load(_pick(r, Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7) + (rows64 + half) * H + cols, mask=mask)
                    tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
                    r1 = r * TW + l1
                    ok1 = (l1 < TW) & (r1 < T)
                    tl.store(SC + r1, tl.load(_pick(r, S0, S1, S2, S3, S4, S5, S6, S7) + half + r1, mask=ok1), mask=ok1)
                    if HAS_RES:
                        o = tl.load(_pick(r, O0, O1, O2, O3, O4, O5, O6, O7) + (rows64 + half) * H + cols, mask=mask)
                        tl.store(RO + rows64 * stride_ro + cols, o, mask=mask)
    if SYNC:
        _count_call(EPOCH, nprog)


@triton.jit
def _unpack_pair(d, XDT: tl.constexpr):
    """Two 16-bit activations packed in an int32 (little end first) -> (even, odd) columns in fp32."""
    lo = (d & 0xFFFF).to(tl.int16).to(XDT, bitcast=True).to(tl.float32)
    hi = (d >> 16).to(tl.int16).to(XDT, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def push_one_stage_kernel(
    X32, stride_x32, R, stride_r, RO, stride_ro, Y, stride_y, SC, W,
    B0, B1, B2, B3, B4, B5, B6, B7, EPOCH,
    T, TLL, H, H2, inv_h, eps, w_off, scale_ub, fp8_max,
    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_H: tl.constexpr, XDT: tl.constexpr,
    HAS_W: tl.constexpr, HAS_RES: tl.constexpr, SYNC: tl.constexpr, PHASES: tl.constexpr,
    RO_DROP: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr,
):
    """One stage without a barrier (NCCL's LL idea): every 8-byte word a rank pushes into a peer's receive buffer
    carries 4 bytes of data (two 16-bit activations) and 4 bytes of flag = this call's number + 1. An aligned 8-byte
    store lands whole, so a receiver that sees its call's flag in a word also sees that word's data: it re-reads its
    own (local) receive buffer until every word of the row carries the flag, with no fence and no separate signal.
    The receive buffer B_r[half, src, row, H/2] is double-buffered by call parity like the others (kernels.py top)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    c2 = tl.arange(0, BLOCK_H // 2)
    ok2 = c2 < H2
    calls = tl.load(EPOCH + 2048)
    half = (calls & 1).to(tl.int64)
    flag = calls + 1
    if PHASES & 1:  # push this rank's rows to every peer
        for row in range(pid, T, nprog):
            r64 = tl.cast(row, tl.int64)
            d = tl.load(X32 + r64 * stride_x32 + c2, mask=ok2, other=0)
            word = (d.to(tl.int64) & 0xFFFFFFFF) | (flag.to(tl.int64) << 32)
            for r in tl.static_range(WORLD):
                if r != RANK:
                    dst = _pick(r, B0, B1, B2, B3, B4, B5, B6, B7) + ((half * WORLD + RANK) * TLL + r64) * H2
                    tl.store(dst + c2, word, mask=ok2)
    if PHASES & 2:
        mine = _pick(RANK, B0, B1, B2, B3, B4, B5, B6, B7)
        cols = tl.arange(0, BLOCK_H)[None, :]
        col_ok = cols < H
        for row in range(pid, T, nprog):
            r64 = tl.cast(row, tl.int64)
            even = tl.zeros([BLOCK_H // 2], dtype=tl.float32)
            odd = tl.zeros([BLOCK_H // 2], dtype=tl.float32)
            for r in tl.static_range(WORLD):
                if r == RANK:
                    d = tl.load(X32 + r64 * stride_x32 + c2, mask=ok2, other=0)
                else:
                    src = mine + ((half * WORLD + r) * TLL + r64) * H2 + c2
                    wv = tl.load(src, mask=ok2, other=0, volatile=True)
                    if SYNC:
                        while tl.min(tl.where(ok2, (wv >> 32).to(tl.int32) == flag, True).to(tl.int32), axis=0) == 0:
                            wv = tl.load(src, mask=ok2, other=0, volatile=True)
                    d = wv.to(tl.int32)
                lo, hi = _unpack_pair(d, XDT)
                even += lo
                odd += hi
            h = tl.reshape(tl.join(even, odd), [1, BLOCK_H])
            rows64 = r64 + tl.zeros([1, 1], dtype=tl.int64)
            mask = col_ok & (rows64 < T)
            q, scale, ro = _norm_quant(h, R, stride_r, W, rows64, cols, mask, col_ok, inv_h, eps, w_off, scale_ub, fp8_max,
                                       HAS_W, HAS_RES, RO.dtype.element_ty, RO_DROP, Y.dtype.element_ty, Y_DROP, Y_MIN_NORMAL, Y_SUB)
            tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
            tl.store(SC + row + tl.arange(0, 1), scale)
            if HAS_RES:
                tl.store(RO + rows64 * stride_ro + cols, ro, mask=mask)
    if SYNC:
        _count_call(EPOCH, nprog)
