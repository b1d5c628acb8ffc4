"""RMSNorm forward of whole rows whose x is moved into shared memory by cp.async (Gluon, Ampere and later): QuACK's
load for rows up to 16384 columns. Bytes in flight then hold no registers until they are read back (the Triton rows
kernel's loads hold theirs from issue), which is the difference between the two that the timings below measure.

    forward_async.launch(x2, y2, weight, bias, rsigma, n, inv_n, eps, weight_offset, block_m, num_warps, pdl=False)

H100 (us, medians of 3 alternations, as the default against the launches before it): 4096 x 4096
24.90 against 25.08, 2048 x 4096 10.76 against 11.60, 8192 x 4096 45.60 against the two-pass kernel's 47.61, 1000 x
8192 11.03 against 11.51, 4096 x 8192 47.30 against 47.63, 8192 x 8192 91.60 against 91.93; level at 16384 x 8192,
32768 x 4096 and 4096 x 16384. 16-bit rows must be 16-byte aligned with a stride and length that are multiples of 16
(aligned): cp.async copies 4 bytes or more, and a row of 5000 failed to compile. Gluon kernels do not run under
TRITON_INTERPRET: off CUDA the launcher refuses (config.async), and CI checks the compiled PTX (ptx_report) instead.
"""

from __future__ import annotations

import torch

from programs.triton.kernels.forward_cluster import GLUON, shared_budget
from tt_rmsnorm.errors import RuleError

if GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    from programs.triton.kernels.forward_cluster import held_rstd, weight_factor

VEC_BYTES = 16  # one cp.async moves 16 bytes a thread


def supported(device) -> bool:
    """Whether the kernel can run here: Gluon (Triton >= 3.6) and a CUDA device with cp.async (compute capability
    8+)."""
    return GLUON and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def layout(block_m: int, block_n: int, num_warps: int, x_size: int):
    """[block_m, block_n]: 16 bytes a thread along the row, the warps along the row first, then over rows."""
    vec = VEC_BYTES // x_size
    along = max(1, min(num_warps, block_n // (vec * 32)))
    return gl.BlockedLayout([1, vec], [1, 32], [num_warps // along, along], [1, 0])


def aligned(x2: torch.Tensor) -> bool:
    """Whether x's rows can be copied in 4-byte pieces or wider, as cp.async copies: 4-byte elements, or 16-bit
    rows whose base, stride and length are multiples of 16 (Triton proves alignment only from divisibility by 16)."""
    if x2.element_size() >= 4:
        return True
    return x2.data_ptr() % 16 == 0 and x2.stride(0) % 16 == 0 and x2.shape[1] % 16 == 0


def check(n: int, block_m: int, num_warps: int, x2: torch.Tensor, device) -> None:
    """Refuse a launch that cannot run here, whose x cannot be copied by cp.async, or whose tile does not cover whole
    16-byte loads of every thread or does not fit shared memory."""
    x_size = x2.element_size()
    if not supported(device):
        raise RuleError(
            "config.async",
            "the cp.async rows kernel needs Gluon (Triton >= 3.6) and a CUDA device of compute capability >= 8; it "
            "does not run under the interpreter",
            f"device {device}, Gluon {GLUON}",
            "config=None",
        )
    if not aligned(x2):
        raise RuleError(
            "config.async",
            "cp.async copies 4, 8 or 16 bytes: 16-bit rows need a 16-byte aligned base and a row stride and length "
            "that are multiples of 16 elements (Triton proves alignment from divisibility by 16 only; a row of 5000 "
            "failed to compile)",
            f"base {x2.data_ptr() % 16} bytes past 16, stride {x2.stride(0)}, N {x2.shape[1]}",
            "config=None (the Triton rows kernel takes any alignment)",
        )
    block_n = 1 << (n - 1).bit_length()
    vec = VEC_BYTES // x_size
    if block_m & (block_m - 1) or block_m * block_n < vec * 32 * num_warps:
        raise RuleError(
            "config.block_m",
            f"an async launch's tile (block_m rows, a power of two, of {block_n} columns) must hold at least one "
            f"16-byte load for each of its {32 * num_warps} threads",
            block_m,
            f"block_m={max(1, vec * 32 * num_warps // block_n)}",
        )
    limit = shared_budget(device)
    if block_m * block_n * x_size > limit:
        raise RuleError(
            "config.block_m",
            f"an async launch's tile of x ({block_m} x {block_n} elements of {x_size} bytes) waits in shared memory, "
            f"at most {limit} bytes",
            block_m * block_n * x_size,
            "config=None (rows this long take the other kernels)",
        )


if GLUON:

    @gluon.jit
    def fwd_async_kernel(
        X,
        stride_x,
        Y,
        stride_y,
        W,
        B,
        RSIG,
        M,
        N,
        inv_n,
        eps,
        w_off: gl.constexpr,
        BLOCK_M: gl.constexpr,
        BLOCK_N: gl.constexpr,
        LAYOUT: gl.constexpr,
        SHARED: gl.constexpr,
        EVEN_N: gl.constexpr,
        HAS_W: gl.constexpr,
        HAS_B: gl.constexpr,
        STORE_RSIG: gl.constexpr,
        PDL: gl.constexpr = False,
    ):
        if PDL:  # wait for the previous kernel's writes (row_io.dependent_launch's first step)
            gdc_wait()
        rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, LAYOUT))
        cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, LAYOUT))
        r64 = rows.to(gl.int64)[:, None]
        row_ok = rows < M
        col_ok = cols < N
        ok = row_ok[:, None] & col_ok[None, :]
        xs = gl.allocate_shared_memory(X.dtype.element_ty, [BLOCK_M, BLOCK_N], SHARED)
        cp.async_copy_global_to_shared(xs, X + r64 * stride_x + cols[None, :], mask=ok)
        cp.commit_group()
        # the weight and bias while x is in flight (their latency hidden behind it)
        if HAS_W:
            w = gl.load(W + cols, mask=col_ok, other=0.0)
        if HAS_B:
            b = gl.load(B + cols, mask=col_ok, other=0.0)
        cp.wait_group(0)
        if PDL:
            # the next kernel may launch once every CTA's x has landed, not as soon as every CTA has started: its
            # waiting CTAs then take the SMs' free slots later (us, 7 rounds, trigger here / at the start; H100, two
            # runs: 4096 x 4096 23.90-23.92 / 24.00-24.01, 2048 x 4096 10.07-10.08 / 10.18-10.28, 8192 x 4096
            # 46.32-46.33 / 46.47-46.56; H200: 17.41 / 17.54, 8.55 / 8.74, 34.20 / 34.37, 8192 x 8192 66.19 /
            # 66.50). The two-pass forward measured the other way (H200, 16384 x 8192: 128.39 with
            # its trigger after the sum against 127.78 at the start), so it keeps its trigger at the start.
            gdc_launch_dependents()
        # each thread reads back the bytes it copied (the same layout): no barrier needed between them. The columns
        # past N are zeroed here rather than trusted to the masked copy (whether it zero-fills is the lowering's
        # business; CTAs of earlier launches left their bytes in this shared memory)
        x = xs.load(LAYOUT).to(gl.float32)
        if not EVEN_N:
            x = gl.where(col_ok[None, :], x, 0.0)
        rs = held_rstd(x, gl.sum(x * x, axis=1), inv_n, eps)  # row_stats' rule
        v = x * rs[:, None]
        if HAS_W:
            v = v * weight_factor(w, w_off)[None, :]
        if HAS_B:
            v = v + b.to(gl.float32)[None, :]
        gl.store(Y + r64 * stride_y + cols[None, :], v.to(Y.dtype.element_ty), mask=ok)
        if STORE_RSIG:
            gl.store(RSIG + rows, rs, mask=row_ok)


def constants(n: int, block_m: int, num_warps: int, x_size: int, has_w: bool, has_b: bool, store_rsigma: bool) -> dict:
    """The kernel's constexpr arguments (as launched, and as ptx_report compiles it)."""
    block_n = 1 << (n - 1).bit_length()
    return dict(
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        LAYOUT=layout(block_m, block_n, num_warps, x_size),
        SHARED=gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
        EVEN_N=n == block_n,
        HAS_W=has_w,
        HAS_B=has_b,
        STORE_RSIG=store_rsigma,
    )


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
    block_m: int,
    num_warps: int,
    pdl: bool = False,
) -> None:
    """block_m whole rows a CTA of num_warps warps; pdl: programmatic dependent launch (rmsnorm_fwd's enable_pdl).
    rmsnorm_fwd validates the inputs, and the launch by check, before any device work."""
    m = x2.shape[0]
    consts = constants(
        n, block_m, num_warps, x2.element_size(), weight is not None, bias is not None, rsigma is not None
    )
    dummy = x2
    fwd_async_kernel[(-(-m // block_m),)](
        x2,
        x2.stride(0),
        y2,
        y2.stride(0),
        weight if weight is not None else dummy,
        bias if bias is not None else dummy,
        rsigma if rsigma is not None else dummy,
        m,
        n,
        inv_n,
        eps,
        float(weight_offset),
        **consts,
        num_warps=num_warps,
        PDL=pdl,
        **({"launch_pdl": True} if pdl else {}),
    )
