"""Input rules of the Triton port: every launcher validates here, before any device work, and names the rule broken."""

from __future__ import annotations

import torch

from tt_rmsnorm.errors import RuleError

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_activation(x, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise RuleError(f"{name}.type", f"{name} must be a torch.Tensor", type(x).__name__, "pass a torch tensor")
    if x.dtype not in FLOAT_DTYPES:
        raise RuleError(f"{name}.dtype", f"{name} must be bfloat16, float16 or float32", x.dtype, f"{name}.float()")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise RuleError(
            f"{name}.shape",
            f"{name} needs a non-empty last (hidden) dimension",
            tuple(x.shape),
            "pass [..., N] with N >= 1",
        )
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise RuleError(
            f"{name}.last_dim_stride",
            f"{name}'s hidden dimension must be contiguous (stride 1); rows may be strided",
            tuple(x.stride()),
            f"{name}.contiguous()",
        )


def as_rows(x, name: str = "x") -> torch.Tensor:
    """x as a 2-D [M, N] view (rows may be strided). Leading dims that cannot be flattened without a copy are
    refused."""
    n = x.shape[-1]
    if x.dim() == 2:
        return x
    try:
        return x.view(-1, n)
    except RuntimeError:
        raise RuleError(
            f"{name}.leading_dims",
            f"{name}'s leading dimensions must flatten to one row index without a copy",
            tuple(x.stride()),
            f"{name}.contiguous()",
        ) from None


def check_vector(v, n: int, name: str, device) -> None:
    if v is None:
        return
    if not isinstance(v, torch.Tensor) or v.dim() != 1 or v.shape[0] != n:
        seen = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
        raise RuleError(
            f"{name}.shape", f"{name} must be a 1-D tensor of the hidden size {n}", seen, f"pass {name} of shape [{n}]"
        )
    if v.dtype not in FLOAT_DTYPES:
        raise RuleError(f"{name}.dtype", f"{name} must be bfloat16, float16 or float32", v.dtype, f"{name}.float()")
    if v.device != device:
        raise RuleError(
            f"{name}.device", f"{name} must be on the activation's device {device}", v.device, f"{name}.to(x.device)"
        )
    if n > 1 and v.stride(0) != 1:
        raise RuleError(f"{name}.stride", f"{name} must be contiguous", v.stride(), f"{name}.contiguous()")


def check_same_rows(t, x, name: str) -> None:
    if t is None:
        return
    check_activation(t, name)
    if tuple(t.shape) != tuple(x.shape):
        raise RuleError(
            f"{name}.shape",
            f"{name} must have the activation's shape {tuple(x.shape)}",
            tuple(t.shape),
            f"pass {name} shaped like x",
        )
    if t.device != x.device:
        raise RuleError(
            f"{name}.device", f"{name} must be on the activation's device {x.device}", t.device, f"{name}.to(x.device)"
        )


def check_epsilon(epsilon) -> float:
    eps = float(epsilon)
    if not eps >= 0.0:
        raise RuleError("epsilon.range", "epsilon must be a finite number >= 0", epsilon, "epsilon=1e-5")
    return eps
