"""Device functions the Triton kernels share (forward, backward, fused all-reduce): the PDL wait, loads and stores of
row blocks, the weight factor (w + weight_offset), the residual add, gathered distributed stats, FP8 rounding and
quantization, and 16-bit rows held as 32-bit words (two values a register)."""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def dependent_launch():
    # PDL: wait for the previous kernel's writes first (x, the weight or y's memory may be its), then let the next
    # kernel's CTAs launch into the SM slots this grid frees
    gdc_wait()
    gdc_launch_dependents()


@triton.jit
def pre_round(v, DROP: tl.constexpr, MIN_NORMAL: tl.constexpr, SUB_MAGIC: tl.constexpr):
    """Round fp32 v to nearest even on the grid of a format with (23 - DROP) mantissa bits (interpreter only; DROP=0
    is the identity). Normal values by integer carry on the bits, subnormals of that format by a magic-number add."""
    if DROP == 0:
        return v
    else:
        b = v.to(tl.uint32, bitcast=True)
        b = b + ((1 << (DROP - 1)) - 1) + ((b >> DROP) & 1)
        b = b & (0xFFFFFFFF ^ ((1 << DROP) - 1))
        r = tl.where(v == v, b.to(tl.float32, bitcast=True), v)  # a NaN's payload can carry out of the top bit
        if SUB_MAGIC != 0.0:
            a = tl.abs(v)
            s = (a + SUB_MAGIC) - SUB_MAGIC
            s = tl.where(v < 0, -s, s)
            r = tl.where(a < MIN_NORMAL, s, r)
        return r


@triton.jit
def fp8_scale(amax, scale_ub, fp8_max):
    """The FP8 scale of a row max: min(amax, scale_ub) / fp8_max, NaN where amax is NaN (the hardware minimum would
    drop it for scale_ub)."""
    return tl.minimum(amax, scale_ub, propagate_nan=tl.PropagateNan.ALL) / fp8_max


@triton.jit
def fp8_recip(scale):
    return tl.where(scale == 0.0, 0.0, 1.0 / scale)


@triton.jit
def vector_at(P, cols, ok):
    """The vector P (weight or bias) at these columns in fp32: 0 where not ok, or, ok None, every column loaded."""
    if ok is None:
        v = tl.load(P + cols)
    else:
        v = tl.load(P + cols, mask=ok, other=0.0)
    return v.to(tl.float32)


@triton.jit
def plus_offset(w, w_off: tl.constexpr):
    """w + weight_offset: the kernels take the offset as a constexpr, so that at 0 (the usual case) the add, one
    instruction an element, is compiled out (it shows where a kernel is bound by instructions, as the cluster
    forward into FP8 is)."""
    if w_off != 0:
        w = w + w_off
    return w


@triton.jit
def weight_at(W, cols, ok, w_off: tl.constexpr):
    """The factor the kernels multiply by at these columns: weight + weight_offset in fp32 (0 + w_off where not ok)."""
    return plus_offset(vector_at(W, cols, ok), w_off)


@triton.jit
def row_words_sumsq(P, stride, row, N, WORDS: tl.constexpr):
    """Sum of squares (fp32) of row `row` of the 16-bit [M, N] tensor P, loaded at once as WORDS 32-bit words (two
    values each: half the registers of the values, so a whole row of 65536 fits 32 warps) and kept in L2 (evict_last)
    for a second read. P's base and stride even in elements (wordable_rows)."""
    wc = tl.arange(0, WORDS)
    PW = P.to(tl.pointer_type(tl.int32))
    v = tl.load(
        PW + tl.cast(row, tl.int64) * (stride // 2) + wc, mask=wc < N // 2, other=0, eviction_policy="evict_last"
    )
    lo, hi = unpack_words(v, P.dtype.element_ty)
    return tl.sum(lo * lo + hi * hi, axis=0)


@triton.jit
def unpack_words(v, DT: tl.constexpr):
    """(lo, hi) in fp32: the two 16-bit values of dtype DT in each 32-bit word of v, lo the one at the lower address
    (little-endian), so lo is column 2j and hi column 2j + 1 of word j."""
    lo = v.to(tl.int16).to(DT, bitcast=True).to(tl.float32)
    hi = (v >> 16).to(tl.int16).to(DT, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def load_words(P, stride, rows, M, jc, j_ok):
    """Words jc of rows `rows` of the 16-bit [M, N] tensor P as int32 [BLOCK_M, CHUNK // 2], 0 where masked."""
    return tl.load(
        P.to(tl.pointer_type(tl.int32)) + rows.to(tl.int64)[:, None] * (stride // 2) + jc[None, :],
        mask=(rows < M)[:, None] & j_ok[None, :],
        other=0,
    )


@triton.jit
def store_words(P, stride, rows, M, jc, j_ok, lo, hi):
    """load_words' inverse: lo and hi (fp32 [BLOCK_M, CHUNK // 2]) rounded to P's 16-bit dtype, stored as words jc."""
    DT: tl.constexpr = P.dtype.element_ty
    words = (lo.to(DT).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) | (
        hi.to(DT).to(tl.int16, bitcast=True).to(tl.int32) << 16
    )
    tl.store(
        P.to(tl.pointer_type(tl.int32)) + rows.to(tl.int64)[:, None] * (stride // 2) + jc[None, :],
        words,
        mask=(rows < M)[:, None] & j_ok[None, :],
    )


@triton.jit
def weight_words(ww, W, w_off: tl.constexpr):
    """(w_lo, w_hi): the weight's words ww (split_words_program) unpacked, + weight_offset, as weight_at gives them."""
    w_lo, w_hi = unpack_words(ww, W.dtype.element_ty)
    return plus_offset(w_lo, w_off), plus_offset(w_hi, w_off)


@triton.jit
def load_rows(P, stride, rows, M, cols, col_ok):
    """P[rows, cols] in its stored dtype, zero where rows >= M or not col_ok (rows [BLOCK_M], cols [n])."""
    return tl.load(
        P + rows.to(tl.int64)[:, None] * stride + cols[None, :], mask=(rows < M)[:, None] & col_ok[None, :], other=0.0
    )


@triton.jit
def residual_sum(h, R, stride_r, RO, r64, cols, mask):
    """h + residual, rounded to residual_out's dtype and returned in it: the rounded sum is what gets normalized, as
    an unfused x + r then norm."""
    return (h + tl.load(R + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)).to(
        RO.dtype.element_ty
    )


@triton.jit
def add_residual(h, R, stride_r, RO, stride_ro, r64, cols, mask):
    """residual_sum, also stored to residual_out."""
    hq = residual_sum(h, R, stride_r, RO, r64, cols, mask)
    tl.store(RO + r64 * stride_ro + cols[None, :], hq, mask=mask)
    return hq


@triton.jit
def gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M: tl.constexpr):
    """The rows' sum of squares from the gathered per-shard stats [n_stats, M], in rank order and in the stats' dtype
    (float64 from pre_stats): every rank gets the same bits."""
    ss = tl.zeros([BLOCK_M], dtype=STATS.dtype.element_ty)
    for k in range(n_stats):
        ss += tl.load(STATS + k * stride_stats + rows, mask=row_ok, other=0.0)
    return ss


@triton.jit
def fp8_quantize(
    v, fp8_max, Y_DTYPE: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr
):
    """v (already divided by its scale) clamped to the FP8 range and rounded to Y_DTYPE; NaN stays NaN (float64's
    clamp keeps it; the hardware minimum and maximum drop it unless told)."""
    q = tl.clamp(v, -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
    return pre_round(q, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y_DTYPE)


@triton.jit
def store_fp8(
    v, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr
):
    tl.store(
        Y + r64 * stride_y + cols[None, :],
        fp8_quantize(v, fp8_max, Y.dtype.element_ty, Y_DROP, Y_MIN_NORMAL, Y_SUB),
        mask=mask,
    )


@triton.jit
def store_out(
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
    sc_mask,
    scale_ub,
    fp8_max,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """Write the normalized rows v [BLOCK_M, cols] as OUT_MODE says: cast (0), FP8 with per-row scales from the row
    max amax (1), FP8 with the one given scale (2), or only the row max (3, first pass of a dynamic tensor scale).
    sc_mask: which programs write the per-row values (one program per row when a row is split)."""
    if OUT_MODE == 0:
        y = pre_round(v, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y.dtype.element_ty)
        tl.store(Y + r64 * stride_y + cols[None, :], y, mask=mask)
    elif OUT_MODE == 3:
        tl.store(SC + rows, amax, mask=sc_mask)
    else:
        if OUT_MODE == 1:
            scale = fp8_scale(amax, scale_ub, fp8_max)
            tl.store(SC + rows, scale, mask=sc_mask)
            recip = fp8_recip(scale)[:, None]
        else:
            recip = fp8_recip(tl.load(SCALE_IN))
        store_fp8(v * recip, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP, Y_MIN_NORMAL, Y_SUB)
