"""Float64 references for the Triton tests (the test-side golden; tolerances come only from tt_rmsnorm.accuracy)."""

from __future__ import annotations

import torch


def norm64(x, weight=None, *, epsilon=1e-5, weight_offset=0.0, bias=None, residual=None, hidden_size=None):
    """(v, rsigma, h) in float64: v = h * rsqrt(sum(h^2)/hidden + eps) * (w + offset) + bias, h = x (+ residual, rounded
    to residual's dtype as the kernels define it)."""
    # references are computed on the CPU, whatever device the kernels ran on
    x, weight, bias, residual = (t.cpu() if t is not None else None for t in (x, weight, bias, residual))
    h = x.double()
    if residual is not None:
        h = (h + residual.double()).to(residual.dtype).double()
    n = hidden_size or h.shape[-1]
    rs = torch.rsqrt(h.pow(2).sum(-1, keepdim=True) / n + epsilon)
    v = h * rs
    if weight is not None:
        v = v * (weight.double() + weight_offset)
    if bias is not None:
        v = v + bias.double()
    return v, rs.squeeze(-1), h


def fp8_expected(v, dtype, scale_mode, scale_ub=float("inf"), scale=None):
    """(expected unrounded quantized values, expected scale) for FP8 output of the float64 v."""
    fmax = torch.finfo(dtype).max
    v = v.cpu()
    scale = scale.cpu() if scale is not None else None
    if scale is not None:
        s = scale.double().reshape(())
    elif scale_mode == "row":
        s = v.abs().amax(-1).clamp(max=scale_ub) / fmax
    else:
        s = (v.abs().amax().clamp(max=scale_ub) / fmax).reshape(1)
    sb = s.unsqueeze(-1) if scale_mode == "row" and scale is None else s
    recip = torch.where(sb == 0, torch.zeros_like(sb), 1.0 / sb)
    return (v * recip).clamp(-fmax, fmax), s


def grads64(x, weight, dy, *, epsilon=1e-5, weight_offset=0.0, bias=None, residual=None, dresidual=None):
    """float64 autograd of the reference (on the CPU): dict of gradients for x, weight, bias, residual."""
    x, weight, dy, bias, residual, dresidual = (
        t.detach().cpu() if t is not None else None for t in (x, weight, dy, bias, residual, dresidual)
    )
    xd = x.double().requires_grad_()
    wd = weight.double().requires_grad_() if weight is not None else None
    bd = bias.double().requires_grad_() if bias is not None else None
    rd = residual.double().requires_grad_() if residual is not None else None
    h = xd
    if rd is not None:  # the kernels normalize x + residual rounded to residual's dtype; the rounding passes gradients
        h = xd + rd
        h = h + ((x.double() + residual.double()).to(residual.dtype).double() - h).detach()
    v = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + epsilon)
    if wd is not None:
        v = v * (wd + weight_offset)
    if bd is not None:
        v = v + bd
    loss = (v * dy.double()).sum()
    if rd is not None and dresidual is not None:
        loss = loss + (h * dresidual.double()).sum()
    loss.backward()
    return {
        "x": xd.grad,
        "weight": wd.grad if wd is not None else None,
        "bias": bd.grad if bd is not None else None,
        "residual": rd.grad if rd is not None else None,
    }


def assert_close_cancelling(actual, expected, dtype, *, context=""):
    """The project's policy for results formed by cancellation (dx, y + bias): `tt_rmsnorm.accuracy`,
    cancelling=True."""
    from tt_rmsnorm.accuracy import assert_close

    return assert_close(actual, expected, dtype, context=context, cancelling=True)
