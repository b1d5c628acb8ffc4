"""`DistributedRMSNorm`: the norm module a model's decoder layer instantiates (twice per layer), with tt-metal's
conventions (`models/common/rmsnorm.py`): weights from a state_dict by key, tilized once into cache files, an optional
unit offset for Gemma-style weights, and an `is_distributed(mode)` policy.

Create the module (and one `CCLResources` shared by every module of the model) before any trace capture, call it once
per mode and shape eagerly (the warm-up plans and allocates), then capture and replay: a planned call makes only its
ttnn calls and allocates no semaphore or buffer.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import ttnn

from tt_rmsnorm import distributed, topology
from tt_rmsnorm.ccl import CCLResources, resources_for
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PlanCache
from tt_rmsnorm.planning import layouts, paths, planner
from tt_rmsnorm.rules import op_checks
from tt_rmsnorm.rules.common import GAMMA_DTYPES, enum_name
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.tiles import TILE

MODES = ("decode", "prefill")


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
        a TILE copy, loaded the first time an interleaved input asks for it (the warm-up call)."""
        if self.dtype in BLOCK_DTYPES:
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
        n = 1 if axis is None else tuple(self.mesh_device.shape)[axis]
        topology.check_local_width(self.dim, n, "weight")
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
    """The widths a norm takes: `dim` replicated, `dim / n` where distributed."""
    if not isinstance(x, ttnn.Tensor):
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


class LocalNorm:
    """The checked plans of rms_norm of full-width (replicated) activations on every device, one per signature."""

    def __init__(self, mesh_device):
        self.mesh_device = mesh_device
        self.plans = PlanCache()

    def plan(
        self, x, weight, residual=None, *, epsilon, memory_config=None, program_config=None, compute_kernel_config=None
    ) -> paths.PathPlan:
        key = (
            epsilon,
            memory_config,
            None if program_config is None else planner.config_key(program_config),
            None if compute_kernel_config is None else planner.config_key(compute_kernel_config),
        )
        plan = self.plans.find(key, x, weight, residual)
        if plan is not None:
            return plan
        grid = self.mesh_device.compute_with_storage_grid_size()
        call = paths.Call(epsilon=epsilon, memory_config=memory_config, mesh_shape=tuple(self.mesh_device.shape))
        plan = planner.plan_call(
            describe(x),
            describe(weight),
            describe(residual),
            mesh_device=self.mesh_device,
            compute_grid=(grid.x, grid.y),
            num_devices=1,
            call=call,
            path="local",
            program_config=planner.copy_config(program_config),
            compute_kernel_config=planner.copy_config(compute_kernel_config),
        )
        self.plans.remember(key, x, weight, residual, plan)
        return plan


def last_call(last, key, x):
    """A module's last planned call `(run, w)` where this call, without a residual, has its signature (key, x's spec
    and storage), else None: the check a forward makes before `PlannedModule.planned`, without building its
    arguments."""
    if last is not None and last[0] == key and isinstance(x, ttnn.Tensor):
        if last[1] == x.spec and last[2] == x.storage_type():
            return last[3], last[4]
    return None


class PlannedModule:
    """A module whose calls are planned once per signature, each bound to its plan and weight once its rules have
    passed: a known signature runs its ttnn calls and nothing else. Setting any attribute of the module forgets them
    (a planned call binds the module's weights and configs as they were when it was planned).

    A planned call is `(run, w)`, called as `run(x, w, residual)`. The last call without a residual is compared
    first (`last_call`), without a lookup: a decoder calls each of its norms with one signature per mode, and the few
    tenths of a microsecond a lookup costs are a few percent of the host time of a one-chip rms_norm."""

    _last = None  # (key, x's spec, x's storage, run, w) of the last call, where it had no residual

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        self.__dict__.pop("_last", None)
        calls = self.__dict__.get("_planned")
        if calls is not None:
            calls.forget()

    def planned(self, key, x, residual, plan, *args):
        """The call planned for (key, x's and the residual's specs); `plan(*args)` makes it for a new signature."""
        try:
            calls = self.__dict__.get("_planned")
            if calls is None:
                calls = self.__dict__["_planned"] = PlanCache()
            call = calls.find(key, x, None, residual)
            if call is None:
                call = plan(*args)
                calls.remember(key, x, None, residual, call)
            self.__dict__["_last"] = None if residual is not None else (key, x.spec, x.storage_type(), *call)
            return call
        except (AttributeError, TypeError):  # not ttnn tensors, or an unhashable key: checked in full
            return plan(*args)


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
        if self.num_devices > 1:
            self.weight_distributed = load.distributed(torch_weight, name, self.cluster_axis)
        # a model's CCL object (tt-metal's TT_CCL) is adopted here, so that the output gather cycles its handles too
        self.ccl = resources_for(ccl, mesh_device, self.cluster_axis)
        if self.ccl is None and self.num_devices > 1:
            self.ccl = CCLResources(mesh_device, cluster_axis=self.cluster_axis)
        self._local_norm = LocalNorm(mesh_device)

    def _output_memory_config(self, mode: str):
        mc = self.output_memory_config
        return mc.get(mode) if isinstance(mc, dict) else mc

    def forward(self, x, mode: str = "decode", residual=None):
        key = (mode, self.is_distributed(mode))  # the policy is asked every call, as tt-metal's modules ask it
        hit = None if residual is not None else last_call(self._last, key, x)
        run, w = hit or self.planned(key, x, residual, self._plan, x, mode, residual)
        return run(x, w, residual)

    __call__ = forward

    def _plan(self, x, mode, residual):
        """The call for this signature, its rules checked: the distributed norm (and the output gather), or the
        replicated rms_norm."""
        if mode not in MODES:
            raise RuleError("module.mode", "mode must be 'decode' or 'prefill'", mode, 'mode="decode"')
        if not self.is_distributed(mode):
            check_input_width(x, self.dim, self.num_devices, distributed=False)
            w = self.weight if x.is_sharded() else self._weight_interleaved()
            plan = self._local_norm.plan(
                x,
                w,
                residual,
                epsilon=self.eps,
                memory_config=self._output_memory_config(mode),
                compute_kernel_config=self.compute_kernel_config,
            )
            return plan.run, w
        check_input_width(x, self.dim, self.num_devices, distributed=True)
        w = self.weight_distributed
        gathered_mc = None
        if self.gather_output:
            # judged before the norm runs, so that a gather that cannot run leaves x and the residual untouched
            out_mc = self._output_memory_config(mode) or x.memory_config()
            gathered_mc = gathered_memory_config(out_mc, self.num_devices)
            self.ccl.check_gather(
                replace(describe(x), memory_config=out_mc),
                gathered_mc,
                cluster_axis=self.cluster_axis,
                num_links=self.ccl.links.num_links,
            )
        plan = distributed.planned_call(
            x,
            w,
            self.mesh_device,
            epsilon=self.eps,
            cluster_axis=self.cluster_axis,
            residual=residual,
            memory_config=self._output_memory_config(mode),
            compute_kernel_config=self.compute_kernel_config,
            ccl=self.ccl,
        )
        if self.gather_output:
            return (lambda x, w, residual: self._gathered(plan.run(x, w, residual), gathered_mc)), w
        return plan.run, w

    def _gathered(self, out, memory_config):
        """All-gather the output slices along the axis (trace-safe: the CCL resources' cycled semaphores)."""
        y, summed = out if isinstance(out, tuple) else (out, None)
        semaphores, barrier = self.ccl.next_gather()
        y = ttnn.experimental.all_gather_async(
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
