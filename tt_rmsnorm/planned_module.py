"""What every norm module shares: its calls planned once per signature in the package's one plan cache
(`PlannedModule`, each call bound to its plan and weight: `BoundCall`), the modes and the distribution policy a module
asks per mode, and the width its inputs must have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import ttnn

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planning import paths
from tt_rmsnorm.signature import Held, Signature
from tt_rmsnorm.tensors import TensorDesc

MODES = ("decode", "prefill")


def mode_name(mode) -> str:
    """ "decode" or "prefill" for a mode given as a string or as tt-metal's `Mode` enum (by its value or its name)."""
    if mode in MODES:
        return mode
    value, name = getattr(mode, "value", None), getattr(mode, "name", None)
    for candidate in (value, name.lower() if isinstance(name, str) else None):
        if candidate in MODES:
            return candidate
    raise RuleError(
        "module.mode", "mode must be 'decode' or 'prefill' (or tt-metal's Mode enum)", mode, 'mode="decode"'
    )


def default_is_distributed(num_devices: int):
    """The default policy: distributed in both modes whenever the gather axis has more than one device, since the
    activations the package is called with are sharded over that axis (a decode input in L1 then runs the fused op,
    prefill the async pre/gather/post). A model that keeps replicated activations in a mode passes its own callable."""
    return lambda mode: num_devices > 1


def distribution_policy(is_distributed, num_devices: int):
    """The `is_distributed(mode)` callable of a module: None takes the default policy, a bool holds in every mode
    (False: never distributed), a callable is the policy itself."""
    if is_distributed is None:
        return default_is_distributed(num_devices)
    if isinstance(is_distributed, bool):
        return lambda mode: is_distributed
    if callable(is_distributed):
        return is_distributed
    raise RuleError(
        "module.is_distributed",
        "is_distributed must be None, a bool or a callable of the mode",
        type(is_distributed).__name__,
        'is_distributed=lambda mode: mode == "prefill"',
    )


def check_input_width(x, dim: int, num_devices: int, distributed: bool) -> None:
    """The widths a norm takes: `dim` replicated, `dim / n` where distributed (x a ttnn tensor or its description)."""
    if not isinstance(x, ttnn.Tensor | TensorDesc):
        raise RuleError(
            "input.ttnn_tensor",
            "x must be a ttnn mesh tensor",
            type(x).__name__,
            "tt_rmsnorm.shard_activation(x, mesh_device)",
        )
    width = dim // num_devices if distributed else dim
    seen = tuple(x.shape)[-1]
    if seen != width:
        kind = "distributed" if distributed else "replicated"
        fix = (
            "shard the activation over the gather axis (tt_rmsnorm.shard_activation), or make the mode replicated"
            if distributed
            else "gather the fractured activation to full width first, or make the mode distributed"
        )
        raise RuleError(
            "module.input_width",
            f"a {kind} norm of dim {dim} on {num_devices} devices takes inputs {width} wide per device",
            f"width {seen}",
            fix,
        )


class BoundCall(NamedTuple):
    """A module's planned call: `run(x, weight, residual)` makes its ttnn calls, `weight` is the weight it binds,
    `plan` the norm's checked path plan and `output` describes what the call returns (the output tensor), for a module
    that plans what it does with it."""

    run: Callable
    weight: object
    plan: paths.PathPlan
    output: TensorDesc


class PlannedModule:
    """A module whose calls are planned once per signature in the package's one plan cache (`tt_rmsnorm.plan_cache`),
    each bound to its plan and weight once its rules have passed (`BoundCall`): a known signature runs its ttnn calls
    and nothing else. A subclass's `plan(mesh_device=..., **fields)` makes the call of a new signature; its forward
    asks `planned(mesh_device=..., x=..., mode=..., ...)` with the signature's fields.

    The signature names the module by identity, with the other modules whose attributes its plans read
    (`bound_modules`): setting any attribute of one of them forgets those plans (a planned call binds the weights and
    configs as they were when it was planned)."""

    def bound_modules(self) -> tuple:
        """The modules whose attributes this module's plans bind: itself."""
        return (self,)

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if self.__dict__.get("_has_plans"):
            object.__setattr__(self, "_has_plans", False)
            PLANS.forget(self)

    def plan_new(self, signature: Signature, held: Held, x, residual) -> BoundCall:
        """The call of a new signature (`plan`), the modules it reads marked as holding plans."""
        call = self.plan(signature, held, x, residual)
        for m in self.bound_modules():
            if isinstance(m, PlannedModule):
                object.__setattr__(m, "_has_plans", True)
        return call

    def plan(self, signature: Signature, held: Held, x, residual) -> BoundCall:
        raise NotImplementedError
