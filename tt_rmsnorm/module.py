"""`DistributedRMSNorm`: the norm module a model's decoder layer instantiates (twice per layer), with tt-metal's
conventions (`models/common/rmsnorm.py`): weights from a state_dict by key, tilized once into cache files, an optional
unit offset for Gemma-style weights, and an `is_distributed(mode)` policy.

Create the module (and one `CCLResources` shared by every module of the model) before any trace capture, call it once
per mode and shape eagerly (the warm-up plans and allocates), then capture and replay: a planned call makes only its
ttnn calls and allocates no semaphore or buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
import ttnn

from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm import op_outputs, topology
from tt_rmsnorm.ccl import CCLResources, resources_for
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planning import layouts, paths
from tt_rmsnorm.rules import op_checks
from tt_rmsnorm.rules.common import GAMMA_DTYPES, enum_name
from tt_rmsnorm.signature import Held, Signature, signature
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.tiles import TILE
from tt_rmsnorm.torch_norms import read_torch_norm

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


def weight_name(weight_key: str, layer_num=None, state_dict_prefix=None) -> str:
    """The state_dict key of the norm's weight, by tt-metal's convention: `{prefix}{key}.weight` with a prefix,
    `layers.{n}.{key}.weight` with a layer number, else `{key}.weight`."""
    if state_dict_prefix:
        return f"{state_dict_prefix}{weight_key}.weight"
    if layer_num is not None:
        return f"layers.{layer_num}.{weight_key}.weight"
    return f"{weight_key}.weight"


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


def state_dict_weight(state_dict, name: str, dim: int) -> torch.Tensor:
    """The norm's weight from the checkpoint, as float: `dim` elements under `name`."""
    if name not in state_dict:
        raise RuleError(
            "module.weight_key",
            "the norm's weight is not in the state_dict",
            name,
            "check weight_key / layer_num / state_dict_prefix against the checkpoint's keys",
        )
    torch_weight = torch.as_tensor(state_dict[name]).reshape(-1).float()
    if torch_weight.numel() != dim:
        raise RuleError("module.weight_size", "the weight must have `dim` elements", torch_weight.numel(), f"dim={dim}")
    return torch_weight


def gathered_memory_config(memory_config, num_devices: int):
    """Where the full-width gather of a norm's output goes: a width-sharded output keeps its cores with shards
    `num_devices` times as wide (the per-device shard spec cannot hold the gathered width); any other layout as is."""
    spec = memory_config.shard_spec
    if memory_config.memory_layout != ttnn.TensorMemoryLayout.WIDTH_SHARDED or spec is None:
        return memory_config
    height, width = spec.shape
    wide = ttnn.ShardSpec(spec.grid, [height, width * num_devices], spec.orientation)
    return ttnn.MemoryConfig(memory_config.memory_layout, memory_config.buffer_type, wide)


# Block-float dtypes hold a shared exponent per tile face: ttnn stores them in TILE layout only.
BLOCK_DTYPES = (ttnn.bfloat8_b, ttnn.bfloat4_b)


def row_major_fits(dim: int, dtype, compute_kernel_config, arch=None) -> bool:
    """Whether ttnn's interleaved rms_norm over a full `dim`-wide row holds a ROW_MAJOR weight in one core's L1 of
    `arch` (None: the default architecture)."""
    weight = TensorDesc((1, 1, dim // TILE, TILE), dtype=dtype, layout=ttnn.ROW_MAJOR_LAYOUT, arch=arch)
    try:
        op_checks.check_rms_norm(
            TensorDesc((1, 1, TILE, dim), arch=arch),
            epsilon=1e-5,
            weight=weight,
            compute_kernel_config=compute_kernel_config,
        )
    except RuleError as e:
        if e.rule == "rms_norm.l1_budget":
            return False
        raise
    return True


class WeightLoader:
    """Puts a norm weight on the mesh as tt-metal's norm modules do, tilized once into `cache / name` when a cache
    path is given: ROW_MAJOR [1, 1, dim/32, 32] or TILE [1, 1, 1, dim], replicated, or split over `axis` into each
    device's slice."""

    def __init__(self, mesh_device, dim: int, dtype, memory_config, cache: Path | None):
        self.mesh_device, self.dim, self.dtype, self.cache = mesh_device, dim, dtype, cache
        self.memory_config = memory_config or ttnn.DRAM_MEMORY_CONFIG

    def replicated(self, torch_weight, name: str, compute_kernel_config):
        """(the replicated weight, the weight an interleaved input takes, a callable): ROW_MAJOR as tt-metal loads
        it, and the same tensor for interleaved inputs; a block-float dtype TILE for both (it cannot be ROW_MAJOR);
        where ttnn's interleaved rms_norm cannot hold a full ROW_MAJOR row beside its buffers (8192 on one device),
        a TILE copy, loaded the first time an interleaved input asks for it (the warm-up call). A width that is not
        a multiple of 32 is TILE too: ttnn pads it to tiles with zeros, which the norm never reads."""
        if self.dtype in BLOCK_DTYPES or self.dim % TILE:  # neither can be ROW_MAJOR [dim/32, 32]
            weight = self(torch_weight, name, None, ttnn.TILE_LAYOUT)
            return weight, lambda: weight
        weight = self(torch_weight, name, None)
        if row_major_fits(self.dim, self.dtype, compute_kernel_config, self.mesh_device.arch()):
            return weight, lambda: weight
        made = []

        def tile_copy():
            if not made:
                made.append(self(torch_weight, name, None, ttnn.TILE_LAYOUT))
            return made[0]

        return weight, tile_copy

    def distributed(self, torch_weight, name: str, axis):
        """Each device's slice of the weight, ROW_MAJOR, as the distributed post and the fused op take it."""
        if self.dtype not in GAMMA_DTYPES:
            raise RuleError(
                "weight.dtype",
                "the distributed post and fused_rms_minimal take a bfloat16 or float32 weight",
                enum_name(self.dtype),
                "weight_dtype=ttnn.bfloat16 (a distributed norm's weight is dim/n wide: bfloat8_b saves nothing)",
            )
        return self(torch_weight, f"{name}_distributed", axis)

    def __call__(self, torch_weight, name: str, axis, layout=ttnn.ROW_MAJOR_LAYOUT):
        if axis is not None:  # a slice a device: the distributed norm's per-device widths are whole tiles
            topology.check_local_width(self.dim, tuple(self.mesh_device.shape)[axis], "weight")
        if layout == ttnn.ROW_MAJOR_LAYOUT:
            shaped, dim = torch_weight.reshape(1, 1, self.dim // TILE, TILE), 2
        else:
            shaped, dim = torch_weight.reshape(1, 1, 1, self.dim), 3
        return ttnn.as_tensor(
            shaped,
            dtype=self.dtype,
            layout=layout,
            device=self.mesh_device,
            memory_config=self.memory_config,
            mesh_mapper=topology.mapper(self.mesh_device, axis, dim),
            cache_file_name=None if self.cache is None else self.cache / name,
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


class DistributedRMSNorm(PlannedModule):
    """RMSNorm over `dim`, its input sharded over `cluster_axis` of `mesh_device` where `is_distributed(mode)` holds
    and replicated (full `dim` on every device) otherwise.

    forward(x, mode="decode" | "prefill", residual=None) returns the output, or `(output, residual)` with a residual,
    x + residual written into `residual` in place (`tt_rmsnorm.distributed_rms_norm`'s residual contract).
    `output_memory_config` (per mode, or one for both) places the output for the next matmul; `gather_output=True`
    all-gathers a distributed output along the axis so every device holds all of `dim`. `ccl`: a `CCLResources` of the
    mesh and axis, or the model's own CCL object (tt-metal's TT_CCL), whose cycled semaphores both gathers then use;
    None creates the module's own resources.

    A call is planned and checked once per signature (the mode, the policy's answer, x's and the residual's specs);
    later calls with that signature make only their ttnn calls. Setting an attribute of the module plans again; a
    config object changed in place after a call is not seen (assign a new one).
    """

    def __init__(
        self,
        mesh_device,
        dim: int,
        state_dict: dict,
        weight_key: str,
        *,
        layer_num=None,
        state_dict_prefix=None,
        weight_cache_path=None,
        weight_dtype=ttnn.bfloat16,
        weight_memory_config=None,
        eps: float = 1e-5,
        add_unit_offset: bool = False,
        is_distributed=None,
        cluster_axis=None,
        ccl=None,
        compute_kernel_config=None,
        output_memory_config=None,
        gather_output: bool = False,
    ):
        self.mesh_device = mesh_device
        self.dim = dim
        self.eps = eps
        self.cluster_axis, self.num_devices = topology.resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
        self.is_distributed = distribution_policy(is_distributed, self.num_devices)
        self.compute_kernel_config = compute_kernel_config
        self.output_memory_config = output_memory_config
        self.gather_output = gather_output
        name = weight_name(weight_key, layer_num, state_dict_prefix)
        torch_weight = state_dict_weight(state_dict, name, dim)
        if add_unit_offset:
            torch_weight = torch_weight + 1.0  # Gemma stores w - 1; the kernels multiply by w
        cache = Path(weight_cache_path) if weight_cache_path is not None else None
        load = WeightLoader(mesh_device, dim, weight_dtype, weight_memory_config, cache)
        self.weight, self._weight_interleaved = load.replicated(
            torch_weight, name, compute_kernel_config or layouts.compute_kernel_config()
        )
        self.weight_distributed = None
        if self.num_devices > 1 and is_distributed is not False:  # a norm that is never distributed needs no slices
            self.weight_distributed = load.distributed(torch_weight, name, self.cluster_axis)
        # a model's CCL object (tt-metal's TT_CCL) is adopted here, so that the output gather cycles its handles too
        self.ccl = resources_for(ccl, mesh_device, self.cluster_axis)
        if self.ccl is None and self.num_devices > 1:
            self.ccl = CCLResources(mesh_device, cluster_axis=self.cluster_axis)

    @classmethod
    def from_torch(
        cls, norm, mesh_device, *, weight_key: str = "norm", activation_dtype=torch.bfloat16, **kwargs
    ) -> DistributedRMSNorm:
        """The module of a torch norm module: `torch.nn.RMSNorm`, or a Hugging Face RMSNorm of the Llama or Gemma
        convention (`tt_rmsnorm.torch_norms`: how each holds its epsilon and weight), its epsilon and weight read from
        it.

        norm: the torch module.
        mesh_device: the mesh.
        weight_key: the name its weight is cached under (with `layer_num` / `state_dict_prefix`, as the constructor).
        activation_dtype: the dtype of the activations, whose epsilon `torch.nn.RMSNorm(eps=None)` takes.
        kwargs: the constructor's other keywords (`cluster_axis`, `is_distributed`, `ccl`, `weight_dtype`, ...).
        Returns the module."""
        given = sorted(k for k in ("eps", "add_unit_offset") if k in kwargs)
        if given:
            raise RuleError(
                "module.from_torch",
                "from_torch reads the epsilon and the weight's unit offset from the torch module",
                f"{', '.join(given)} given",
                "set them on the torch module, or build DistributedRMSNorm(mesh_device, dim, state_dict, ...)",
            )
        read = read_torch_norm(norm, activation_dtype)
        name = weight_name(weight_key, kwargs.get("layer_num"), kwargs.get("state_dict_prefix"))
        return cls(mesh_device, read.dim, {name: read.weight}, weight_key, eps=read.epsilon, **kwargs)

    def _output_memory_config(self, mode: str):
        mc = self.output_memory_config
        return mc.get(mode) if isinstance(mc, dict) else mc

    def forward(self, x, mode: str = "decode", residual=None):
        called, held = signature(
            mesh_device=self.mesh_device,
            modules=self.bound_modules(),
            x=x,
            residual=residual,
            mode=mode,
            distributed=self.is_distributed(mode),  # asked every call, as tt-metal's modules ask it
        )
        call = PLANS.planned(called, held, self.plan_new, x, residual)
        return call.run(x, call.weight, residual)

    __call__ = forward

    def plan(self, signature: Signature, held: Held, x, residual) -> BoundCall:
        """The call of this signature, its rules checked: the distributed norm (and the output gather), or the
        replicated rms_norm."""
        mesh_device, mode, distributed = self.mesh_device, signature.mode, signature.distributed
        mode = mode_name(mode)
        check_input_width(x, self.dim, self.num_devices, distributed=bool(distributed))
        distributed_calls.check_tensors(x, None, residual)
        if not distributed:
            w = self.weight if x.is_sharded() else self._weight_interleaved()
            plan = distributed_calls.plan_replicated(
                mesh_device,
                describe(x),
                describe(w),
                describe(residual),
                epsilon=self.eps,
                memory_config=self._output_memory_config(mode),
                compute_kernel_config=self.compute_kernel_config,
            )
            return BoundCall(plan.run, w, plan, plan.output_desc(describe(x)))
        w = self.weight_distributed
        plan = distributed_calls.planned_call(
            x,
            w,
            mesh_device,
            epsilon=self.eps,
            cluster_axis=self.cluster_axis,
            residual=residual,
            memory_config=self._output_memory_config(mode),
            compute_kernel_config=self.compute_kernel_config,
            ccl=self.ccl,
        )
        output = plan.output_desc(describe(x))
        if not self.gather_output:
            return BoundCall(plan.run, w, plan, output)
        # judged before the norm runs, so that a gather that cannot run leaves x and the residual untouched
        gathered_mc = gathered_memory_config(output.memory_config, self.num_devices)
        self.ccl.check_gather(output, gathered_mc, cluster_axis=self.cluster_axis, num_links=self.ccl.links.num_links)
        gathered = op_outputs.gathered_desc(output, 3, self.num_devices, gathered_mc)
        run = plan.run

        def gathered_run(x, w, residual):
            return self._gathered(run(x, w, residual), gathered_mc)

        return BoundCall(gathered_run, w, plan, gathered)

    def _gathered(self, out, memory_config):
        """All-gather the output slices along the axis (trace-safe: the CCL resources' cycled semaphores)."""
        y, summed = out if isinstance(out, tuple) else (out, None)
        semaphores, barrier = self.ccl.next_gather()
        y = route()(ttnn.experimental.all_gather_async)(
            y,
            dim=3,
            cluster_axis=self.cluster_axis,
            mesh_device=self.mesh_device,
            topology=self.ccl.links.topology,
            multi_device_global_semaphore=semaphores,
            barrier_semaphore=barrier,
            num_links=self.ccl.links.num_links,
            memory_config=memory_config,
        )
        return y if summed is None else (y, summed)
