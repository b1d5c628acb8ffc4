"""tt_transformers' `DistributedNorm` (models/tt_transformers/tt/distributed_norm.py): the norm of a decoder layer with
the gathers around it, run through the package."""

from __future__ import annotations

from dataclasses import replace

import ttnn

from tt_rmsnorm import ccl, distributed, module
from tt_rmsnorm.tensors import describe


class DistributedNorm(module.PlannedModule):
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
        """all_gather_async on dim 3 with the model CCL's cycled semaphores, as tt_transformers gathers (its rules are
        checked when the call is planned: `_check_gather`)."""
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

    def _check_gather(self, x, memory_config) -> None:
        """A gathered width whose shards do not fit the grid is a RuleError, not a TT_FATAL."""
        self._gather_ccl.check_gather(x, memory_config, num_links=1)

    def forward(self, x, mode):
        # the norm's output config is part of the signature: a decode call binds it
        key = (mode, self.args.is_distributed_norm(mode), id(self.norm.sharded_output_config))
        run, w = module.last_call(self._last, key, x) or self.planned(key, x, None, self._plan, x, mode)
        return run(x, w, None)

    __call__ = forward

    def _plan(self, x, mode):
        """The call for this signature, every gather's rules checked before it runs: the input gathered to full width
        (a mode that is not distributed on a multichip mesh) or moved to where the norm reads it, the norm, and the
        output gathered (a distributed mode)."""
        if self.TG:
            return self._tg(x, mode)
        norm, decode = self.norm, mode == "decode"
        distributed_mode = self.args.is_distributed_norm(mode)
        gather_input = self.args.is_multichip and not distributed_mode
        if self.force_interleaved_norm:
            mc = ttnn.DRAM_MEMORY_CONFIG
            if gather_input:
                self._check_gather(x, mc)
            out_mc = norm.sharded_output_config if decode else None

            def run(x, w, residual):
                x = self._gather(x, mc) if gather_input else ttnn.to_memory_config(x, mc)
                x = norm(x, mode=mode, in_sharded=False, out_sharded=False)
                return x if out_mc is None else ttnn.to_memory_config(x, out_mc)

            return run, None
        input_mc = norm.sharded_output_config if decode else ttnn.DRAM_MEMORY_CONFIG
        move = not gather_input and x.memory_config() != input_mc
        if gather_input:
            self._check_gather(x, input_mc)
        gather_output = distributed_mode and self.args.is_multichip
        if gather_output:
            # the norm's output has x's shape and dtype, in the norm's sharded output config for decode and x's
            # (DRAM) memory config for prefill; it is gathered into the same config
            self._check_gather(replace(describe(x), memory_config=input_mc), input_mc)

        def run(x, w, residual):
            if gather_input:
                x = self._gather(x, input_mc)
            elif move:
                x = ttnn.to_memory_config(x, input_mc)
            x = norm(x, mode=mode, in_sharded=decode, out_sharded=decode)
            return self._gather(x, input_mc) if gather_output else x

        return run, None

    def _tg(self, x, mode):
        """Both modes distributed over the mesh columns: decode on tt-metal's TG grid and program config, prefill
        interleaved with its TG compute config (HiFi2, no fp32 accumulation)."""
        module.check_input_width(x, self.args.dim, 4, distributed=True)
        if mode == "decode":
            mc = self.gather_in_mem_cfg if x.memory_config() != self.gather_in_mem_cfg else None
            configs = {"program_config": self.ln_prg_cfg}
        else:
            mc, configs = None, {"compute_kernel_config": self.ln_cfg}
        w = self.norm.weight_distributed
        planned = []  # the plan of the moved input's signature, planned at the first call

        def run(x, w, residual):
            if mc is not None:
                x = ttnn.to_memory_config(x, mc)
            if not planned:
                planned.append(
                    distributed.planned_call(
                        x, w, self.args.mesh_device, epsilon=self.norm.eps, cluster_axis=1, ccl=self._tg_ccl, **configs
                    )
                )
            return planned[0].run(x, w, None)

        return run, w
