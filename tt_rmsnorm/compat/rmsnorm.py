"""tt-metal's `RMSNorm` (models/common/rmsnorm.py), keyword for keyword, run through the package."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ttnn

from tt_rmsnorm import ccl
from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import BoundCall, PlannedModule, check_input_width, distribution_policy
from tt_rmsnorm.rules import sharding
from tt_rmsnorm.signature import signature
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.topology import resolve_cluster_axis
from tt_rmsnorm.weights import WeightLoader, state_dict_weight, weight_name


def _hifi2():
    """tt-metal's RMSNorm compute config (compute_kernel_config_hifi2), used as it is."""
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False, fp32_dest_acc_en=True, packer_l1_acc=True
    )


class RMSNorm(PlannedModule):
    """tt-metal's `RMSNorm`: weights from a state_dict by key, cached tilized, replicated (`weight`) and, where
    `is_distributed` is given, split over the mesh columns (`weight_distributed`); `forward(x, mode, in_sharded,
    out_sharded)` runs `rms_norm` on full-width activations or the distributed norm where `is_distributed(mode)`.

    `is_distributed`: None or False, never distributed; a callable of the mode, the policy per mode. `tt_ccl`: the
    model's CCL object (its cycled semaphores and link counts are used); without one, the module creates its own
    `CCLResources` at construction, before any trace. `ccl_topology`: the stats gather's topology (Ring or Linear).
    A call is planned and checked once per signature (mode, in_sharded, out_sharded, the policy's answer, x's spec);
    setting an attribute (`sharded_program_config`, `eps`, ...) plans again.

    device: the device or mesh.
    dim: the full hidden width.
    state_dict, weight_key, layer_num, state_dict_prefix: the weight's key, by tt-metal's naming
        (`tt_rmsnorm.weights.weight_name`).
    weight_cache_path: a directory for the tilized weights; None caches nothing.
    weight_memory_config, weight_dtype: where and in which dtype the weights live (DRAM, bfloat16).
    eps: epsilon inside the square root.
    add_unit_offset: the state_dict holds w - 1 (Gemma).
    sharded_program_config: the `LayerNormShardedMultiCoreProgramConfig` of a sharded call (`in_sharded=True`),
        honoured as given.
    sharded_output_config: where a sharded call writes its output (`out_sharded=True`).
    output_mem_config: where an interleaved call writes its output; None, where x sits.
    ccl_topology, tt_ccl: as above.
    """

    def __init__(
        self,
        device,
        dim,
        state_dict,
        weight_key,
        layer_num=None,
        state_dict_prefix=None,
        weight_cache_path=None,
        weight_memory_config=ttnn.DRAM_MEMORY_CONFIG,
        weight_dtype=ttnn.bfloat16,
        is_distributed=None,
        eps: float = 1e-05,
        add_unit_offset=False,
        sharded_program_config=None,
        sharded_output_config=None,
        output_mem_config=None,
        ccl_topology=ttnn.Topology.Ring,
        tt_ccl=None,
    ):
        self.device = device
        self.dim = dim
        self.eps = eps
        self.is_distributed = is_distributed
        self.ccl_topology = ccl_topology
        self.tt_ccl = tt_ccl
        self.sharded_program_config = sharded_program_config
        self.sharded_output_config = sharded_output_config
        self.output_mem_config = output_mem_config
        self.compute_kernel_config_hifi2 = _hifi2()
        # None and False: never distributed (tt-metal's reading); True or a callable: the policy per mode
        self._policy = distribution_policy(is_distributed if is_distributed is not None else False, 1)
        ccl.check_topology(ccl_topology, device)
        mesh_shape = tuple(device.shape)
        # tt-metal splits the distributed weight over mesh dim 1 (ShardTensor2dMesh dims (None, 2)): the columns, which
        # a 1-D mesh gathers over unnamed (as tt-metal's calls on it)
        axis = 1 if mesh_shape[0] > 1 else None
        self.cluster_axis, self.num_devices = resolve_cluster_axis(mesh_shape, axis)
        name = weight_name(weight_key, layer_num, state_dict_prefix)
        torch_weight = state_dict_weight(state_dict, name, dim)
        if add_unit_offset:
            torch_weight = torch_weight + 1.0  # Gemma stores w - 1; the kernels multiply by w
        cache = None if weight_cache_path is None else Path(weight_cache_path)
        load = WeightLoader(device, dim, weight_dtype, weight_memory_config, cache)
        self.weight, self._weight_interleaved = load.replicated(torch_weight, name, self.compute_kernel_config_hifi2)
        self.weight_distributed = None
        self._ccl = None
        if is_distributed and self.num_devices == 1:
            # one device on the axis: tt-metal's 1x1 split is the whole weight, and the norm is never distributed
            self.weight_distributed = self.weight
        elif is_distributed:
            self.weight_distributed = load.distributed(torch_weight, name, self.cluster_axis)
            if self.num_devices > 1:
                self._ccl = (
                    ccl.resources_for(tt_ccl, device, axis, topology=ccl_topology)
                    if tt_ccl is not None
                    else ccl.CCLResources(device, cluster_axis=axis, topology=ccl_topology)
                )

    def forward(self, x: ttnn.Tensor, mode, in_sharded=False, out_sharded=False, norm_config=None) -> ttnn.Tensor:
        """The norm of `x`. mode: "decode" / "prefill" or tt-metal's `Mode`, handed to `is_distributed` as given.
        in_sharded: x is sharded, the norm runs with the sharded program config. out_sharded: the output goes to the
        sharded output config. norm_config: {"sharded_program_config", "sharded_output_config"} for this call, in
        place of the module's (tt-metal's newer RMSNorm takes the configs per call). Returns the output."""
        program_config, output_config = self.sharded_program_config, self.sharded_output_config
        if norm_config:
            program_config = norm_config.get("sharded_program_config", program_config)
            output_config = norm_config.get("sharded_output_config", output_config)
        called, held = signature(
            mesh_device=self.device,
            modules=self.bound_modules(),
            x=x,
            mode=mode,
            distributed=self.distributed_in(mode),
            in_sharded=in_sharded,
            out_sharded=out_sharded,
            program_config=program_config if in_sharded else None,
            memory_config=output_config if out_sharded else None,
        )
        call = PLANS.planned(called, held, self.plan_new, x, None)
        return call.run(x, call.weight, None)

    __call__ = forward

    def plan(self, signature, held, x, residual) -> BoundCall:
        distributed_calls.check_tensors(x)
        s = signature
        return self.plan_described(
            describe(x), s.mode, s.distributed, s.in_sharded, s.out_sharded, held.program_config, s.memory_config
        )

    def plan_described(
        self, x: TensorDesc, mode, distributed, in_sharded, out_sharded, program_config=None, output_config=None
    ) -> BoundCall:
        """The call for an input as described, its rules checked: the program and output configs (the module's
        sharded ones by default) where the input and output are sharded, the distributed norm or the replicated
        rms_norm, then `sharded_to_interleaved` where a sharded input gives an interleaved output. A module that makes
        the input (a gather, a move) plans it here before it runs anything."""
        program_config = (program_config or self.sharded_program_config) if in_sharded else None
        memory_config = (output_config or self.sharded_output_config) if out_sharded else None
        distributed = bool(distributed) and self.num_devices > 1
        check_input_width(x, self.dim, self.num_devices, distributed=distributed)
        if distributed:
            w = self.weight_distributed
            plan = distributed_calls.plan_described(
                self.device,
                x,
                describe(w),
                None,
                epsilon=self.eps,
                cluster_axis=self.cluster_axis,
                memory_config=memory_config,
                program_config=program_config,
                compute_kernel_config=self.compute_kernel_config_hifi2,
                ccl=self._ccl,
            )
        else:
            w = self.weight if x.is_sharded else self._weight_interleaved()
            plan = distributed_calls.plan_replicated(
                self.device,
                x,
                describe(w),
                epsilon=self.eps,
                memory_config=memory_config,
                program_config=program_config,
                compute_kernel_config=self.compute_kernel_config_hifi2,
            )
        output = plan.output_desc(x)
        if not (in_sharded and not out_sharded):
            return BoundCall(plan.run, w, plan, output)
        sharding.check_move(output, ttnn.DRAM_MEMORY_CONFIG)
        run = plan.run

        def to_interleaved(x, w, residual):
            return route()(ttnn.sharded_to_interleaved)(run(x, w, residual))

        return BoundCall(to_interleaved, w, plan, replace(output, memory_config=ttnn.DRAM_MEMORY_CONFIG))

    def distributed_in(self, mode):
        """The policy's answer for `mode` (tt-metal's `is_distributed(mode)`, None and False meaning never): the norm
        is distributed where it is true and the mesh columns hold several devices."""
        return self._policy(mode)


class SimpleRMSNorm(PlannedModule):
    """tt-metal's `SimpleRMSNorm` (models/common/rmsnorm.py, for models whose width is not a multiple of 32): the
    weight from a state_dict by key, padded with zeros to tiles (TILE, replicated), and `forward(x, mode=None,
    in_sharded=False, out_sharded=False)` one plain `rms_norm` of x where it sits with that weight and `eps`. As in
    tt-metal, `mode`, `in_sharded`, `out_sharded` and `sharded_output_config` do not change the call (the module
    keeps the config as an attribute); the call is planned and checked once per signature.

    device: the device or mesh.
    dim: the hidden width, any positive width (the weight is padded to whole tiles).
    state_dict, weight_key, layer_num, state_dict_prefix: the weight's key, by tt-metal's naming
        (`tt_rmsnorm.weights.weight_name`).
    weight_cache_path: a directory for the tilized weight; None caches nothing.
    weight_memory_config, weight_dtype: where and in which dtype the weight lives (DRAM, bfloat16).
    eps: epsilon inside the square root.
    add_unit_offset: the state_dict holds w - 1 (Gemma).
    sharded_output_config: kept as an attribute, as in tt-metal.
    """

    def __init__(
        self,
        device,
        dim,
        state_dict,
        weight_key,
        layer_num=None,
        state_dict_prefix=None,
        weight_cache_path=None,
        weight_memory_config=ttnn.DRAM_MEMORY_CONFIG,
        weight_dtype=ttnn.bfloat16,
        eps: float = 1e-05,
        add_unit_offset=False,
        sharded_output_config=None,
    ):
        self.device = device
        self.dim = dim
        self.eps = eps
        self.sharded_output_config = sharded_output_config
        name = weight_name(weight_key, layer_num, state_dict_prefix)
        torch_weight = state_dict_weight(state_dict, name, dim)
        if add_unit_offset:
            torch_weight = torch_weight + 1.0  # Gemma stores w - 1; the kernel multiplies by w
        cache = None if weight_cache_path is None else Path(weight_cache_path)
        load = WeightLoader(device, dim, weight_dtype, weight_memory_config, cache)
        self.weight = load(torch_weight, name, None, ttnn.TILE_LAYOUT)

    def forward(self, x, mode=None, in_sharded=False, out_sharded=False):
        called, held = signature(
            mesh_device=self.device,
            modules=self.bound_modules(),
            x=x,
            mode=mode,
            in_sharded=in_sharded,
            out_sharded=out_sharded,
        )
        call = PLANS.planned(called, held, self.plan_new, x, None)
        return call.run(x, call.weight, None)

    __call__ = forward

    def plan(self, signature, held, x, residual) -> BoundCall:
        distributed_calls.check_tensors(x)
        check_input_width(x, self.dim, 1, distributed=False)
        x = describe(x)
        plan = distributed_calls.plan_replicated(self.device, x, describe(self.weight), epsilon=self.eps)
        return BoundCall(plan.run, self.weight, plan, plan.output_desc(x))
