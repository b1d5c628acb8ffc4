"""The Llama-70B Galaxy decoder's `DistributedNorm` (models/demos/llama3_70b_galaxy/tt/distributed_norm.py):
`DistributedNorm(norm, args, TG=False, tt_ccl=None, ccl_topology=None)` and `forward(x, res, mode)`, which always
gives the decoder a pair back, run through the package.

TG (the Galaxy 8x4): both modes distributed over the mesh columns (cluster axis 1). Decode runs on the decoder's
width-sharded grid, cores (1,0)-(2,7) with [32, dim/4/16] shards and the matching sharded program config, as the fused
op (`fused_rms_minimal`, with the residual when one is given, as the Galaxy decoder's sharded norm runs it); prefill
runs pre -> all_gather_async -> post with HiFi2 and no fp32 accumulation. With `res`, x + res is written into `res` in
place and `(output, res)` comes back; without, `(output, None)`.
Not TG: the norm on the input where the norm reads it (the decoder's sharded config for decode, DRAM for prefill).
"""

from __future__ import annotations

import ttnn

from tt_rmsnorm import ccl, distributed, module
from tt_rmsnorm.errors import RuleError

_TG_AXIS = 1  # the Galaxy decoder's hidden dim is split over the mesh columns


class DistributedNorm(module.PlannedModule):
    """The Galaxy decoder's norm with its residual: `forward(x, res, mode)` -> `(output, res or None)`.

    `args` is duck-typed: `dim`, `mesh_device`, `is_multichip`, `is_distributed_norm(mode)`, and `qk_norm` where the
    model has one (its decode grid is then 5x2 rather than 8x2). `tt_ccl`: a model CCL object with tt_transformers'
    `TT_CCL` methods is adopted (its cycled semaphores serve the norm's gathers); without one the module creates its
    own `CCLResources` at construction, before any trace.
    """

    def __init__(self, norm, args, TG=False, tt_ccl=None, ccl_topology=None):  # noqa: N803 (tt-metal's name)
        self.norm = norm
        self.args = args
        self.tt_ccl = tt_ccl
        self.ccl_topology = ccl_topology
        self.TG = TG
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

    def forward(self, x, res, mode):
        key = (mode, self.args.is_distributed_norm(mode))
        hit = None if res is not None else module.last_call(self._last, key, x)
        run, w = hit or self.planned(key, x, res, self._plan, x, res, mode)
        return run(x, w, res)

    __call__ = forward

    def _plan(self, x, res, mode):
        if self.TG:
            return self._tg(x, res, mode)
        if res is not None:
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
        move = x.memory_config() != input_mc
        norm = self.norm

        def run(x, w, res):
            if move:
                x = ttnn.to_memory_config(x, input_mc)
            return norm(x, mode=mode, in_sharded=decode, out_sharded=decode)

        return run, None

    def _tg(self, x, res, mode):
        module.check_input_width(x, self.args.dim, self.args.mesh_device.shape[_TG_AXIS], distributed=True)
        decode = mode == "decode"
        moves = decode and x.memory_config() != self.gather_in_mem_cfg
        configs = {"program_config": self.ln_prg_cfg} if decode else {"compute_kernel_config": self.ln_cfg}
        w = self.norm.weight_distributed
        planned = []  # the plan of the input's signature where the norm reads it, planned at the first call

        def run(x, w, res):
            if moves:
                x = ttnn.to_memory_config(x, self.gather_in_mem_cfg)
                if res is not None:
                    # the sum goes back into the caller's residual: a moved copy is summed, then copied back
                    moved = ttnn.to_memory_config(res, self.gather_in_mem_cfg)
                    out, moved = self._norm(planned, x, w, moved, configs)
                    ttnn.copy(ttnn.to_memory_config(moved, res.memory_config()), res)
                    return out, res
            out = self._norm(planned, x, w, res, configs)
            return out if res is not None else (out, None)

        return run, w

    def _norm(self, planned, x, w, res, configs):
        if not planned:
            planned.append(
                distributed.planned_call(
                    x,
                    w,
                    self.args.mesh_device,
                    epsilon=self.norm.eps,
                    cluster_axis=_TG_AXIS,
                    residual=res,
                    ccl=self._ccl,
                    **configs,
                )
            )
        return planned[0].run(x, w, res)
