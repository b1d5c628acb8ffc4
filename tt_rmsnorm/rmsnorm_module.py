"""`DistributedRMSNorm`: the norm module a model's decoder layer instantiates (twice per layer), with tt-metal's
conventions (`models/common/rmsnorm.py`): weights from a state_dict by key, tilized once into cache files, an optional
unit offset for Gemma-style weights, and an `is_distributed(mode)` policy.

Create the module (and one `CCLResources` shared by every module of the model) before any trace capture, call it once
per mode and shape eagerly (the warm-up plans and allocates), then capture and replay: a planned call makes only its
ttnn calls and allocates no semaphore or buffer.
"""

from __future__ import annotations

from pathlib import Path

import torch
import ttnn

from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm import op_outputs, topology
from tt_rmsnorm.ccl import CCLResources, resources_for
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import (
    BoundCall,
    PlannedModule,
    check_input_width,
    distribution_policy,
    mode_name,
)
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.signature import Held, Signature, signature
from tt_rmsnorm.tensors import describe
from tt_rmsnorm.torch_norms import read_torch_norm
from tt_rmsnorm.weights import WeightLoader, state_dict_weight, weight_name


def gathered_memory_config(memory_config, num_devices: int):
    """Where the full-width gather of a norm's output goes: a width-sharded output keeps its cores with shards
    `num_devices` times as wide (the per-device shard spec cannot hold the gathered width); any other layout as is."""
    spec = memory_config.shard_spec
    if memory_config.memory_layout != ttnn.TensorMemoryLayout.WIDTH_SHARDED or spec is None:
        return memory_config
    height, width = spec.shape
    wide = ttnn.ShardSpec(spec.grid, [height, width * num_devices], spec.orientation)
    return ttnn.MemoryConfig(memory_config.memory_layout, memory_config.buffer_type, wide)


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

    mesh_device: the mesh (or one device) the module runs on.
    dim: the full hidden width; the weight in `state_dict` must hold `dim` values.
    state_dict: the weights by key.
    weight_key: the weight's name: its key is `{state_dict_prefix}{weight_key}.weight`, or with `layer_num` and no
        prefix `layers.{layer_num}.{weight_key}.weight` (tt-metal's naming).
    layer_num, state_dict_prefix: the key's parts, as above.
    weight_cache_path: a directory for the tilized weights (`ttnn.as_tensor` cache files); None caches nothing.
    weight_dtype: the weight's device dtype: bfloat16 or float32 (`weight.dtype`).
    weight_memory_config: where the weight lives; None, DRAM.
    eps: epsilon inside the square root.
    add_unit_offset: the state_dict holds w - 1 (Gemma): the module multiplies by w.
    is_distributed: None (distributed wherever the axis holds several devices), a bool, or a callable of the mode.
    cluster_axis: the mesh axis the hidden dim is split over; None on a 1-D mesh.
    ccl: as above.
    compute_kernel_config: the ops' compute config; None, the planner's (`planning.layouts.compute_kernel_config`).
    output_memory_config: where the output goes, one config or a dict by mode; None, where x sits.
    gather_output: all-gather a distributed output along the axis.
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
