"""The Llama-70B Galaxy decoder's `DistributedNorm` (models/demos/llama3_70b_galaxy/tt/distributed_norm.py):
`DistributedNorm(norm, args, TG=False, tt_ccl=None, ccl_topology=None)`, and its current form `DistributedNorm(norm,
args, tt_ccl=None, ccl_topology=None, use_sharded_decode=True)` (always the Galaxy flows), with `forward(x, res, mode)`,
which always gives the decoder a pair back, run through the package.

TG (the Galaxy 8x4): both modes distributed over the mesh columns (cluster axis 1). Decode runs on the decoder's
width-sharded grid, cores (1,0)-(2,7) with [32, dim/4/16] shards and the matching sharded program config, as the fused
op (`fused_rms_minimal`, with the residual when one is given, as the Galaxy decoder's sharded norm runs it); prefill
runs pre -> all_gather_async -> post with HiFi2 and no fp32 accumulation. With `res`, x + res is written into `res` in
place and `(output, res)` comes back; without, `(output, None)`.
`use_sharded_decode=False`: decode runs as prefill does, in DRAM (x + res added first where `res` is given, into `res`),
and gives `(output, None)` back, as the current decoder's non-sharded decode does.
Not TG: the norm on the input where the norm reads it (the decoder's sharded config for decode, DRAM for prefill).
"""

from __future__ import annotations

from dataclasses import replace

import ttnn

from tt_rmsnorm import ccl
from tt_rmsnorm import distributed as distributed_calls
from tt_rmsnorm.compat.tt_transformers import check_norm
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import BoundCall, PlannedModule, check_input_width, mode_name
from tt_rmsnorm.rules import operands, sharding
from tt_rmsnorm.signature import signature
from tt_rmsnorm.tensors import TensorDesc, describe

_TG_AXIS = 1  # the Galaxy decoder's hidden dim is split over the mesh columns


class DistributedNorm(PlannedModule):
    """The Galaxy decoder's norm with its residual: `forward(x, res, mode)` -> `(output, res or None)`.

    `args` is duck-typed: `dim`, `mesh_device`, `is_multichip`, `is_distributed_norm(mode)`, and `qk_norm` where the
    model has one (its decode grid is then 5x2 rather than 8x2). `tt_ccl`: a model CCL object with tt_transformers'
    `TT_CCL` methods is adopted (its cycled semaphores serve the norm's gathers); without one the module creates its
    own `CCLResources` at construction, before any trace.

    norm: the norm module.
    args: the model args, as above.
    TG: the Galaxy flows; None, a 2-D mesh. The current signature `(norm, args, tt_ccl, ccl_topology,
        use_sharded_decode)` is also taken by position.
    tt_ccl: the model's CCL object, as above.
    ccl_topology: the gathers' topology; None, the system's.
    use_sharded_decode: decode width-sharded on the decode grid; False, interleaved in DRAM.
    """

    def __init__(self, norm, args, TG=None, tt_ccl=None, ccl_topology=None, use_sharded_decode=True):  # noqa: N803
        if TG is not None and not isinstance(TG, bool):
            # the current signature (norm, args, tt_ccl, ccl_topology, use_sharded_decode), called by position
            if isinstance(ccl_topology, bool):
                use_sharded_decode = ccl_topology
            TG, tt_ccl, ccl_topology = None, TG, tt_ccl
        if TG is None:  # the current module has no TG: its flows are the Galaxy's, on a 2-D mesh
            TG = min(tuple(args.mesh_device.shape)) > 1
        check_norm(norm)
        self.norm = norm
        self.args = args
        self.tt_ccl = tt_ccl
        self.ccl_topology = ccl_topology
        self.TG = TG
        self.use_sharded_decode = use_sharded_decode
        if not TG:
            return
        rows = 5 if getattr(args, "qk_norm", False) else 8
        offset = ttnn.CoreCoord(1, 0)
        cores = ttnn.CoreRange(offset, ttnn.CoreCoord(offset.x + 1, offset.y + rows - 1))  # 2 columns of `rows`
        per_device = args.dim // args.mesh_device.shape[_TG_AXIS]
        shard_width = per_device // (2 * rows)
        self.gather_in_mem_cfg = ttnn.create_sharded_memory_config(
            shape=(1, 1, 32, shard_width),
            core_grid=ttnn.CoreRangeSet({cores}),
            strategy=ttnn.ShardStrategy.WIDTH,
            use_height_and_width_as_shard_shape=True,
        )
        block = shard_width // 32
        self.ln_prg_cfg = ttnn.LayerNormShardedMultiCoreProgramConfig(
            compute_with_storage_grid_size=(2, rows),
            subblock_w=block,
            block_h=1,
            block_w=block,
            inplace=False,
        )
        self.ln_cfg = ttnn.WormholeComputeKernelConfig(
            math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False, fp32_dest_acc_en=False, packer_l1_acc=False
        )
        topology = ccl_topology if ccl_topology is not None else ttnn.Topology.Linear
        mesh = args.mesh_device
        self._ccl = (
            ccl.resources_for(tt_ccl, mesh, _TG_AXIS, topology=topology)
            if tt_ccl is not None
            else ccl.CCLResources(mesh, cluster_axis=_TG_AXIS, topology=topology)
        )

    def bound_modules(self) -> tuple:
        """Itself and its norm: the norm's configs and weights are bound into the planned call."""
        return (self, self.norm)

    def forward(self, x, res, mode):
        called, held = signature(
            mesh_device=self.args.mesh_device,
            modules=self.bound_modules(),
            x=x,
            residual=res,
            mode=mode,
            # asked every call, as tt-metal's DistributedNorm and RMSNorm ask them
            distributed=(self.args.is_distributed_norm(mode), self.norm.distributed_in(mode)),
        )
        call = PLANS.planned(called, held, self.plan_new, x, res)
        return call.run(x, call.weight, res)

    __call__ = forward

    def plan(self, signature, held, x, residual) -> BoundCall:
        """The call for this signature, every op it issues (moves, the norm, the residual's copy back) checked before
        any runs."""
        distributed_calls.check_tensors(x, None, residual)
        x, residual, distributed = describe(x), describe(residual), signature.distributed
        mode = mode_name(signature.mode)
        if self.TG:
            return self._tg(x, residual, mode)
        if residual is not None:
            raise RuleError(
                "compat.residual",
                "the Galaxy decoder's norm adds a residual on the TG (Galaxy) path only",
                "res given with TG=False",
                "add the residual first (ttnn.add) and pass res=None, or build the norm with TG=True on a Galaxy",
            )
        if self.args.is_multichip:
            raise RuleError(
                "compat.gather",
                "without TG the Galaxy decoder's norm runs on one chip: its multichip gathers are not part of it",
                f"a {self.args.mesh_device.get_num_devices()}-device mesh",
                "use tt_rmsnorm.compat.DistributedNorm (tt_transformers' module) on T3000-class meshes",
            )
        decode = mode == "decode"
        input_mc = self.norm.sharded_output_config if decode else ttnn.DRAM_MEMORY_CONFIG
        move = x.memory_config != input_mc
        if move:
            sharding.check_move(x, input_mc)
            x = replace(x, memory_config=input_mc)
        norm_call = self.norm.plan_described(x, mode, distributed[1], decode, decode)
        norm_run = norm_call.run

        def run(x, w, res):
            if move:
                x = route()(ttnn.to_memory_config)(x, input_mc)
            return norm_run(x, w, None)

        return BoundCall(run, norm_call.weight, norm_call.plan, norm_call.output)

    def _tg(self, x: TensorDesc, res: TensorDesc | None, mode) -> BoundCall:
        check_input_width(x, self.args.dim, self.args.mesh_device.shape[_TG_AXIS], distributed=True)
        decode = mode == "decode"
        if decode and not self.use_sharded_decode:
            return self._dram_decode(x, res)
        cfg = self.gather_in_mem_cfg
        moves = decode and x.memory_config != cfg
        configs = {"program_config": self.ln_prg_cfg} if decode else {"compute_kernel_config": self.ln_cfg}
        h, h_res = x, res
        if moves:
            sharding.check_move(x, cfg)
            h = replace(x, memory_config=cfg)
            if res is not None:
                sharding.check_move(res, cfg)
                h_res = replace(res, memory_config=cfg)
                # the sum goes back into the caller's residual: the moved copy moved back (then of the residual's own
                # spec) and copied over it
                sharding.check_move(h_res, res.memory_config)
        w = self.norm.weight_distributed
        plan = distributed_calls.plan_described(
            self.args.mesh_device,
            h,
            describe(w),
            h_res,
            epsilon=self.norm.eps,
            cluster_axis=_TG_AXIS,
            ccl=self._ccl,
            **configs,
        )
        plan_run = plan.run
        res_mc = None if res is None else res.memory_config

        def run(x, w, res):
            if moves:
                via = route()
                x = via(ttnn.to_memory_config)(x, cfg)
                if res is not None:
                    moved = via(ttnn.to_memory_config)(res, cfg)
                    out, moved = plan_run(x, w, moved)
                    via(ttnn.copy)(via(ttnn.to_memory_config)(moved, res_mc), res)
                    return out, res
            out = plan_run(x, w, res)
            return out if res is not None else (out, None)

        return BoundCall(run, w, plan, plan.output_desc(h))

    def _dram_decode(self, x: TensorDesc, res: TensorDesc | None) -> BoundCall:
        """use_sharded_decode=False: decode in DRAM as the current decoder runs it without its sharded grid: x (and
        res) moved to DRAM, x + res added into a new tensor (the caller's res is not written), the distributed norm
        interleaved with HiFi2, the output moved where the norm's output config says; `(output, None)` back."""
        dram = ttnn.DRAM_MEMORY_CONFIG
        moves = [t is not None and t.memory_config != dram for t in (x, res)]
        for t, move in zip((x, res), moves, strict=True):
            if move:
                sharding.check_move(t, dram)
        h = replace(x, memory_config=dram)
        if res is not None:
            operands.check_residual(h, replace(res, memory_config=dram))
        out_mc = self.norm.output_mem_config
        plan = distributed_calls.plan_described(
            self.args.mesh_device,
            h,
            describe(self.norm.weight_distributed),
            None,
            epsilon=self.norm.eps,
            cluster_axis=_TG_AXIS,
            compute_kernel_config=self.ln_cfg,
            ccl=self._ccl,
        )
        output = plan.output_desc(h)
        if out_mc is not None:
            sharding.check_move(output, out_mc)
            output = replace(output, memory_config=out_mc)
        plan_run = plan.run
        move_x, move_res = moves

        def run(x, w, res):
            via = route()
            if move_x:
                x = via(ttnn.to_memory_config)(x, dram)
            if res is not None:
                r = via(ttnn.to_memory_config)(res, dram) if move_res else res
                x = via(ttnn.add)(x, r, memory_config=dram)
            out = plan_run(x, w, None)
            return (out if out_mc is None else via(ttnn.to_memory_config)(out, out_mc)), None

        return BoundCall(run, self.norm.weight_distributed, plan, output)
