"""tt_transformers' `DistributedNorm` (models/tt_transformers/tt/distributed_norm.py): the norm of a decoder layer with
the gathers around it, run through the package."""

from __future__ import annotations

from dataclasses import replace

import ttnn

from tt_rmsnorm import ccl, op_outputs
from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm.compat.rmsnorm import RMSNorm
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import BoundCall, PlannedModule, check_input_width, mode_name
from tt_rmsnorm.rules import sharding
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


def check_prefetcher(prefetcher) -> None:
    """tt_transformers' `prefetcher` runs the model's ops on sub-devices beside tt-metal's DRAM prefetcher; the package
    runs its ops on the whole device, so a prefetcher is refused rather than left unused."""
    if prefetcher is None:
        return
    if isinstance(prefetcher, bool):
        raise RuleError(
            "compat.prefetcher",
            "tt_transformers' DistributedNorm takes (norm, args, tt_ccl, prefetcher=None, TG=False, ...): a bool "
            "in the fourth place is the older TG",
            f"prefetcher={prefetcher}",
            f"TG={prefetcher} by keyword",
        )
    raise RuleError(
        "compat.prefetcher",
        "the package runs the norm's ops on the whole device, not on the sub-devices tt-metal's DRAM prefetcher "
        "splits it into",
        type(prefetcher).__name__,
        "prefetcher=None (run the norm outside the prefetcher's sub-device scheme)",
    )


class DistributedNorm(PlannedModule):
    """tt_transformers' `DistributedNorm`: the norm of a decoder layer with the gathers around it.

    `args` is duck-typed: `dim`, `mesh_device`, `is_multichip`, `is_distributed_norm(mode)`, `ccl_topology()`, and
    `model_config[ag_config_key]` where `ag_config_key` is given. Not TG: decode reads its input in the norm's sharded
    output config (or `norm_config`'s), prefill in DRAM; a mode that is not distributed on a multichip mesh gathers
    the fractured input to full width first, a distributed one gathers the norm's fractured output afterwards (unless
    `enable_all_gather=False`). TG (Galaxy): both modes stay distributed over the mesh columns, decode width-sharded
    on tt-metal's TG grid (run by the fused op, which computes the same norm in one program), the output fractured.

    `norm=None`: the gathers alone, no norm (post-norm decoders); not on TG, as in tt-metal. `use_fused_rms`: on a
    multichip mesh without TG, a decode call with `residual` runs as one fused_rms_minimal (x + residual written into
    the residual, normalized, gathered stats), its output where the norm's sharded output config says. `prefetcher`:
    refused (`compat.prefetcher`). `mode` is a string or tt-metal's `Mode`.

    norm: the norm module (`compat.RMSNorm`, `compat.SimpleRMSNorm`, `DistributedRMSNorm`), or None as above.
    args: the model args, as above.
    tt_ccl: the model's CCL object (tt-metal's TT_CCL), whose cycled semaphores the gathers use.
    prefetcher: refused where given (no prefetcher runs here).
    TG: the Galaxy flows.
    ag_config_key: the key of the decode input gather's config in `args.model_config` (its links, chunks per sync and
        workers per link).
    enable_all_gather: gather a distributed output to full width.
    use_fused_rms: decode with a residual as one fused_rms_minimal, as above.
    force_interleaved_norm: the norm runs interleaved on an input in DRAM; a decode output then moves into the norm's
        sharded output config.
    """

    def __init__(
        self,
        norm,
        args,
        tt_ccl,
        prefetcher=None,
        TG=False,  # noqa: N803 (tt-metal's name)
        ag_config_key=None,
        enable_all_gather=True,
        use_fused_rms=False,
        force_interleaved_norm=False,
    ):
        check_prefetcher(prefetcher)
        if norm is None and TG:
            raise RuleError(
                "compat.norm",
                "the gather-only DistributedNorm (norm=None) runs off the TG path only, as in tt-metal",
                "norm=None with TG=True",
                "pass the norm, or TG=False",
            )
        if norm is not None:
            check_norm(norm)
        self.norm = norm
        self.args = args
        self.tt_ccl = tt_ccl
        self.prefetcher = prefetcher
        self.TG = TG
        self.ag_config_key = ag_config_key
        self.enable_all_gather = enable_all_gather
        self.use_fused_rms = use_fused_rms and not TG and args.is_multichip
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
        return (self,) if self.norm is None else (self, self.norm)

    def _gather_params(self, decode: bool) -> dict:
        """The input gather's links and sync, tt_transformers' values: `model_config[ag_config_key]`'s in decode where
        a key is given, else one chunk sync every 10 and 2 workers a link on the model CCL's links."""
        if decode and self.ag_config_key:
            config = self.args.model_config[self.ag_config_key]
            return {k: config[k] for k in ("num_links", "chunks_per_sync", "num_workers_per_link")}
        return {"num_links": self._gather_ccl.links.num_links, "chunks_per_sync": 10, "num_workers_per_link": 2}

    def _gather(self, x, memory_config, via, params):
        """all_gather_async on dim 3 with the model CCL's cycled semaphores, as tt_transformers gathers (its rules are
        checked when the call is planned: `_gathered`)."""
        semaphores, barrier = self._gather_ccl.next_gather()
        return via(ttnn.experimental.all_gather_async)(
            x,
            persistent_output_buffer=None,
            dim=3,
            multi_device_global_semaphore=semaphores,
            topology=self.args.ccl_topology(),
            memory_config=memory_config,
            barrier_semaphore=barrier,
            num_buffers_per_channel=2,
            **params,
        )

    def _gathered(self, x: TensorDesc, memory_config, params) -> TensorDesc:
        """The gather of `x` into `memory_config`, its rules checked (a gathered width whose shards do not fit the grid
        is a RuleError, not a TT_FATAL): what it returns."""
        self._gather_ccl.check_gather(x, memory_config, num_links=params["num_links"])
        return op_outputs.gathered_desc(x, 3, self._gather_ccl.num_devices, memory_config)

    def forward(self, x, mode, norm_config=None, residual=None):
        """The norm of `x` with its gathers. mode: "decode" / "prefill" or tt-metal's `Mode` (handed to the policies
        as given). norm_config: {"sharded_program_config", "sharded_output_config"} for this call, in place of the
        norm's. residual: the residual stream of a fused decode (`use_fused_rms`). Returns the output."""
        norm = self.norm
        program_config, output_config = (None, None) if norm is None else (norm.sharded_program_config, None)
        if norm is not None:
            output_config = norm.sharded_output_config
        if norm_config:
            program_config = norm_config.get("sharded_program_config", program_config)
            output_config = norm_config.get("sharded_output_config", output_config)
        called, held = signature(
            mesh_device=self.args.mesh_device,
            modules=self.bound_modules(),
            x=x,
            residual=residual,
            mode=mode,
            # asked every call, as tt-metal's DistributedNorm and RMSNorm ask them
            distributed=(self.args.is_distributed_norm(mode), None if norm is None else norm.distributed_in(mode)),
            program_config=program_config,
            memory_config=output_config,
        )
        call = PLANS.planned(called, held, self.plan_new, x, residual)
        return call.run(x, call.weight, residual)

    __call__ = forward

    def plan(self, signature, held, x, residual) -> BoundCall:
        """The call for this signature, every op's rules checked before any runs: the input gathered to full width (a
        mode that is not distributed on a multichip mesh) or moved to where the norm reads it, the norm, and the
        output gathered (a distributed mode)."""
        distributed_calls.check_tensors(x, None, residual)
        x, r, mode = describe(x), describe(residual), mode_name(signature.mode)
        distributed_mode, norm_distributed = signature.distributed
        decode = mode == "decode"
        if residual is not None and not (self.use_fused_rms and decode):
            raise RuleError(
                "compat.residual",
                "tt_transformers' DistributedNorm adds a residual on its fused decode only (use_fused_rms=True on a "
                "multichip mesh without TG)",
                f"residual given in {mode}" + ("" if self.use_fused_rms else " with use_fused_rms off"),
                "add the residual first (ttnn.add) and call without it, or build the module with use_fused_rms=True",
            )
        if residual is not None:
            return self._fused(x, r, held.program_config, signature.memory_config)
        if self.TG:
            return self._tg(x, mode)
        norm = self.norm
        gather_input = self.args.is_multichip and not distributed_mode
        gather_output = distributed_mode and self.args.is_multichip and self.enable_all_gather
        params = self._gather_params(decode) if self.args.is_multichip else None
        if self.force_interleaved_norm:
            return self._interleaved(x, mode, norm_distributed, gather_input, signature.memory_config, params)
        input_mc = signature.memory_config if decode else ttnn.DRAM_MEMORY_CONFIG
        move = not gather_input and x.memory_config != input_mc
        if gather_input:
            h = self._gathered(x, input_mc, params)
        elif move:
            sharding.check_move(x, input_mc)
            h = replace(x, memory_config=input_mc)
        else:
            h = x
        if norm is None:
            norm_call = BoundCall(lambda x, w, residual: x, None, None, h)
        else:
            norm_call = norm.plan_described(
                h, mode, norm_distributed, decode, decode, held.program_config, signature.memory_config
            )
        # the norm's output goes back into its own config: gathered into it where the mode is distributed
        out_mc = norm_call.output.memory_config
        output = (
            self._gathered(norm_call.output, out_mc, self._gather_params(False)) if gather_output else norm_call.output
        )
        norm_run, output_params = norm_call.run, self._gather_params(False) if gather_output else None

        def run(x, w, residual):
            via = route()
            if gather_input:
                x = self._gather(x, input_mc, via, params)
            elif move:
                x = via(ttnn.to_memory_config)(x, input_mc)
            x = norm_run(x, w, None)
            return self._gather(x, out_mc, via, output_params) if gather_output else x

        return BoundCall(run, norm_call.weight, norm_call.plan, output)

    def _interleaved(self, x, mode, norm_distributed, gather_input, output_config, params) -> BoundCall:
        """force_interleaved_norm: the input gathered (or moved) into DRAM, the norm interleaved, a decode output moved
        into the norm's sharded output config."""
        norm, decode, mc = self.norm, mode == "decode", ttnn.DRAM_MEMORY_CONFIG
        if gather_input:
            h = self._gathered(x, mc, params)
        else:
            sharding.check_move(x, mc)
            h = replace(x, memory_config=mc)
        norm_call = (
            BoundCall(lambda x, w, residual: x, None, None, h)
            if norm is None
            else norm.plan_described(h, mode, norm_distributed, False, False)
        )
        out_mc = output_config if decode else None
        if out_mc is not None:
            sharding.check_move(norm_call.output, out_mc)
        norm_run = norm_call.run

        def run(x, w, residual):
            via = route()
            x = self._gather(x, mc, via, params) if gather_input else via(ttnn.to_memory_config)(x, mc)
            x = norm_run(x, w, None)
            return x if out_mc is None else via(ttnn.to_memory_config)(x, out_mc)

        output = norm_call.output if out_mc is None else replace(norm_call.output, memory_config=out_mc)
        return BoundCall(run, norm_call.weight, norm_call.plan, output)

    def _fused(self, x: TensorDesc, residual: TensorDesc, program_config, output_config) -> BoundCall:
        """use_fused_rms decode: x + residual written into the residual, normalized over the full width, in one
        fused_rms_minimal; the output in the norm's sharded output config (the fused op writes a width-sharded L1
        config itself), the output alone handed back, as tt-metal's module does."""
        w = self.norm.weight_distributed
        plan = distributed_calls.plan_described(
            self.args.mesh_device,
            x,
            describe(w),
            residual,
            epsilon=self.norm.eps,
            memory_config=output_config,
            program_config=program_config if x.is_sharded else None,
            sharded=True,
            path="fused",
            ccl=self._gather_ccl,
        )
        plan_run = plan.run

        def run(x, w, residual):
            return plan_run(x, w, residual)[0]

        return BoundCall(run, w, plan, plan.output_desc(x))

    def _tg(self, x: TensorDesc, mode) -> BoundCall:
        """Both modes distributed over the mesh columns: decode on tt-metal's TG grid and program config, prefill
        interleaved with its TG compute config (HiFi2, no fp32 accumulation)."""
        check_input_width(x, self.args.dim, 4, distributed=True)
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
            return BoundCall(plan.run, w, plan, plan.output_desc(x))
        plan_run = plan.run

        def run(x, w, residual):
            return plan_run(route()(ttnn.to_memory_config)(x, mc), w, None)

        return BoundCall(run, w, plan, plan.output_desc(x))
