"""The row math every fused all-reduce strategy shares once a row's fp32 sum is in registers: residual, RMSNorm, per-row
FP8 scale and codes, and the stores of the local outputs.

Every strategy calls `finish_rows` on the same sums with the same arguments, so all strategies and all ranks produce the
same bits. The kernels bundle the arguments that never change within a launch:
  nq = (inv_h, eps, scale_ub, fp8_max)                  runtime scalars
  fl = (HAS_W, HAS_RES, Y_DROP, Y_MIN_NORMAL, Y_SUB)     constexprs (fp8.downcast_consts gives the last three)
"""

from __future__ import annotations

import triton
import triton.language as tl

from programs.triton.kernels.row_io import fp8_quantize, fp8_recip, weight_at


@triton.jit
def weight_factor(W, cols, col_ok, w_off: tl.constexpr, HAS_W: tl.constexpr):
    """(weight + weight_offset) in fp32, loaded once per program before any waiting (1.0 without a weight)."""
    wf = 1.0
    if HAS_W:
        wf = weight_at(W, cols, col_ok, w_off)
    return wf


@triton.jit
def residual_rows(R, stride_r, rows64, cols, mask, HAS_RES: tl.constexpr):
    res = 0.0
    if HAS_RES:
        res = tl.load(R + rows64 * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
    return res


@triton.jit
def rescale(h, ss, d, inv_h, eps):
    """(m, d) per row for the rows the plain fp32 formula loses: the caller normalizes v = (h * m) * rsqrt(d).
      ss = +inf (the fp32 sum of squares overflowed, so max|h| >= 2^56): m = 2^-72 puts every (m h)^2 under 2^112,
        so the sum stays finite (H <= 32768); the squares that underflow are those of |h| < 2^-3, nothing against
        the row's largest square (>= 2^112 before scaling).
      eps == 0 and mean(h^2) under 2^-100 (squares in or near the subnormal range, all |h| < 2^-42): m = 2^-e with e
        half the exponent of mean(h^2), which brings mean((m h)^2) near 1, or m = 2^100 where every square underflowed
        (all |h| < 2^-74: the smallest subnormal becomes 2^-49).
    Powers of two scale exactly, and rsqrt(mean((m h)^2) + eps m^2) * m h = rsqrt(mean(h^2) + eps) * h. A row with an
    infinity gets +inf again (m h keeps it) and the plain formula's NaN and zeros; an all-zero row stays 0 / 0; a NaN
    row never comes here (its ss is NaN). Every other row keeps m = 1 and its d."""
    big = ss == float("inf")
    tiny = (d < 7.888609052210118e-31) & (eps == 0.0)  # 2^-100
    e = ((d.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127  # d's unbiased exponent; -127 for 0 and subnormals
    m = tl.where(e > -127, ((127 - e // 2) << 23).to(tl.float32, bitcast=True), 1.2676506002282294e30)  # 2^100
    m = tl.where(big, 2.117582368135751e-22, tl.where(tiny, m, 1.0))  # 2^-72
    hs = h * m[:, None]
    d2 = tl.sum(hs * hs, axis=1) * inv_h + eps * m * m
    return m, tl.where(big | tiny, d2, d)


@triton.jit
def norm_quant(h, res, wf, mask, nq, RO_DTYPE: tl.constexpr, Y_DTYPE: tl.constexpr, fl: tl.constexpr):
    """(fp8 rows, per-row scales, residual_out rows) of the fp32 sums h [BLOCK_M, BLOCK_H], as rmsnorm_fwd computes
    them: with a residual (res, already loaded) the sum is rounded to the residual's dtype, returned, and that rounded
    value normalized; wf is weight_factor's (weight + weight_offset).

    Every row equals the float64 y = h * rsqrt(mean(h^2) + eps) * w, its scale and codes as computed from that y:
    rows whose fp32 sum of squares overflows, or (eps == 0) underflows, take `rescale` (a second pass, only in a
    block holding such a row); a row with an infinity keeps the plain formula (rsqrt(inf) = 0: NaN at the infinities,
    +-0 elsewhere) and a NaN anywhere makes the whole row NaN. The row max is taken on the bits of |v| (a NaN's bits
    exceed every number's), since the float max instruction drops NaN; a row with a NaN gets a NaN scale and NaN
    codes (0x7F), as the float64 definition's amax, 1 / scale and v / scale give."""
    inv_h, eps, scale_ub, fp8_max = nq
    HAS_W: tl.constexpr = fl[0]
    HAS_RES: tl.constexpr = fl[1]
    ro = h
    if HAS_RES:
        h += res
        ro = h.to(RO_DTYPE)
        h = ro.to(tl.float32)
    ss = tl.sum(h * h, axis=1)
    d = ss * inv_h + eps
    lost = (ss == float("inf")) | ((d < 7.888609052210118e-31) & (eps == 0.0))  # rows for `rescale` (2^-100)
    m = tl.full(ss.shape, 1.0, tl.float32)
    if tl.max(lost.to(tl.int32), axis=0) > 0:
        m, d = rescale(h, ss, d, inv_h, eps)
    v = (h * m[:, None]) * tl.rsqrt(d)[:, None]
    if HAS_W:
        v = v * wf
    bits = tl.where(mask, v, 0.0).to(tl.int32, bitcast=True) & 0x7FFFFFFF
    amax = tl.max(bits, axis=1).to(tl.float32, bitcast=True)
    scale = tl.minimum(amax, scale_ub, propagate_nan=tl.PropagateNan.ALL) / fp8_max
    x = v * fp8_recip(scale)[:, None]
    q = fp8_quantize(x, fp8_max, Y_DTYPE, fl[2], fl[3], fl[4])
    nan_row = scale != scale  # scale_ub is finite, so a NaN code only comes with a NaN scale, for the whole row
    if tl.max(nan_row.to(tl.int32), axis=0) > 0:  # rare: the clamp's min / max drop NaN, codes taken per row here
        q = tl.where(nan_row[:, None], tl.full(x.shape, 0x7F, tl.uint8).to(Y_DTYPE, bitcast=True), q)
    return q, scale, ro


@triton.jit
def finish_rows(h, res, wf, at, out, nq, fl: tl.constexpr, STORE_RO: tl.constexpr):
    """norm_quant of the sums h, then the local outputs. at = (rows64, cols, mask, sc_rows, sc_ok): the rows'
    elements and their scale slots; out = (Y, stride_y, SC, RO, stride_ro). Writes the FP8 rows, the scales and, with
    a residual (and STORE_RO), residual_out; returns (q, scale, ro) for strategies that post them."""
    rows64, cols, mask, sc_rows, sc_ok = at
    Y, stride_y, SC, RO, stride_ro = out
    q, scale, ro = norm_quant(h, res, wf, mask, nq, RO.dtype.element_ty, Y.dtype.element_ty, fl)
    tl.store(Y + rows64 * stride_y + cols, q, mask=mask)
    tl.store(SC + sc_rows, scale, mask=sc_ok)
    if fl[1] and STORE_RO:
        tl.store(RO + rows64 * stride_ro + cols, ro, mask=mask)
    return q, scale, ro


@triton.jit
def adopt_residual_out(o, wf, at, out, nq, fl: tl.constexpr):
    """A peer's residual_out rows o (the owner's bits): stored as this rank's residual_out and normalized as the owner
    normalized them (fl with HAS_RES False: o is the rounded sum already)."""
    rows64, cols, mask, _, _ = at
    RO, stride_ro = out[3], out[4]
    tl.store(RO + rows64 * stride_ro + cols, o, mask=mask)
    finish_rows(o.to(tl.float32), 0.0, wf, at, out, nq, fl, False)


@triton.jit
def one_row(row, col_ok, T):
    """(rows64 [1, 1], mask [1, BLOCK_H], sc_rows [1], sc_ok [1]) of row `row` for the one-row-a-program strategies."""
    rows64 = tl.cast(row, tl.int64) + tl.zeros([1, 1], dtype=tl.int64)
    sc_rows = row + tl.arange(0, 1)
    return rows64, col_ok & (rows64 < T), sc_rows, sc_rows < T


@triton.jit
def piece_of_row(piece, per_row, PIECE: tl.constexpr):
    """(row, its int64, the columns) of push piece `piece`: a row is pushed in per_row pieces of PIECE words."""
    row = piece // per_row
    return row, tl.cast(row, tl.int64), (piece - row * per_row) * PIECE + tl.arange(0, PIECE)
