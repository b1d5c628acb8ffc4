"""Host overhead of `distributed_rms_norm` against the raw ttnn calls it makes, per path, on mock meshes.

    make bench-host            # or: python -m benchmarks.host [--calls 100] [--rounds 7]

For each mock system (T3000 1x8 and Galaxy 8x4 with the hidden dim over the columns; N150 1x1 for the local path),
decode (32 tokens, the activation already width-sharded in L1 as models keep it) and prefill (128 tokens, DRAM), and
every path that applies, it times `calls` calls of the package and of the same ttnn calls written out by hand with the
plan's configs, alternating the two for `rounds` rounds and keeping each side's best round. A mock device runs ttnn's
host side in full (validation, program cache lookup, dispatch) and no kernel, so what is timed is host time: the
overhead a model pays whenever it is not replaying a trace. Mock devices answer from one process per system.
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


def _time(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def measure(mesh, system: str, calls: int, rounds: int) -> list[dict]:
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
            raw = _raw_calls(path, plan, mesh, ccl, x, w, extra)
            for fn in (package, raw):
                for _ in range(10):
                    fn()
            best = {"package": float("inf"), "raw": float("inf")}
            for _ in range(rounds):
                best["package"] = min(best["package"], _time(package, calls))
                best["raw"] = min(best["raw"], _time(raw, calls))
            rows.append(
                {
                    "system": system,
                    "mesh": "x".join(map(str, mesh_shape)),
                    "mode": f"{mode} T={tokens}",
                    "hidden": hidden,
                    "path": path,
                    "package_us": best["package"] * 1e6,
                    "raw_us": best["raw"] * 1e6,
                }
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="calls per round (default 100)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; the best of each side is kept")
    parser.add_argument("--systems", default="t3k,galaxy,n150")
    args = parser.parse_args(argv)
    from tt_rmsnorm.testing import workers

    rows = []
    for system in args.systems.split(","):
        print(f"measuring mock {system} ...", file=sys.stderr, flush=True)
        rows += workers.run_isolated(
            system, measure, system, args.calls, args.rounds, timeout=900, mesh_shape=SYSTEMS[system]
        )
    workers.shutdown_workers()
    print(f"# host time per call, best of {args.rounds} alternating rounds of {args.calls} calls; bf16")
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
