"""The input rules of a fused all-reduce call, checked before any device work (RuleError names the rule)."""

from __future__ import annotations

import torch

from programs.triton import fp8 as fp8mod
from programs.triton.allreduce.dispatch import LAMPORT, LAMPORT2, PUSH, STAGE_NAMES, push_capable
from programs.triton.allreduce.workspace import LAMPORT2_MAX_TOKENS, LAMPORT_MAX_TOKENS, PUSH_MAX_TOKENS
from programs.triton.checks import as_rows, check_activation, check_epsilon, check_vector
from tt_rmsnorm.errors import RuleError


def check_call(
    x, weight, *, residual, epsilon, weight_offset, scale_ub, dtype, stage, hidden, max_tokens, act_dtype, device
) -> torch.Tensor:
    """Every input rule of a fused call, before any device work; returns x as [T, H] rows."""
    check_activation(x)
    check_epsilon(epsilon)
    if x.dtype != act_dtype:
        raise RuleError(
            "x.dtype",
            f"x must have the workspace dtype {act_dtype}",
            x.dtype,
            f"x.to({act_dtype}) or a workspace for {x.dtype}",
        )
    if x.device != device:
        raise RuleError("x.device", f"x must be on this rank's device {device}", x.device, f"x.to('{device}')")
    if x.shape[-1] != hidden:
        raise RuleError(
            "x.hidden",
            f"x's last dimension must be the workspace hidden_size {hidden}",
            tuple(x.shape),
            "a workspace for this hidden size",
        )
    x2 = as_rows(x)
    if x2.shape[0] > max_tokens:
        raise RuleError(
            "x.tokens",
            f"at most max_tokens={max_tokens} rows per call",
            x2.shape[0],
            "split the call or a larger max_tokens",
        )
    check_vector(weight, hidden, "weight", x.device)
    if weight is None and weight_offset != 0.0:
        raise RuleError(
            "weight_offset.no_weight",
            "weight_offset shifts a weight, but weight is None",
            weight_offset,
            "pass weight or weight_offset=0.0",
        )
    if residual is not None:
        if (
            not isinstance(residual, torch.Tensor)
            or residual.shape != x.shape
            or residual.dtype != x.dtype
            or residual.device != x.device
        ):
            seen = (
                (tuple(residual.shape), residual.dtype, str(residual.device))
                if isinstance(residual, torch.Tensor)
                else type(residual).__name__
            )
            raise RuleError(
                "residual.shape",
                "residual must match x in shape, dtype and device",
                seen,
                "residual.to(x.dtype), shaped like x",
            )
        check_activation(residual, "residual")
    fp8mod.fp8_format(dtype)
    if not (scale_ub > 0):
        raise RuleError("scale_ub.range", "scale_ub must be > 0 (inf: no bound)", scale_ub, "scale_ub=math.inf")
    if stage not in (None, *STAGE_NAMES):
        raise RuleError(
            "stage.value", f"stage must be None (measured choice) or one of {sorted(STAGE_NAMES)}", stage, "stage=None"
        )
    if stage == PUSH and not (push_capable(hidden, x.dtype.itemsize) and int32_view_ok(x2)):
        raise RuleError(
            "stage.push",
            "stage 0 needs 16-bit activations, an even hidden size and rows at even element offsets",
            (x.dtype, hidden, x2.stride(0), x2.storage_offset()),
            "stage=None or stage=3",
        )
    if stage in (LAMPORT, LAMPORT2) and not push_capable(hidden, x.dtype.itemsize):
        raise RuleError(
            "stage.push",
            f"stage {stage} needs 16-bit activations and an even hidden size",
            (x.dtype, hidden),
            "stage=None or stage=2",
        )
    for st, cap in ((PUSH, PUSH_MAX_TOKENS), (LAMPORT, LAMPORT_MAX_TOKENS), (LAMPORT2, LAMPORT2_MAX_TOKENS)):
        if stage == st and x2.shape[0] > min(max_tokens, cap):
            raise RuleError(
                "stage.push_tokens", f"stage {st} takes at most {min(max_tokens, cap)} rows", x2.shape[0], "stage=None"
            )
    return x2


def int32_view_ok(x2: torch.Tensor) -> bool:
    return x2.stride(0) % 2 == 0 and x2.storage_offset() % 2 == 0 and x2.shape[-1] % 2 == 0
