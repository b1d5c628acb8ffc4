"""The RMSNorm backward launcher: dx (+ dresidual), dgamma and dbias from the saved rsigma, dgamma deterministic;
rmsnorm_bwd's docstring gives each parameter and the result.

With xhat = h * rs, g = dy * (w + weight_offset) and c = mean(xhat * g) over the row:
    dx = rs * (g - xhat * c) (+ dresidual, the gradient reaching residual_out), dweight = sum_rows dy * xhat,
    dbias = sum_rows dy.
h is the normalized input (x, or residual_out when the residual add was fused).

dweight/dbias: each program accumulates its rows in fp32 and writes one row of a [programs, N] fp32 buffer; a second
kernel sums that buffer column by column in a fixed order. No atomics: the same inputs give the same bits every run.
With one program (M <= BLOCK_M of the rows kernel) its row is the sum: it is stored in the output dtype and the second
kernel is not launched (a second launch would double a decode step's time). Decode-sized inputs (M <= DECODE_M) take
the decode kernel: its column programs sum dweight / dbias over all rows, final in one fixed order.

This module owns the call: its rules (checked before any device work), the outputs and the launches, one function a
kernel. The kernels live in kernels/backward.py, the launch heuristics in backward_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from programs.triton import interpreter
from programs.triton.backward_config import DECODE_M, MAX_ROWS_N, BwdConfig, bwd_config
from programs.triton.checks import as_rows, check_activation, check_same_rows, check_vector
from programs.triton.kernels.backward import (
    bwd_cols_kernel,
    bwd_decode_kernel,
    bwd_rowdot_kernel,
    bwd_rows_kernel,
    bwd_split_kernel,
    bwd_split_words_kernel,
    sum_partials_kernel,
)
from programs.triton.launch import launch_options, resolve_pdl, split_shape, wordable_rows, wordable_weight
from tt_rmsnorm.errors import RuleError


def l2_prefetchable(*rows: torch.Tensor) -> bool:
    """Whether every row of these [M, N] tensors starts 16-byte aligned and is a 16-byte multiple long, as the bulk
    prefetch (kernels.backward.l2_prefetch_row) requires."""
    return all(
        t.data_ptr() % 16 == 0
        and (t.stride(0) * t.element_size()) % 16 == 0
        and (t.shape[1] * t.element_size()) % 16 == 0
        for t in rows
    )


def words_fit(h2: torch.Tensor, dy2: torch.Tensor, dx2: torch.Tensor, weight, need_bias_grad: bool, dresidual) -> bool:
    """Whether the split kernel may hold its blocks as 32-bit words (bwd_split_words_kernel): the rows of h, dy and
    dx wordable (wordable_rows: 16-bit, N, row strides and bases even), the weight absent or 16-bit on a 4-byte
    boundary, no dbias and no dresidual (their accumulator and loads would not fit beside 4 stages)."""
    return (
        wordable_rows(h2)
        and wordable_rows(dy2)
        and wordable_rows(dx2)
        and not need_bias_grad
        and dresidual is None
        and wordable_weight(weight)
    )


def _reduce(partials: torch.Tensor, dtype, pdl: bool = False) -> torch.Tensor:
    g, n = partials.shape
    out = torch.empty(n, dtype=dtype, device=partials.device)
    block = min(128, triton.next_power_of_2(n))
    block_g = min(32, triton.next_power_of_2(g))
    sum_partials_kernel[(triton.cdiv(n, block),)](
        partials,
        out,
        g,
        n,
        BLOCK_G=block_g,
        BLOCK=block,
        PDL=pdl,
        num_warps=4,
        **launch_options(partials.device, pdl=pdl),
    )
    return out


# --- rules of the call, checked before any device work --------------------------------------------------------------


def _check_rsigma(rsigma: torch.Tensor, m: int, device) -> None:
    if (
        rsigma.dtype != torch.float32
        or rsigma.numel() != m
        or rsigma.device != device
        or (m > 1 and rsigma.stride(-1) != 1)
    ):
        raise RuleError(
            "rsigma.shape",
            f"rsigma must be the forward's contiguous float32 [{m}]",
            (tuple(rsigma.shape), rsigma.dtype),
            "rmsnorm_fwd(..., return_rsigma=True).rsigma",
        )


def _check_config(cfg: BwdConfig, h2, dy2, weight, need_bias_grad: bool, dr2, l2_ok: bool, words_ok: bool) -> None:
    m, n = h2.shape
    if (cfg.stream or cfg.l2_ahead) and cfg.kernel != "rows":
        raise RuleError(
            "config.stream", "stream and l2_ahead are options of the rows kernel", cfg, "stream=False, l2_ahead=0"
        )
    if cfg.l2_ahead and (h2.device.type != "cuda" or not l2_ok):
        raise RuleError(
            "config.l2_ahead",
            "the L2 look-ahead is a bulk prefetch in inline PTX: CUDA only, rows 16-byte aligned and a 16-byte "
            "multiple long",
            (h2.device.type, tuple(h2.stride()), n, h2.dtype),
            "l2_ahead=0",
        )
    if cfg.words and (cfg.kernel != "split" or not words_ok or cfg.block_n < 2):
        raise RuleError(
            "config.words",
            "words are the split kernel's (chunk >= 2), for 16-bit h and dy with N, the row strides and the bases "
            "even, a 16-bit weight on a 4-byte boundary or none, no dbias and no dresidual",
            f"kernel {cfg.kernel}, chunk {cfg.block_n}, h {h2.dtype}, dy {dy2.dtype}, weight "
            f"{None if weight is None else weight.dtype}, N {n}, strides {h2.stride(0)}/{dy2.stride(0)}, dbias "
            f"{need_bias_grad}, dresidual {dr2 is not None}",
            "words=False",
        )
    if cfg.stages != 3 and not (cfg.words and cfg.stages == 4):
        raise RuleError(
            "config.stages",
            "the element split kernel holds 3 row blocks; the words kernel 3 or 4",
            (cfg.stages, cfg.words),
            "stages=3",
        )


def _check_decode(cfg: BwdConfig, m: int, n: int) -> None:
    if cfg.kernel == "decode" and (m > DECODE_M or n > MAX_ROWS_N):
        raise RuleError(
            "config.decode",
            "the decode kernel holds a whole row per program and all rows per column program: "
            f"M <= {DECODE_M}, N <= {MAX_ROWS_N}",
            (m, n),
            "config=None",
        )


# --- the launches, one function a kernel ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    """A backward call's launch arguments: the shape, the tensors (absent ones: h as a placeholder) and the grid."""

    cfg: BwdConfig
    dy2: torch.Tensor
    h2: torch.Tensor
    weight: torch.Tensor | None
    rsig: torch.Tensor
    dx2: torch.Tensor
    dr2: torch.Tensor | None
    dwp: torch.Tensor | None
    dbp: torch.Tensor | None
    weight_offset: float
    need_bias_grad: bool
    pdl: bool
    groups: int  # persistent programs (rows), row groups (cols) or row blocks in flight (split)
    splits: int = 1
    xw: int = 1

    @property
    def m(self) -> int:
        return self.h2.shape[0]

    @property
    def n(self) -> int:
        return self.h2.shape[1]

    def placeholder(self, t: torch.Tensor | None) -> torch.Tensor:
        return t if t is not None else self.h2

    def head(self) -> tuple:
        """The inputs every backward kernel reads first: dy, h, the weight and rsigma."""
        return (self.dy2, self.dy2.stride(0), self.h2, self.h2.stride(0), self.placeholder(self.weight), self.rsig)

    def outputs(self) -> tuple:
        """dx (with the dresidual added into it) and the dweight and dbias partials."""
        dr2 = self.dr2
        dr_stride = dr2.stride(0) if dr2 is not None else 0
        dw, db = self.placeholder(self.dwp), self.placeholder(self.dbp)
        return (self.dx2, self.dx2.stride(0), self.placeholder(dr2), dr_stride, dw, db)

    def args(self) -> tuple:
        """The rows, decode and split kernels' shared leading arguments."""
        return (*self.head(), *self.outputs(), self.m, self.n, 1.0 / self.n, self.weight_offset)

    def flags(self) -> dict:
        return dict(HAS_W=self.weight is not None, NEED_DB=self.need_bias_grad, HAS_DRES=self.dr2 is not None)


def _run_rows(L: _Launch) -> None:
    cfg = L.cfg
    bwd_rows_kernel[(L.groups,)](
        *L.args(),
        BLOCK_M=cfg.block_m,
        BLOCK_N=triton.next_power_of_2(L.n),
        STREAM=cfg.stream,
        L2_AHEAD=cfg.l2_ahead,
        PDL=L.pdl,
        num_warps=cfg.num_warps,
        **launch_options(L.h2.device, pdl=L.pdl),
        **L.flags(),
    )


def _run_decode(L: _Launch) -> None:
    cfg = L.cfg
    bwd_decode_kernel[(L.m + triton.cdiv(L.n, cfg.block_n),)](
        *L.args(),
        BLOCK_M=triton.next_power_of_2(L.m),
        BLOCK_N=triton.next_power_of_2(L.n),
        COLS=cfg.block_n,
        PDL=L.pdl,
        num_warps=cfg.num_warps,
        **launch_options(L.h2.device, pdl=L.pdl),
        **L.flags(),
    )


def _run_cols(L: _Launch) -> None:
    cfg, m, n = L.cfg, L.m, L.n
    c = torch.empty(m, dtype=torch.float32, device=L.h2.device)
    chunk = min(4096, triton.next_power_of_2(n))
    bwd_rowdot_kernel[(m,)](
        *L.head(), c, m, n, 1.0 / n, L.weight_offset, HAS_W=L.weight is not None, CHUNK=chunk, num_warps=8
    )
    bwd_cols_kernel[(triton.cdiv(n, cfg.block_n), L.groups)](
        *L.head(),
        c,
        *L.outputs(),
        m,
        n,
        L.weight_offset,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        num_warps=cfg.num_warps,
        **L.flags(),
    )


def _run_split(L: _Launch) -> None:
    cfg = L.cfg
    xdot = torch.zeros(L.m * L.xw, dtype=torch.int64, device=L.h2.device)  # exchange words, unflagged
    split = dict(
        SPLITS=L.splits,
        XW=L.xw,
        CHUNK=cfg.block_n,
        BLOCK_M=cfg.block_m,
        num_warps=cfg.num_warps,
        **launch_options(L.h2.device, L.splits, cfg.maxnreg),
    )
    grid = (L.splits * L.groups,)
    if cfg.words:
        bwd_split_words_kernel[grid](*L.args(), xdot, STAGES=cfg.stages, HAS_W=L.weight is not None, **split)
    else:
        bwd_split_kernel[grid](*L.args(), xdot, **split, **L.flags())


_RUNNERS = {"rows": _run_rows, "decode": _run_decode, "cols": _run_cols, "split": _run_split}


def rmsnorm_bwd(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rsigma: torch.Tensor,
    *,
    weight_offset: float = 0.0,
    dresidual: torch.Tensor | None = None,
    need_bias_grad: bool = False,
    bias_dtype: torch.dtype | None = None,
    config: BwdConfig | None = None,
    enable_pdl: bool | None = None,
):
    """The gradients of RMSNorm from the forward's saved rsigma (the module docstring gives the formulas); dweight and
    dbias are summed over the rows in a fixed order, the same bits every run.

    Parameters
    ----------
    dy: torch.Tensor
        The gradient reaching y, h's shape.
    h: torch.Tensor
        [..., N] bf16, fp16 or fp32, what the forward normalized: x, or residual_out where it added a residual.
    weight: torch.Tensor | None
        The forward's weight [N] on h's device, or None.
    rsigma: torch.Tensor
        The forward's rsigma: contiguous float32 [M] (rmsnorm_fwd(..., return_rsigma=True).rsigma).
    weight_offset: float
        The forward's weight offset.
    dresidual: torch.Tensor | None
        The gradient reaching residual_out, h's shape, added to dx; None where the forward took no residual.
    need_bias_grad: bool
        Whether to compute dbias.
    bias_dtype: torch.dtype | None
        dbias's dtype: None (h.dtype), or the forward's bias dtype.
    config: BwdConfig | None
        The launch to run in place of backward_config.bwd_config's choice; its rules hold before any launch.
    enable_pdl: bool | None
        Programmatic dependent launch as rmsnorm_fwd takes it: the rows and decode kernels and the partials' sum wait
        for the kernel before them, then let the next one launch; the split kernel, whose programs must all be
        resident at once, and the interpreter's two-kernel path launch plainly.

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
        dx: h's shape and dtype (dresidual included).
        dweight: [N] in weight's dtype, or None without a weight.
        dbias: [N] in bias_dtype, or None unless need_bias_grad.

    Raises
    ------
    RuleError
        An argument or launch a rule refuses (its id, the value seen, the fix), before any launch.
    """
    check_activation(h, "h")
    check_same_rows(dy, h, "dy")
    check_same_rows(dresidual, h, "dresidual")
    n = h.shape[-1]
    check_vector(weight, n, "weight", h.device)
    h2, dy2 = as_rows(h, "h"), as_rows(dy, "dy")
    m = h2.shape[0]
    _check_rsigma(rsigma, m, h.device)
    pdl = resolve_pdl(h.device, enable_pdl)
    dx = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    dx2 = dx.view(-1, n)
    dr2 = as_rows(dresidual, "dresidual") if dresidual is not None else None
    l2_ok = l2_prefetchable(h2, dy2)
    words_ok = words_fit(h2, dy2, dx2, weight, need_bias_grad, dr2)
    cfg = config or bwd_config(m, n, h.device, l2_ok, words_ok)
    _check_config(cfg, h2, dy2, weight, need_bias_grad, dr2, l2_ok, words_ok)
    groups, splits, xw = max(1, cfg.programs or 1), 1, 1
    if cfg.kernel == "split":
        splits, xw, groups = split_shape(m, n, cfg.block_n, cfg.block_m, cfg.programs, h.device)
    _check_decode(cfg, m, n)
    runner = _RUNNERS.get(cfg.kernel)
    if runner is None and m > 0:
        raise RuleError(
            "config.kernel", "config.kernel must be 'rows', 'cols', 'split' or 'decode'", cfg.kernel, "config=None"
        )
    interpreter.use_exact_casts(h.device)
    # one program, or column programs over all rows (decode): the result is stored in its own dtype (module docstring)
    final = groups == 1 or cfg.kernel == "decode"
    db_dtype = bias_dtype or h.dtype

    def partials(dtype):
        return torch.empty((n,) if final else (groups, n), dtype=dtype if final else torch.float32, device=h.device)

    dwp = partials(weight.dtype) if weight is not None else None
    dbp = partials(db_dtype) if need_bias_grad else None
    if m > 0:
        rsig = rsigma.reshape(m)
        tensors = (dy2, h2, weight, rsig, dx2, dr2, dwp, dbp)
        runner(_Launch(cfg, *tensors, float(weight_offset), need_bias_grad, pdl, groups, splits, xw))
    else:
        for p in (dwp, dbp):
            if p is not None:
                p.zero_()
    if final:
        return dx, dwp, dbp
    dw = _reduce(dwp, weight.dtype, pdl) if weight is not None else None
    db = _reduce(dbp, db_dtype, pdl) if need_bias_grad else None
    return dx, dw, db
