"""tt_transformers' `DistributedNorm` (models/tt_transformers/tt/distributed_norm.py): the norm of a decoder layer with
the gathers around it, run through the package."""

from __future__ import annotations

from dataclasses import replace

import ttnn

from tt_rmsnorm import ccl, module
from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm.compat.rmsnorm import RMSNorm
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.rules import ccl_checks, sharding
from tt_rmsnorm.signature import signature
from tt_rmsnorm.tensors import TensorDesc, describe


def check_norm(norm) -> None:
    """The norm a compat decoder module wraps is `tt_rmsnorm.compat.RMSNorm`: its ops are planned and checked with the
    module's gathers and moves, before any of them runs."""
    if not isinstance(norm, RMSNorm):
        raise RuleError(
            "compat.norm",
            "the compat DistributedNorm plans its norm's ops with its own before any runs: the norm must be a "
            "tt_rmsnorm.compat.RMSNorm",
            type(norm).__name__,
            "from tt_rmsnorm.compat import RMSNorm (tt-metal's constructor, keyword for keyword)",
        )


class DistributedNorm(module.PlannedModule):
    """tt_transformers' `DistributedNorm`: the norm of a decoder layer with the gathers around it.

    `args` is duck-typed: `dim`, `mesh_device`, `is_multichip`, `is_distributed_norm(mode)`, `ccl_topology()`. Not
    TG: decode reads its input in `norm.sharded_output_config`, prefill in DRAM; a mode that is not distributed on a
    multichip mesh gathers the fractured input to full width first, a distributed one gathers the norm's fractured
    output afterwards. TG (Galaxy): both modes stay distributed over the mesh columns, decode width-sharded on
    tt-metal's TG grid (run by the fused op, which computes the same norm in one program), the output fractured.
    """

    def __init__(self, norm, args, tt_ccl, TG=False, force_interleaved_norm=False):  # noqa: N803 (tt-metal's name)
        check_norm(norm)
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

    def bound_modules(self) -> tuple:
        """Itself and its norm: the norm's configs and weights are bound into the planned call."""
        return (self, self.norm)

    def _gather(self, x, memory_config, via):
        """all_gather_async on dim 3 with the model CCL's cycled semaphores, as tt_transformers gathers (its rules are
        checked when the call is planned: `_gathered`)."""
        semaphores, barrier = self._gather_ccl.next_gather()
        return via(ttnn.experimental.all_gather_async)(
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

    def _gathered(self, x: TensorDesc, memory_config) -> TensorDesc:
        """The gather of `x` into `memory_config`, its rules checked (a gathered width whose shards do not fit the grid
        is a RuleError, not a TT_FATAL): what it returns."""
        self._gather_ccl.check_gather(x, memory_config, num_links=1)
        return ccl_checks.gathered_desc(x, 3, self._gather_ccl.num_devices, memory_config)

    def forward(self, x, mode):
        called, held = signature(
            mesh_device=self.args.mesh_device,
            modules=self.bound_modules(),
            x=x,
            mode=mode,
            # asked every call, as tt-metal's DistributedNorm and RMSNorm ask them
            distributed=(self.args.is_distributed_norm(mode), self.norm.distributed_in(mode)),
        )
        call = PLANS.planned(called, held, self.plan_new, x, None)
        return call.run(x, call.weight, None)

    __call__ = forward

    def plan(self, signature, x, residual) -> module.BoundCall:
        """The call for this signature, every op's rules checked before any runs: the input gathered to full width (a
        mode that is not distributed on a multichip mesh) or moved to where the norm reads it, the norm, and the
        output gathered (a distributed mode)."""
        distributed_calls.check_tensors(x)
        x, mode, distributed = describe(x), signature.mode, signature.distributed
        if self.TG:
            return self._tg(x, mode)
        norm, decode = self.norm, mode == "decode"
        distributed_mode, norm_distributed = distributed
        gather_input = self.args.is_multichip and not distributed_mode
        if self.force_interleaved_norm:
            mc = ttnn.DRAM_MEMORY_CONFIG
            if gather_input:
                h = self._gathered(x, mc)
            else:
                sharding.check_move(x, mc)
                h = replace(x, memory_config=mc)
            norm_call = norm.plan_described(h, mode, norm_distributed, False, False)
            out_mc = norm.sharded_output_config if decode else None
            if out_mc is not None:
                sharding.check_move(norm_call.output, out_mc)
            norm_run = norm_call.run

            def run(x, w, residual):
                via = route()
                x = self._gather(x, mc, via) if gather_input else via(ttnn.to_memory_config)(x, mc)
                x = norm_run(x, w, None)
                return x if out_mc is None else via(ttnn.to_memory_config)(x, out_mc)

            output = norm_call.output if out_mc is None else replace(norm_call.output, memory_config=out_mc)
            return module.BoundCall(run, norm_call.weight, norm_call.plan, output)
        input_mc = norm.sharded_output_config if decode else ttnn.DRAM_MEMORY_CONFIG
        move = not gather_input and x.memory_config != input_mc
        if gather_input:
            h = self._gathered(x, input_mc)
        elif move:
            sharding.check_move(x, input_mc)
            h = replace(x, memory_config=input_mc)
        else:
            h = x
        norm_call = norm.plan_described(h, mode, norm_distributed, decode, decode)
        gather_output = distributed_mode and self.args.is_multichip
        # the norm's output goes back into the input's config: gathered into it where the mode is distributed
        output = self._gathered(norm_call.output, input_mc) if gather_output else norm_call.output
        norm_run = norm_call.run

        def run(x, w, residual):
            via = route()
            if gather_input:
                x = self._gather(x, input_mc, via)
            elif move:
                x = via(ttnn.to_memory_config)(x, input_mc)
            x = norm_run(x, w, None)
            return self._gather(x, input_mc, via) if gather_output else x

        return module.BoundCall(run, norm_call.weight, norm_call.plan, output)

    def _tg(self, x: TensorDesc, mode) -> module.BoundCall:
        """Both modes distributed over the mesh columns: decode on tt-metal's TG grid and program config, prefill
        interleaved with its TG compute config (HiFi2, no fp32 accumulation)."""
        module.check_input_width(x, self.args.dim, 4, distributed=True)
        if mode == "decode":
            mc = self.gather_in_mem_cfg if x.memory_config != self.gather_in_mem_cfg else None
            configs = {"program_config": self.ln_prg_cfg}
        else:
            mc, configs = None, {"compute_kernel_config": self.ln_cfg}
        if mc is not None:
            sharding.check_move(x, mc)
            x = replace(x, memory_config=mc)
        w = self.norm.weight_distributed
        plan = distributed_calls.plan_described(
            self.args.mesh_device,
            x,
            describe(w),
            None,
            epsilon=self.norm.eps,
            cluster_axis=1,
            ccl=self._tg_ccl,
            **configs,
        )
        if mc is None:
            return module.BoundCall(plan.run, w, plan, plan.output_desc(x))
        plan_run = plan.run

        def run(x, w, residual):
            return plan_run(route()(ttnn.to_memory_config)(x, mc), w, None)

        return module.BoundCall(run, w, plan, plan.output_desc(x))
