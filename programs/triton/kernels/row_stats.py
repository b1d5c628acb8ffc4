"""A row's statistics in the Triton forwards: its rstd from the fp32 sum of squares, with a second pass for the rows
whose fp32 sum leaves fp32's range, and its FP8 row max. The Gluon kernels (forward_cluster.py, forward_async.py)
follow the same rule in their own language; the distributed pre-stats sum in float64 (distributed.py).

The semantics every backend of the project gives (docs/gpu-performance.md, "Extreme values"): the output equals the
float64 reference y = x * rsqrt(mean(x^2) + eps) * w evaluated in IEEE float64 and cast to the output dtype, within
tt_rmsnorm.accuracy's tolerance, non-finite rows included:

- A row whose fp32 sum of squares is finite and whose ss / N + eps is at least fp32's smallest normal (2^-126) takes
  the plain formula rsqrt(ss / N + eps): every ordinary row, and every row when eps >= 2^-126 (eps dominates a
  subnormal or tiny row exactly as in float64). Ordinary rows pay one range test per row and nothing else.
- A row whose ss / N + eps is +inf (x^2 or the sum past 3.4e38), or below 2^-126 (eps = 0, or tinier than 2^-126,
  and a row of tiny values whose squares underflow), takes a second pass over the row: the sum of squares of x * c,
  c a power of two (2^-80 for an overflowing sum, 2^88 for a tiny one), which cannot overflow (|x| < 2^128: squares
  below 2^96) nor lose the row to underflow (every nonzero |x| >= 2^-149: squares of x * 2^88 >= 2^-122), and
  rstd = rsqrt(ss_c / N + eps * c^2) * c, rescaled back exactly (a power of two). Elements far below the row's
  largest lose their squares in the scaled sum, where they are below fp32's resolution of the sum anyway.
- A row holding +-inf keeps the plain result: its scaled sum is +inf as well, rstd = rsqrt(inf) = 0, and y is NaN at
  the infinities and +-0 elsewhere, as float64 gives (inf * 0). A NaN anywhere makes ss NaN, which no range test
  takes, and the row NaN. An all-zero row with eps = 0 is 0 * rsqrt(0) = NaN, as in float64.
- rstd itself is an fp32: for rows whose rms is above 2^126 it is subnormal (at least 20 significant bits: the
  output stays within the policy), and with eps = 0 a row whose rms is below 2^-128 (every value fp32-subnormal) has
  an rstd past fp32's range: that row comes out as +-inf (0 as NaN), the one case this rule leaves unrepresented.
- FP8 row scales: the row max of y, taken as rstd * max|x * w| where a kernel folds it into the sum, is taken over
  the scaled row in rows that need the second pass (x * w may overflow there), and is NaN where y holds a NaN, as
  float64's max is; NaN scales and values stay NaN through the clamp to the FP8 range (fp8_quantize). A row whose
  max|y| is below fp8_max * 2^-126 (5e-36 for e4m3: subnormal x with eps > 0) has an fp32-subnormal scale whose
  reciprocal is past fp32's range: its values saturate to +-fp8_max (its scale is right).

Where the pass runs: restore_rows writes flagged rows again after a kernel's plain pass (the rows kernel), or
stored_rstd / stored_scaled_stats read them back where the sum is taken (looped, split); every pass reads the row
from memory in a fixed order, so all programs of a row get the same bits.

Hardware minimum and maximum (PTX max.f32) drop a NaN operand, so nothing here detects NaN through a row max.

restore_rows stays one function: it is the second pass called (noinline) after the plain one, so its frame holds
only what the output needs, and it is read as one pass over a flagged row.
"""

import triton
import triton.language as tl

from programs.triton.kernels.row_io import store_out, weight_at

INF = tl.constexpr(float("inf"))
FP32_MIN_NORMAL = tl.constexpr(2.0**-126)
FP32_MAX_HALF = tl.constexpr(2.0**127)
DOWN = tl.constexpr(2.0**-80)  # c for a row whose fp32 sum of squares overflowed
UP = tl.constexpr(2.0**88)  # c for a row whose mean square is below fp32's smallest normal
# columns a step of the second pass over a stored row: small, so that the branch adds few registers to kernels that
# hold row blocks in flight around it
PASS_CHUNK = tl.constexpr(512)


@triton.jit
def off_range(t):
    """Which rows' ss / N + eps (t) need the second pass: +inf, or below fp32's smallest normal (NaN: neither)."""
    return (t == INF) | (t < FP32_MIN_NORMAL)


@triton.jit
def any_row(flag):
    """Whether any row of the block is flagged: one scalar, so the second pass is a branch that ordinary blocks skip."""
    return tl.max(flag.to(tl.int32), axis=0) != 0


@triton.jit
def rescale_factor(t):
    """The power of two c the second pass multiplies a row by: down for a sum past fp32's range, up for a tiny one."""
    return tl.where(t == INF, DOWN, UP)


@triton.jit
def scaled_rstd(ss_c, c, inv_n, eps):
    """(rstd, rstd of the scaled row) from the sum of squares ss_c of the row times c: rsqrt(ss_c / N + eps c^2) * c
    and rsqrt(ss_c / N + eps c^2), whose product with max|x c w| is the row max of y."""
    r = tl.rsqrt(ss_c * inv_n + eps * c * c)
    return r * c, r


@triton.jit
def stored_rows(X, stride_x, R, stride_r, RO, r64, cols, mask, HAS_RES: tl.constexpr):
    """h [BLOCK_M, n] in fp32 read back from memory (0 where not mask): x, or x + residual rounded to RO's dtype as
    row_io.residual_sum forms it (formed again: another program's residual_out may not be stored yet)."""
    h = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        h = (h + tl.load(R + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)).to(
            RO.dtype.element_ty
        )
    return h.to(tl.float32)


@triton.jit
def stored_scaled_stats(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    W,
    rows,
    row_ok,
    N,
    c,
    w_off: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_W: tl.constexpr,
):
    """(sum of (h c)^2, max|h c w~|) [BLOCK_M] of rows whose values are read back from memory chunk by chunk, in a
    fixed order (every program of a row gets the same bits): h = x, or x + residual rounded to RO's dtype (as
    row_io.residual_sum forms it), c [BLOCK_M] the rows' powers of two, w~ = weight + weight_offset."""
    cols = tl.arange(0, PASS_CHUNK)
    r64 = rows.to(tl.int64)[:, None]
    acc = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    mx = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    for c0 in range(0, N, PASS_CHUNK):
        cc = c0 + cols
        hc = stored_rows(X, stride_x, R, stride_r, RO, r64, cc, row_ok[:, None] & (cc < N)[None, :], HAS_RES)
        hc = hc * c[:, None]
        acc += hc * hc
        if HAS_W:
            w = tl.load(W + cc, mask=cc < N, other=0.0).to(tl.float32)
            if w_off != 0:
                w = w + w_off
            hc = hc * w[None, :]
        mx = tl.maximum(mx, tl.abs(hc))
    return tl.sum(acc, axis=1), tl.max(mx, axis=1)


@triton.jit
def stored_rstd(
    ss,
    inv_n,
    eps,
    X,
    stride_x,
    R,
    stride_r,
    RO,
    rows,
    row_ok,
    N,
    BLOCK_M: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """rstd [BLOCK_M] of rows from their fp32 sums of squares ss (the module docstring's rule): the second pass reads
    the flagged rows back from memory (stored_scaled_stats), which adds few registers to the kernel around it, where a
    pass over a row held in registers would hold a scaled copy beside it."""
    t = ss * inv_n + eps
    rs = tl.rsqrt(t)
    off = off_range(t) & row_ok
    if any_row(off):
        c = rescale_factor(t)
        ss_c, _ = stored_scaled_stats(X, stride_x, R, stride_r, RO, X, rows, off, N, c, 0.0, BLOCK_M, HAS_RES, False)
        rs_c, _ = scaled_rstd(ss_c, c, inv_n, eps)
        rs = tl.where(off, rs_c, rs)
    return rs


@triton.jit
def stats_rstd(ss, inv_n, eps):
    """rstd from gathered distributed stats: float64 sums (pre_stats) hold any fp32 row's sum of squares, so the
    rstd is taken in float64 and rounded to fp32 once (float32 stats are taken the same way)."""
    t = ss.to(tl.float64) * inv_n + eps
    return (1.0 / tl.sqrt(t)).to(tl.float32)


@triton.jit
def nan_rows(amax, ss, rs):
    """The row max of y as float64 takes it: NaN where y holds a NaN (a NaN in the row, an infinity times rstd = 0,
    or 0 times rstd = inf), which ss * rs shows per row (the hardware max drops NaN operands); amax elsewhere."""
    p = ss * rs
    return tl.where(p == p, amax, p - p)  # p - p: NaN where p is (a NaN constexpr global fails Triton's global check)


@triton.jit
def opaque_program_id(GPU: tl.constexpr):
    """The program's id, on a GPU read again from its special register by a non-pure asm, which the compiler cannot
    merge with the kernel's earlier reads: so restore_rows' rows are computed afresh in its branch rather than kept
    from the kernel's start (registers held through the plain pass spilled in the capped launches). The
    interpreter runs no asm."""
    pid = tl.program_id(0)
    if GPU:
        pid = tl.inline_asm_elementwise("mov.u32 $0, %ctaid.x;", "=r,r", [pid], dtype=tl.int32, is_pure=False, pack=1)
    return pid


@triton.jit(noinline=True)
def restore_rows(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    Y,
    stride_y,
    W,
    B,
    RSIG,
    SC,
    SCALE_IN,
    row0,
    M,
    first,
    col0,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    BLOCK_M: tl.constexpr,
    SPAN: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """The rows past fp32's range written again from memory, after a kernel's plain pass wrote them all: each row's
    sum of squares again, scaled both ways (the branch needs nothing held from before it), rstd from the
    second pass for the rows it takes (also those within a factor of two of its bounds, so that a sum rounded apart
    from the plain pass's loses no row), then, as row_io.store_out writes them, their outputs at columns
    [col0, col0 + SPAN), rsigma and FP8 scale or row max (`first`: the program writing the per-row values). A kernel
    calls it last, when it holds nothing else, so that the branch costs its ordinary rows no registers."""
    tl.debug_barrier()  # the plain pass's stores of these rows, by other threads of the CTA, land first
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    r64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, PASS_CHUNK)
    acc_dn = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    mx_dn = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    mx_up = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
    for c0 in range(0, N, PASS_CHUNK):
        cc = c0 + cols
        h = stored_rows(X, stride_x, R, stride_r, RO, r64, cc, row_ok[:, None] & (cc < N)[None, :], HAS_RES)
        hd, hu = h * DOWN, h * UP
        acc_dn += hd * hd
        acc_up += hu * hu
        if OUT_MODE == 1 or OUT_MODE == 3:
            if HAS_W:
                w = weight_at(W, cc, cc < N, w_off)
                hd, hu = hd * w[None, :], hu * w[None, :]
            mx_dn = tl.maximum(mx_dn, tl.abs(hd))
            mx_up = tl.maximum(mx_up, tl.abs(hu))
    ss_dn = tl.sum(acc_dn, axis=1)  # ss * 2^-160
    ss_up = tl.sum(acc_up, axis=1)  # ss * 2^176 (+inf for rows of ordinary size)
    # ss / N + eps past 2^127, or below 2^-125, read from the scaled sums (no plain sum held)
    down = ss_dn * inv_n >= DOWN * DOWN * FP32_MAX_HALF
    off = (down | (ss_up * inv_n + eps * UP * UP < UP * UP * 4 * FP32_MIN_NORMAL)) & row_ok
    c = tl.where(down, DOWN, UP)
    rs, r = scaled_rstd(tl.where(down, ss_dn, ss_up), c, inv_n, eps)
    if STORE_RSIG:
        tl.store(RSIG + rows, rs, mask=off & first)
    amax = 0.0
    if OUT_MODE == 1 or OUT_MODE == 3:
        amax = tl.where(down, tl.max(mx_dn, axis=1), tl.max(mx_up, axis=1)) * r  # max|h w| rs, from the scaled row
        if HAS_B:  # max|h rs w + b|: a pass of its own
            mb = tl.zeros([BLOCK_M, PASS_CHUNK], dtype=tl.float32)
            for c0 in range(0, N, PASS_CHUNK):
                cc = c0 + cols
                mask = off[:, None] & (cc < N)[None, :]
                v = _restored(
                    X, stride_x, R, stride_r, RO, W, B, r64, cc, cc < N, mask, rs, w_off, HAS_W, HAS_B, HAS_RES
                )
                mb = tl.maximum(mb, tl.where(mask, tl.abs(v), 0.0))
            amax = tl.max(mb, axis=1)
        amax = nan_rows(amax, ss_dn, rs)  # ss_dn * rs is NaN where ss * rs is
    for c0 in range(col0, col0 + SPAN, PASS_CHUNK):
        cc = c0 + cols
        col_ok = (cc < N) & (cc < col0 + SPAN)
        mask = off[:, None] & col_ok[None, :]
        v = _restored(X, stride_x, R, stride_r, RO, W, B, r64, cc, col_ok, mask, rs, w_off, HAS_W, HAS_B, HAS_RES)
        store_out(
            v,
            amax,
            Y,
            stride_y,
            SC,
            SCALE_IN,
            rows,
            r64,
            cc,
            mask,
            off & first,
            scale_ub,
            fp8_max,
            OUT_MODE,
            Y_DROP,
            Y_MIN_NORMAL,
            Y_SUB,
        )


@triton.jit
def _restored(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    W,
    B,
    r64,
    cols,
    col_ok,
    mask,
    rs,
    w_off: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """h rs (w + weight_offset) (+ bias) at these columns, h read back (stored_rows)."""
    v = stored_rows(X, stride_x, R, stride_r, RO, r64, cols, mask, HAS_RES) * rs[:, None]
    if HAS_W:
        v = v * weight_at(W, cols, col_ok, w_off)[None, :]
    if HAS_B:
        v += tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return v
