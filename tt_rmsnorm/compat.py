"""tt-metal's norm modules, keyword for keyword: `RMSNorm` (models/common/rmsnorm.py) and `DistributedNorm`
(models/tt_transformers/tt/distributed_norm.py). A model file changes its import line and keeps every call:

    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

Behind the same signatures the calls go through the package: every rule checked before device work, the model's
CCL object (tt-metal's TT_CCL) adopted so that gathers use its cycled semaphores and persistent stats buffers, the
distributed norm taking sharded inputs too, and a TILE copy of the weight where ttnn's interleaved `rms_norm` cannot
hold a ROW_MAJOR one in a core's L1 (8192 wide on one device). docs/migrating-from-tt-metal.md maps every argument.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ttnn

from tt_rmsnorm import ccl, distributed, module
from tt_rmsnorm.tensors import describe
from tt_rmsnorm.topology import resolve_cluster_axis


def _hifi2():
    """tt-metal's RMSNorm compute config (compute_kernel_config_hifi2), used as it is."""
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False, fp32_dest_acc_en=True, packer_l1_acc=True
    )


class RMSNorm:
    """tt-metal's `RMSNorm`: weights from a state_dict by key, cached tilized, replicated (`weight`) and, where
    `is_distributed` is given, split over the mesh columns (`weight_distributed`); `forward(x, mode, in_sharded,
    out_sharded)` runs `rms_norm` on full-width activations or the distributed norm where `is_distributed(mode)`.

    `is_distributed`: None or False, never distributed; a callable of the mode, the policy per mode. `tt_ccl`: the
    model's CCL object (its cycled semaphores and link counts are used); without one, the module creates its own
    `CCLResources` at construction, before any trace. `ccl_topology`: the stats gather's topology (Ring or Linear).
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
        self._policy = module.distribution_policy(is_distributed if is_distributed is not None else False, 1)
        ccl.check_topology(ccl_topology)
        mesh_shape = tuple(device.shape)
        # tt-metal splits the distributed weight over mesh dim 1 (ShardTensor2dMesh dims (None, 2)): the columns, which
        # a 1-D mesh gathers over unnamed (as tt-metal's calls on it)
        axis = 1 if mesh_shape[0] > 1 else None
        self.cluster_axis, self.num_devices = resolve_cluster_axis(mesh_shape, axis)
        name = module.weight_name(weight_key, layer_num, state_dict_prefix)
        torch_weight = module.state_dict_weight(state_dict, name, dim)
        if add_unit_offset:
            torch_weight = torch_weight + 1.0  # Gemma stores w - 1; the kernels multiply by w
        cache = None if weight_cache_path is None else Path(weight_cache_path)
        load = module.WeightLoader(device, dim, weight_dtype, weight_memory_config, cache)
        self.weight, self._weight_interleaved = load.replicated(torch_weight, name, self.compute_kernel_config_hifi2)
        self.weight_distributed = None
        self._ccl = None
        if is_distributed:
            self.weight_distributed = load.distributed(torch_weight, name, self.cluster_axis)
            if self.num_devices > 1:
                self._ccl = (
                    ccl.resources_for(tt_ccl, device, axis, topology=ccl_topology)
                    if tt_ccl is not None
                    else ccl.CCLResources(device, cluster_axis=axis, topology=ccl_topology)
                )
        self._local = module.LocalNorm(device)
        self._widths = module.InputWidths(dim, self.num_devices)

    def forward(self, x: ttnn.Tensor, mode, in_sharded=False, out_sharded=False) -> ttnn.Tensor:
        program_config = self.sharded_program_config if in_sharded else None
        memory_config = self.sharded_output_config if out_sharded else None
        if self._policy(mode) and self.num_devices > 1:
            self._widths.check(x, distributed=True)
            out = distributed.distributed_rms_norm(
                x,
                self.weight_distributed,
                self.device,
                epsilon=self.eps,
                cluster_axis=self.cluster_axis,
                memory_config=memory_config,
                program_config=program_config,
                compute_kernel_config=self.compute_kernel_config_hifi2,
                ccl=self._ccl,
            )
        else:
            self._widths.check(x, distributed=False)
            weight = self.weight if x.is_sharded() else self._weight_interleaved()
            out = self._local(
                x,
                weight,
                epsilon=self.eps,
                memory_config=memory_config,
                program_config=program_config,
                compute_kernel_config=self.compute_kernel_config_hifi2,
            )
        if in_sharded and not out_sharded:
            return ttnn.sharded_to_interleaved(out)
        return out

    __call__ = forward


class DistributedNorm:
    """tt_transformers' `DistributedNorm`: the norm of a decoder layer with the gathers around it.

    `args` is duck-typed: `dim`, `mesh_device`, `is_multichip`, `is_distributed_norm(mode)`, `ccl_topology()`. Not
    TG: decode reads its input in `norm.sharded_output_config`, prefill in DRAM; a mode that is not distributed on a
    multichip mesh gathers the fractured input to full width first, a distributed one gathers the norm's fractured
    output afterwards. TG (Galaxy): both modes stay distributed over the mesh columns, decode width-sharded on
    tt-metal's TG grid (run by the fused op, which computes the same norm in one program), the output fractured.
    """

    def __init__(self, norm, args, tt_ccl, TG=False, force_interleaved_norm=False):  # noqa: N803 (tt-metal's name)
        self.norm = norm
        self.args = args
        self.tt_ccl = tt_ccl
        self.TG = TG
        self.force_interleaved_norm = force_interleaved_norm
        mesh = args.mesh_device
        self._gather_ccl = None
        if args.is_multichip and not TG:
            self._gather_ccl = ccl.resources_for(tt_ccl, mesh, None, topology=args.ccl_topology())
        if TG:
            per_device = args.dim // 4
            grid = (min(4, per_device // 32 // 8), 8)  # (rows, columns) of cores: tt-metal's TG decode grid
            cores = grid[0] * grid[1]
            self.gather_in_mem_cfg = ttnn.create_sharded_memory_config(
                shape=(1, 1, 32, per_device),
                core_grid=ttnn.CoreGrid(y=grid[0], x=grid[1]),
                strategy=ttnn.ShardStrategy.WIDTH,
            )
            block = per_device // cores // 32
            self.ln_prg_cfg = ttnn.LayerNormShardedMultiCoreProgramConfig(
                compute_with_storage_grid_size=(grid[1], grid[0]),
                subblock_w=block,
                block_h=1,
                block_w=block,
                inplace=False,
            )
            self.ln_cfg = ttnn.WormholeComputeKernelConfig(
                math_fidelity=ttnn.MathFidelity.HiFi2,
                math_approx_mode=False,
                fp32_dest_acc_en=False,
                packer_l1_acc=False,
            )
            self._tg_ccl = ccl.resources_for(tt_ccl, mesh, 1)

    def _gather(self, x, memory_config):
        """all_gather_async on dim 3 with the model CCL's cycled semaphores, as tt_transformers gathers; its rules
        are checked first (a gathered width whose shards do not fit the grid is a RuleError, not a TT_FATAL)."""
        self._gather_ccl.check_gather(x, memory_config, num_links=1)
        semaphores, barrier = self._gather_ccl.next_gather()
        return ttnn.experimental.all_gather_async(
            x,
            persistent_output_buffer=None,
            dim=3,
            multi_device_global_semaphore=semaphores,
            num_links=1,
            topology=self.args.ccl_topology(),
            memory_config=memory_config,
            barrier_semaphore=barrier,
            chunks_per_sync=10,
            num_workers_per_link=2,
            num_buffers_per_channel=2,
        )

    def forward(self, x, mode):
        if self.TG:
            return self._tg(x, mode)
        distributed_mode = self.args.is_distributed_norm(mode)
        decode = mode == "decode"
        if self.force_interleaved_norm:
            if self.args.is_multichip and not distributed_mode:
                x = self._gather(x, ttnn.DRAM_MEMORY_CONFIG)
            else:
                x = ttnn.to_memory_config(x, ttnn.DRAM_MEMORY_CONFIG)
            x = self.norm(x, mode=mode, in_sharded=False, out_sharded=False)
            return ttnn.to_memory_config(x, self.norm.sharded_output_config) if decode else x
        input_mem_cfg = self.norm.sharded_output_config if decode else ttnn.DRAM_MEMORY_CONFIG
        if self.args.is_multichip and not distributed_mode:
            x = self._gather(x, input_mem_cfg)
        elif x.memory_config() != input_mem_cfg:
            x = ttnn.to_memory_config(x, input_mem_cfg)
        gather_output = distributed_mode and self.args.is_multichip
        if gather_output:
            # the output gather is judged before the norm runs: the norm's output has x's shape and dtype, in the
            # norm's sharded output config for decode and x's memory config for prefill
            out_mc = self.norm.sharded_output_config if decode else x.memory_config()
            self._gather_ccl.check_gather(replace(describe(x), memory_config=out_mc), out_mc, num_links=1)
        x = self.norm(x, mode=mode, in_sharded=decode, out_sharded=decode)
        if gather_output:
            x = self._gather(x, x.memory_config())
        return x

    __call__ = forward

    def _tg(self, x, mode):
        """Both modes distributed over the mesh columns: decode on tt-metal's TG grid and program config, prefill
        interleaved with its TG compute config (HiFi2, no fp32 accumulation)."""
        if mode == "decode":
            if x.memory_config() != self.gather_in_mem_cfg:
                x = ttnn.to_memory_config(x, self.gather_in_mem_cfg)
            configs = {"program_config": self.ln_prg_cfg}
        else:
            configs = {"compute_kernel_config": self.ln_cfg}
        return distributed.distributed_rms_norm(
            x,
            self.norm.weight_distributed,
            self.args.mesh_device,
            epsilon=self.norm.eps,
            cluster_axis=1,
            ccl=self._tg_ccl,
            **configs,
        )
