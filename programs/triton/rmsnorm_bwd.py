"""RMSNorm backward in Triton: dx (+ dresidual), dgamma and dbias from the saved rsigma, dgamma deterministic.

    rmsnorm_bwd(dy, h, weight, rsigma, *, weight_offset=0.0, dresidual=None, need_bias_grad=False, config=None,
                enable_pdl=None) -> (dx, dweight | None, dbias | None)

With xhat = h * rs, g = dy * (w + weight_offset) and c = mean(xhat * g) over the row:
    dx = rs * (g - xhat * c) (+ dresidual, the gradient reaching residual_out), dweight = sum_rows dy * xhat,
    dbias = sum_rows dy.
h is the normalized input (x, or residual_out when the residual add was fused).

dweight/dbias: each program accumulates its rows in fp32 and writes one row of a [programs, N] fp32 buffer; a second
kernel sums that buffer column by column in a fixed order. No atomics: the same inputs give the same bits every run.
With one program (M <= BLOCK_M of the rows kernel) its row is the sum: it is stored in the output dtype and the second
kernel is not launched (two launches took 4.5 us at 1 x 8192, NOTES.md v6). Decode-sized inputs (M <= DECODE_M) take
`_bwd_decode_kernel` by default: one launch whose first M programs write dx row by row while the others sum dweight /
dbias over all rows for their columns, final in one fixed order (NOTES.md v10).
enable_pdl as rmsnorm_fwd takes it: the rows and decode kernels and the partials' sum launch with programmatic
dependent launch (each waits for the kernel before it, then lets the next one launch); the split kernel, whose
programs must all be resident at once, and the interpreter's two-kernel path launch plainly.

Kernels: `_bwd_rows_kernel` (N <= MAX_ROWS_N) is a persistent grid with BLOCK_M whole rows in registers, the next
tile's loads issued before the current tile is reduced. Up to STREAM_ROWS_N it streams instead: one row at a time
with nothing held ahead in registers, the next row asked of the L2 by a bulk prefetch (CUDA).
Longer rows on a GPU: `_bwd_split_kernel` cuts each row into column chunks held by programs resident together, which
exchange their shares of c as flagged words (split_publish / split_reduce), so x and dy cross DRAM once;
`_bwd_split_words_kernel` is that kernel holding 16-bit rows as 32-bit words (two values a register), with a fourth
stage from 32 chunks a row (bwd_config, words_fit). Under the
interpreter (programs run one after another, no exchange possible) longer rows take two kernels: `_bwd_rowdot_kernel`
computes c per row, then `_bwd_cols_kernel` works on column tiles (dx and the dweight partials), reading x and dy a
second time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from programs.triton.checks import TritonRuleError, as_rows, check_activation, check_same_rows, check_vector
from programs.triton.rmsnorm_fwd import (
    LEAN_DRAM_GBPS_PER_SM,
    dependent_launch,
    dram_gbps_per_sm,
    launch_options,
    load_rows,
    load_words,
    resolve_pdl,
    sm_count,
    split_program,
    split_publish,
    split_reduce,
    split_reduce_from,
    split_shape,
    split_words,
    split_words_program,
    store_words,
    unpack_words,
    weight_at,
    weight_words,
    wordable_rows,
    wordable_weight,
)

MAX_ROWS_N = 8192  # x, dy, their prefetched successors and the dweight accumulator all live in registers
STREAM_ROWS_N = 16384  # up to here the rows kernel streams (BwdConfig.stream): no register look-ahead, L2 prefetch
DECODE_M = 32  # the decode kernel's column programs hold all rows of their columns
SPLIT_CHUNK, SPLIT_WARPS = 8192, 16  # longer rows: columns per program of the split kernel (H200 sweep, NOTES.md v6)


@dataclass(frozen=True)
class BwdConfig:
    kernel: str  # "rows" | "cols" | "split" | "decode"
    num_warps: int
    block_m: int = 1
    programs: int = 0  # rows: persistent programs; cols: row groups; split: programs resident together
    block_n: int = 0  # cols: column tile width; split: columns per program; decode: dweight columns per program
    maxnreg: int = 0  # split: registers per thread capped (0: the compiler's choice), e.g. 128 for two programs per SM
    stream: bool = False  # rows: no register look-ahead and the weight re-read each row (N = 16384 at 32 warps)
    l2_ahead: int = 0  # rows: tiles asked of the L2 this many steps past the register look-ahead (CUDA only; 0: none)
    words: bool = False  # split: h, dy, dx and the weight held as 32-bit words of two 16-bit values (words_ok)
    stages: int = 3  # split with words: row blocks in registers; 4 publishes two blocks ahead instead of one


def stream_config(m: int, device, l2_ahead: int = 0) -> BwdConfig:
    """The streaming rows launch (8192 < N <= STREAM_ROWS_N): one row at a time, 32 warps, one program per SM."""
    return BwdConfig("rows", 32, block_m=1, programs=min(m, sm_count(device)), stream=True, l2_ahead=l2_ahead)


def bwd_config(m: int, n: int, device, l2_ok: bool = True, words_ok: bool = False) -> BwdConfig:
    """Launch shape by size, from the H200 sweep in NOTES.md (`benchmark --sweep`): one CTA per SM. l2_ok: the rows
    of h and dy may be bulk-prefetched (16-byte aligned, a 16-byte multiple long; `l2_prefetchable`). words_ok: the
    split kernel may hold its blocks as 32-bit words (`words_fit`)."""
    sms = sm_count(device)
    if m <= DECODE_M and n <= MAX_ROWS_N:
        # one launch, no partials (NOTES.md v10, H200, against the rows kernel + partial sum in the same run):
        # 32 x 8192 3.06 us (6.22), 16 x 8192 2.93 (5.91), 8 x 4096 2.28 (4.83), 1 x 8192 2.43 (2.98). One row: the
        # row program is all the work, so more warps; more rows: 4 warps and 64 column programs measured best.
        if m == 1:
            return BwdConfig("decode", 16, block_n=512)
        return BwdConfig("decode", 4, block_n=max(32, triton.next_power_of_2(n) // 64))
    if n <= MAX_ROWS_N:
        block_n = triton.next_power_of_2(n)
        block_m = max(1, min(8192 // block_n, 8))
        num_warps = 32 if block_n >= 8192 else 16
        gbps = dram_gbps_per_sm(device)
        if block_n >= 4096 and m >= 32 * block_m * sms and gbps is not None and gbps < LEAN_DRAM_GBPS_PER_SM:
            # less DRAM bandwidth per SM needs fewer bytes in flight, and 8 warps reduce a row with fewer barriers.
            # H100 (NOTES.md v15, us): 8192 x 8192 145.2-145.8 against 152.9-153.5 at 32 warps, 16384 x 8192 280.5
            # against 291.2-291.8, 32768 x 4096 278.1-279.5 against 284.9-285.4 at 16; at 16 tiles a program
            # (4096 x 4096, 2048 x 8192) 0.5-1% slower, so from 32 on. H200 lost 5% that way at N = 8192.
            num_warps = 8
        return BwdConfig("rows", num_warps, block_m=block_m, programs=min(triton.cdiv(m, block_m), sms))
    if n <= STREAM_ROWS_N:
        # H200, NOTES.md v12, against the split kernel in the same run: 4096 x 16384 107.7 us (90% of copy) against
        # 126.4 (77%), 8192 x 16384 201.0 against 242.1, 4096 x 12288 91.1 against 113.7, 1024 x 16384 37.9 against
        # 41.4. The L2 look-ahead is worth 4%; at N <= 8192, with the register look-ahead, it measured slower.
        return stream_config(m, device, l2_ahead=1 if device.type == "cuda" and l2_ok else 0)
    if device.type == "cuda":
        # Words (no spill at 3 stages, where 16-bit elements spill 24 bytes under Triton 3.6) measured faster only where
        # a row is cut in a power-of-two number of chunks, and 4 stages only at 32 (NOTES.md v16, us, H200, against
        # the element kernel in the same run): 4096 x 32768 231.4 against 236.7, 2048 x 65536 236.6 against 239.9,
        # 1024 x 131072 237.5 against 243.0, 1024 x 262144 434.5 (4 stages) against 452.3; 3-4% slower at 3, 5, 6,
        # 7, 9, 12 and 24 chunks, the cause not found. H100: 2048 x 65536 291.6 against 298.7, 1024 x 262144 559.7
        # against 566.8, level at 7 chunks.
        splits = triton.cdiv(n, SPLIT_CHUNK)
        words = words_ok and splits & (splits - 1) == 0
        return BwdConfig(
            "split",
            SPLIT_WARPS,
            block_m=1,
            programs=sms,
            block_n=SPLIT_CHUNK,
            words=words,
            stages=4 if words and splits >= 32 else 3,
        )
    block_n = 2048
    groups = max(1, min(triton.cdiv(m, 8), (2 * sms) // triton.cdiv(n, block_n)))
    return BwdConfig("cols", 4, block_m=8, programs=groups, block_n=block_n)


@triton.jit
def l2_prefetch_row(P, row, stride, N):
    """Thread 0 of the CTA asks the L2 for row `row` of P (N elements of P's dtype; Hopper's bulk prefetch, so the row
    16-byte aligned and a 16-byte multiple long: l2_prefetchable): a row still to come gets on its way from DRAM
    without holding registers, and nothing waits for it. Inline PTX, so compiled code only: the interpreter launches
    with L2_AHEAD=0."""
    tl.inline_asm_elementwise(
        asm="{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        constraints="=r,l,r",
        args=[P + tl.cast(row, tl.int64) * stride, N * (P.dtype.element_ty.primitive_bitwidth // 8)],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _store_dx(gw, xhat, c, rs, DX, stride_dx, DRES, stride_dres, r64, cols, mask, HAS_DRES: tl.constexpr):
    """dx = rs * (g - xhat * c) (+ dresidual) for a [BLOCK_M, n] tile, rs and c as [BLOCK_M, 1]."""
    dx = (gw - xhat * c) * rs
    if HAS_DRES:
        dx += tl.load(DRES + r64 * stride_dres + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(DX + r64 * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _store_rows_dx(
    xhat,
    dy,
    w,
    rs,
    inv_n,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    r64,
    cols,
    mask,
    HAS_W: tl.constexpr,
    HAS_DRES: tl.constexpr,
):
    """dx of whole rows held in registers: g = dy * w~, c = mean(xhat * g) over each row, then _store_dx."""
    g = dy
    if HAS_W:
        g = dy * w[None, :]
    _store_dx(
        g,
        xhat,
        tl.sum(xhat * g, axis=1)[:, None] * inv_n,
        rs,
        DX,
        stride_dx,
        DRES,
        stride_dres,
        r64,
        cols,
        mask,
        HAS_DRES,
    )


@triton.jit
def _store_partials(DWP, DBP, row, N, cols, col_ok, dw, db, HAS_W: tl.constexpr, NEED_DB: tl.constexpr):
    """This program's dweight / dbias partials as row `row` of the [programs, N] buffers the column sum reduces, or,
    with one program, as the final vectors in their own dtype."""
    if HAS_W:
        tl.store(DWP + row.to(tl.int64) * N + cols, dw.to(DWP.dtype.element_ty), mask=col_ok)
    if NEED_DB:
        tl.store(DBP + row.to(tl.int64) * N + cols, db.to(DBP.dtype.element_ty), mask=col_ok)


@triton.jit
def _bwd_rows_kernel(
    DY,
    stride_dy,
    H,
    stride_h,
    W,
    RSIG,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    DWP,
    DBP,
    M,
    N,
    inv_n,
    w_off: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    NEED_DB: tl.constexpr,
    HAS_DRES: tl.constexpr,
    STREAM: tl.constexpr,
    L2_AHEAD: tl.constexpr,
    PDL: tl.constexpr = False,
):
    # PDL: the next kernel (the partials' sum) may launch only once this grid is done with its rows: this grid is
    # one CTA an SM, and a launch at its start, as the forwards trigger, put the sum's CTAs, then the next
    # backward's, beside it: 51.3 us against 33.4 launched plainly (H200, 4096 x 4096, NOTES.md v27)
    if PDL:
        gdc_wait()
    # Persistent: one CTA per SM is all the registers allow (x, dy and the dweight accumulator), so the next tile's
    # loads are issued before the current tile is reduced: DRAM stays busy through the reduction and the stores.
    # STREAM (8192 < N <= 16384): that look-ahead beside a held weight spills at 32 warps (ptxas: 176 bytes), so the
    # weight is re-read every row (from L1) and the rows to come are asked of the L2 instead (L2_AHEAD tiles past
    # the register look-ahead, if any; NOTES.md v12).
    # dweight / dbias accumulate per row slot, [BLOCK_M, BLOCK_N], and are summed over the slots once at the end: a
    # sum over the tile's rows in every step (cross-warp, through shared memory) made the backward 3x slower at
    # 65536 x 1024 (NOTES.md v12).
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = tl.zeros([BLOCK_N], dtype=tl.float32)
    if HAS_W and not STREAM:
        w = weight_at(W, cols, col_ok, w_off)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    step = nprog * BLOCK_M
    if not STREAM:
        rows_n = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        h_n = load_rows(H, stride_h, rows_n, M, cols, col_ok)
        dy_n = load_rows(DY, stride_dy, rows_n, M, cols, col_ok)
        rs_n = tl.load(RSIG + rows_n, mask=rows_n < M, other=0.0)
    for start in range(pid * BLOCK_M, M, step):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        if L2_AHEAD > 0:
            ahead = start + (L2_AHEAD + (0 if STREAM else 1)) * step
            for r in tl.static_range(BLOCK_M):
                if ahead + r < M:
                    l2_prefetch_row(H, ahead + r, stride_h, N)
                    l2_prefetch_row(DY, ahead + r, stride_dy, N)
        if STREAM:
            h = load_rows(H, stride_h, rows, M, cols, col_ok).to(tl.float32)
            dy = load_rows(DY, stride_dy, rows, M, cols, col_ok).to(tl.float32)
            rs = tl.load(RSIG + rows, mask=row_ok, other=0.0)[:, None]
            if HAS_W:
                w = weight_at(W, cols, col_ok, w_off)
        else:
            h = h_n.to(tl.float32)
            dy = dy_n.to(tl.float32)
            rs = rs_n[:, None]
            rows_n = rows + step
            h_n = load_rows(H, stride_h, rows_n, M, cols, col_ok)
            dy_n = load_rows(DY, stride_dy, rows_n, M, cols, col_ok)
            rs_n = tl.load(RSIG + rows_n, mask=rows_n < M, other=0.0)
        xhat = h * rs
        # accumulated before dx: dy is then dead across dx's row reduction (STREAM at N = 16384: no spill, ptxas)
        if HAS_W:
            dw += dy * xhat
        if NEED_DB:
            db += dy
        _store_rows_dx(xhat, dy, w, rs, inv_n, DX, stride_dx, DRES, stride_dres, r64, cols, mask, HAS_W, HAS_DRES)
    _store_partials(DWP, DBP, pid, N, cols, col_ok, tl.sum(dw, axis=0), tl.sum(db, axis=0), HAS_W, NEED_DB)
    if PDL:
        gdc_launch_dependents()


@triton.jit
def _bwd_decode_kernel(
    DY,
    stride_dy,
    H,
    stride_h,
    W,
    RSIG,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    DW,
    DB,
    M,
    N,
    inv_n,
    w_off: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    COLS: tl.constexpr,
    HAS_W: tl.constexpr,
    NEED_DB: tl.constexpr,
    HAS_DRES: tl.constexpr,
    PDL: tl.constexpr = False,
):
    if PDL:
        dependent_launch()
    # Few rows (M <= BLOCK_M): programs 0..M-1 each take a whole row's dx; the programs after them each take COLS
    # columns of dweight / dbias over all rows (dweight = sum_rows dy * h * rs needs no row dot), final in their
    # dtype. The two halves do not depend on each other, so one launch does it all: no partials, no second kernel.
    pid = tl.program_id(0)
    if pid < M:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < N
        rows = pid + tl.arange(0, 1)
        mask = col_ok[None, :]
        rs = tl.load(RSIG + rows)[:, None]
        w = tl.zeros([BLOCK_N], dtype=tl.float32)
        if HAS_W:
            w = weight_at(W, cols, col_ok, w_off)
        _store_rows_dx(
            load_rows(H, stride_h, rows, M, cols, col_ok).to(tl.float32) * rs,
            load_rows(DY, stride_dy, rows, M, cols, col_ok).to(tl.float32),
            w,
            rs,
            inv_n,
            DX,
            stride_dx,
            DRES,
            stride_dres,
            rows.to(tl.int64)[:, None],
            cols,
            mask,
            HAS_W,
            HAS_DRES,
        )
    else:  # names of their own: the compiler wants a name's type equal in both branches
        dcols = (pid - M) * COLS + tl.arange(0, COLS)
        dcol_ok = dcols < N
        all_rows = tl.arange(0, BLOCK_M)
        dy = load_rows(DY, stride_dy, all_rows, M, dcols, dcol_ok).to(tl.float32)
        if HAS_W:
            rs_all = tl.load(RSIG + all_rows, mask=all_rows < M, other=0.0)[:, None]
            xhat_all = load_rows(H, stride_h, all_rows, M, dcols, dcol_ok).to(tl.float32) * rs_all
            tl.store(DW + dcols, tl.sum(dy * xhat_all, axis=0).to(DW.dtype.element_ty), mask=dcol_ok)
        if NEED_DB:
            tl.store(DB + dcols, tl.sum(dy, axis=0).to(DB.dtype.element_ty), mask=dcol_ok)


@triton.jit
def _bwd_rowdot_kernel(
    DY, stride_dy, H, stride_h, W, RSIG, C, M, N, inv_n, w_off: tl.constexpr, HAS_W: tl.constexpr, CHUNK: tl.constexpr
):
    """c[row] = mean(xhat * dy * w~) over the row."""
    row = tl.program_id(0)
    r64 = row.to(tl.int64)
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        c = start + cols
        ok = c < N
        h = tl.load(H + r64 * stride_h + c, mask=ok, other=0.0).to(tl.float32)
        g = tl.load(DY + r64 * stride_dy + c, mask=ok, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * weight_at(W, c, ok, w_off)
        acc += h * g
    tl.store(C + row, tl.sum(acc, axis=0) * tl.load(RSIG + row) * inv_n)


@triton.jit
def _bwd_cols_kernel(
    DY,
    stride_dy,
    H,
    stride_h,
    W,
    RSIG,
    C,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    DWP,
    DBP,
    M,
    N,
    w_off: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    NEED_DB: tl.constexpr,
    HAS_DRES: tl.constexpr,
):
    cb = tl.program_id(0)
    grp = tl.program_id(1)
    ngrp = tl.num_programs(1)
    cols = cb * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(grp * BLOCK_M, M, ngrp * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        h = tl.load(H + r64 * stride_h + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + r64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rs = tl.load(RSIG + rows, mask=row_ok, other=0.0)[:, None]
        c = tl.load(C + rows, mask=row_ok, other=0.0)[:, None]
        xhat = h * rs
        if HAS_W:
            g = dy * w[None, :]
        else:
            g = dy
        _store_dx(g, xhat, c, rs, DX, stride_dx, DRES, stride_dres, r64, cols, mask, HAS_DRES)
        if HAS_W:
            dw += tl.sum(dy * xhat, axis=0)
        if NEED_DB:
            db += tl.sum(dy, axis=0)
    _store_partials(DWP, DBP, grp, N, cols, col_ok, dw, db, HAS_W, NEED_DB)


@triton.jit
def _bwd_split_publish(h_n, dy_n, rs, rows, row_ok, w, XDOT, g, XW: tl.constexpr, HAS_W: tl.constexpr):
    """First half of a row block in the split kernel: the chunk's share of sum(xhat * dy * w~), stored and published."""
    gw = dy_n.to(tl.float32)
    if HAS_W:
        gw = gw * w[None, :]
    split_publish(XDOT, rows, row_ok, g, tl.sum(h_n.to(tl.float32) * rs[:, None] * gw, axis=1), XW)


@triton.jit
def _bwd_split_kernel(
    DY,
    stride_dy,
    H,
    stride_h,
    W,
    RSIG,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    DWP,
    DBP,
    M,
    N,
    inv_n,
    w_off: tl.constexpr,
    XDOT,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_W: tl.constexpr,
    NEED_DB: tl.constexpr,
    HAS_DRES: tl.constexpr,
):
    # Long rows, read once: program lane * SPLITS + g keeps column chunk g of its rows in registers, publishes the
    # chunk's share of sum(xhat * g) and sums the row's shares in a fixed order (split_publish /
    # split_reduce), so x and dy cross DRAM once (the cols path reads them twice). Pipelined as the forward split
    # kernel: per step block k+2 is loaded, block k+1 published, block k finished. The program's columns never
    # change, so its dweight partial stays in registers across all its rows and is written once (DWP [lanes, N]).
    g, lane, lanes, cols, col_ok = split_program(N, SPLITS, CHUNK)
    ar = tl.arange(0, BLOCK_M)
    w = tl.zeros([CHUNK], dtype=tl.float32)
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    dw = tl.zeros([CHUNK], dtype=tl.float32)
    db = tl.zeros([CHUNK], dtype=tl.float32)
    step = lanes * BLOCK_M
    first_row = lane * BLOCK_M
    rows = first_row + ar
    h_a = load_rows(H, stride_h, rows, M, cols, col_ok)
    dy_a = load_rows(DY, stride_dy, rows, M, cols, col_ok)
    rs_a = tl.load(RSIG + rows, mask=rows < M, other=0.0)
    _bwd_split_publish(h_a, dy_a, rs_a, rows, rows < M, w, XDOT, g, XW, HAS_W)
    rows = first_row + step + ar
    h_b = load_rows(H, stride_h, rows, M, cols, col_ok)
    dy_b = load_rows(DY, stride_dy, rows, M, cols, col_ok)
    rs_b = tl.load(RSIG + rows, mask=rows < M, other=0.0)
    for start in range(first_row, M, step):
        rows_c = start + 2 * step + ar
        h_c = load_rows(H, stride_h, rows_c, M, cols, col_ok)
        dy_c = load_rows(DY, stride_dy, rows_c, M, cols, col_ok)
        rs_c = tl.load(RSIG + rows_c, mask=rows_c < M, other=0.0)
        rows_b = start + step + ar
        _bwd_split_publish(h_b, dy_b, rs_b, rows_b, rows_b < M, w, XDOT, g, XW, HAS_W)
        # finish block k
        rows = start + ar
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        dy = dy_a.to(tl.float32)
        xhat = h_a.to(tl.float32) * rs_a[:, None]
        gw = dy
        if HAS_W:
            gw = dy * w[None, :]
        c = split_reduce(XDOT, rows, row_ok, SPLITS, XW, False)[:, None] * inv_n
        _store_dx(gw, xhat, c, rs_a[:, None], DX, stride_dx, DRES, stride_dres, r64, cols, mask, HAS_DRES)
        if HAS_W:
            dw += tl.sum(dy * xhat, axis=0)
        if NEED_DB:
            db += tl.sum(dy, axis=0)
        h_a, dy_a, rs_a = h_b, dy_b, rs_b
        h_b, dy_b, rs_b = h_c, dy_c, rs_c
    _store_partials(DWP, DBP, lane, N, cols, col_ok, dw, db, HAS_W, NEED_DB)


@triton.jit
def _words_g(dyw, w_lo, w_hi, DT: tl.constexpr, HAS_W: tl.constexpr):
    """(g_lo, g_hi, dy_lo, dy_hi): dy unpacked and g = dy * w~."""
    dy_lo, dy_hi = unpack_words(dyw, DT)
    if HAS_W:
        return dy_lo * w_lo[None, :], dy_hi * w_hi[None, :], dy_lo, dy_hi
    return dy_lo, dy_hi, dy_lo, dy_hi


@triton.jit
def _words_split_publish(
    hw,
    dyw,
    rs,
    rows,
    w_lo,
    w_hi,
    XDOT,
    g,
    M,
    XW: tl.constexpr,
    DT: tl.constexpr,
    DYT: tl.constexpr,
    HAS_W: tl.constexpr,
):
    """_bwd_split_publish of a block held as words."""
    h_lo, h_hi = unpack_words(hw, DT)
    g_lo, g_hi, _, _ = _words_g(dyw, w_lo, w_hi, DYT, HAS_W)
    split_publish(XDOT, rows, rows < M, g, tl.sum(h_lo * g_lo + h_hi * g_hi, axis=1) * rs, XW)


@triton.jit
def _bwd_split_words_kernel(
    DY,
    stride_dy,
    H,
    stride_h,
    W,
    RSIG,
    DX,
    stride_dx,
    DRES,
    stride_dres,
    DWP,
    DBP,
    M,
    N,
    inv_n,
    w_off: tl.constexpr,
    XDOT,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    STAGES: tl.constexpr,
    HAS_W: tl.constexpr,
):
    # _bwd_split_kernel's exchange, with h, dy, dx and the weight as 32-bit words (column pair j = word j of the
    # chunk, lo / hi its even / odd column): half the registers of 16-bit elements, which Triton holds one a
    # register, so 3 stages fit 128 registers without spill, and 4 at 32 chunks (ptxas: none under Triton 3.6, 8
    # bytes under 3.8). 4 stages publish block k+2 while block k finishes: its peers published block k two steps
    # before, so a lane of many programs (32 at N = 262144) waits less on its slowest, and its words are read before
    # the publish (NOTES.md v16). No dbias, no dresidual (words_fit).
    DT: tl.constexpr = H.dtype.element_ty
    DYT: tl.constexpr = DY.dtype.element_ty
    g, first_row, step, jc, j_ok, ww = split_words_program(N, W, SPLITS, CHUNK, BLOCK_M, HAS_W)
    lane = first_row // BLOCK_M
    dw_lo = tl.zeros([CHUNK // 2], dtype=tl.float32)
    dw_hi = tl.zeros([CHUNK // 2], dtype=tl.float32)
    ar = tl.arange(0, BLOCK_M)
    # prologue: blocks 0 .. STAGES - 2 loaded, 0 .. STAGES - 3 published
    w_lo, w_hi = weight_words(ww, W, w_off)
    rows = first_row + ar
    h_a = load_words(H, stride_h, rows, M, jc, j_ok)
    dy_a = load_words(DY, stride_dy, rows, M, jc, j_ok)
    rs_a = tl.load(RSIG + rows, mask=rows < M, other=0.0)
    _words_split_publish(h_a, dy_a, rs_a, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
    rows = first_row + step + ar
    h_b = load_words(H, stride_h, rows, M, jc, j_ok)
    dy_b = load_words(DY, stride_dy, rows, M, jc, j_ok)
    rs_b = tl.load(RSIG + rows, mask=rows < M, other=0.0)
    h_c, dy_c, rs_c = h_b, dy_b, rs_b  # the third held block of 4 stages; with 3 never read
    if STAGES == 4:
        _words_split_publish(h_b, dy_b, rs_b, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
        rows = first_row + 2 * step + ar
        h_c = load_words(H, stride_h, rows, M, jc, j_ok)
        dy_c = load_words(DY, stride_dy, rows, M, jc, j_ok)
        rs_c = tl.load(RSIG + rows, mask=rows < M, other=0.0)
    for start in range(first_row, M, step):
        rows = start + (STAGES - 1) * step + ar
        h_n = load_words(H, stride_h, rows, M, jc, j_ok)
        dy_n = load_words(DY, stride_dy, rows, M, jc, j_ok)
        rs_n = tl.load(RSIG + rows, mask=rows < M, other=0.0)
        # the weight unpacked again each step: held as words it leaves the registers 4 stages need
        w_lo, w_hi = weight_words(ww, W, w_off)
        rows_k = start + ar
        row_ok = rows_k < M
        rows = start + (STAGES - 2) * step + ar
        if STAGES == 4:
            # block k's words were published two steps ago: read first, they are in flight through the publish
            word = split_words(XDOT, rows_k, row_ok, SPLITS, XW)
            _words_split_publish(h_c, dy_c, rs_c, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
            c = split_reduce_from(word, XDOT, rows_k, row_ok, SPLITS, XW, False)[:, None] * inv_n
        else:
            # one step ago: read after the publish (read before it, it more often finds a peer's word unset and
            # spins; 300.5 us against 236.6 at 2048 x 65536, NOTES.md v16)
            _words_split_publish(h_b, dy_b, rs_b, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
            c = split_reduce(XDOT, rows_k, row_ok, SPLITS, XW, False)[:, None] * inv_n
        # finish block k
        rows = rows_k
        h_lo, h_hi = unpack_words(h_a, DT)
        g_lo, g_hi, dy_lo, dy_hi = _words_g(dy_a, w_lo, w_hi, DYT, HAS_W)
        rs = rs_a[:, None]
        x_lo = h_lo * rs
        x_hi = h_hi * rs
        store_words(DX, stride_dx, rows, M, jc, j_ok, (g_lo - x_lo * c) * rs, (g_hi - x_hi * c) * rs)
        if HAS_W:
            dw_lo += tl.sum(dy_lo * x_lo, axis=0)
            dw_hi += tl.sum(dy_hi * x_hi, axis=0)
        h_a, dy_a, rs_a = h_b, dy_b, rs_b
        if STAGES == 4:
            h_b, dy_b, rs_b = h_c, dy_c, rs_c
            h_c, dy_c, rs_c = h_n, dy_n, rs_n
        else:
            h_b, dy_b, rs_b = h_n, dy_n, rs_n
    _store_partials(DWP, DBP, lane, N, 2 * jc, j_ok, dw_lo, dw_lo, HAS_W, False)
    _store_partials(DWP, DBP, lane, N, 2 * jc + 1, j_ok, dw_hi, dw_hi, HAS_W, False)


@triton.jit
def _sum_partials_kernel(P, OUT, G, N, BLOCK_G: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """OUT[n] = sum over g of P[g, n]: BLOCK_G partial rows per step, summed by a fixed tree, steps in order.

    A fixed order either way (same bits every run); BLOCK_G rows per load keep ~G/BLOCK_G dependent L2 round trips
    instead of G (one row at a time cost ~30 us per backward on H200 at G = 132)."""
    if PDL:  # P is the kernel before's output
        dependent_launch()
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < N
    rg = tl.arange(0, BLOCK_G)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(tl.cdiv(G, BLOCK_G)):
        g = i * BLOCK_G + rg
        tile = tl.load(P + g.to(tl.int64)[:, None] * N + cols[None, :], mask=(g < G)[:, None] & ok[None, :], other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(OUT + cols, acc.to(OUT.dtype.element_ty), mask=ok)


def l2_prefetchable(*rows: torch.Tensor) -> bool:
    """Whether every row of these [M, N] tensors starts 16-byte aligned and is a 16-byte multiple long, as the bulk
    prefetch (l2_prefetch_row) requires."""
    return all(
        t.data_ptr() % 16 == 0
        and (t.stride(0) * t.element_size()) % 16 == 0
        and (t.shape[1] * t.element_size()) % 16 == 0
        for t in rows
    )


def words_fit(h2: torch.Tensor, dy2: torch.Tensor, dx2: torch.Tensor, weight, need_bias_grad: bool, dresidual) -> bool:
    """Whether the split kernel may hold its blocks as 32-bit words (_bwd_split_words_kernel): the rows of h, dy and
    dx wordable (wordable_rows: 16-bit, N, row strides and bases even), the weight absent or 16-bit on a 4-byte
    boundary, no dbias and no dresidual (their accumulator and loads would not fit beside 4 stages)."""
    return (
        wordable_rows(h2)
        and wordable_rows(dy2)
        and wordable_rows(dx2)
        and not need_bias_grad
        and dresidual is None
        and wordable_weight(weight)
    )


def _reduce(partials: torch.Tensor, dtype, pdl: bool = False) -> torch.Tensor:
    g, n = partials.shape
    out = torch.empty(n, dtype=dtype, device=partials.device)
    block = min(128, triton.next_power_of_2(n))
    block_g = min(32, triton.next_power_of_2(g))
    _sum_partials_kernel[(triton.cdiv(n, block),)](
        partials,
        out,
        g,
        n,
        BLOCK_G=block_g,
        BLOCK=block,
        PDL=pdl,
        num_warps=4,
        **launch_options(partials.device, pdl=pdl),
    )
    return out


def rmsnorm_bwd(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rsigma: torch.Tensor,
    *,
    weight_offset: float = 0.0,
    dresidual: torch.Tensor | None = None,
    need_bias_grad: bool = False,
    bias_dtype: torch.dtype | None = None,
    config: BwdConfig | None = None,
    enable_pdl: bool | None = None,
):
    """(dx, dweight, dbias) of RMSNorm (module docstring). dx has h's dtype, dweight weight's, dbias bias_dtype."""
    check_activation(h, "h")
    check_same_rows(dy, h, "dy")
    check_same_rows(dresidual, h, "dresidual")
    n = h.shape[-1]
    check_vector(weight, n, "weight", h.device)
    h2, dy2 = as_rows(h, "h"), as_rows(dy, "dy")
    m = h2.shape[0]
    if (
        rsigma.dtype != torch.float32
        or rsigma.numel() != m
        or rsigma.device != h.device
        or (m > 1 and rsigma.stride(-1) != 1)
    ):
        raise TritonRuleError(
            "rsigma.shape",
            f"rsigma must be the forward's contiguous float32 [{m}]",
            (tuple(rsigma.shape), rsigma.dtype),
            "rmsnorm_fwd(..., return_rsigma=True).rsigma",
        )
    rsig = rsigma.reshape(m)
    pdl = resolve_pdl(h.device, enable_pdl)
    dx = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    dx2 = dx.view(-1, n)
    dr2 = as_rows(dresidual, "dresidual") if dresidual is not None else None
    l2_ok = l2_prefetchable(h2, dy2)
    words_ok = words_fit(h2, dy2, dx2, weight, need_bias_grad, dr2)
    cfg = config or bwd_config(m, n, h.device, l2_ok, words_ok)
    if (cfg.stream or cfg.l2_ahead) and cfg.kernel != "rows":
        raise TritonRuleError(
            "config.stream", "stream and l2_ahead are options of the rows kernel", cfg, "stream=False, l2_ahead=0"
        )
    if cfg.l2_ahead and (h.device.type != "cuda" or not l2_ok):
        raise TritonRuleError(
            "config.l2_ahead",
            "the L2 look-ahead is a bulk prefetch in inline PTX: CUDA only, rows 16-byte aligned and a 16-byte multiple long",
            (h.device.type, tuple(h2.stride()), n, h.dtype),
            "l2_ahead=0",
        )
    if cfg.words and (cfg.kernel != "split" or not words_ok or cfg.block_n < 2):
        raise TritonRuleError(
            "config.words",
            "words are the split kernel's (chunk >= 2), for 16-bit h and dy with N, the row strides and the bases even, a 16-bit weight on a 4-byte boundary or none, no dbias and no dresidual",
            f"kernel {cfg.kernel}, chunk {cfg.block_n}, h {h.dtype}, dy {dy.dtype}, weight {None if weight is None else weight.dtype}, N {n}, strides {h2.stride(0)}/{dy2.stride(0)}, dbias {need_bias_grad}, dresidual {dr2 is not None}",
            "words=False",
        )
    if cfg.stages != 3 and not (cfg.words and cfg.stages == 4):
        raise TritonRuleError(
            "config.stages",
            "the element split kernel holds 3 row blocks; the words kernel 3 or 4",
            (cfg.stages, cfg.words),
            "stages=3",
        )
    groups = max(1, cfg.programs or 1)
    if cfg.kernel == "split":
        splits, xw, groups = split_shape(m, n, cfg.block_n, cfg.block_m, cfg.programs, h.device)
    if cfg.kernel == "decode" and (m > DECODE_M or n > MAX_ROWS_N):
        raise TritonRuleError(
            "config.decode",
            f"the decode kernel holds a whole row per program and all rows per column program: M <= {DECODE_M}, N <= {MAX_ROWS_N}",
            (m, n),
            "config=None",
        )
    # one program, or column programs over all rows (decode): the result is stored in its own dtype (module docstring)
    final = groups == 1 or cfg.kernel == "decode"
    db_dtype = bias_dtype or h.dtype

    def partials(dtype):
        return torch.empty((n,) if final else (groups, n), dtype=dtype if final else torch.float32, device=h.device)

    dwp = partials(weight.dtype) if weight is not None else None
    dbp = partials(db_dtype) if need_bias_grad else None
    dummy = h2
    common = dict(HAS_W=weight is not None, NEED_DB=need_bias_grad, HAS_DRES=dr2 is not None)
    # the rows, decode and split kernels take the same leading arguments
    args = (
        dy2,
        dy2.stride(0),
        h2,
        h2.stride(0),
        weight if weight is not None else dummy,
        rsig,
        dx2,
        dx2.stride(0),
        dr2 if dr2 is not None else dummy,
        dr2.stride(0) if dr2 is not None else 0,
        dwp if dwp is not None else dummy,
        dbp if dbp is not None else dummy,
        m,
        n,
        1.0 / n,
        float(weight_offset),
    )
    if m > 0:
        if cfg.kernel == "rows":
            _bwd_rows_kernel[(groups,)](
                *args,
                BLOCK_M=cfg.block_m,
                BLOCK_N=triton.next_power_of_2(n),
                STREAM=cfg.stream,
                L2_AHEAD=cfg.l2_ahead,
                PDL=pdl,
                num_warps=cfg.num_warps,
                **launch_options(h.device, pdl=pdl),
                **common,
            )
        elif cfg.kernel == "decode":
            _bwd_decode_kernel[(m + triton.cdiv(n, cfg.block_n),)](
                *args,
                BLOCK_M=triton.next_power_of_2(m),
                BLOCK_N=triton.next_power_of_2(n),
                COLS=cfg.block_n,
                PDL=pdl,
                num_warps=cfg.num_warps,
                **launch_options(h.device, pdl=pdl),
                **common,
            )
        elif cfg.kernel == "cols":
            c = torch.empty(m, dtype=torch.float32, device=h.device)
            _bwd_rowdot_kernel[(m,)](
                dy2,
                dy2.stride(0),
                h2,
                h2.stride(0),
                weight if weight is not None else dummy,
                rsig,
                c,
                m,
                n,
                1.0 / n,
                float(weight_offset),
                HAS_W=weight is not None,
                CHUNK=min(4096, triton.next_power_of_2(n)),
                num_warps=8,
            )
            _bwd_cols_kernel[(triton.cdiv(n, cfg.block_n), groups)](
                dy2,
                dy2.stride(0),
                h2,
                h2.stride(0),
                weight if weight is not None else dummy,
                rsig,
                c,
                dx2,
                dx2.stride(0),
                dr2 if dr2 is not None else dummy,
                dr2.stride(0) if dr2 is not None else 0,
                dwp if dwp is not None else dummy,
                dbp if dbp is not None else dummy,
                m,
                n,
                float(weight_offset),
                BLOCK_M=cfg.block_m,
                BLOCK_N=cfg.block_n,
                num_warps=cfg.num_warps,
                **common,
            )
        elif cfg.kernel == "split":
            xdot = torch.zeros(m * xw, dtype=torch.int64, device=h.device)  # exchange words, unflagged (split_publish)
            split = dict(
                SPLITS=splits,
                XW=xw,
                CHUNK=cfg.block_n,
                BLOCK_M=cfg.block_m,
                num_warps=cfg.num_warps,
                **launch_options(h.device, splits, cfg.maxnreg),
            )
            if cfg.words:
                _bwd_split_words_kernel[(splits * groups,)](
                    *args, xdot, STAGES=cfg.stages, HAS_W=weight is not None, **split
                )
            else:
                _bwd_split_kernel[(splits * groups,)](*args, xdot, **split, **common)
        else:
            raise TritonRuleError(
                "config.kernel", "config.kernel must be 'rows', 'cols', 'split' or 'decode'", cfg.kernel, "config=None"
            )
    else:
        if dwp is not None:
            dwp.zero_()
        if dbp is not None:
            dbp.zero_()
    if final:
        return dx, dwp, dbp
    dw = _reduce(dwp, weight.dtype, pdl) if weight is not None else None
    db = _reduce(dbp, db_dtype, pdl) if need_bias_grad else None
    return dx, dw, db
