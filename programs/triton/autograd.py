"""Autograd, torch custom ops and the nn.Module drop-in for torch.nn.RMSNorm.

The kernels are registered as torch.library custom ops (namespace `tt_rmsnorm_triton`) with fake implementations, so
torch.compile traces through them without graph breaks and CUDA graphs capture them like any aten op.

    y = rms_norm(x, weight, epsilon=1e-5)                      # autograd through RMSNormFunction
    y, new_residual = rms_norm(x, weight, residual=r)          # fused add: new_residual = x + r
    q, scale, _ = rms_norm_fp8(x, weight, dtype=torch.float8_e4m3fn, scale_mode="row")   # inference
    norm = RMSNorm(4096, eps=1e-6)                             # same parameters and state_dict as torch.nn.RMSNorm
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from programs.triton.backward import rmsnorm_bwd
from programs.triton.forward import rmsnorm_fwd
from tt_rmsnorm.errors import RuleError

_FP8_NAMES = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def _rows(x: Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


@torch.library.custom_op("tt_rmsnorm_triton::rms_norm_fwd", mutates_args=())
def rms_norm_fwd_op(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    epsilon: float,
    weight_offset: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, rsigma float32 [M], residual_out or an empty tensor)."""
    o = rmsnorm_fwd(
        x, weight, epsilon=epsilon, weight_offset=weight_offset, bias=bias, residual=residual, return_rsigma=True
    )
    return o.y, o.rsigma, o.residual_out if residual is not None else x.new_empty(0)


@rms_norm_fwd_op.register_fake
def _(x, weight, bias, residual, epsilon, weight_offset):
    ro = residual.new_empty(residual.shape) if residual is not None else x.new_empty(0)
    return x.new_empty(x.shape), x.new_empty(_rows(x), dtype=torch.float32), ro


@torch.library.custom_op("tt_rmsnorm_triton::rms_norm_bwd", mutates_args=())
def rms_norm_bwd_op(
    dy: Tensor,
    h: Tensor,
    weight: Tensor | None,
    rsigma: Tensor,
    dresidual: Tensor | None,
    weight_offset: float,
    need_bias_grad: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight or empty, dbias float32 or empty)."""
    dx, dw, db = rmsnorm_bwd(
        dy,
        h,
        weight,
        rsigma,
        weight_offset=weight_offset,
        dresidual=dresidual,
        need_bias_grad=need_bias_grad,
        bias_dtype=torch.float32,
    )
    return dx, dw if dw is not None else h.new_empty(0), db if db is not None else h.new_empty(0, dtype=torch.float32)


@rms_norm_bwd_op.register_fake
def _(dy, h, weight, rsigma, dresidual, weight_offset, need_bias_grad):
    n = h.shape[-1]
    dw = weight.new_empty(n) if weight is not None else h.new_empty(0)
    db = h.new_empty(n if need_bias_grad else 0, dtype=torch.float32)
    return h.new_empty(h.shape), dw, db


@torch.library.custom_op("tt_rmsnorm_triton::rms_norm_fp8", mutates_args=())
def rms_norm_fp8_op(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    scale: Tensor | None,
    epsilon: float,
    weight_offset: float,
    fp8_dtype: str,
    scale_mode: str,
    scale_ub: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(y fp8, scale float32 [M] or [1], residual_out or an empty tensor)."""
    o = rmsnorm_fwd(
        x,
        weight,
        epsilon=epsilon,
        weight_offset=weight_offset,
        bias=bias,
        residual=residual,
        dtype=_fp8_dtype(fp8_dtype),
        scale_mode=scale_mode,
        scale=scale,
        scale_ub=scale_ub,
    )
    sc = o.scale if scale is None else o.scale.clone()  # outputs may not alias inputs
    return o.y, sc, o.residual_out if residual is not None else x.new_empty(0)


@rms_norm_fp8_op.register_fake
def _(x, weight, bias, residual, scale, epsilon, weight_offset, fp8_dtype, scale_mode, scale_ub):
    ro = residual.new_empty(residual.shape) if residual is not None else x.new_empty(0)
    n_scales = _rows(x) if scale_mode == "row" else 1
    return x.new_empty(x.shape, dtype=_fp8_dtype(fp8_dtype)), x.new_empty(n_scales, dtype=torch.float32), ro


def _fp8_dtype(name: str) -> torch.dtype:
    if name not in _FP8_NAMES:
        raise RuleError(
            "dtype.fp8", "FP8 output must be float8_e4m3fn or float8_e5m2", name, "dtype=torch.float8_e4m3fn"
        )
    return _FP8_NAMES[name]


class RMSNormFunction(torch.autograd.Function):
    """y, residual_out = RMSNormFunction.apply(x, weight, bias, residual, epsilon, weight_offset).

    residual_out is an empty tensor when residual is None. The backward uses the saved rsigma and h (x, or
    residual_out)."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, epsilon, weight_offset):
        y, rsigma, ro = rms_norm_fwd_op(x, weight, bias, residual, epsilon, weight_offset)
        has_res = residual is not None
        ctx.save_for_backward(ro if has_res else x, weight, rsigma)
        ctx.weight_offset = weight_offset
        ctx.has_res = has_res
        ctx.x_dtype = x.dtype
        ctx.res_dtype = residual.dtype if has_res else None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.mark_non_differentiable(rsigma)
        if not has_res:
            ctx.mark_non_differentiable(ro)
        return y, ro

    @staticmethod
    def backward(ctx, dy, dro):
        h, weight, rsigma = ctx.saved_tensors
        dres = dro.contiguous() if (ctx.has_res and dro is not None) else None
        need_db = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        dx, dw, db = rms_norm_bwd_op(dy.contiguous(), h, weight, rsigma, dres, ctx.weight_offset, need_db)
        gx = dx.to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        gw = dw if (weight is not None and ctx.needs_input_grad[1]) else None
        gb = db.to(ctx.bias_dtype) if need_db else None
        gr = dx.to(ctx.res_dtype) if (ctx.has_res and ctx.needs_input_grad[3]) else None
        return gx, gw, gb, gr, None, None


def rms_norm(
    x: Tensor,
    weight: Tensor | None = None,
    *,
    epsilon: float = 1e-5,
    weight_offset: float = 0.0,
    bias: Tensor | None = None,
    residual: Tensor | None = None,
):
    """RMSNorm with autograd. Returns y, or (y, x + residual) when residual is given."""
    y, ro = RMSNormFunction.apply(x, weight, bias, residual, float(epsilon), float(weight_offset))
    return (y, ro) if residual is not None else y


def rms_norm_fp8(
    x: Tensor,
    weight: Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float8_e4m3fn,
    scale_mode: str = "row",
    scale: Tensor | None = None,
    scale_ub: float = math.inf,
    epsilon: float = 1e-5,
    weight_offset: float = 0.0,
    bias: Tensor | None = None,
    residual: Tensor | None = None,
):
    """Inference RMSNorm to FP8: (y, scale, residual_out or None); y * scale approximates the bf16/fp32 result."""
    name = str(dtype).removeprefix("torch.")
    y, sc, ro = rms_norm_fp8_op(
        x, weight, bias, residual, scale, float(epsilon), float(weight_offset), name, scale_mode, float(scale_ub)
    )
    return y, sc, (ro if residual is not None else None)


class RMSNorm(nn.Module):
    """Drop-in for torch.nn.RMSNorm (same constructor, parameter and state_dict), normalizing the last dimension.

    eps=None means torch.finfo(input.dtype).eps, as torch.nn.RMSNorm."""

    def __init__(
        self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None, dtype=None
    ):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1:
            raise RuleError(
                "normalized_shape.last_dim",
                "only the last dimension can be normalized",
                shape,
                "RMSNorm(hidden_size) on a [..., hidden_size] input",
            )
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != self.normalized_shape:
            raise RuleError(
                "input.hidden_size",
                f"input's last dimension must be {self.normalized_shape[0]}",
                tuple(x.shape),
                "match the module's normalized_shape",
            )
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        return rms_norm(x, self.weight, epsilon=eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
