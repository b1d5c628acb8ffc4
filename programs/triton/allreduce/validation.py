"""The input rules of a fused all-reduce call, checked before any device work (RuleError names the rule)."""

from __future__ import annotations

import torch

from programs.triton import fp8 as fp8mod
from programs.triton.allreduce.dispatch import PUSHED, Strategy, push_capable
from programs.triton.allreduce.workspace import LAMPORT2_MAX_TOKENS, LAMPORT_MAX_TOKENS, PUSH_MAX_TOKENS
from programs.triton.checks import as_rows, check_activation, check_epsilon, check_vector
from tt_rmsnorm.errors import RuleError


def check_call(
    x, weight, *, residual, epsilon, weight_offset, scale_ub, dtype, strategy, hidden, max_tokens, act_dtype, device
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
    flags = Strategy.ONE_SHOT_FLAGS
    if strategy == flags and not (push_capable(hidden, x.dtype.itemsize) and int32_view_ok(x2)):
        raise RuleError(
            "strategy.push",
            f"{flags.value} needs 16-bit activations, an even hidden size and rows at even element offsets",
            (x.dtype, hidden, x2.stride(0), x2.storage_offset()),
            "strategy=None or strategy='one_shot_lamport'",
        )
    if strategy in PUSHED and not push_capable(hidden, x.dtype.itemsize):
        raise RuleError(
            "strategy.push",
            f"{strategy.value} needs 16-bit activations and an even hidden size",
            (x.dtype, hidden),
            "strategy=None or strategy='two_shot_pulled'",
        )
    caps = {flags: PUSH_MAX_TOKENS, Strategy.ONE_SHOT_LAMPORT: LAMPORT_MAX_TOKENS}
    caps[Strategy.TWO_SHOT_LAMPORT] = LAMPORT2_MAX_TOKENS
    if strategy in caps and x2.shape[0] > min(max_tokens, caps[strategy]):
        cap = min(max_tokens, caps[strategy])
        raise RuleError(
            "strategy.push_tokens", f"{strategy.value} takes at most {cap} rows", x2.shape[0], "strategy=None"
        )
    return x2


def as_strategy(strategy) -> Strategy | None:
    """A call's `strategy` argument: None (the measured choice), a Strategy or its name ("one_shot_lamport")."""
    if strategy is None or isinstance(strategy, Strategy):
        return strategy
    try:
        return Strategy(strategy)
    except ValueError:
        names = [s.value for s in Strategy]
        raise RuleError(
            "strategy.value", f"strategy must be None (measured choice) or one of {names}", strategy, "strategy=None"
        ) from None


def int32_view_ok(x2: torch.Tensor) -> bool:
    return x2.stride(0) % 2 == 0 and x2.storage_offset() % 2 == 0 and x2.shape[-1] % 2 == 0
