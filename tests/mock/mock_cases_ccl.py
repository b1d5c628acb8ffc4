"""The CCL agreement battery's cases: `ttnn.experimental.all_gather_async`, `ttnn.fused_rms_minimal`, and the
composition pre -> all_gather_async -> post, described once as plain data (the spec constructors of `mock_cases`).

A case is a dict: `op` ("all_gather_async", "fused", "compose"), `system` (Wormhole "t3k" and "galaxy", Blackhole
"p300" and "bh-galaxy"), tensor specs for `x`
and optionally `weight`, `residual`, `stats` (fused's stats buffer) and `persistent` (the gather's or the fused op's
persistent output), semaphore specs `sems` and `barrier`, op keyword arguments `kw`, and `expect`: what real ttnn does
("accept" / "reject"), or "pkg:<rule>" for a package-only guard. Semaphores are made by a `create(grid)` callback:
real `ttnn.create_global_semaphore` handles in the worker, plain objects on the package side, so both sides describe
them with the same `SemaphoreDesc.of`.
"""

from __future__ import annotations

import dataclasses

import ttnn

from tests.mock import mock_cases
from tests.mock.mock_cases import CK, GRIDS, PC, S, T, in_sample, tensor_desc
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.op_outputs import gathered_desc, pre_stats_desc
from tt_rmsnorm.rules.ccl_checks import SemaphoreDesc, check_all_gather_async, check_fused_rms_minimal
from tt_rmsnorm.rules.op_checks import check_post_all_gather, check_pre_all_gather
from tt_rmsnorm.systems import system_of
from tt_rmsnorm.tensors import describe, stats_kind_of
from tt_rmsnorm.testing.dry_run import memory_config_text
from tt_rmsnorm.testing.mock_cluster import ARCHES, MESH_SHAPES

TENSOR_SLOTS = ("x", "weight", "residual", "stats", "persistent")
OPS = ("fused", "all_gather_async", "compose")
SYSTEMS = ("t3k", "galaxy", "p300", "bh-galaxy")


def in_make_test(case: dict) -> bool:
    """`make test` runs every Wormhole case and, of the Blackhole repeats of the same tables, the package-only guards
    and a stable share of the rest (mock_cases.in_sample); `make battery` runs them all."""
    if ARCHES[case["system"]] != "blackhole" or case["expect"].startswith("pkg:"):
        return True
    return in_sample(case["id"])


def fabric_links(system: str) -> int:
    """Ethernet links between neighbours on the system's gather axis (tt_rmsnorm.systems)."""
    return system_of(ARCHES[system], MESH_SHAPES[system]).links_on(1)


def one_row(system: str) -> bool:
    """A 1xN mesh: axis 0 has one device."""
    return MESH_SHAPES[system][0] == 1


def SEM(grid="full", count=1, shared=False):
    """Semaphore spec: the grid (x0, y0, x1, y1) or "full" (the device's compute grid), how many handles, and whether
    they are one handle passed `count` times."""
    return ("sem", grid, count, shared)


def sem_grid(spec, system) -> ttnn.CoreRangeSet:
    grid = spec[1] if spec[1] != "full" else (0, 0, GRIDS[system][0] - 1, GRIDS[system][1] - 1)
    x0, y0, x1, y1 = grid
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(x0, y0), ttnn.CoreCoord(x1, y1))})


def semaphores(case, create) -> dict:
    """{"sems": [handles], "barrier": handle or None} for `case`; `create(grid)` makes one handle."""
    out = {"sems": [], "barrier": None}
    if case.get("sems"):
        _, _, count, shared = spec = case["sems"]
        grid = sem_grid(spec, case["system"])
        first = create(grid)
        out["sems"] = [first] + [first if shared else create(grid) for _ in range(count - 1)]
    barrier = case.get("barrier")
    if barrier == "gather0":
        out["barrier"] = out["sems"][0]
    elif barrier:
        out["barrier"] = create(sem_grid(barrier, case["system"]))
    return out


def semaphore_descs(case, handles) -> dict:
    sems = SemaphoreDesc.of(handles["sems"], sem_grid(case["sems"], case["system"])) if case.get("sems") else None
    barrier = None
    if handles["barrier"] is not None:
        spec = case["sems"] if case["barrier"] == "gather0" else case["barrier"]
        barrier = SemaphoreDesc.of(handles["barrier"], sem_grid(spec, case["system"]))
    return {"sems": sems, "barrier": barrier}


def op_kwargs(kw: dict) -> dict:
    """ttnn objects for the specs in `kw` (nested "pre"/"gather" dicts for compositions; topology by name)."""
    flat = mock_cases.op_kwargs({k: v for k, v in kw.items() if not isinstance(v, dict) and k != "topology"})
    if "topology" in kw:
        flat["topology"] = getattr(ttnn.Topology, kw["topology"])
    return {**flat, **{k: op_kwargs(v) for k, v in kw.items() if isinstance(v, dict)}}


def output_text(t) -> dict:
    """shape / dtype / memory config of a TensorDesc, in the worker's `describe_output` format."""
    t = describe(t)
    return {
        "shape": tuple(t.shape),
        "dtype": str(t.dtype).rsplit(".", 1)[-1],
        "memory_config": memory_config_text(t.memory_config),
    }


# ---------------------------------------------------------------------------------------------------------------------
# The package side.


def _gather_kw(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k not in ("topology", "overload")}


def _fused(case, t, kw, sems) -> dict:
    kw = {k: v for k, v in kw.items() if k not in ("topology", "epsilon")}
    pc, axis = kw.pop("program_config"), kw.pop("cluster_axis")
    check_fused_rms_minimal(
        t["x"],
        pc,
        axis,
        MESH_SHAPES[case["system"]],
        sems["sems"],
        weight=t.get("weight"),
        stats=t.get("stats"),
        residual_input_tensor=t.get("residual"),
        persistent_output_tensor=t.get("persistent"),
        **kw,
    )
    out = describe(t.get("persistent")) or dataclasses.replace(
        describe(t["x"]), memory_config=kw.get("memory_config") or describe(t["x"]).memory_config
    )
    return output_text(dataclasses.replace(out, dtype=kw.get("dtype") or out.dtype))


def _gather(case, x, kw, sems, persistent):
    kw = _gather_kw(kw)
    dim = kw.pop("dim")
    n = check_all_gather_async(
        x,
        dim,
        multi_device_global_semaphore=sems["sems"],
        barrier_semaphore=sems["barrier"],
        mesh_shape=MESH_SHAPES[case["system"]],
        persistent_output_buffer=persistent,
        compute_grid=GRIDS[case["system"]],
        **kw,
    )
    gathered = describe(persistent) or gathered_desc(x, dim, n, kw.get("memory_config"))
    return dataclasses.replace(gathered, stats_kind=stats_kind_of(x))


def _compose(case, t, kw, sems, produced) -> dict:
    grid, x = GRIDS[case["system"]], t["x"]
    pre = {k: kw[k] for k in ("program_config", "compute_kernel_config") if k in kw}
    check_pre_all_gather(x, residual_input_tensor=t.get("residual"), compute_grid=grid, **pre, **kw.get("pre", {}))
    stats = produced.get("stats") or pre_stats_desc(x, **kw.get("pre", {}))
    gathered = _gather(case, stats, kw["gather"], sems, t.get("persistent"))
    if produced.get("gathered") is not None:
        gathered = dataclasses.replace(describe(produced["gathered"]), stats_kind=stats_kind_of(stats))
    check_post_all_gather(x, gathered, weight=t.get("weight"), compute_grid=grid, epsilon=1e-5, **pre)
    return output_text(gathered)


def package_verdict(case: dict, tensors: dict, handles: dict | None = None, produced: dict | None = None) -> dict:
    """The package's verdict on `case` for `tensors` (TensorDescs or real tensors) and semaphore `handles` (real, or
    stand-ins when None); for compositions, `produced` holds the real intermediate tensors ttnn returned (missing ones
    are predicted). An accepted case also reports the output the package predicts."""
    sems = semaphore_descs(case, handles or semaphores(case, lambda grid: object()))
    kw = op_kwargs(case["kw"])
    try:
        if case["op"] == "fused":
            predicted = _fused(case, tensors, kw, sems)
        elif case["op"] == "all_gather_async":
            predicted = output_text(_gather(case, tensors["x"], kw, sems, tensors.get("persistent")))
        else:
            predicted = _compose(case, tensors, kw, sems, produced or {})
    except RuleError as e:
        return {"verdict": "reject", "rule": e.rule, "message": str(e), "predicted": None}
    return {"verdict": "accept", "rule": None, "message": "", "predicted": predicted}


def package_side(case: dict) -> dict:
    return package_verdict(case, {k: tensor_desc(case[k], case["system"]) for k in TENSOR_SLOTS if case.get(k)})


# ---------------------------------------------------------------------------------------------------------------------
# The table.

CASES: list[dict] = []
A, R = "accept", "reject"


def case(id, op, system, x, expect, **slots_and_kw):
    slots = {k: slots_and_kw.pop(k) for k in (*TENSOR_SLOTS, "sems", "barrier") if k in slots_and_kw}
    CASES.append(
        {"id": f"{op}-{system}-{id}", "op": op, "system": system, "x": x, **slots, "kw": slots_and_kw, "expect": expect}
    )


def _one_core(core, width, rows=32):
    return S("WIDTH", (*core, *core), (rows, width))


# Per system: gather axis and its devices, per-device width, fused grid (its first core), shard width, program config.
# Llama-70B's 8192 over each system's columns: 1024 on T3000, 2048 on either Galaxy, 4096 on a P300.
LAYOUT = {
    "t3k": dict(axis=1, n=8, w=1024, grid=(0, 0, 7, 3), first=(0, 0), other=(1, 0), pc=PC((8, 4), 1, 1, 1)),
    "galaxy": dict(axis=1, n=4, w=2048, grid=(1, 0, 2, 7), first=(1, 0), other=(0, 0), pc=PC((2, 8), 4, 1, 4)),
    "p300": dict(axis=1, n=2, w=4096, grid=(0, 0, 7, 3), first=(0, 0), other=(1, 0), pc=PC((8, 4), 4, 1, 4)),
    "bh-galaxy": dict(axis=1, n=4, w=2048, grid=(1, 0, 2, 7), first=(1, 0), other=(0, 0), pc=PC((2, 8), 4, 1, 4)),
}
FP32 = CK(fp32=True)
FP32_SYNC = CK(fp32=True, dst_sync=True)


def _fused_cases(system):
    L = LAYOUT[system]
    axis, n, w, grid, first = L["axis"], L["n"], L["w"], L["grid"], L["first"]
    cores = (grid[2] - grid[0] + 1) * (grid[3] - grid[1] + 1)
    XM = S("WIDTH", grid, (32, w // cores))
    X = T((1, 1, 32, w), mem=XM)
    WT = T((1, 1, w // 32, 32), layout="RM")
    ST = T((1, 1, 32, 32 * n), mem=_one_core(first, 32 * n))
    ST32 = T((1, 1, 32, 32 * n), "fp32", mem=_one_core(first, 32 * n))
    GSEM = SEM(grid)
    F = dict(weight=WT, stats=ST, sems=GSEM, program_config=L["pc"], cluster_axis=axis, topology="Linear", num_links=1)

    def fused(id, expect, x=X, **kw):
        case(id, "fused", system, x, expect, **{**F, **kw})

    # --- fused_rms_minimal: accepted -------------------------------------------------------------------------------
    fused("decode", A, memory_config=XM, epsilon=1e-5)
    fused("no-memory-config", A)
    fused("semaphore-full-grid", A, sems=SEM("full"))
    fused("reshard-8-cores", A, memory_config=S("WIDTH", (0, 0, 7, 0), (32, w // 8)))
    fused("reshard-1-core", A, memory_config=S("WIDTH", (0, 0, 0, 0), (32, w)))
    fused("residual", A, residual=T((1, 1, 32, w), mem=XM))
    fused("residual-bf8", A, residual=T((1, 1, 32, w), "bf8", mem=XM))
    fused("fp32-acc-fp32-stats", A, stats=ST32, compute_kernel_config=FP32)
    fused("input-bf8", A, x=T((1, 1, 32, w), "bf8", mem=XM))
    fused("input-fp32", A, x=T((1, 1, 32, w), "fp32", mem=XM))
    fused("rows8", A, x=T((1, 1, 8, w), mem=XM))
    fused("weight-fp32", A, weight=T((1, 1, w // 32, 32), "fp32", "RM"))
    fused("weight-2d", A, weight=T((w // 32, 32), layout="RM"))
    fused("out-bf8", A, dtype="bf8")
    fused("ring", A, topology="Ring")
    fused("links2", A, num_links=2)
    fused("welford-ignored", A, program_config=PC(L["pc"][1], L["pc"][2], 1, L["pc"][4], welford=True))
    fused("persistent-output-spec", A, persistent=T((1, 1, 32, w), mem=XM))
    # --- fused_rms_minimal: rejected by ttnn -----------------------------------------------------------------------
    fused("semaphore-one-core", R, sems=SEM((*first, *first)))
    fused("semaphore-list", R, sems=SEM(grid, count=2))
    fused("no-stats", R, stats=None)
    fused("no-weight", R, weight=None)
    fused("stats-fp32-acc-off", R, stats=ST32)
    fused("stats-bf16-acc-on", R, compute_kernel_config=FP32)
    fused("stats-bf8", R, stats=T((1, 1, 32, 32 * n), "bf8", mem=_one_core(first, 32 * n)))
    fused("stats-dram", R, stats=T((1, 1, 32, 32 * n)))
    fused("stats-2-cores", R, stats=T((1, 1, 32, 64 * n), mem=S("WIDTH", (0, 0, 1, 0), (32, 32 * n))))
    fused("out-interleaved", R, memory_config="L1")
    fused("out-col-major", R, memory_config=S("WIDTH", grid, (32, w // cores), orient="COL"))
    fused("input-col-major", R, x=T((1, 1, 32, w), mem=S("WIDTH", grid, (32, w // cores), orient="COL")))
    fused("input-interleaved", R, x=T((1, 1, 32, w), mem="L1"))
    fused("input-height-sharded", R, x=T((1, 1, 32, w), mem=S("HEIGHT", (0, 0, 0, 0), (32, w))))
    fused("batch2", R, x=T((2, 1, 32, w), mem=S("WIDTH", grid, (64, w // cores))))
    fused("input-row-major", R, x=T((1, 1, 32, w), layout="RM", mem=XM))
    fused("weight-tile", R, weight=T((1, 1, 1, w)))
    fused("weight-short", R, weight=T((1, 1, w // 64, 32), layout="RM"))
    fused("residual-interleaved", R, residual=T((1, 1, 32, w)))
    fused("residual-other-grid", R, residual=T((1, 1, 32, w), mem=S("WIDTH", (0, 0, 7, 0), (32, w // 8))))
    fused("block_w", R, program_config=PC(L["pc"][1], 1, 1, 2 * L["pc"][4]))
    fused("default-program-config", R, program_config=("default_pc", False, False))
    fused("grid-too-small", R, program_config=PC((1, 1), L["pc"][2], 1, L["pc"][4]))
    x4, sem4 = T((1, 1, 32, w), mem=S("WIDTH", (0, 0, 3, 0), (32, w // 4))), SEM((0, 0, 3, 0))
    st4 = dict(stats=T((1, 1, 32, 32 * n), mem=_one_core((0, 0), 32 * n)), sems=sem4)
    bw4 = w // 128  # 4 cores: 8 tiles each on t3k, 16 on the Galaxies, 32 on a P300
    fused("4-cores-subblock8", A, x=x4, program_config=PC((4, 1), 8, 1, bw4), **st4)
    fused(
        "4-cores-subblock8-fp32",
        R,
        x=x4,
        program_config=PC((4, 1), 8, 1, bw4),
        compute_kernel_config=FP32,
        **{**st4, "stats": T((1, 1, 32, 32 * n), "fp32", mem=_one_core((0, 0), 32 * n))},
    )
    fused(
        "4-cores-subblock8-fp32-sync",
        A,
        x=x4,
        program_config=PC((4, 1), 8, 1, bw4),
        compute_kernel_config=FP32_SYNC,
        **{**st4, "stats": T((1, 1, 32, 32 * n), "fp32", mem=_one_core((0, 0), 32 * n))},
    )
    fused("4-cores-subblock-divides", R, x=x4, program_config=PC((4, 1), 3, 1, bw4), **st4)
    fused("persistent-dram", R, persistent=T((1, 1, 32, w)))
    # --- fused_rms_minimal: package-only guards --------------------------------------------------------------------
    fused("stats-other-core", "pkg:fused.stats_core", stats=T((1, 1, 32, 32 * n), mem=_one_core(L["other"], 32 * n)))
    fused("stats-half-width", "pkg:fused.stats_width", stats=T((1, 1, 32, 16 * n), mem=_one_core(first, 16 * n)))
    fused(
        "stats-row-major",
        "pkg:fused.stats_layout",
        stats=T((1, 1, 32, 32 * n), layout="RM", mem=_one_core(first, 32 * n)),
    )
    fused("persistent-32x32", "pkg:fused.persistent_output", persistent=T((1, 1, 32, 32), mem=_one_core((0, 0), 32)))
    fused("persistent-fp32", "pkg:fused.persistent_output", persistent=T((1, 1, 32, w), "fp32", mem=XM))
    fused("axis2", "pkg:fused.cluster_axis", cluster_axis=2)
    fused("links0", "pkg:fused.num_links", num_links=0)
    if one_row(system):
        fused("links-beyond-fabric", "pkg:fused.num_links", num_links=fabric_links(system) + 2)  # accepted by ttnn
        fused("axis0-one-device", "pkg:fused.num_devices", cluster_axis=0)
    else:
        fused("axis0", A, cluster_axis=0, stats=T((1, 1, 32, 256), mem=_one_core(first, 256)))


# --- all_gather_async of the stats ---------------------------------------------------------------------------------
def _gather_cases(system):
    L = LAYOUT[system]
    axis, n = L["axis"], L["n"]
    SI = T((1, 1, 128, 32))  # interleaved (prefill) stats of 128 rows
    P = T((1, 1, 128, 32 * n))
    S1 = T((1, 1, 32, 32), mem=_one_core((0, 0), 32))  # sharded (decode) stats
    PN = _one_core((0, 0), 32 * n)
    G = dict(sems=SEM(count=2), barrier=SEM(), dim=3, cluster_axis=axis, topology="Linear", num_links=1)

    def gather(id, expect, x=SI, **kw):
        case(id, "all_gather_async", system, x, expect, **{**G, **kw})

    gather("persistent-barrier", A, persistent=P, memory_config="DRAM")
    gather("persistent-no-memory-config", A, persistent=P)
    gather("no-persistent", A)
    gather("no-barrier", A, persistent=P, barrier=None)
    gather("mesh-overload", A, persistent=P, overload="mesh")
    gather("persistent-L1", A, persistent=T((1, 1, 128, 32 * n), mem="L1"), memory_config="L1")
    gather("ring", A, persistent=P, topology="Ring")
    gather("links2", A, persistent=P, num_links=2)
    gather("links-default", A, persistent=P, num_links=None)
    gather("dim2", A, persistent=T((1, 1, 128 * n, 32)), dim=2)
    gather("dim-1", A, persistent=P, dim=-1)
    gather("fp32", A, x=T((1, 1, 128, 32), "fp32"), persistent=T((1, 1, 128, 32 * n), "fp32"))
    gather("bf8", A, x=T((1, 1, 128, 32), "bf8"), persistent=T((1, 1, 128, 32 * n), "bf8"))
    gather("seq2048", A, x=T((1, 1, 2048, 32)), persistent=T((1, 1, 2048, 32 * n)))
    gather("sharded-stats", A, x=S1, persistent=T((1, 1, 32, 32 * n), mem=PN), memory_config=PN)
    gather("sharded-to-dram", A, x=S1, persistent=T((1, 1, 32, 32 * n)), memory_config="DRAM")
    gather("interleaved-to-1-core", A, x=T((1, 1, 32, 32)), persistent=T((1, 1, 32, 32 * n), mem=PN), memory_config=PN)
    gather("one-semaphore", R, persistent=P, sems=SEM())
    gather("three-semaphores", R, persistent=P, sems=SEM(count=3))
    gather("persistent-too-wide", R, persistent=T((1, 1, 128, 64 * n)))
    gather("persistent-rows", R, persistent=T((1, 1, 64, 32 * n)))
    gather("persistent-fp32", R, persistent=T((1, 1, 128, 32 * n), "fp32"))
    gather("persistent-row-major", R, persistent=T((1, 1, 128, 32 * n), layout="RM"))
    gather("persistent-L1-memory-config-dram", R, persistent=T((1, 1, 128, 32 * n), mem="L1"))
    gather("persistent-rank3", R, persistent=T((1, 128, 32 * n)))
    gather("persistent-host", R, persistent=T((1, 1, 128, 32 * n), host=True))
    gather("dim4", R, persistent=P, dim=4)
    gather("links0", R, persistent=P, num_links=0)
    gather("links-beyond-fabric", R, persistent=P, num_links=fabric_links(system) + 1)
    gather("axis2", R, persistent=P, cluster_axis=2)
    gather("sharded-no-memory-config", R, x=S1, persistent=T((1, 1, 32, 32 * n), mem=PN))
    gather("sharded-no-persistent-no-memory-config", R, x=S1)
    gather("persistent-truncated", "pkg:all_gather_async.persistent_truncated", persistent=T((1, 1, 128, 16 * n)))
    gather("one-handle-twice", "pkg:all_gather_async.distinct_semaphores", persistent=P, sems=SEM(count=2, shared=True))
    gather("barrier-is-gather-semaphore", "pkg:all_gather_async.distinct_semaphores", persistent=P, barrier="gather0")
    gather("no-axis", A if one_row(system) else R, persistent=P, cluster_axis=None)  # a 2-D mesh needs the axis
    if one_row(system):
        gather("axis0-one-device", R, cluster_axis=0)
    else:
        gather("axis0", A, persistent=T((1, 1, 128, 256)), cluster_axis=0, num_links=fabric_links(system))


# --- pre -> all_gather_async -> post ----------------------------------------------------------------------------------
def _compose_cases(system):
    L = LAYOUT[system]
    axis, n, w, grid, first = L["axis"], L["n"], L["w"], L["grid"], L["first"]
    cores = (grid[2] - grid[0] + 1) * (grid[3] - grid[1] + 1)
    XM = S("WIDTH", grid, (32, w // cores))
    WT = T((1, 1, w // 32, 32), layout="RM")
    PN = _one_core(first, 32 * n)  # the sharded pre leaves its stats on the input grid's first core
    GA = dict(dim=3, cluster_axis=axis, topology="Linear", num_links=1)
    C = dict(weight=WT, sems=SEM(count=2), barrier=SEM())

    def compose(id, expect, x, gather=None, **kw):
        case(id, "compose", system, x, expect, **{**C, **kw, "gather": {**GA, **(gather or {})}})

    XP = T((1, 1, 128, w))
    compose("prefill", A, XP, persistent=T((1, 1, 128, 32 * n)), gather={"memory_config": "DRAM"})
    compose("prefill-no-persistent", A, XP)
    compose("prefill-fp32-acc", A, XP, persistent=T((1, 1, 128, 32 * n)), compute_kernel_config=FP32)
    compose(
        "prefill-fp32-stats",
        A,
        XP,
        persistent=T((1, 1, 128, 32 * n), "fp32"),
        pre={"dtype": "fp32"},
        compute_kernel_config=FP32,
    )
    compose("prefill-bf8-stats", A, XP, persistent=T((1, 1, 128, 32 * n), "bf8"), pre={"dtype": "bf8"})
    compose(
        "prefill-stats-on-one-core",
        A,
        T((1, 1, 32, w)),
        persistent=T((1, 1, 32, 32 * n), mem=PN),
        gather={"memory_config": PN},
    )
    XD = T((1, 1, 32, w), mem=XM)
    DEC = dict(persistent=T((1, 1, 32, 32 * n), mem=PN), gather={"memory_config": PN}, program_config=L["pc"])
    compose("decode", A, XD, **DEC)
    compose("decode-residual", A, XD, **DEC, residual=T((1, 1, 32, w), mem=XM))
    compose("decode-no-persistent", A, XD, **{**DEC, "persistent": None})
    compose("prefill-stats-fp32-no-acc", R, XP, persistent=T((1, 1, 128, 32 * n), "fp32"), pre={"dtype": "fp32"})
    compose("prefill-persistent-rows", R, XP, persistent=T((1, 1, 32, 32 * n)))
    compose(
        "decode-stats-to-dram",
        R,
        XD,
        persistent=T((1, 1, 32, 32 * n)),
        gather={"memory_config": "DRAM"},
        program_config=L["pc"],
    )
    compose(
        "decode-persistent-memory-config",
        R,
        XD,
        persistent=T((1, 1, 32, 32 * n), mem=PN),
        program_config=L["pc"],
    )
    compose("prefill-truncated", "pkg:all_gather_async.persistent_truncated", XP, persistent=T((1, 1, 128, 16 * n)))
    compose(
        "decode-truncated",
        "pkg:all_gather_async.persistent_truncated",
        XD,
        persistent=T((1, 1, 32, 16 * n), mem=_one_core(first, 16 * n)),
        gather={"memory_config": _one_core(first, 16 * n)},
        program_config=L["pc"],
    )


for system in SYSTEMS:
    _fused_cases(system)
    _gather_cases(system)
    _compose_cases(system)


# --- classes found by differential fuzzing (tools/differential.py) ---------------------------------------------------
def _one_core_stats(core, n, dtype="bf16"):
    return T((1, 1, 32, 32 * n), dtype, mem=_one_core(core, 32 * n))


GX = dict(weight=T((1, 1, 256, 32), layout="RM"), cluster_axis=1, topology="Linear")
TWO_CORES = S("WIDTH", (0, 7, 1, 7), (32, 4096))
# fused_rms_minimal's static buffers (two x blocks, the weight block, a resharded output's block) against its shards
for id, expect, extra in (
    ("l1-8192-on-2-cores", A, {}),
    ("l1-8192-on-2-cores-resharded", R, {"memory_config": S("WIDTH", (0, 0, 1, 0), (32, 4096))}),
):
    case(
        id,
        "fused",
        "galaxy",
        T((1, 1, 8, 8192), mem=TWO_CORES),
        expect,
        sems=SEM((0, 7, 1, 7)),
        stats=_one_core_stats((0, 7), 4),
        program_config=PC((2, 8), 16, 1, 128),
        compute_kernel_config=CK(dst_sync=True),
        **GX,
        **extra,
    )
case(
    "l1-4096-on-1-core",
    "fused",
    "galaxy",
    T((1, 1, 32, 4096), mem=_one_core((0, 0), 4096)),
    R,
    sems=SEM((0, 0, 0, 0)),
    stats=_one_core_stats((0, 0), 4, "fp32"),
    program_config=PC((1, 1), 8, 1, 128),
    compute_kernel_config=CK(fp32=True, dst_sync=True),
    **{**GX, "weight": T((1, 1, 128, 32), "fp32", "RM")},
)
# the reduce workers are placed relative to the grid and compared with its absolute end
case(
    "one-column-off-x0",
    "fused",
    "galaxy",
    T((1, 1, 32, 2048), mem=S("WIDTH", (3, 0, 3, 1), (32, 1024))),
    R,
    sems=SEM((3, 0, 3, 1)),
    stats=_one_core_stats((3, 0), 4),
    program_config=PC((4, 2), 8, 1, 32),
    **{**GX, "weight": T((1, 1, 64, 32), layout="RM")},
)
# Galaxy's decode stats (32x32 on one core into 32x128 on one core) take ttnn's Llama gather: any number of semaphores
for count in (1, 3):
    case(
        f"llama-stats-{count}-semaphores",
        "all_gather_async",
        "galaxy",
        T((1, 1, 32, 32), mem=_one_core((0, 0), 32)),
        A,
        sems=SEM(count=count),
        persistent=T((1, 1, 32, 128), mem=_one_core((0, 0), 128)),
        memory_config=_one_core((0, 0), 128),
        dim=3,
        cluster_axis=1,
        topology="Linear",
    )

# Cases where the package's verdict differs from ttnn's (strict xfails, as in mock_cases).
KNOWN_DISAGREEMENTS: dict[str, str] = {}

assert len({c["id"] for c in CASES}) == len(CASES), "duplicate case ids"
CASES.sort(key=lambda c: SYSTEMS.index(c["system"]))  # one worker per system, started once
