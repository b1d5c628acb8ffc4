"""What every rank of a mesh that spans hosts runs (`tt_rmsnorm.testing.multi_host.launch`), and what one process runs
on the same mesh opened as one host: distributed_rms_norm by every path, DistributedRMSNorm and tt-metal's decoder norm
through `tt_rmsnorm.compat`, on decode and prefill activations, with the hidden dim sharded over an axis that crosses
the hosts; and what the rules and the planner see of the whole mesh (links, topology, the plan).

    python -m tt_rmsnorm.testing.rank_program 2xt3k /run/dir             # one rank; tt-run starts one per host
    python -m tt_rmsnorm.testing.rank_program 2xt3k /run/dir --one-host  # the same mesh as one host opens it
    python -m tt_rmsnorm.testing.rank_program 2xt3k /run/dir --fail-rank 1  # rank 1 fails once its mesh is open

Each rank writes `rank<N>.json` into the directory: the facts of its own devices (by mesh coordinate) and of the mesh.
Any failure writes the error and ends the process at once (`os._exit(1)`), so that a failing rank never leaves the
others waiting on it longer than mpirun's timeout.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HIDDEN = 8192  # Llama-70B
MODES = (("decode", 32), ("prefill", 128))


def _memory_config_text(mc) -> str:
    from tt_rmsnorm.testing.dry_run import memory_config_text

    return memory_config_text(mc)


def _local_coords(mesh) -> list[tuple[int, int]]:
    """The mesh coordinates of this process's devices (every coordinate on one host)."""
    import ttnn

    view = mesh.get_view()
    rows, cols = tuple(mesh.shape)
    return [(r, c) for r in range(rows) for c in range(cols) if view.is_local(ttnn.MeshCoordinate(r, c))]


def _shards(t, mesh, local) -> dict[str, list]:
    """Shape, dtype and memory config of each local device's shard, by mesh coordinate ("r,c")."""
    import ttnn

    cols = tuple(mesh.shape)[1]
    shards = ttnn.get_device_tensors(t)
    out = {}
    for r, c in local:
        s = shards[r * cols + c]
        out[f"{r},{c}"] = [list(s.shape), str(s.dtype).rsplit(".", 1)[-1], _memory_config_text(s.memory_config())]
    return out


def mesh_facts(mesh) -> dict:
    """Everything a rank reports: the mesh as ttnn and the package see it, and each path's, module's and compat
    class's outputs on this process's devices."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import distributed
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    rows, cols = tuple(mesh.shape)
    axis = 1 if rows > 1 else None
    n = cols
    local = _local_coords(mesh)
    grid = mesh.compute_with_storage_grid_size()
    facts = {
        "mesh": [rows, cols],
        "devices": mesh.get_num_devices(),
        "local": [f"{r},{c}" for r, c in local],
        "arch": str(mesh.arch()).rsplit(".", 1)[-1],
        "grid": [grid.x, grid.y],
        "ttnn_links": {str(a): ttnn.get_num_links(mesh, a) for a, k in enumerate((rows, cols)) if k > 1},
    }
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis)
    facts["links"] = [ccl.links.system, list(ccl.links.available), ccl.links.num_links, str(ccl.links.topology)]
    facts["plans"] = {
        mode: tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, tokens, HIDDEN // n),
            (rows, cols),
            cluster_axis=axis,
            arch=mesh.arch(),
            compute_grid=(grid.x, grid.y),
            ccl=True,
            sharded=True if mode == "decode" else None,
        ).describe()
        for mode, tokens in MODES
    }
    gathered = []
    saved = ttnn.all_gather

    def all_gather(*args, **kwargs):  # the stats gather of the classic path, over the axis that crosses hosts
        out = saved(*args, **kwargs)
        gathered.append(list(ttnn.get_device_tensors(out)[local[0][0] * cols + local[0][1]].shape))
        return out

    ttnn.all_gather = all_gather
    outputs = {}
    try:
        w = tt_rmsnorm.prepare_weight(torch.randn(HIDDEN), mesh, cluster_axis=axis)
        for mode, tokens in MODES:
            torch.manual_seed(0)
            x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
            sharded = True if mode == "decode" else None
            for path in ("classic", "async", "auto"):
                r = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
                kw = dict(epsilon=1e-5, cluster_axis=axis, residual=r, path=path, ccl=ccl, sharded=sharded)
                chosen = distributed.planned_call(x, w, mesh, **kw).name
                y, h = tt_rmsnorm.distributed_rms_norm(x, w, mesh, **kw)
                outputs[f"{mode}-{path}"] = {
                    "path": chosen,
                    "y": _shards(y, mesh, local),
                    "residual": _shards(h, mesh, local),
                }
            try:  # the fused op asked for by name: refused before any device work where the mesh spans hosts
                tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, cluster_axis=axis, path="fused", ccl=ccl)
                outputs[f"{mode}-fused"] = {"refused": None}
            except tt_rmsnorm.RuleError as e:
                outputs[f"{mode}-fused"] = {"refused": e.rule}
    finally:
        ttnn.all_gather = saved
    facts["outputs"] = outputs
    facts["stats_gathered"] = gathered
    module = tt_rmsnorm.DistributedRMSNorm(
        mesh, HIDDEN, {"norm.weight": torch.randn(HIDDEN)}, "norm", cluster_axis=axis, ccl=ccl
    )
    facts["module"] = {}
    for mode, tokens in MODES:
        x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
        facts["module"][mode] = _shards(module(x, mode=mode), mesh, local)
    facts["compat"] = {}
    if rows == 1:  # tt_transformers' decoder norm on a line of chips
        layer, _, _, _ = stand_ins.decoder_norm_module(mesh, False)
        for mode, _ in MODES:
            facts["compat"][mode] = _shards(layer(stand_ins.decoder_input(mesh, mode, False), mode), mesh, local)
    else:  # the Galaxy decoder's norm over the mesh columns
        layer = stand_ins.galaxy_norm_module(mesh, stand_ins.ModelCCL(mesh))
        for mode, _ in MODES:
            out, _ = layer(stand_ins.galaxy_input(mesh, mode, layer), None, mode)
            facts["compat"][mode] = _shards(out, mesh, local)
    return facts


def open_system_mesh(system: str):
    """The system's whole mesh, opened as tt_rmsnorm.testing.mock_cluster opens its base system's."""
    import ttnn

    from tt_rmsnorm.devices import open_mesh
    from tt_rmsnorm.testing.mock_cluster import WORKER_DISPATCH_SYSTEMS
    from tt_rmsnorm.testing.multi_host import SYSTEMS

    spec = SYSTEMS[system]
    kw = {}
    if spec.base in WORKER_DISPATCH_SYSTEMS:  # N300-board hosts: consistent grids under Tensix dispatch
        kw["dispatch_core_config"] = ttnn.DispatchCoreConfig(ttnn.DispatchCoreType.WORKER)
    return open_mesh(spec.mesh_shape, **kw)


def main(argv: list[str]) -> None:
    """`system directory`: one rank under tt-run; `system directory --one-host`: the whole mesh in this process,
    from the joined descriptor (multi_host.joined_descriptor), into `one_host.json`."""
    system, directory = argv[1], Path(argv[2])
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    out = directory / f"rank{rank}.json"
    if "--one-host" in argv[3:]:
        from tt_rmsnorm.hardware import MOCK_ENV

        os.environ[MOCK_ENV] = str(directory / "joined.yaml")
        out = directory / "one_host.json"
    t0 = time.monotonic()
    try:
        os.environ["TT_METAL_CACHE"] = tempfile.mkdtemp(prefix=f"tt_rmsnorm-rank{rank}-") + "/"
        from tt_rmsnorm.testing.sfpi_stand_in import install_compiler_stand_in

        install_compiler_stand_in()
        from tt_rmsnorm.devices import close_mesh

        mesh = open_system_mesh(system)
        opened = time.monotonic() - t0
        if "--fail-rank" in argv and rank == int(argv[argv.index("--fail-rank") + 1]):
            raise RuntimeError(f"rank {rank} fails on purpose before the first collective (--fail-rank)")
        facts = mesh_facts(mesh)
        result = {"ok": True, "rank": rank, "open_s": opened, "run_s": time.monotonic() - t0, "facts": facts}
        out.write_text(json.dumps(result))
        close_mesh(mesh)
    except Exception:  # any failure ends this rank now: the others are ended by mpirun, never left waiting
        out.write_text(json.dumps({"ok": False, "rank": rank, "error": traceback.format_exc()[-4000:]}))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main(sys.argv)
