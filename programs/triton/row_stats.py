"""A row's statistics in the Triton forwards: its rstd from the fp32 sum of squares, with a second pass for the rows
whose fp32 sum leaves fp32's range, and its FP8 row max. The Gluon kernels (rmsnorm_cluster.py, rmsnorm_async.py)
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

Hardware minimum and maximum (PTX max.f32) drop a NaN operand, so nothing here detects NaN through a row max.
"""

import triton
import triton.language as tl

INF = tl.constexpr(float("inf"))
FP32_MIN_NORMAL = tl.constexpr(2.0**-126)
DOWN = tl.constexpr(2.0**-80)  # c for a row whose fp32 sum of squares overflowed
UP = tl.constexpr(2.0**88)  # c for a row whose mean square is below fp32's smallest normal
# columns a step of the second pass over a stored row: small, so that the branch adds few registers to kernels that
# hold row blocks in flight around it
PASS_CHUNK = tl.constexpr(1024)


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
def held_rstd(h, ss, inv_n, eps):
    """rstd [BLOCK_M] of rows h [BLOCK_M, n] held in registers (0 past each row's end), ss their fp32 sums of squares
    (the module docstring's rule)."""
    t = ss * inv_n + eps
    rs = tl.rsqrt(t)
    off = off_range(t)
    if any_row(off):
        c = rescale_factor(t)
        hc = h * c[:, None]
        rs_c, _ = scaled_rstd(tl.sum(hc * hc, axis=1), c, inv_n, eps)
        rs = tl.where(off, rs_c, rs)
    return rs


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
        mask = row_ok[:, None] & (cc < N)[None, :]
        h = tl.load(X + r64 * stride_x + cc[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            r = tl.load(R + r64 * stride_r + cc[None, :], mask=mask, other=0.0).to(tl.float32)
            h = (h + r).to(RO.dtype.element_ty).to(tl.float32)
        hc = h * c[:, None]
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
    """held_rstd for rows whose values the kernel no longer holds whole (split across programs, or streamed): the
    second pass reads them back from memory (stored_scaled_stats)."""
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
