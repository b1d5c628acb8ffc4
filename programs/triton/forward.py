"""The RMSNorm forward launcher: y = h * rsqrt(mean(h^2) + eps) * (w + weight_offset) (+ bias), h = x (+ residual),
into a float or FP8 output; rmsnorm_fwd's docstring gives each parameter and the result.

This module owns the call: its outputs, the choice of launch (forward_config.py) and the launch itself, one function
a kernel. The rules of forward_rules.py, the launch shape's included, all pass before the call allocates anything. The
kernels live in kernels/forward.py, kernels/forward_split.py, kernels/forward_cluster.py and kernels/forward_async.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton

from programs.triton import fp8 as fp8mod
from programs.triton import interpreter
from programs.triton.checks import (
    as_rows,
    check_activation,
    check_epsilon,
    check_same_rows,
    check_vector,
)
from programs.triton.forward_config import JOINT_MAX_PER_THREAD, FwdConfig, fwd_config
from programs.triton.forward_rules import Call, check_launch, check_output, check_stats, out_mode
from programs.triton.fp8 import OUT_AMAX, OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC
from programs.triton.kernels import forward_async, forward_cluster
from programs.triton.kernels.forward import fwd_looped_kernel, fwd_rows_kernel, row_sumsq_kernel
from programs.triton.kernels.forward_split import fwd_split_kernel, fwd_split_words_kernel
from programs.triton.launch import (
    launch_options,
    resolve_pdl,
    sm_count,
    split_shape,
    wordable_rows,
    wordable_weight,
)


class RMSNormOutput(NamedTuple):
    y: torch.Tensor | None  # output (x's shape), None for the amax-only pass
    rsigma: torch.Tensor | None  # float32 [M] when asked for
    residual_out: torch.Tensor | None  # x + residual when residual was given
    scale: torch.Tensor | None  # FP8: float32 [M] (row) or [1] (tensor)


def split_words_fit(x2: torch.Tensor, out_dtype: torch.dtype, weight, plain: bool) -> bool:
    """Whether the split forward may hold its blocks as words (fwd_split_words_kernel): the rows of x wordable, a
    16-bit output (y is allocated contiguous [M, N], so its rows are then wordable too), the weight absent or 16-bit on
    a 4-byte boundary, and plain: x normalized as given into a cast output, no bias."""
    return plain and wordable_rows(x2) and out_dtype.itemsize == 2 and wordable_weight(weight)


# --- the launches, one function a kernel ----------------------------------------------------------------------------


class _Pass(NamedTuple):
    """One pass over the rows: what it reads (src, the residual r), what it writes and how (out_mode)."""

    src: torch.Tensor
    out_mode: int
    y: torch.Tensor
    sc: torch.Tensor | None  # per-row scales or row maxima written
    scale_in: torch.Tensor | None  # the one given scale read
    store_rsig: bool
    rsig: torch.Tensor | None
    ro: torch.Tensor | None  # residual_out written
    r: torch.Tensor | None  # residual read


@dataclass(frozen=True)
class _Launch:
    """A forward call's fixed launch arguments: the chosen shape, the vectors, the scalars and the FP8 constants."""

    cfg: FwdConfig
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    stats: torch.Tensor | None
    m: int
    n: int
    inv_hidden: float
    eps: float
    weight_offset: float
    ub: float
    fmax: float
    pdl: bool
    busy: bool
    y_consts: tuple[int, float, float]  # fp8.downcast_consts of the output dtype

    def args(self, p: _Pass) -> tuple:
        """The rows, looped and split kernels' shared leading arguments (absent tensors: src as a placeholder)."""
        d = p.src
        st = self.stats
        return (
            p.src,
            p.src.stride(0),
            p.r if p.r is not None else d,
            p.r.stride(0) if p.r is not None else 0,
            p.ro if p.ro is not None else d,
            p.ro.stride(0) if p.ro is not None else 0,
            p.y,
            p.y.stride(0),
            self.weight if self.weight is not None else d,
            self.bias if self.bias is not None else d,
            p.rsig if p.rsig is not None else d,
            p.sc if p.sc is not None else d,
            st if st is not None else d,
            st.stride(0) if st is not None else 0,
            st.shape[0] if st is not None else 0,
            p.scale_in if p.scale_in is not None else d,
            self.m,
            self.n,
            self.inv_hidden,
            self.eps,
            self.weight_offset,
            self.ub,
            self.fmax,
        )

    def flags(self, p: _Pass) -> dict:
        y_drop, y_min, y_sub = self.y_consts
        return dict(
            HAS_W=self.weight is not None,
            HAS_B=self.bias is not None,
            HAS_RES=p.r is not None,
            HAS_STATS=self.stats is not None,
            STORE_RSIG=p.store_rsig,
            OUT_MODE=p.out_mode,
            Y_DROP=y_drop,
            Y_MIN_NORMAL=y_min,
            Y_SUB=y_sub,
        )

    def gluon_args(self, p: _Pass) -> tuple:
        """The Gluon kernels' (cluster, cp.async) shared leading launch arguments."""
        rsig = p.rsig if p.store_rsig else None
        return (p.src, p.y, self.weight, self.bias, rsig, self.n, self.inv_hidden, self.eps, self.weight_offset)

    def run(self, p: _Pass) -> None:
        _RUNNERS[self.cfg.kernel](self, p)


def _run_rows(L: _Launch, p: _Pass) -> None:
    cfg, device = L.cfg, p.src.device
    row_n = block_n = triton.next_power_of_2(L.n)
    if cfg.chunk and cfg.chunk < row_n:
        block_n = cfg.chunk
    slices = row_n // block_n
    grid = (triton.cdiv(L.m, cfg.block_m) * slices,)
    fwd_rows_kernel[grid](
        *L.args(p),
        BLOCK_M=cfg.block_m,
        BLOCK_N=block_n,
        SLICES=slices,
        num_warps=cfg.num_warps,
        PDL=L.pdl,
        JOINT_MAX=cfg.block_m * block_n <= JOINT_MAX_PER_THREAD * 32 * cfg.num_warps,
        GPU=device.type == "cuda",
        **launch_options(device, maxnreg=cfg.maxnreg, pdl=L.pdl),
        **L.flags(p),
    )


def _run_looped(L: _Launch, p: _Pass) -> None:
    cfg, device = L.cfg, p.src.device
    grid = (min(L.m, cfg.programs or sm_count(device)),)
    words = triton.next_power_of_2(triton.cdiv(L.n, 2)) if cfg.words else 0
    fwd_looped_kernel[grid](
        *L.args(p),
        CHUNK=cfg.chunk,
        HEAD=cfg.head,
        WORDS=words,
        REVERSE=cfg.reverse,
        ONE_ROW=grid[0] == L.m,
        num_warps=cfg.num_warps,
        PDL=L.pdl,
        **launch_options(device, maxnreg=cfg.maxnreg, pdl=L.pdl),
        **L.flags(p),
    )


def _run_split(L: _Launch, p: _Pass) -> None:
    cfg, device = L.cfg, p.src.device
    row_max = p.out_mode in (OUT_FP8_ROW, OUT_AMAX)
    exchange = L.stats is None or row_max
    splits, xw, lanes = split_shape(L.m, L.n, cfg.chunk, cfg.block_m, cfg.programs, device, exchange=exchange)
    # the exchange words (split_publish) start unflagged: zeroed per call, one memset for both
    xch = torch.zeros((2 if row_max else 1, L.m * xw), dtype=torch.int64, device=device)
    options = launch_options(device, splits, cfg.maxnreg)
    if cfg.words:
        fwd_split_words_kernel[(splits * lanes,)](
            p.src,
            p.src.stride(0),
            p.y,
            p.y.stride(0),
            L.weight if L.weight is not None else p.src,
            p.rsig if p.rsig is not None else p.src,
            L.m,
            L.n,
            L.inv_hidden,
            L.eps,
            L.weight_offset,
            xch[0],
            SPLITS=splits,
            XW=xw,
            CHUNK=cfg.chunk,
            BLOCK_M=cfg.block_m,
            STAGES=cfg.stages,
            HAS_W=L.weight is not None,
            STORE_RSIG=p.store_rsig,
            num_warps=cfg.num_warps,
            **options,
        )
        return
    fwd_split_kernel[(splits * lanes,)](
        *L.args(p),
        xch[0],
        xch[-1],
        SPLITS=splits,
        XW=xw,
        CHUNK=cfg.chunk,
        BLOCK_M=cfg.block_m,
        num_warps=cfg.num_warps,
        **options,
        **L.flags(p),
    )


def _run_cluster(L: _Launch, p: _Pass) -> None:
    cfg = L.cfg
    tail = (cfg.chunk, cfg.num_warps, cfg.maxnreg, L.busy, p.out_mode, p.sc, p.scale_in, L.ub, L.fmax, L.pdl)
    forward_cluster.launch(*L.gluon_args(p), *tail)


def _run_async(L: _Launch, p: _Pass) -> None:
    forward_async.launch(*L.gluon_args(p), L.cfg.block_m, L.cfg.num_warps, L.pdl)


_RUNNERS = {"rows": _run_rows, "looped": _run_looped, "split": _run_split, "cluster": _run_cluster, "async": _run_async}


def _default_config(c: Call) -> FwdConfig:
    """forward_config.fwd_config asked what this call allows."""
    x2, dev = c.x2, c.x2.device
    m, n = x2.shape
    return fwd_config(
        m,
        n,
        dev,
        fused=c.fused,
        split_ok=not c.row_max_with_bias,
        bias=c.bias is not None,
        words_ok=wordable_rows(x2) and c.of_x,
        split_words_ok=c.split_words_ok,
        cluster_ok=forward_cluster.supported(dev) and c.of_x and not c.row_max_with_bias,
        row_max=c.mode == OUT_FP8_ROW,
        async_ok=forward_async.supported(dev) and forward_async.aligned(x2),
    )


# --- the entry points -----------------------------------------------------------------------------------------------


def rmsnorm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    epsilon: float = 1e-5,
    weight_offset: float = 0.0,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    scale_mode: str = "row",
    scale: torch.Tensor | None = None,
    scale_ub: float = math.inf,
    return_rsigma: bool = False,
    stats: torch.Tensor | None = None,
    hidden_size: int | None = None,
    config: FwdConfig | None = None,
    enable_pdl: bool | None = None,
) -> RMSNormOutput:
    """Fused RMSNorm forward: y = h * rsqrt(mean(h^2) + epsilon) * (weight + weight_offset) (+ bias), where
    h = x (+ residual), in fp32 with 64-bit offsets.

    Parameters
    ----------
    x: torch.Tensor
        [..., N] bf16, fp16 or fp32, the hidden dimension contiguous; rows may be strided.
    weight: torch.Tensor | None
        [N] on x's device; the rows are multiplied by (weight + weight_offset). None: no weight.
    epsilon: float
        Added to mean(h^2) under the square root; >= 0.
    weight_offset: float
        Added to the weight (1.0: a zero-centered gamma); 0.0 without a weight.
    bias: torch.Tensor | None
        [N] on x's device, added after the weight.
    residual: torch.Tensor | None
        x's shape: h = x + residual, rounded to residual.dtype, is normalized and returned as residual_out.
    dtype: torch.dtype | None
        The output dtype: None (x.dtype), bf16, fp16, fp32, torch.float8_e4m3fn or torch.float8_e5m2.
    scale_mode: str
        FP8 output: "row", a float32 scale per row, min(max|v| of the row, scale_ub) / fp8_max; or "tensor", one
        float32 scale, `scale` if given, else min(max|v|, scale_ub) / fp8_max from a first pass over the rows.
        y = fp8(clamp(v / scale)), so v ~= y * scale.
    scale: torch.Tensor | None
        FP8 output with scale_mode="tensor": the static scale, one float32 element on x's device.
    scale_ub: float
        FP8 output: the bound on the max|v| a scale is taken from; > 0 (inf: none).
    return_rsigma: bool
        Whether to return rsigma.
    stats: torch.Tensor | None
        float64 (or float32) [W, M], contiguous rows: the shards' sums of squares (the distributed call's post phase),
        summed in rank order and divided by hidden_size in place of x's own row; rsigma taken from them in float64.
        No residual with stats.
    hidden_size: int | None
        What the sum of squares is divided by: None (N), or the global hidden size >= N beside stats.
    config: FwdConfig | None
        The launch to run in place of forward_config.fwd_config's choice; its rules hold before anything is allocated.
    enable_pdl: bool | None
        Programmatic dependent launch of the rows, looped, cp.async and cluster kernels (None: wherever it runs,
        Hopper and later; True where it cannot run is refused). Each CTA first waits for the previous kernel in the
        stream to finish (griddepcontrol.wait, before any load or store), then lets the next kernel's CTAs launch as
        this grid's free their SMs, so back-to-back PDL kernels overlap one's launch with the other's tail. The split
        launch, whose programs must all be resident at once (they wait on each other through global memory), launches
        plainly; a cluster's CTAs wait only on each other, and the hardware starts them together.

    Returns
    -------
    RMSNormOutput
        y: x's shape, in `dtype`.
        rsigma: float32 [M], rsqrt(mean(h^2) + epsilon) (TransformerEngine's nvte_rmsnorm_fwd rsigma), or None.
        residual_out: h in residual.dtype, x's shape, or None without a residual.
        scale: the FP8 scales, float32 [M] ("row") or [1] ("tensor"), or None for a float output.

    Raises
    ------
    RuleError
        An argument or launch a rule refuses (its id, the value seen, the fix), before any allocation or launch.
    """
    check_activation(x)
    eps = check_epsilon(epsilon)
    n = x.shape[-1]
    check_vector(weight, n, "weight", x.device)
    check_vector(bias, n, "bias", x.device)
    check_same_rows(residual, x, "residual")
    out_dtype, hidden = check_output(x, weight, weight_offset, dtype, scale_mode, scale, scale_ub, hidden_size)
    pdl = resolve_pdl(x.device, enable_pdl)
    x2 = as_rows(x)
    m = x2.shape[0]
    check_stats(stats, residual, m, x.device)
    mode = out_mode(out_dtype, scale_mode, scale)
    r2 = as_rows(residual, "residual") if residual is not None else None
    plain = mode == OUT_CAST and residual is None and stats is None and bias is None
    words_fit = split_words_fit(x2, out_dtype, weight, plain)
    c = Call(x2, weight, bias, residual, stats, out_dtype, mode, scale is not None, words_fit)
    if m:  # no rows: nothing launches, so no launch shape is checked
        cfg = config or _default_config(c)
        busy = check_launch(cfg, c)
    interpreter.use_exact_casts(x.device)

    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    rsig = torch.empty(m, dtype=torch.float32, device=x.device) if return_rsigma else None
    res_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device) if residual is not None else None
    sc = torch.empty(m, dtype=torch.float32, device=x.device) if mode == OUT_FP8_ROW else None
    if m == 0:
        if mode == OUT_FP8_STATIC:
            sc = scale if scale is not None else torch.zeros(1, dtype=torch.float32, device=x.device)
        return RMSNormOutput(y, rsig, res_out, sc)

    y2 = y.view(-1, n)
    fmax = fp8mod.fp8_format(out_dtype).max if mode != OUT_CAST else 1.0
    ub = min(scale_ub, 3.0e38)  # scale_ub as the kernels take it: a finite float32
    consts = fp8mod.downcast_consts(out_dtype)
    scalars = (m, n, 1.0 / hidden, eps, float(weight_offset), float(ub), float(fmax))
    L = _Launch(cfg, weight, bias, stats, *scalars, pdl, busy, consts)
    ro2 = res_out.view(-1, n) if res_out is not None else None
    if c.dynamic_tensor_scale:
        # pass 1: per-row max|v| (also writes residual_out and rsigma); pass 2 quantizes with the one scale
        amax = torch.empty(m, dtype=torch.float32, device=x.device)
        L.run(_Pass(x2, OUT_AMAX, y2, amax, None, return_rsigma, rsig, ro2, r2))
        sc = (torch.clamp(amax.amax(), max=ub) / fmax).reshape(1)
        # pass 2 normalizes residual_out (the rounded sum written by pass 1) when there is a residual
        L.run(_Pass(ro2 if ro2 is not None else x2, OUT_FP8_STATIC, y2, None, sc, False, None, None, None))
    else:
        if mode == OUT_FP8_STATIC:
            sc = scale
        L.run(_Pass(x2, mode, y2, sc if mode == OUT_FP8_ROW else None, scale, return_rsigma, rsig, ro2, r2))
    return RMSNormOutput(y, rsig, res_out, sc)


def row_sum_of_squares(x: torch.Tensor) -> torch.Tensor:
    """float64 [M]: the sum of squares of each row of x [..., N] (float64 accumulation: no row's sum leaves its
    range), the distributed pre-stats."""
    check_activation(x)
    x2 = as_rows(x)
    m, n = x2.shape
    out = torch.empty(m, dtype=torch.float64, device=x.device)
    if m == 0:
        return out
    chunk = min(triton.next_power_of_2(n), 4096)
    block_m = max(1, min(4096 // chunk, 16))
    row_sumsq_kernel[(triton.cdiv(m, block_m),)](x2, x2.stride(0), out, m, n, BLOCK_M=block_m, CHUNK=chunk, num_warps=8)
    return out
