"""The forward's Triton kernels that hold rows whole or walk them in chunks, and the distributed pre-stats kernel.

`fwd_rows_kernel` keeps BLOCK_M whole rows in registers (N <= MAX_ROWS_N: one read of x, one write of y); at decode
sizes it cuts rows into column slices, one program each, every program summing the whole row itself.
`fwd_looped_kernel` serves longer rows: a persistent grid, one row at a time in CHUNK-wide pieces, a stats pass that
keeps the row in L2 (evict_last) and a normalize pass in reverse order that reads it back from there (evict_first), so
DRAM sees about one read and one write. Launched a row a program with the normalize pass in order, it is also the
two-pass form of tall tensors of plain 16-bit rows (TWO_PASS_N). With stats given (distributed post) there is no
stats pass. For 16-bit rows up to 65536 columns without a residual its stats pass is one load of the whole row as
32-bit words (FwdConfig.words); an FP8 row max then takes a pass of its own over the row in L2.
`row_sumsq_kernel`: each row's sum of squares in float64, the distributed pre-stats.

Each row's rstd follows row_stats.py's rule (a second pass for the rows whose fp32 sum of squares leaves fp32's
range; FP8 row maxima as float64 takes them). Each kernel body stays one function: its phases share live values (the
row in registers, the prefetched chunk), and the argument lists are the launcher's (forward.py). The launch shapes come
from forward_config.py.
"""

import triton
import triton.language as tl

from programs.triton.kernels.row_io import (
    add_residual,
    dependent_launch,
    fp8_quantize,
    fp8_recip,
    fp8_scale,
    gathered_stats,
    plus_offset,
    pre_round,
    residual_sum,
    row_words_sumsq,
    store_out,
    vector_at,
    weight_at,
)
from programs.triton.kernels.row_stats import (
    any_row,
    nan_rows,
    off_range,
    opaque_program_id,
    rescale_factor,
    restore_rows,
    scaled_rstd,
    stats_rstd,
    stored_scaled_stats,
)


@triton.jit
def _sum_max(a0, a1, b0, b1):  # combine of the (sum of squares, max|h*w|) reduction
    return a0 + b0, tl.maximum(a1, b1)


@triton.jit
def fwd_rows_kernel(
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLICES: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    PDL: tl.constexpr = False,
    JOINT_MAX: tl.constexpr = False,
    GPU: tl.constexpr = True,
):
    if PDL:
        dependent_launch()
    # SLICES > 1 (decode): SLICES programs per row block, each writing BLOCK_N columns of it. Each takes the row's sum
    # (and row max) over the whole row itself, the other slices' bytes coming again from L2, so no program waits on
    # another and a row's latency is that of a smaller CTA (H100, 1 x 8192).
    pid = tl.program_id(0)
    rows = (pid // SLICES) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % SLICES) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)[:, None]
    # weight and bias first: their loads overlap x's instead of waiting behind the row reduction (decode latency)
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)

    h = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        h = add_residual(h, R, stride_r, RO, stride_ro, r64, cols, mask).to(tl.float32)

    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    if SLICES > 1 and (NEED_AMAX or not HAS_STATS):
        # the whole row, h as residual_sum rounds it (add_residual stored only this program's slice of residual_out)
        full = tl.arange(0, BLOCK_N * SLICES)
        full_ok = full < N
        fmask = row_ok[:, None] & full_ok[None, :]
        hf = tl.load(X + r64 * stride_x + full[None, :], mask=fmask, other=0.0).to(tl.float32)
        if HAS_RES:
            hf = residual_sum(hf, R, stride_r, RO, r64, full, fmask).to(tl.float32)
    # FP8 row scales of whole rows without a bias, JOINT_MAX (launches of <= 8 elements a thread: decode sizes):
    # max|y| = rs * max|h * w| (rs > 0), so the max comes from the same reduction as the sum of squares instead of a
    # second one after it, each with its shared-memory pass and barriers (as the cluster kernel). At 16 elements a
    # thread the registers it holds cost more than the barriers it saves.
    JOINT: tl.constexpr = JOINT_MAX and NEED_AMAX and SLICES == 1 and not (HAS_B or HAS_STATS)
    if HAS_STATS:
        ss = gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M)
        rs = stats_rstd(ss, inv_n, eps)
    elif SLICES > 1:
        ss = tl.sum(hf * hf, axis=1)
        rs = tl.rsqrt(ss * inv_n + eps)
    elif JOINT:
        hw = h
        if HAS_W:
            hw = h * w[None, :]
        ss, hwmax = tl.reduce((h * h, tl.abs(hw)), 1, _sum_max)
        rs = tl.rsqrt(ss * inv_n + eps)
    else:
        ss = tl.sum(h * h, axis=1)
        rs = tl.rsqrt(ss * inv_n + eps)
    first = pid % SLICES == 0  # the one program of a row that writes the per-row values
    rare = False
    if not HAS_STATS:
        rare = any_row(off_range(ss * inv_n + eps) & row_ok)  # rows past fp32's range: the branch at the end

    v = h * rs[:, None]
    if HAS_W:
        v = v * w[None, :]
    if HAS_B:
        v += b[None, :]

    amax = 0.0
    if NEED_AMAX:
        if SLICES > 1:
            vf = hf * rs[:, None]
            if HAS_W:
                vf = vf * weight_at(W, full, full_ok, w_off)[None, :]
            if HAS_B:
                vf += tl.load(B + full, mask=full_ok, other=0.0).to(tl.float32)[None, :]
            amax = tl.max(tl.where(fmask, tl.abs(vf), 0.0), axis=1)
        elif JOINT:
            amax = rs * hwmax  # masked columns are 0 in h
        else:
            amax = tl.max(tl.where(mask, tl.abs(v), 0.0), axis=1)
        amax = nan_rows(amax, ss, rs)
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
        row_ok & first,
        scale_ub,
        fp8_max,
        OUT_MODE,
        Y_DROP,
        Y_MIN_NORMAL,
        Y_SUB,
    )
    if STORE_RSIG:  # after y: the per-row address is not held through the normalize (the capped launches)
        tl.store(RSIG + rows, rs, mask=row_ok & first)
    if not HAS_STATS:
        if rare:
            # rows past fp32's range (row_stats): written again, last, from memory, where nothing else is held (a
            # branch while the row and the weight are held made the launches capped at 32 registers a thread spill,
            # on every row); only the branch's predicate is held until here
            pid = opaque_program_id(GPU)
            # a call (noinline): the plain pass's registers are free, and only the pointers it reads are passed
            restore_rows(
                X,
                stride_x,
                R if HAS_RES else None,
                stride_r,
                RO if HAS_RES else None,
                Y if OUT_MODE != 3 else None,
                stride_y,
                W if HAS_W else None,
                B if HAS_B else None,
                RSIG if STORE_RSIG else None,
                SC if OUT_MODE == 1 or OUT_MODE == 3 else None,
                SCALE_IN if OUT_MODE == 2 else None,
                (pid // SLICES) * BLOCK_M,
                M,
                pid % SLICES == 0,
                (pid % SLICES) * BLOCK_N,
                N,
                inv_n,
                eps,
                w_off,
                scale_ub,
                fp8_max,
                BLOCK_M,
                BLOCK_N,
                HAS_W,
                HAS_B,
                HAS_RES,
                STORE_RSIG,
                OUT_MODE,
                Y_DROP,
                Y_MIN_NORMAL,
                Y_SUB,
            )


@triton.jit
def _looped_scaled(h, W, B, c, ok, rs, w_off: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """h * rs * (w + weight_offset) (+ bias) for the fp32 values h at columns c of one row: the streamed chunks (ok
    masks the row's end) and the register-held head (ok None)."""
    v = h * rs
    if HAS_W:
        v = v * weight_at(W, c, ok, w_off)
    if HAS_B:
        v += vector_at(B, c, ok)
    return v


@triton.jit
def _looped_cast(
    v,
    recip,
    fp8_max,
    Y_DTYPE: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """The normalized v in the output dtype: FP8 (OUT_MODE 1, 2) times the scale's reciprocal, clamped and rounded;
    otherwise rounded."""
    if OUT_MODE != 0:
        y = fp8_quantize(v * recip, fp8_max, Y_DTYPE, Y_DROP, Y_MIN_NORMAL, Y_SUB)
    else:
        y = pre_round(v, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y_DTYPE)
    return y


@triton.jit
def _looped_out_chunk(
    hrow,
    yrow,
    W,
    B,
    c,
    N,
    rs,
    recip,
    w_off: tl.constexpr,
    fp8_max,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    Y_EVICT: tl.constexpr,
):
    """The looped kernel's normalize pass at columns c of one row: h re-read from L2 (the last read: evict_first),
    scaled, cast, stored (with Y_EVICT as the store's eviction policy)."""
    ok = c < N
    h = tl.load(hrow + c, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    v = _looped_scaled(h, W, B, c, ok, rs, w_off, HAS_W, HAS_B)
    y = _looped_cast(v, recip, fp8_max, yrow.dtype.element_ty, OUT_MODE, Y_DROP, Y_MIN_NORMAL, Y_SUB)
    tl.store(yrow + c, y, mask=ok, eviction_policy=Y_EVICT)


@triton.jit
def fwd_looped_kernel(
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
    CHUNK: tl.constexpr,
    HEAD: tl.constexpr,
    WORDS: tl.constexpr,
    REVERSE: tl.constexpr,
    ONE_ROW: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    PDL: tl.constexpr = False,
):
    if PDL:
        dependent_launch()
    # Columns [0, HEAD) stay in registers between the stats pass and the normalize pass; [HEAD, N) stream through in
    # CHUNK pieces and are read twice, the second time (REVERSE: last chunk first) mostly from L2. HEAD=0: everything
    # streams. The chunk loops step a column offset (tl.range(HEAD, N, CHUNK)): the same loops indexed as
    # HEAD + i * CHUNK were unrolled differently by ptxas (a peeled first trip) and ran slower (H200:
    # a two-chunk row program at 16384 x 8192 133.1 us against 128.9; this kernel at 2048 x 65535, 32768-column
    # chunks, 429.0 against 409.3).
    # WORDS > 0 (plain rows of 16-bit x, no head): the stats pass is one load of the whole row (row_words_sumsq).
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(N - HEAD, CHUNK)
    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    STATS_PASS: tl.constexpr = (not HAS_STATS) or HAS_RES
    # Without bias, max|h*rs*w| = rs * max|h*w| (rs > 0): the row max rides along the stats pass.
    AMAX_IN_STATS: tl.constexpr = NEED_AMAX and (not HAS_B) and STATS_PASS and WORDS == 0
    # ONE_ROW (a program a row): a loop of one trip that the compiler removes; the persistent loop around the two-pass
    # row cost 2% at 16384 x 8192 (H200), and 0.3-5.7% on the launches of M <= 2 x SMs rows (H100)
    for row in range(pid, pid + 1 if ONE_ROW else M, 1 if ONE_ROW else nprog):
        r64 = tl.cast(row, tl.int64)
        xrow = X + r64 * stride_x
        if HAS_RES:  # h is re-read from RO, the stored sum
            hrow = RO + r64 * stride_ro
        else:
            hrow = xrow
        acc = tl.zeros([CHUNK], dtype=tl.float32)
        mx = tl.zeros([CHUNK], dtype=tl.float32)
        head_ss = 0.0
        head_mx = 0.0
        if HEAD > 0:
            hc = tl.arange(0, HEAD)
            hh = tl.load(xrow + hc).to(tl.float32)
            if HAS_RES:
                hh += tl.load(R + r64 * stride_r + hc).to(tl.float32)
                hq_head = hh.to(RO.dtype.element_ty)
                tl.store(hrow + hc, hq_head)
                hh = hq_head.to(tl.float32)
            if STATS_PASS:
                head_ss = tl.sum(hh * hh, axis=0)
            if AMAX_IN_STATS:
                if HAS_W:
                    head_mx = tl.max(tl.abs(hh * plus_offset(tl.load(W + hc).to(tl.float32), w_off)), axis=0)
                else:
                    head_mx = tl.max(tl.abs(hh), axis=0)
        if STATS_PASS and WORDS == 0:
            for c0 in tl.range(HEAD, N, CHUNK):
                c = c0 + cols
                ok = c < N
                h = tl.load(xrow + c, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
                if HAS_RES:
                    h += tl.load(R + r64 * stride_r + c, mask=ok, other=0.0, eviction_policy="evict_first").to(
                        tl.float32
                    )
                    hq = h.to(RO.dtype.element_ty)
                    tl.store(hrow + c, hq, mask=ok, eviction_policy="evict_last")
                    h = hq.to(tl.float32)
                acc += h * h
                if AMAX_IN_STATS:
                    if HAS_W:
                        wv = weight_at(W, c, ok, w_off)
                        mx = tl.maximum(mx, tl.abs(h * wv))
                    else:
                        mx = tl.maximum(mx, tl.abs(h))
        # the row max of y where the second pass takes it (rows past fp32's range), else < 0
        rare_amax = tl.full([], -1.0, tl.float32)
        if HAS_STATS:
            ss = tl.load(STATS + row)
            for k in range(1, n_stats):
                ss += tl.load(STATS + k * stride_stats + row)
            rs = stats_rstd(ss, inv_n, eps)
        else:
            if WORDS > 0:
                ss = row_words_sumsq(X, stride_x, row, N, WORDS)
            else:
                ss = tl.sum(acc, axis=0) + head_ss
            rs = tl.rsqrt(ss * inv_n + eps)
            if off_range(ss * inv_n + eps):  # the second pass, over the row as stored (row_stats)
                c = rescale_factor(ss * inv_n + eps)
                one = tl.arange(0, 1)
                ss_c, mx_c = stored_scaled_stats(
                    hrow, 0, R, 0, RO, W, one, one == 0, N, c + tl.zeros([1], tl.float32), w_off, 1, False, HAS_W
                )
                rs, r = scaled_rstd(tl.sum(ss_c, axis=0), c, inv_n, eps)
                rare_amax = tl.sum(mx_c, axis=0) * r
        if STORE_RSIG:
            tl.store(RSIG + row, rs)

        amax = 0.0
        if NEED_AMAX:
            if AMAX_IN_STATS:
                amax = tl.maximum(tl.max(mx, axis=0), head_mx) * rs
                amax = nan_rows(tl.where(rare_amax >= 0, rare_amax, amax), ss, rs)
            else:
                for c0 in tl.range(HEAD, N, CHUNK):
                    c = c0 + cols
                    ok = c < N
                    # evict_last: the normalize pass reads it again
                    h = tl.load(hrow + c, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
                    v = _looped_scaled(h, W, B, c, ok, rs, w_off, HAS_W, HAS_B)
                    mx = tl.maximum(mx, tl.where(ok, tl.abs(v), 0.0))
                amax = tl.max(mx, axis=0)
                if HEAD > 0:
                    vh = _looped_scaled(hh, W, B, hc, None, rs, w_off, HAS_W, HAS_B)
                    amax = tl.maximum(amax, tl.max(tl.abs(vh), axis=0))
                amax = nan_rows(amax, ss, rs)

        if OUT_MODE == 3:
            tl.store(SC + row, amax)
        else:
            recip = 1.0
            if OUT_MODE == 1:
                scale = fp8_scale(amax, scale_ub, fp8_max)
                tl.store(SC + row, scale)
                recip = fp8_recip(scale)
            elif OUT_MODE == 2:
                recip = fp8_recip(tl.load(SCALE_IN))
            yrow = Y + r64 * stride_y
            # y stored evict_first where the normalize pass runs last chunk first (long rows: what the L2 holds of the
            # row is read back from its end, and y should not push it out); in order (the two-pass launch of rows up
            # to 8192, read back right after the sum) without a hint: 0.5% faster at 16384 x 8192 (H200)
            if REVERSE:
                for j in range(n_chunks):
                    _looped_out_chunk(
                        hrow,
                        yrow,
                        W,
                        B,
                        HEAD + (n_chunks - 1 - j) * CHUNK + cols,
                        N,
                        rs,
                        recip,
                        w_off,
                        fp8_max,
                        HAS_W,
                        HAS_B,
                        OUT_MODE,
                        Y_DROP,
                        Y_MIN_NORMAL,
                        Y_SUB,
                        "evict_first",
                    )
            else:
                for c0 in tl.range(HEAD, N, CHUNK):
                    _looped_out_chunk(
                        hrow,
                        yrow,
                        W,
                        B,
                        c0 + cols,
                        N,
                        rs,
                        recip,
                        w_off,
                        fp8_max,
                        HAS_W,
                        HAS_B,
                        OUT_MODE,
                        Y_DROP,
                        Y_MIN_NORMAL,
                        Y_SUB,
                        "",
                    )
            if HEAD > 0:
                vh = _looped_scaled(hh, W, B, hc, None, rs, w_off, HAS_W, HAS_B)
                tl.store(
                    yrow + hc,
                    _looped_cast(vh, recip, fp8_max, Y.dtype.element_ty, OUT_MODE, Y_DROP, Y_MIN_NORMAL, Y_SUB),
                )


@triton.jit
def row_sumsq_kernel(X, stride_x, OUT, M, N, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, CHUNK)
    r64 = rows.to(tl.int64)[:, None]
    # float64: the sums leave the kernel, and float64 holds any fp32 row's sum of squares (2^-298 to 2^287) without
    # a second pass (row_stats' rule applies where the sum stays in fp32)
    acc = tl.zeros([BLOCK_M, CHUNK], dtype=tl.float64)
    for i in range(tl.cdiv(N, CHUNK)):
        c = i * CHUNK + cols
        x = tl.load(X + r64 * stride_x + c[None, :], mask=row_ok[:, None] & (c < N)[None, :], other=0.0).to(tl.float64)
        acc += x * x
    tl.store(OUT + rows, tl.sum(acc, axis=1), mask=row_ok)
