"""The forward's split kernels: rows longer than the registers of one SM cut over co-resident programs, which
exchange per-row partials through global memory (split_exchange.py), so x crosses DRAM once.

`fwd_split_kernel` holds its blocks as elements (any float x, a residual, distributed stats, FP8 output);
`fwd_split_words_kernel` is its form for plain 16-bit rows held as 32-bit words (two values a register), which
leaves room for a fourth stage from 32 chunks a row (FwdConfig.stages): each block is published two steps before it
is finished, and its partials are read before the next block's loads. A row whose exchanged sum leaves fp32's range
is read back whole by each of its programs for row_stats.py's second pass. Kernel bodies stay whole: their stages hand
registers from one step to the next.
"""

import triton
import triton.language as tl

from programs.triton.kernels.row_io import (
    add_residual,
    fp8_recip,
    fp8_scale,
    gathered_stats,
    load_rows,
    load_words,
    store_fp8,
    store_out,
    store_words,
    unpack_words,
    weight_at,
    weight_words,
)
from programs.triton.kernels.row_stats import (
    any_row,
    nan_rows,
    off_range,
    rescale_factor,
    scaled_rstd,
    stats_rstd,
    stored_rstd,
    stored_scaled_stats,
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
def _fwd_split_publish(
    xv,
    rows,
    row_ok,
    mask,
    cols,
    w,
    R,
    stride_r,
    RO,
    stride_ro,
    XSS,
    XMX,
    g,
    XW: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    NEED_AMAX: tl.constexpr,
):
    """First half of a row block in the split kernel: h (x, or x + residual rounded and stored as residual_out), its
    chunk's partials stored and published. Returns h in its storage dtype (fewer registers while it waits)."""
    hn = xv
    h = xv.to(tl.float32)
    if HAS_RES:
        hn = add_residual(h, R, stride_r, RO, stride_ro, rows.to(tl.int64)[:, None], cols, mask)
        h = hn.to(tl.float32)
    if not HAS_STATS:
        split_publish(XSS, rows, row_ok, g, tl.sum(h * h, axis=1), XW)
    if NEED_AMAX:  # no bias (launcher rule): max|h*rs*w| = rs * max|h*w|
        if HAS_W:
            h = h * w[None, :]
        split_publish(XMX, rows, row_ok, g, tl.max(tl.where(mask, tl.abs(h), 0.0), axis=1), XW)
    return hn


@triton.jit
def fwd_split_kernel(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    W,
    B,
    RSIG,
    SC,
    STATS,
    stride_stats,
    n_stats,
    SCALE_IN,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    XSS,
    XMX,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    # A row is cut into SPLITS column chunks, one per program (program = lane * SPLITS + g): each program keeps its
    # chunk of BLOCK_M rows in registers, so x is read from DRAM once however long the row (the looped kernel reads
    # it twice, the second time hoping for L2). The row's sum of squares (and, for FP8 row scales, max|h*w|) is the
    # fixed-order sum (max) of the chunks' partials, exchanged through XSS/XMX. Distributed stats need no exchange.
    # Pipeline, per step: the loads of block k+2 are issued, block k+1's partials published, then block k (published
    # a step earlier, so its peers have usually arrived) is finished: the exchange latency hides behind a step.
    g, lane, lanes, cols, col_ok = split_program(N, SPLITS, CHUNK)
    ar = tl.arange(0, BLOCK_M)
    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    w = tl.zeros([CHUNK], dtype=tl.float32)
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    step = lanes * BLOCK_M
    first_row = lane * BLOCK_M
    rows = first_row + ar
    mask = (rows < M)[:, None] & col_ok[None, :]
    x_a = load_rows(X, stride_x, rows, M, cols, col_ok)
    h_a = _fwd_split_publish(
        x_a,
        rows,
        rows < M,
        mask,
        cols,
        w,
        R,
        stride_r,
        RO,
        stride_ro,
        XSS,
        XMX,
        g,
        XW,
        HAS_W,
        HAS_RES,
        HAS_STATS,
        NEED_AMAX,
    )
    x_b = load_rows(X, stride_x, first_row + step + ar, M, cols, col_ok)
    for start in range(first_row, M, step):
        x_c = load_rows(X, stride_x, start + 2 * step + ar, M, cols, col_ok)
        rows_b = start + step + ar
        mask_b = (rows_b < M)[:, None] & col_ok[None, :]
        h_b = _fwd_split_publish(
            x_b,
            rows_b,
            rows_b < M,
            mask_b,
            cols,
            w,
            R,
            stride_r,
            RO,
            stride_ro,
            XSS,
            XMX,
            g,
            XW,
            HAS_W,
            HAS_RES,
            HAS_STATS,
            NEED_AMAX,
        )
        # finish block k
        rows = start + ar
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        if HAS_STATS:
            ss = gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M)
            rs = stats_rstd(ss, inv_n, eps)
        else:
            ss = split_reduce(XSS, rows, row_ok, SPLITS, XW, False)
            rs = tl.rsqrt(ss * inv_n + eps)
        first = row_ok & (g == 0)  # per-row outputs: written by the row's first chunk
        amax = 0.0
        if NEED_AMAX:
            amax = split_reduce(XMX, rows, row_ok, SPLITS, XW, True) * rs
        if not HAS_STATS:
            # rows past fp32's range: the second pass reads the whole row back (x, and the residual: the other
            # programs' residual_out may not be stored yet), in the same order in every program of the row
            off = off_range(ss * inv_n + eps) & row_ok
            if any_row(off):
                c = rescale_factor(ss * inv_n + eps)
                ss_c, mx_c = stored_scaled_stats(
                    X, stride_x, R, stride_r, RO, W, rows, off, N, c, w_off, BLOCK_M, HAS_RES, HAS_W
                )
                rs_c, r = scaled_rstd(ss_c, c, inv_n, eps)
                rs = tl.where(off, rs_c, rs)
                if NEED_AMAX:
                    amax = tl.where(off, mx_c * r, amax)
            if NEED_AMAX:
                amax = nan_rows(amax, ss, rs)
        if STORE_RSIG:
            tl.store(RSIG + rows, rs, mask=first)
        if OUT_MODE == 1:
            # FP8 row scales: rs / scale as one factor per row, and for one row a plain scalar. Scaling the finished
            # row by 1/scale (scale built from both gathered partials, rs and the row max) made Triton convert it
            # through shared memory (PTX: 4096 shared stores per thread; 17 ms instead of ~0.2;
            # ptx_report.py watches the count)
            scale = fp8_scale(amax, scale_ub, fp8_max)
            tl.store(SC + rows, scale, mask=first)
            f = rs * fp8_recip(scale)
            if BLOCK_M == 1:
                v = h_a.to(tl.float32) * tl.sum(f, axis=0)
            else:
                v = h_a.to(tl.float32) * f[:, None]
            if HAS_W:
                v = v * w[None, :]
            store_fp8(v, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        else:
            v = h_a.to(tl.float32) * rs[:, None]
            if HAS_W:
                v = v * w[None, :]
            if HAS_B:
                v += b[None, :]
            store_out(
                v,
                amax,
                Y,
                stride_y,
                SC,
                SCALE_IN,
                rows,
                r64,
                cols,
                mask,
                first,
                scale_ub,
                fp8_max,
                OUT_MODE,
                Y_DROP,
                Y_MIN_NORMAL,
                Y_SUB,
            )
        h_a = h_b
        x_b = x_c


@triton.jit
def _words_sumsq_publish(xw, rows, M, XSS, g, XW: tl.constexpr, DT: tl.constexpr):
    lo, hi = unpack_words(xw, DT)
    split_publish(XSS, rows, rows < M, g, tl.sum(lo * lo + hi * hi, axis=1), XW)


@triton.jit
def fwd_split_words_kernel(
    X,
    stride_x,
    Y,
    stride_y,
    W,
    RSIG,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    XSS,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    STAGES: tl.constexpr,
    HAS_W: tl.constexpr,
    STORE_RSIG: tl.constexpr,
):
    # fwd_split_kernel for plain rows (x normalized as given, cast output, no bias), with x, y and the weight as
    # 32-bit words (column pair j = word j of the chunk, lo / hi its even / odd column): half the registers of 16-bit
    # elements, so 3 stages hold without the element kernel's spill, and 4 fit: block k+2 published while block k
    # finishes, whose words (published two steps before) are read before the publish, in flight through it.
    # With 3 stages that early read more often finds a peer's word unset and spins.
    DT: tl.constexpr = X.dtype.element_ty
    g, first_row, step, jc, j_ok, ww = split_words_program(N, W, SPLITS, CHUNK, BLOCK_M, HAS_W)
    ar = tl.arange(0, BLOCK_M)
    rows = first_row + ar
    x_a = load_words(X, stride_x, rows, M, jc, j_ok)
    _words_sumsq_publish(x_a, rows, M, XSS, g, XW, DT)
    rows = first_row + step + ar
    x_b = load_words(X, stride_x, rows, M, jc, j_ok)
    x_c = x_b  # the third held block of 4 stages; with 3 never read
    if STAGES == 4:
        _words_sumsq_publish(x_b, rows, M, XSS, g, XW, DT)
        x_c = load_words(X, stride_x, first_row + 2 * step + ar, M, jc, j_ok)
    for start in range(first_row, M, step):
        x_n = load_words(X, stride_x, start + (STAGES - 1) * step + ar, M, jc, j_ok)
        rows_k = start + ar
        row_ok = rows_k < M
        rows = start + (STAGES - 2) * step + ar
        if STAGES == 4:
            word = split_words(XSS, rows_k, row_ok, SPLITS, XW)
            _words_sumsq_publish(x_c, rows, M, XSS, g, XW, DT)
            ss = split_reduce_from(word, XSS, rows_k, row_ok, SPLITS, XW, False)
        else:
            _words_sumsq_publish(x_b, rows, M, XSS, g, XW, DT)
            ss = split_reduce(XSS, rows_k, row_ok, SPLITS, XW, False)
        rs = stored_rstd(ss, inv_n, eps, X, stride_x, X, 0, X, rows_k, row_ok, N, BLOCK_M, False)
        if STORE_RSIG:
            tl.store(RSIG + rows_k, rs, mask=row_ok & (g == 0))
        lo, hi = unpack_words(x_a, DT)
        y_lo = lo * rs[:, None]
        y_hi = hi * rs[:, None]
        if HAS_W:
            w_lo, w_hi = weight_words(ww, W, w_off)
            y_lo = y_lo * w_lo[None, :]
            y_hi = y_hi * w_hi[None, :]
        store_words(Y, stride_y, rows_k, M, jc, j_ok, y_lo, y_hi)
        x_a = x_b
        if STAGES == 4:
            x_b = x_c
            x_c = x_n
        else:
            x_b = x_n
