"""RMSNorm forward over a thread-block cluster (Gluon, Hopper and later): one row a cluster of K CTAs, each holding
N / K columns of it in registers, so x crosses DRAM once and no partial sum goes through global memory.

    forward_cluster.launch(x2, y2, weight, bias, rsigma, n, inv_n, eps, weight_offset, chunk, num_warps, maxnreg,
                           busy, out_mode, sc, scale_in, scale_ub, fp8_max)

The K partial sums of squares meet in distributed shared memory: Triton 3.6 cannot reduce across the CTAs of a cluster
(its ReduceOp lowering asserts a reduction within a CTA), so the exchange is inline PTX, QuACK's way: every CTA's
thread j < K sends the CTA's partial into slot[rank] of CTA j with `st.async`, which credits CTA j's mbarrier with
4 bytes; each CTA waits on its own mbarrier, then sums its K slots in rank order, so all K CTAs get the same bits.
Through `barrier.cluster` instead (every thread of the K CTAs arriving, a gpu-scope fence on the release) the same
kernel ran 197 us at 2048 x 65536 where the kernel with no exchange at all ran 181 (H100); with the
mbarrier, 180-181 us.

The tensors are laid out [K, CHUNK] with the K axis split over the cluster (the layout's CGA bases), so every CTA
loads, reduces and stores only its own piece; the exchange takes the [K] vector of partials (one element a CTA).
What is needed only after the exchange waits in shared memory (the bias, and the weight; at 64 elements a thread
in a row of 16 CTAs into a float output x itself, the weight then loaded during the exchange: x_staged) and x stays
16-bit, so that a CTA of 64 elements a thread fits 64 registers and 4 CTAs share an SM (N = 262144).
FP8 output (x normalized as given: no residual or distributed stats): with one given scale, or with a scale a row
(MAX's allreduce_rmsnorm_fp8 rule, fp8.py), whose row max rides the same exchange: each CTA sends its max|x*w| beside
its partial sum (one 8-byte st.async), and the row max is rs times the largest (rs > 0; no bias, as the split kernel).
Launched with PDL where rmsnorm_fwd's enable_pdl says so, as the rows kernels are.
Rows whose fp32 sum of squares leaves fp32's range (row_stats.py's rule): the exchange also leaves the row's sum in
shared memory, where the kernel reads it back as one scalar. A cast or one-scale output takes the second pass before
its stores, over the piece the CTA holds (_held_pass); an output with a row max takes it after its plain pass, in a
called function (_restore_row) that reads the CTA's piece back in steps and writes rsigma, the FP8 scale or row max
and y again (_held_pass says why each). Either pass exchanges
the scaled partials a second time (rescaled_exchange_asm: stores into the peers' shared memory and a cluster
barrier, which every CTA of the cluster reaches, their sums being the same bits).
Gluon kernels do not run under TRITON_INTERPRET: off CUDA the launcher refuses (config.cluster), and CI checks the
compiled PTX (ptx_report) instead of running it.

The kernel body stays one function: its loads, exchange and stores hand registers from one step to the next;
_held_pass and _restore_row are the two forms of the second pass.
"""

from __future__ import annotations

import torch
import triton.language as tl

from programs.log import logger
from programs.triton.fp8 import OUT_CAST
from programs.triton.kernels.cluster_exchange import SUM_ASM, VAL2_ASM, arrive_asm, exchange_asm, rescaled_exchange_asm
from programs.triton.kernels.cluster_staging import MAX_CLUSTER, cluster_size, element_size, row_max, x_staged
from tt_rmsnorm.errors import RuleError

try:  # Gluon with CTA-split (CGA) layouts: Triton >= 3.6
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    from programs.triton.kernels.row_stats import DOWN, FP32_MIN_NORMAL, INF, UP

    GLUON = "cga_layout" in getattr(gl.BlockedLayout, "__dataclass_fields__", {})
except ImportError:  # pragma: no cover - older Triton
    GLUON = False

SHARED_LIMIT = 227 * 1024  # Hopper's shared memory a CTA, where torch does not say

VEC = 8  # 16-bit elements a thread loads at once (16 bytes)


def supported(device) -> bool:
    """Whether the cluster kernel can run here: Gluon with CGA layouts and a CUDA device of compute capability >= 9."""
    return GLUON and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def shared_budget(device) -> int:
    """Bytes of shared memory a CTA may stage data in: the device's opt-in maximum (SHARED_LIMIT where torch does
    not say, or off CUDA) less 1 KB for the exchange's slots and Triton's scratch."""
    limit = SHARED_LIMIT
    if device.type == "cuda":
        limit = getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", SHARED_LIMIT)
    return limit - 1024


if GLUON:  # the exchange's PTX strings as the kernel's constexpr globals
    SUM_ASM = gl.constexpr(SUM_ASM)
    VAL2_ASM = gl.constexpr(VAL2_ASM)


def layout(k: int, num_warps: int):
    """[K, CHUNK]: 16 bytes a thread along the row, the K axis over the cluster's CTAs."""
    bases = [[1 << i, 0] for i in range(k.bit_length() - 1)]
    return gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0], bases)


def shared_layout(k: int):
    """[K, CHUNK] in shared memory: each CTA its own row of K, unswizzled (a thread reads back what it stored)."""
    bases = [[1 << i, 0] for i in range(k.bit_length() - 1)]
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0], bases)


if GLUON:
    IDENTITY = gl.constexpr("mov.b32 $0, $1;")  # two 16-bit elements copied as one 32-bit register

    @gluon.jit
    def _piece(P, offs, ok):
        """P at this CTA's columns, as stored: every column (ok None: the row fills the cluster), else 0 past its
        end."""
        if ok is None:
            v = gl.load(P + offs)
        else:
            v = gl.load(P + offs, mask=ok, other=0.0)
        return v

    @gluon.jit
    def _staged(P, offs, ok, SHARED: gl.constexpr):
        """P at this CTA's columns, moved into shared memory: its registers are free again before x is loaded."""
        v = _piece(P, offs, ok)
        s = gl.allocate_shared_memory(v.dtype, v.shape, SHARED)
        s.store(v)
        return s

    @gluon.jit
    def _opaque(xs):
        """An opaque copy of the 16-bit x: converting it again is not merged with an earlier conversion, so x is not
        held as fp32 in between."""
        return gl.inline_asm_elementwise(IDENTITY, "=r,r", [xs], dtype=xs.dtype, is_pure=False, pack=2)

    @gluon.jit
    def _row_store(P, row, kk, v):
        """v [K] (one value a CTA, all equal) at P[row], written by the cluster's first CTA."""
        gl.store(P + row + kk * 0, v, mask=kk == 0)

    @gluon.jit
    def weight_factor(w, w_off: gl.constexpr):
        """The weight as the Gluon forwards multiply by it, w + weight_offset in fp32: row_io.plus_offset's rule
        (no add at offset 0), which a Gluon kernel cannot call."""
        g = w.to(gl.float32)
        if w_off != 0:
            g = g + w_off
        return g

    @gluon.jit
    def _sum_max(a0, a1, b0, b1):  # combine of the (sum of squares, max|x*w|) reduction
        return a0 + b0, gl.maximum(a1, b1)

    @gluon.jit
    def off_range(t):
        """row_stats.off_range: the rows whose ss / N + eps needs the second pass."""
        return (t == INF) | (t < FP32_MIN_NORMAL)

    @gluon.jit
    def held_rstd(x, ss, inv_n, eps):
        """row_stats.stored_rstd for a Gluon kernel holding whole rows x [BLOCK_M, n] (0 past each row's end) in one
        CTA: the second pass over the rows held (the cp.async kernel has registers to spare for it, ptx_report)."""
        t = ss * inv_n + eps
        rs = gl.rsqrt(t)
        off = off_range(t)
        if gl.max(off.to(gl.int32), axis=0) != 0:
            c = gl.where(t == INF, DOWN, UP)
            xc = x * c[:, None]
            rs = gl.where(off, gl.rsqrt(gl.sum(xc * xc, axis=1) * inv_n + eps * c * c) * c, rs)
        return rs

    @gluon.jit
    def fp8_scale(amax, scale_ub, fp8_max):
        """row_io.fp8_scale: NaN stays NaN."""
        return gl.minimum(amax, scale_ub, propagate_nan=tl.PropagateNan.ALL) / fp8_max

    @gluon.jit
    def fwd_cluster_kernel(
        X,
        stride_x,
        Y,
        stride_y,
        W,
        B,
        RSIG,
        SC,
        SCALE_IN,
        N,
        inv_n,
        eps,
        w_off: gl.constexpr,
        scale_ub,
        fp8_max,
        K: gl.constexpr,
        CHUNK: gl.constexpr,
        LAYOUT: gl.constexpr,
        SHARED: gl.constexpr,
        ARRIVE: gl.constexpr,
        EXCHANGE: gl.constexpr,
        RESCALED_EXCHANGE: gl.constexpr,
        SUB: gl.constexpr,
        IDENT: gl.constexpr,
        X_STAGED: gl.constexpr,
        EVEN: gl.constexpr,
        HAS_W: gl.constexpr,
        HAS_B: gl.constexpr,
        STORE_RSIG: gl.constexpr,
        OUT_MODE: gl.constexpr = 0,
        NEED_MAX: gl.constexpr = False,
        PDL: gl.constexpr = False,
    ):
        # OUT_MODE as fp8.OUT_*: 0 the cast output; 1 FP8 with a scale a row, 3 only the row max (both NEED_MAX, the
        # row max exchanged beside the sum: no bias, max|x*rs*w| = rs * max|x*w|); 2 FP8 with the one scale at SCALE_IN
        # PDL: row_io.dependent_launch's two steps (a Gluon kernel cannot call a Triton jit function). The next
        # call's clusters are launched while this grid runs and wait on the SMs for its end: its launch latency is
        # hidden, not this grid's drain (H200, us, with / without:
        # 4096 x 32768 128.7 / 129.7, 2048 x 65536 132.8 / 133.2, 64 x 65536 6.39 / 6.58, 8 x 262144 5.00 / 5.16;
        # FP8 row scales level)
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        row = gl.program_id(0).to(gl.int64)  # the cluster's index: one row a cluster
        kk = gl.arange(0, K, gl.SliceLayout(1, LAYOUT))
        gl.inline_asm_elementwise(ARRIVE, "=r,r", [kk], dtype=gl.int32, is_pure=False, pack=1)
        cols = gl.arange(0, CHUNK, gl.SliceLayout(0, LAYOUT))
        offs = kk[:, None] * CHUNK + cols[None, :]
        if EVEN:
            ok = None
        else:
            ok = offs < N
        # The registers decide how many CTAs share an SM, and the SM's bytes in flight with them: what is not needed
        # until after the exchange waits in shared memory, and x stays as stored (16-bit: half the registers of fp32).
        # 1024 x 262144 (16384 columns a CTA, 8 warps), all in registers: 127 registers, 2 CTAs a SM, 377 us; the
        # weight staged, capped at 64 registers (4 a SM), 363-365 us; with x staged after its sum and the weight
        # loaded during the exchange instead (X_STAGED: its L2 latency behind the exchange's wait, not before x's
        # loads), 361.5 us; 360 us with no weight at all. X_STAGED lost at 32 elements a thread (2048 x 65536 182.7
        # against 179.3, 64 x 65536 9.0 against 7.5; H100).
        if HAS_B:
            bs = _staged(B, offs, ok, SHARED)
        if HAS_W and not X_STAGED:
            ws = _staged(W, offs, ok, SHARED)
        xs = _piece(X + row * stride_x, offs, ok)
        x = xs.to(gl.float32)
        if not NEED_MAX:
            part = gl.sum(x * x, axis=1)
        if X_STAGED:
            xsm = gl.allocate_shared_memory(xs.dtype, xs.shape, SHARED)
            xsm.store(xs)
            if HAS_W:
                wr = _piece(W, offs, ok)
        if NEED_MAX:
            xw = x
            if IDENT:  # x as fp32 then dies with the sum instead of being held beside the weight (32 elements a
                # thread: 96 registers against 64)
                xw = _opaque(xs).to(gl.float32)
            if HAS_W:  # as loaded for staging (the compiler merges the two global loads: 8 wide loads at 32 a thread,
                # x's and the weight's, ptx_report), not from ws: that load would be merged with the one after the
                # exchange, the weight then held across it
                xw = xw * weight_factor(_piece(W, offs, ok), w_off)
            # the sum and the max in one reduction: one pass through shared memory and its barriers where two took
            # theirs (H100, FP8 row scales, us: 1024 x 131072 184.96 -> 153.64, 2048 x 65536 156.43 -> 146.18,
            # 1024 x 262144 312.22 -> 299.90, 4096 x 32768 147.37 -> 138.30; the same bytes)
            part, pmx = gl.reduce((x * x, gl.abs(xw)), 1, _sum_max)
            ss, mx = gl.inline_asm_elementwise(
                EXCHANGE, "=f,=f,f,f", [part, pmx], dtype=(gl.float32, gl.float32), is_pure=False, pack=1
            )
        else:
            ss = gl.inline_asm_elementwise(EXCHANGE, "=f,f", [part], dtype=gl.float32, is_pure=False, pack=1)
        rs = gl.rsqrt(ss * inv_n + eps)
        if not NEED_MAX:  # row_stats' rule over the row held (_held_pass says why only here)
            rs = _held_pass(rs, xsm if X_STAGED else xs, inv_n, eps, LAYOUT, RESCALED_EXCHANGE, X_STAGED)
        if STORE_RSIG:
            _row_store(RSIG, row, kk, rs)
        if NEED_MAX:  # max|y| = rs max|x w|; NaN where y holds a NaN (row_stats.nan_rows)
            p = ss * rs
            mx = gl.where(p == p, mx * rs, p - p)
        if OUT_MODE == 3:
            _row_store(SC, row, kk, mx)
        else:
            if X_STAGED:
                xs = xsm.load(LAYOUT)
            elif IDENT:  # ordered after the exchange: x not held as fp32 across it
                xs = _opaque(xs)
            scale = rs  # read by FP8 outputs only
            if OUT_MODE == 1:
                scale = fp8_scale(mx, scale_ub, fp8_max)
                _row_store(SC, row, kk, scale)
            elif OUT_MODE == 2:
                scale = gl.load(SCALE_IN + kk * 0)
            v = xs.to(gl.float32) * rs[:, None]
            if HAS_W:
                if X_STAGED:
                    wv = wr
                else:
                    wv = ws.load(LAYOUT)
                v = v * weight_factor(wv, w_off)
            if HAS_B:
                v = v + bs.load(LAYOUT).to(gl.float32)
            v = _to_out(v, scale, fp8_max, OUT_MODE)
            gl.store(Y + row * stride_y + offs, v.to(Y.dtype.element_ty), mask=ok)
        if NEED_MAX:  # row_stats' rule for an output with a row max (_held_pass says why here): last, where nothing is
            # held, the range test on the row's sum read back as one scalar (the exchange left it in shared memory),
            # and a row past fp32's range written again from memory by a called function
            row_ss = gl.inline_asm_elementwise(
                SUM_ASM, "=f,r", [gl.program_id(0)], dtype=gl.float32, is_pure=False, pack=1
            )
            if off_range(row_ss * inv_n + eps):
                # a call (noinline): the plain pass's registers are free; only what the output reads is passed
                val2 = gl.inline_asm_elementwise(
                    VAL2_ASM, "=r,r", [gl.program_id(0)], dtype=gl.int32, is_pure=False, pack=1
                )
                _restore_row(
                    row_ss,
                    val2,
                    X,
                    stride_x,
                    Y if OUT_MODE != 3 else None,
                    stride_y,
                    W if HAS_W else None,
                    B if HAS_B else None,
                    RSIG if STORE_RSIG else None,
                    SC,
                    N,
                    inv_n,
                    eps,
                    w_off,
                    scale_ub if OUT_MODE == 1 else 0.0,
                    fp8_max,
                    K,
                    CHUNK,
                    SUB,
                    LAYOUT,
                    RESCALED_EXCHANGE,
                    EVEN,
                    HAS_W,
                    HAS_B,
                    STORE_RSIG,
                    OUT_MODE,
                )

    @gluon.jit
    def _held_pass(rs, xs, inv_n, eps, LAYOUT: gl.constexpr, RESCALED_EXCHANGE: gl.constexpr, X_STAGED: gl.constexpr):
        """rs, or for a row past fp32's range its rescaled value: the second pass over the piece this CTA holds (xs:
        in registers, or in shared memory where X_STAGED), its scaled partials exchanged a second time. Every cast or
        one-scale output takes it, before the stores, inline: at 2048 x 65536 (64 elements a thread under a cap of 64
        registers) the called pass after the stores cost 3.7% (Triton 3.6) and 6.9% (Triton 3.8), this one nothing
        (3.6) and 1.0% (3.8: its code spills under the cap there, and the launcher drops the cap, note_spills). With a
        row max this pass cost 1.53x under Triton 3.8, so those outputs take the called pass (_restore_row)."""
        row_ss = gl.inline_asm_elementwise(SUM_ASM, "=f,r", [gl.program_id(0)], dtype=gl.float32, is_pure=False, pack=1)
        ss = row_ss + gl.zeros_like(rs)
        if off_range(row_ss * inv_n + eps):
            c = gl.where(ss * inv_n + eps == INF, DOWN, UP)
            if X_STAGED:
                xc = xs.load(LAYOUT).to(gl.float32) * c[:, None]
            else:
                xc = xs.to(gl.float32) * c[:, None]
            val2 = gl.inline_asm_elementwise(
                VAL2_ASM, "=r,r", [gl.program_id(0)], dtype=gl.int32, is_pure=False, pack=1
            )
            ss_c = gl.inline_asm_elementwise(
                RESCALED_EXCHANGE,
                "=f,f,r",
                [gl.sum(xc * xc, axis=1), val2 + gl.zeros_like(rs).to(gl.int32)],
                dtype=gl.float32,
                is_pure=False,
                pack=1,
            )
            rs = gl.rsqrt(ss_c * inv_n + eps * c * c) * c
        return rs

    @gluon.jit
    def _to_out(v, scale, fp8_max, OUT_MODE: gl.constexpr):
        """v as stored: FP8 (OUT_MODE 1, 2) divided by the scale and clamped, NaN kept (row_io.fp8_quantize's
        order: a scale bound by scale_ub leaves |v| above the format's range), else as is."""
        if OUT_MODE != 0:
            v = v * gl.where(scale == 0.0, 0.0, 1.0 / scale)[:, None]
            v = gl.maximum(v, -fp8_max, propagate_nan=tl.PropagateNan.ALL)
            v = gl.minimum(v, fp8_max, propagate_nan=tl.PropagateNan.ALL)
        return v

    @gluon.jit(noinline=True)
    def _restore_row(
        row_ss,
        val2,
        X,
        stride_x,
        Y,
        stride_y,
        W,
        B,
        RSIG,
        SC,
        N,
        inv_n,
        eps,
        w_off: gl.constexpr,
        scale_ub,
        fp8_max,
        K: gl.constexpr,
        CHUNK: gl.constexpr,
        SUB: gl.constexpr,
        LAYOUT: gl.constexpr,
        RESCALED_EXCHANGE: gl.constexpr,
        EVEN: gl.constexpr,
        HAS_W: gl.constexpr,
        HAS_B: gl.constexpr,
        STORE_RSIG: gl.constexpr,
        OUT_MODE: gl.constexpr,
    ):
        """The cluster's row written again where the output has a row max (OUT_MODE 1 or 3; row_stats.restore_rows'
        part for a row over K CTAs): each CTA reads its piece back SUB columns a step, its scaled partial sum and
        max|x c w| meet the others' in the second exchange, then rsigma, the FP8 scale or row max and y are written
        again. The second exchange's cluster barrier orders the plain pass's stores before these."""
        row = gl.program_id(0).to(gl.int64)
        kk = gl.arange(0, K, gl.SliceLayout(1, LAYOUT))
        cols = gl.arange(0, SUB, gl.SliceLayout(0, LAYOUT))
        xrow = X + row * stride_x
        acc = gl.full([K, SUB], 0.0, gl.float32, LAYOUT)
        mxa = gl.full([K, SUB], 0.0, gl.float32, LAYOUT)
        ss = row_ss + gl.zeros_like(kk).to(gl.float32)  # the exchanged sum (the same in every CTA) as [K]
        base = val2 + gl.zeros_like(kk)
        c = gl.where(ss * inv_n + eps == INF, DOWN, UP)
        for s0 in range(0, CHUNK, SUB):
            offs = kk[:, None] * CHUNK + s0 + cols[None, :]
            if EVEN:
                ok = None
            else:
                ok = offs < N
            xc = _piece(xrow, offs, ok).to(gl.float32) * c[:, None]
            acc += xc * xc
            if HAS_W:
                xc = xc * weight_factor(_piece(W, offs, ok), w_off)
            mxa = gl.maximum(mxa, gl.abs(xc))
        ss_c, mx = gl.inline_asm_elementwise(
            RESCALED_EXCHANGE,
            "=f,=f,f,f,r",
            [gl.sum(acc, axis=1), gl.max(mxa, axis=1), base],
            dtype=(gl.float32, gl.float32),
            is_pure=False,
            pack=1,
        )
        r = gl.rsqrt(ss_c * inv_n + eps * c * c)
        rs = r * c
        if STORE_RSIG:
            _row_store(RSIG, row, kk, rs)
        p = ss * rs
        mx = gl.where(p == p, mx * r, p - p)
        if OUT_MODE == 3:
            _row_store(SC, row, kk, mx)
        else:
            scale = fp8_scale(mx, scale_ub, fp8_max)
            _row_store(SC, row, kk, scale)
        if OUT_MODE != 3:
            for s0 in range(0, CHUNK, SUB):
                offs = kk[:, None] * CHUNK + s0 + cols[None, :]
                if EVEN:
                    ok = None
                else:
                    ok = offs < N
                v = _piece(xrow, offs, ok).to(gl.float32) * rs[:, None]
                if HAS_W:
                    v = v * weight_factor(_piece(W, offs, ok), w_off)
                if HAS_B:
                    v = v + _piece(B, offs, ok).to(gl.float32)
                v = _to_out(v, scale, fp8_max, OUT_MODE)
                gl.store(Y + row * stride_y + offs, v.to(Y.dtype.element_ty), mask=ok)


def constants(
    n: int,
    chunk: int,
    num_warps: int,
    w_size: int,
    b_size: int,
    store_rsigma: bool,
    x_size: int = 2,
    busy: bool = True,
    out_mode: int = OUT_CAST,
) -> dict:
    """The kernel's constexpr arguments for a row of n in chunk-column pieces; x, weight and bias element sizes in
    bytes (0: no weight or bias), busy as x_staged takes it, out_mode as fp8.OUT_*; as launched and as ptx_report
    compiles it."""
    k, with_max = cluster_size(n, chunk), row_max(out_mode)
    return dict(
        K=k,
        CHUNK=chunk,
        LAYOUT=layout(k, num_warps),
        SHARED=shared_layout(k),
        ARRIVE=arrive_asm(k, 2 if with_max else 1),
        EXCHANGE=exchange_asm(k, with_max),
        RESCALED_EXCHANGE=rescaled_exchange_asm(k, with_max),
        SUB=min(chunk, VEC * 32 * num_warps),
        IDENT=x_size == 2,
        X_STAGED=x_staged(n, chunk, num_warps, w_size, b_size, busy, out_mode),
        EVEN=k * chunk == n,
        HAS_W=w_size > 0,
        HAS_B=b_size > 0,
        STORE_RSIG=store_rsigma,
        OUT_MODE=out_mode,
        NEED_MAX=with_max,
    )


def check(n: int, chunk: int, num_warps: int, device, staged: int = 0) -> int:
    """The cluster size of a launch of chunk columns a CTA at num_warps warps, or the rule it breaks. staged: the
    CTA's staging buffers in bytes (shared_bytes)."""
    k = cluster_size(n, chunk)
    per_thread = chunk // (32 * num_warps)
    if not supported(device):
        raise RuleError(
            "config.cluster",
            "the cluster kernel needs Gluon with CTA-split layouts (Triton >= 3.6) and a CUDA device of compute "
            "capability >= 9 (clusters, distributed shared memory); it does not run under the interpreter",
            f"device {device}, Gluon {GLUON}",
            "config=None",
        )
    if chunk & (chunk - 1) or per_thread < VEC or per_thread % VEC:
        raise RuleError(
            "config.chunk",
            f"a cluster launch's chunk must be a power of two of at least {VEC} elements a thread "
            f"({VEC * 32 * num_warps} at {num_warps} warps)",
            chunk,
            f"chunk={max(chunk, VEC * 32 * num_warps)}",
        )
    if not 2 <= k <= MAX_CLUSTER:
        raise RuleError(
            "config.cluster_size",
            f"a row of {n} in chunks of {chunk} takes {k} CTAs; a cluster holds 2 to {MAX_CLUSTER}",
            k,
            f"chunk between {max(VEC * 32 * num_warps, -(-n // MAX_CLUSTER))} and {n // 2 if n > 1 else 1}",
        )
    limit = shared_budget(device)
    if staged > limit:
        raise RuleError(
            "config.chunk",
            "a cluster CTA stages its chunk of the bias and of the weight (or of x) in shared memory, "
            f"{staged // chunk} bytes a column, within {limit} bytes",
            staged,
            f"chunk={1 << (limit // (staged // chunk)).bit_length() - 1} or less (more CTAs a row)",
        )
    return k


def launch(
    x2: torch.Tensor,
    y2: torch.Tensor,
    weight,
    bias,
    rsigma,
    n: int,
    inv_n: float,
    eps: float,
    weight_offset: float,
    chunk: int,
    num_warps: int,
    maxnreg: int = 0,
    busy: bool = True,
    out_mode: int = OUT_CAST,
    sc=None,
    scale_in=None,
    scale_ub: float = 3.0e38,
    fp8_max: float = 1.0,
    pdl: bool = False,
) -> None:
    """One row a cluster of cluster_size(n, chunk) CTAs of num_warps warps, chunk columns each, at most maxnreg
    registers a thread (0: ptxas decides); busy: at least two CTAs for every SM (x_staged). out_mode (fp8.OUT_*) with
    sc (float32 [M]: the row scales, or the row maxima), scale_in (the one given scale), scale_ub and fp8_max as
    rmsnorm_fwd takes them. rmsnorm_fwd validates the inputs, and the launch shape by check, before any device work."""
    consts = constants(
        n,
        chunk,
        num_warps,
        element_size(weight),
        element_size(bias),
        rsigma is not None,
        x2.element_size(),
        busy,
        out_mode,
    )
    key = (
        n,
        chunk,
        num_warps,
        maxnreg,
        out_mode,
        x2.dtype,
        y2.dtype,
        element_size(weight),
        element_size(bias),
        rsigma is not None,
        busy,
        float(weight_offset),
    )
    cap = register_cap(key, maxnreg)
    dummy = x2
    compiled = fwd_cluster_kernel[(x2.shape[0],)](
        x2,
        x2.stride(0),
        y2,
        y2.stride(0),
        *(t if t is not None else dummy for t in (weight, bias, rsigma, sc, scale_in)),
        n,
        inv_n,
        eps,
        float(weight_offset),
        float(scale_ub),
        float(fp8_max),
        **consts,
        PDL=pdl,
        num_warps=num_warps,
        num_ctas=consts["K"],
        **({"maxnreg": cap} if cap else {}),
        **({"launch_pdl": True} if pdl else {}),
    )
    note_spills(key, cap, getattr(compiled, "n_spills", 0))


# Launches (launch's key) whose register cap the compiler met only by spilling. A cap is there for occupancy (CTAs an
# SM); how many registers the code needs depends on the compiler: the FP8 row-scale launch fits 80 under Triton 3.6
# with either CUDA 12.8's ptxas or CUDA 13.0's (which torch.compile puts in TRITON_PTXAS_PATH), but Triton 3.8 spills
# 144-160 bytes there. Whether spilled code at the higher occupancy beats unspilled code at the lower one varied
# (H100, CUDA 13.0's ptxas: 68-76 bytes spilled at 3 CTAs a SM ran level with or up to 7% faster than
# 88 registers at 2; 228-264 bytes at 4 ran 1.3-2x slower than either), so a cap stays only where it costs at most
# SPILL_OK_BYTES (a few registers stored once, well under the 68 that ran level) and is dropped for that launch from the
# next call on otherwise. Triton 3.8 spills 4-16 bytes under the cap of 64 where the weight is staged at 64 elements a
# thread without a weight offset (Triton 3.6: none, or 2 bytes with few rows). Not timed under Triton 3.8 (no such
# GPU here).
SPILL_OK_BYTES = 16
_SPILLED: set = set()


def register_cap(key: tuple, maxnreg: int) -> int:
    """The cap to compile launch `key` with: maxnreg, or 0 (the compiler's choice) once that cap has spilled."""
    return 0 if key in _SPILLED else maxnreg


def note_spills(key: tuple, cap: int, spill_bytes: int) -> None:
    if cap and spill_bytes > SPILL_OK_BYTES:
        _SPILLED.add(key)
        logger.debug(
            f"cluster launch {key}: {spill_bytes} bytes spilled under a cap of {cap} registers; uncapped from now on"
        )
