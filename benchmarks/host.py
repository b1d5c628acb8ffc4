"""Host time of every entry point against the raw ttnn calls it stands for, on mock meshes.

    make bench-host            # or: python -m benchmarks.host [--calls 100] [--rounds 7] [--clock wall|cpu]

For each mock system (T3000 1x8 and Galaxy 8x4 with the hidden dim over the columns; N150 1x1), decode (32 tokens, the
activation already width-sharded in L1 as models keep it) and prefill (128 tokens, DRAM), it times `calls` calls of
each entry point and of the ttnn calls it stands for, written out by hand as model code writes them, alternating the
two for `rounds` rounds and keeping each side's best round:

- `distributed_rms_norm` on every path that applies, and `DistributedRMSNorm`, against the path's ttnn calls with the
  plan's configs;
- `compat.RMSNorm`, `compat.DistributedNorm` and `compat.llama_galaxy.DistributedNorm`, built and called as tt-metal's
  decoders build and call theirs, against the ttnn sequence tt-metal's own module issues for the same call.

A mock device runs ttnn's host side in full (validation, program cache lookup, dispatch) and no kernel, so what is
timed is host time: the overhead a model pays whenever it is not replaying a trace. `--clock cpu` times the calling
thread's CPU time instead of the wall clock, for a machine busy with other work (a preempted round then costs nothing
extra). Mock devices answer from one process per system.
"""

from __future__ import annotations

import argparse
import sys
import time

HIDDEN = {"t3k": 8192, "galaxy": 8192, "n150": 4096}  # Llama-70B on the meshes; an 8B-sized model on one chip
SYSTEMS = {"t3k": (1, 8), "galaxy": (8, 4), "n150": (1, 1)}
MODES = {"decode": 32, "prefill": 128}
PATHS_BY_SYSTEM = {"t3k": ("classic", "async", "fused"), "galaxy": ("classic", "async", "fused"), "n150": ("local",)}


def _raw_calls(path: str, plan, mesh, ccl, x, w, extra: dict):
    """The ttnn calls of `path` with `plan`'s configs, as model code would write them."""
    import ttnn

    norm, axis = plan.norm, plan.call.cluster_axis
    ck, pc = norm.compute_kernel_config, norm.program_config

    def pre():
        return ttnn.rms_norm_pre_all_gather(x, dtype=ttnn.bfloat16, compute_kernel_config=ck, program_config=pc)

    def post(stats):
        return ttnn.rms_norm_post_all_gather(
            x, stats, epsilon=1e-5, weight=w, compute_kernel_config=ck, program_config=pc
        )

    if path == "classic":
        return lambda: post(ttnn.all_gather(pre(), 3, cluster_axis=axis, memory_config=norm.stats_memory_config))
    if path == "async":

        def run_async():
            semaphores, barrier = ccl.next_gather()
            stats = ttnn.experimental.all_gather_async(
                pre(),
                dim=3,
                cluster_axis=axis,
                mesh_device=mesh,
                topology=ttnn.Topology.Linear,
                multi_device_global_semaphore=semaphores,
                barrier_semaphore=barrier,
                num_links=1,
                memory_config=norm.stats_memory_config,
                persistent_output_tensor=extra["gathered"],
            )
            return post(stats)

        return run_async
    if path == "fused":
        return lambda: ttnn.fused_rms_minimal(
            x,
            pc,
            axis,
            mesh,
            ccl.next_fused(),
            num_links=1,
            topology=ttnn.Topology.Linear,
            compute_kernel_config=ck,
            memory_config=x.memory_config(),
            epsilon=1e-5,
            weight=w,
            stats=extra["fused_stats"],
        )
    return lambda: ttnn.rms_norm(x, epsilon=1e-5, weight=w, program_config=pc, compute_kernel_config=ck)


def _tt_metal_decoder_norm(mode: str, tg: bool, layer, x):
    """tt_transformers' DistributedNorm.forward as tt-metal writes it (models/tt_transformers/tt/distributed_norm.py
    with models/common/rmsnorm.py and tt_transformers' ccl.py), on the compat layer's own weights and the model CCL
    stand-in: the raw ttnn sequence the compat call stands for."""
    import ttnn

    norm, args, tt_ccl = layer.norm, layer.args, layer.tt_ccl
    topology = args.ccl_topology()
    ring = {"chunks_per_sync": 10, "num_workers_per_link": 2, "num_buffers_per_channel": 2}

    def gather(t, memory_config, axis=None, num_links=1, topology=topology):
        kw = {} if axis is None else {"cluster_axis": axis}
        return ttnn.experimental.all_gather_async(
            t,
            persistent_output_buffer=None,
            dim=3,
            multi_device_global_semaphore=tt_ccl.get_and_cycle_ag_semaphore_handles(axis),
            num_links=num_links,
            topology=topology,
            memory_config=memory_config,
            barrier_semaphore=tt_ccl.get_and_cycle_barrier_semaphore_handle(axis),
            **kw,
            **ring,
        )

    if tg and mode == "decode":  # tt_sharded_distributed_rmsnorm
        stats_mc = ttnn.create_sharded_memory_config(
            shape=[1, 1, 32, 32 * 4], core_grid=ttnn.CoreGrid(y=1, x=1), strategy=ttnn.ShardStrategy.WIDTH
        )

        def run():
            h = ttnn.to_memory_config(x, memory_config=layer.gather_in_mem_cfg)
            stats = ttnn.rms_norm_pre_all_gather(h, program_config=layer.ln_prg_cfg)
            stats = gather(stats, stats_mc, axis=1, num_links=tt_ccl.get_num_links(1), topology=ttnn.Topology.Linear)
            out = ttnn.rms_norm_post_all_gather(
                h, epsilon=norm.eps, weight=norm.weight_distributed, program_config=layer.ln_prg_cfg, stats=stats
            )
            stats.deallocate(True)
            return out

        return run
    if tg:  # tt_distributed_rmsnorm

        def run():
            stats = ttnn.rms_norm_pre_all_gather(x, compute_kernel_config=layer.ln_cfg, dtype=ttnn.bfloat16)
            stats = ttnn.reshape(stats, ttnn.Shape((1, 1, x.shape[-2], 32)))
            stats = ttnn.to_memory_config(stats, ttnn.DRAM_MEMORY_CONFIG)
            gathered = gather(stats, ttnn.DRAM_MEMORY_CONFIG, axis=1, num_links=tt_ccl.get_num_links(1))
            stats.deallocate(True)
            out = ttnn.rms_norm_post_all_gather(
                x, gathered, epsilon=norm.eps, weight=norm.weight_distributed, compute_kernel_config=layer.ln_cfg
            )
            gathered.deallocate(True)
            return out

        return run
    decode = mode == "decode"
    input_mc = norm.sharded_output_config if decode else ttnn.DRAM_MEMORY_CONFIG
    distributed = args.is_distributed_norm(mode)
    rmsnorm = _tt_metal_rmsnorm(norm, mode, distributed, decode, decode, gather)

    def run():
        h = gather(x, input_mc) if args.is_multichip and not distributed else ttnn.to_memory_config(x, input_mc)
        out = rmsnorm(h)
        return gather(out, out.memory_config()) if distributed else out

    return run


def _tt_metal_rmsnorm(norm, mode, distributed, in_sharded, out_sharded, gather):
    """models/common/rmsnorm.py's RMSNorm.forward(h, mode, in_sharded, out_sharded) as tt-metal writes it, on the compat
    module's weights: the distributed pre -> stats gather (`gather`, the model CCL's) -> post, or rms_norm, then
    sharded_to_interleaved where a sharded input gives an interleaved output."""
    import ttnn

    ck = norm.compute_kernel_config_hifi2
    program_config = norm.sharded_program_config if in_sharded else None
    memory_config = norm.sharded_output_config if out_sharded else None

    def forward(h):
        if distributed:
            stats = ttnn.rms_norm_pre_all_gather(h, compute_kernel_config=ck, dtype=ttnn.bfloat16)
            stats = gather(stats, ttnn.DRAM_MEMORY_CONFIG)
            out = ttnn.rms_norm_post_all_gather(
                h, stats, epsilon=norm.eps, weight=norm.weight_distributed, compute_kernel_config=ck
            )
            stats.deallocate(True)
        else:
            out = ttnn.rms_norm(
                h,
                epsilon=norm.eps,
                weight=norm.weight,
                program_config=program_config,
                memory_config=memory_config,
                compute_kernel_config=ck,
            )
        return ttnn.sharded_to_interleaved(out) if in_sharded and not out_sharded else out

    return forward


def _tt_metal_galaxy_norm(layer, mode, x, res):
    """The Llama-70B Galaxy decoder's norm on TG as its llama_ccl writes it, on the compat module's weights and
    configs: decode the fused op on the decoder's grid (with the residual), prefill pre -> all_gather_async over the
    columns -> post with HiFi2 and no fp32 accumulation."""
    import ttnn

    from tt_rmsnorm import op_outputs
    from tt_rmsnorm.planning import planner

    norm, ccl, mesh = layer.norm, layer._ccl, layer.args.mesh_device
    if mode == "decode":
        stats = planner.allocate(op_outputs.fused_stats_desc(x, 4, None), mesh)
        res_kw = {} if res is None else {"residual_input_tensor": res}
        return lambda: ttnn.fused_rms_minimal(
            x,
            layer.ln_prg_cfg,
            1,
            mesh,
            ccl.next_fused(),
            num_links=ccl.links.num_links,
            topology=ttnn.Topology.Linear,
            memory_config=layer.gather_in_mem_cfg,
            epsilon=norm.eps,
            weight=norm.weight_distributed,
            stats=stats,
            **res_kw,
        )

    def prefill():
        stats = ttnn.rms_norm_pre_all_gather(x, compute_kernel_config=layer.ln_cfg, dtype=ttnn.bfloat16)
        semaphores, barrier = ccl.next_gather()
        gathered = ttnn.experimental.all_gather_async(
            stats,
            dim=3,
            cluster_axis=1,
            mesh_device=mesh,
            topology=ttnn.Topology.Linear,
            multi_device_global_semaphore=semaphores,
            barrier_semaphore=barrier,
            num_links=ccl.links.num_links,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )
        return ttnn.rms_norm_post_all_gather(
            x, gathered, epsilon=norm.eps, weight=norm.weight_distributed, compute_kernel_config=layer.ln_cfg
        )

    return prefill


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def _best(fns: dict, calls: int, rounds: int, clock: str) -> dict:
    """Each callable's best time per call over `rounds` alternating rounds, after a warm-up."""
    for fn in fns.values():
        for _ in range(10):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], _time(fn, calls, CLOCKS[clock]))
    return best


def _time(fn, calls: int, now) -> float:
    t0 = now()
    for _ in range(calls):
        fn()
    return (now() - t0) / calls


def measure(mesh, system: str, calls: int, rounds: int, clock: str = "wall") -> list[dict]:
    """Runs in a mock-cluster worker: the rows of the table for one system."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm import devices, distributed
    from tt_rmsnorm.planning import planner

    mesh_shape = tuple(mesh.shape)
    axis = 1 if mesh_shape[0] > 1 else None
    n = mesh_shape[1]
    grid = mesh.compute_with_storage_grid_size()
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis) if n > 1 else None
    rows = []
    hidden = HIDDEN[system]

    def row(mode, tokens, what, fns):
        best = _best(fns, calls, rounds, clock)
        ours, raw = (best[k] for k in fns)
        rows.append(_row(system, mesh_shape, mode, tokens, hidden, what, ours, raw))

    for mode, tokens in MODES.items():
        w = devices.prepare_weight(torch.randn(hidden), mesh, cluster_axis=axis)
        for path in PATHS_BY_SYSTEM[system]:
            if path == "fused" and mode != "decode":
                continue
            plan = tt_rmsnorm.plan_distributed_rms_norm(
                (1, 1, tokens, hidden // n),
                mesh_shape,
                cluster_axis=axis,
                compute_grid=(grid.x, grid.y),
                path=path,
                ccl=ccl is not None or None,
                sharded=True if mode == "decode" else None,
            )
            x = devices.shard_activation(
                torch.randn(1, 1, tokens, hidden),
                mesh,
                cluster_axis=axis,
                memory_config=plan.norm.input_memory_config,
            )

            def package(x=x, w=w, path=path):
                return distributed.distributed_rms_norm(x, w, mesh, epsilon=1e-5, cluster_axis=axis, path=path, ccl=ccl)

            extra = {
                k: planner.allocate(d, mesh)
                for k, d in (("gathered", plan.gathered), ("fused_stats", plan.fused_stats))
                if d is not None
            }
            row(mode, tokens, path, {"package": package, "raw": _raw_calls(path, plan, mesh, ccl, x, w, extra)})
        _modules(mesh, system, mode, tokens, ccl, row)
    return rows


def _modules(mesh, system: str, mode: str, tokens: int, ccl, row) -> None:
    """The module forms of the same call against the ttnn calls they stand for: DistributedRMSNorm against the raw
    calls of the path it takes; compat.RMSNorm, compat.DistributedNorm (tt_transformers' decoder norm as a model builds
    it) and, on the Galaxy, compat.llama_galaxy.DistributedNorm (with the residual in decode, as the ff norm calls it)
    against the ttnn sequence tt-metal's own module makes for the same call."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import devices
    from tt_rmsnorm.planning import planner
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    mesh_shape = tuple(mesh.shape)
    axis = 1 if mesh_shape[0] > 1 else None
    n, hidden = mesh_shape[1], HIDDEN[system]
    grid = mesh.compute_with_storage_grid_size()
    sd = {"norm.weight": torch.randn(hidden)}
    norm = tt_rmsnorm.DistributedRMSNorm(mesh, hidden, sd, "norm", cluster_axis=axis, ccl=ccl)
    plan = tt_rmsnorm.plan_distributed_rms_norm(
        (1, 1, tokens, hidden // n),
        mesh_shape,
        cluster_axis=axis,
        compute_grid=(grid.x, grid.y),
        ccl=ccl is not None,
        sharded=True if mode == "decode" else None,  # decode activations live in L1, as models keep them
    )
    if n == 1:
        x = ttnn.from_torch(
            torch.randn(1, 1, tokens, hidden),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=mesh,
            memory_config=plan.norm.input_memory_config,
        )
        w = norm._weight_interleaved() if x.memory_config() == ttnn.DRAM_MEMORY_CONFIG else norm.weight
    else:
        x = devices.shard_activation(
            torch.randn(1, 1, tokens, hidden), mesh, cluster_axis=axis, memory_config=plan.norm.input_memory_config
        )
        w = norm.weight_distributed
    extra = {
        k: planner.allocate(d, mesh)
        for k, d in (("gathered", plan.gathered), ("fused_stats", plan.fused_stats))
        if d is not None
    }
    raw = _raw_calls(plan.name, plan, mesh, ccl, x, w, extra)
    row(mode, tokens, f"DistributedRMSNorm ({plan.name})", {"module": lambda: norm(x, mode), "raw": raw})

    tg = system == "galaxy"
    layer, rms, args, tt_ccl = stand_ins.decoder_norm_module(mesh, tg, dim=hidden)
    x = stand_ins.decoder_input(mesh, mode, tg, dim=hidden)
    raw = _tt_metal_decoder_norm(mode, tg, layer, x)
    row(mode, tokens, "compat.DistributedNorm", {"compat": lambda: layer(x, mode), "raw": raw})

    # compat.RMSNorm as a decoder's DistributedNorm calls it, on the input as it reaches the norm: on the TG path
    # tt_transformers calls its own distributed functions, so the Galaxy norm is called distributed on DRAM input
    decode = mode == "decode" and not tg
    distributed = args.is_distributed_norm(mode) and args.is_multichip
    h = stand_ins.decoder_input(mesh, mode, tg, dim=hidden)
    if decode:
        h = ttnn.to_memory_config(
            _full_width(mesh, tokens, hidden) if not distributed else h, rms.sharded_output_config
        )
    gather = _model_gather(tt_ccl, args.ccl_topology(), cluster_axis=1 if tg else None)
    raw = _tt_metal_rmsnorm(rms, mode, distributed, decode, decode, gather)
    row(mode, tokens, "compat.RMSNorm", {"compat": lambda: rms(h, mode, decode, decode), "raw": lambda: raw(h)})

    if tg:
        layer = stand_ins.galaxy_norm_module(mesh, stand_ins.ModelCCL(mesh))
        x = stand_ins.galaxy_input(mesh, mode, layer)
        res = stand_ins.galaxy_input(mesh, mode, layer) if mode == "decode" else None
        raw = _tt_metal_galaxy_norm(layer, mode, x, res)
        row(mode, tokens, "compat.llama_galaxy.DistributedNorm", {"compat": lambda: layer(x, res, mode), "raw": raw})
    elif n == 1:  # off the TG path the Galaxy decoder's norm runs on one chip: the input moved where the norm reads it
        from tt_rmsnorm.compat import llama_galaxy

        layer = llama_galaxy.DistributedNorm(rms, args)
        x = stand_ins.decoder_input(mesh, mode, False, dim=hidden)
        input_mc = rms.sharded_output_config if mode == "decode" else ttnn.DRAM_MEMORY_CONFIG
        norm_raw = _tt_metal_rmsnorm(rms, mode, False, mode == "decode", mode == "decode", gather)

        def galaxy_raw():
            return norm_raw(ttnn.to_memory_config(x, input_mc))

        fns = {"compat": lambda: layer(x, None, mode), "raw": galaxy_raw}
        row(mode, tokens, "compat.llama_galaxy.DistributedNorm", fns)


def _full_width(mesh, tokens, hidden):
    """A replicated full-width activation: what a decoder's norm gets after gathering a fractured one."""
    import torch
    import ttnn

    return ttnn.from_torch(
        torch.randn(1, 1, tokens, hidden),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=mesh,
        mesh_mapper=ttnn.ReplicateTensorToMesh(mesh),
    )


def _model_gather(tt_ccl, topology, cluster_axis=None):
    """tt_transformers' stats and activation gather: all_gather_async on dim 3 with the model CCL's cycled handles.
    tt-metal's RMSNorm names no axis, which a 2-D mesh cannot run (ttnn fails in the fabric): there the same gather
    runs over the axis the compat module gathers on."""
    import ttnn

    axis = {} if cluster_axis is None else {"cluster_axis": cluster_axis}

    def gather(t, memory_config):
        return ttnn.experimental.all_gather_async(
            t,
            persistent_output_buffer=None,
            dim=3,
            multi_device_global_semaphore=tt_ccl.get_and_cycle_ag_semaphore_handles(cluster_axis),
            num_links=1,
            topology=topology,
            memory_config=memory_config,
            barrier_semaphore=tt_ccl.get_and_cycle_barrier_semaphore_handle(cluster_axis),
            chunks_per_sync=10,
            num_workers_per_link=2,
            num_buffers_per_channel=2,
            **axis,
        )

    return gather


def _row(system, mesh_shape, mode, tokens, hidden, path, ours, raw) -> dict:
    return {
        "system": system,
        "mesh": "x".join(map(str, mesh_shape)),
        "mode": f"{mode} T={tokens}",
        "hidden": hidden,
        "path": path,
        "package_us": ours * 1e6,
        "raw_us": raw * 1e6,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="calls per round (default 100)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; the best of each side is kept")
    parser.add_argument("--systems", default="t3k,galaxy,n150")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall (default) or the thread's CPU")
    args = parser.parse_args(argv)
    from tt_rmsnorm.testing import workers

    rows = []
    for system in args.systems.split(","):
        print(f"measuring mock {system} ...", file=sys.stderr, flush=True)
        rows += workers.run_isolated(
            system, measure, system, args.calls, args.rounds, args.clock, timeout=900, mesh_shape=SYSTEMS[system]
        )
    workers.shutdown_workers()
    clock = f"{args.clock} clock, best of {args.rounds} alternating rounds of {args.calls} calls"
    print(f"# host time per call ({clock}); bf16")
    print("| system | mesh | hidden | mode | path | package us | raw ttnn us | package / raw |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["package_us"] / r["raw_us"]
        print(
            f"| {r['system']} | {r['mesh']} | {r['hidden']} | {r['mode']} | {r['path']} | {r['package_us']:.1f} | "
            f"{r['raw_us']:.1f} | {ratio:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
