"""The backward's Triton kernels.

`bwd_rows_kernel` (N <= MAX_ROWS_N) is a persistent grid with BLOCK_M whole rows in registers, the next tile's loads
issued before the current tile is reduced. Up to STREAM_ROWS_N it streams instead: one row at a time with nothing
held ahead in registers, the next row asked of the L2 by a bulk prefetch (CUDA). `bwd_decode_kernel` serves decode
sizes in one launch: its first M programs write dx row by row while the others sum dweight / dbias over all rows for
their columns. Longer rows on a GPU: `bwd_split_kernel` cuts each row into column chunks held by programs resident
together, which exchange their shares of c as flagged words (split_exchange.py), so h and dy cross DRAM once;
`bwd_split_words_kernel` is that kernel holding 16-bit rows as 32-bit words (two values a register), with a fourth
stage from 32 chunks a row. Under the interpreter (programs run one after another, no exchange possible) longer
rows take two kernels: `bwd_rowdot_kernel` computes c per row, then `bwd_cols_kernel` works on column tiles (dx
and the dweight partials), reading h and dy a second time. `sum_partials_kernel` sums the per-program dweight /
dbias partials column by column in a fixed order.

Kernel bodies stay whole: their stages hand registers from one step to the next. The launches come from
backward_config.py, the launcher is backward.py.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from programs.triton.kernels.row_io import (
    dependent_launch,
    load_rows,
    load_words,
    store_words,
    unpack_words,
    weight_at,
    weight_words,
)
from programs.triton.kernels.split_exchange import (
    split_program,
    split_publish,
    split_reduce,
    split_reduce_from,
    split_words,
    split_words_program,
)


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
def bwd_rows_kernel(
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
    # backward's, beside it: 51.3 us against 33.4 launched plainly (H200, 4096 x 4096)
    if PDL:
        gdc_wait()
    # Persistent: one CTA per SM is all the registers allow (x, dy and the dweight accumulator), so the next tile's
    # loads are issued before the current tile is reduced: DRAM stays busy through the reduction and the stores.
    # STREAM (8192 < N <= 16384): that look-ahead beside a held weight spills at 32 warps (ptxas: 176 bytes), so the
    # weight is re-read every row (from L1) and the rows to come are asked of the L2 instead (L2_AHEAD tiles past
    # the register look-ahead, if any).
    # dweight / dbias accumulate per row slot, [BLOCK_M, BLOCK_N], and are summed over the slots once at the end: a
    # sum over the tile's rows in every step (cross-warp, through shared memory) made the backward 3x slower at
    # 65536 x 1024.
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
def bwd_decode_kernel(
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
def bwd_rowdot_kernel(
    DY, stride_dy, H, stride_h, W, RSIG, C, M, N, inv_n, w_off: tl.constexpr, HAS_W: tl.constexpr, CHUNK: tl.constexpr
):
    """c[row] = mean(xhat * dy * w~) over the row."""
    row = tl.program_id(0)
    r64 = row.to(tl.int64)
    rs = tl.load(RSIG + row)
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        c = start + cols
        ok = c < N
        h = tl.load(H + r64 * stride_h + c, mask=ok, other=0.0).to(tl.float32)
        g = tl.load(DY + r64 * stride_dy + c, mask=ok, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * weight_at(W, c, ok, w_off)
        acc += h * rs * g  # xhat first: h * g can pass fp32's range in rows near its maximum
    tl.store(C + row, tl.sum(acc, axis=0) * inv_n)


@triton.jit
def bwd_cols_kernel(
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
def _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, cols, col_ok, WORDS: tl.constexpr):
    """A row block of the split backwards, as both kernels hold it: h and dy (as elements, or as 32-bit words of two
    columns if WORDS) and rsigma."""
    if WORDS:
        h = load_words(H, stride_h, rows, M, cols, col_ok)
        dy = load_words(DY, stride_dy, rows, M, cols, col_ok)
    else:
        h = load_rows(H, stride_h, rows, M, cols, col_ok)
        dy = load_rows(DY, stride_dy, rows, M, cols, col_ok)
    return h, dy, tl.load(RSIG + rows, mask=rows < M, other=0.0)


@triton.jit
def _bwd_split_publish(h_n, dy_n, rs, rows, row_ok, w, XDOT, g, XW: tl.constexpr, HAS_W: tl.constexpr):
    """First half of a row block in the split kernel: the chunk's share of sum(xhat * dy * w~), stored and published."""
    gw = dy_n.to(tl.float32)
    if HAS_W:
        gw = gw * w[None, :]
    split_publish(XDOT, rows, row_ok, g, tl.sum(h_n.to(tl.float32) * rs[:, None] * gw, axis=1), XW)


@triton.jit
def bwd_split_kernel(
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
    h_a, dy_a, rs_a = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, cols, col_ok, False)
    _bwd_split_publish(h_a, dy_a, rs_a, rows, rows < M, w, XDOT, g, XW, HAS_W)
    rows = first_row + step + ar
    h_b, dy_b, rs_b = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, cols, col_ok, False)
    for start in range(first_row, M, step):
        rows_c = start + 2 * step + ar
        h_c, dy_c, rs_c = _split_block(H, stride_h, DY, stride_dy, RSIG, rows_c, M, cols, col_ok, False)
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
    """_bwd_split_publish of a block held as words: the chunk's share of sum(xhat * g), xhat = h * rs taken first
    (h * g can pass fp32's range in rows near its maximum, or lose bits to underflow in tiny rows)."""
    h_lo, h_hi = unpack_words(hw, DT)
    g_lo, g_hi, _, _ = _words_g(dyw, w_lo, w_hi, DYT, HAS_W)
    r = rs[:, None]
    dot = tl.sum(h_lo * r * g_lo + h_hi * r * g_hi, axis=1)
    split_publish(XDOT, rows, rows < M, g, dot, XW)


@triton.jit
def bwd_split_words_kernel(
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
    # bwd_split_kernel's exchange, with h, dy, dx and the weight as 32-bit words (column pair j = word j of the
    # chunk, lo / hi its even / odd column): half the registers of 16-bit elements, which Triton holds one a
    # register, so 3 stages fit 128 registers without spill, and 4 at 32 chunks (ptxas: none under Triton 3.6, 8
    # bytes under 3.8). 4 stages publish block k+2 while block k finishes: its peers published block k two steps
    # before, so a lane of many programs (32 at N = 262144) waits less on its slowest, and its words are read before
    # the publish. No dbias, no dresidual (words_fit).
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
    h_a, dy_a, rs_a = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, jc, j_ok, True)
    _words_split_publish(h_a, dy_a, rs_a, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
    rows = first_row + step + ar
    h_b, dy_b, rs_b = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, jc, j_ok, True)
    h_c, dy_c, rs_c = h_b, dy_b, rs_b  # the third held block of 4 stages; with 3 never read
    if STAGES == 4:
        _words_split_publish(h_b, dy_b, rs_b, rows, w_lo, w_hi, XDOT, g, M, XW, DT, DYT, HAS_W)
        rows = first_row + 2 * step + ar
        h_c, dy_c, rs_c = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, jc, j_ok, True)
    for start in range(first_row, M, step):
        rows = start + (STAGES - 1) * step + ar
        h_n, dy_n, rs_n = _split_block(H, stride_h, DY, stride_dy, RSIG, rows, M, jc, j_ok, True)
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
            # spins; 300.5 us against 236.6 at 2048 x 65536)
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
def sum_partials_kernel(P, OUT, G, N, BLOCK_G: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
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
