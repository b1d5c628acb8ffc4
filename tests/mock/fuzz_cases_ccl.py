"""The differential fuzzer's generator of CCL calls, in the CCL battery's spec format (mock_cases_ccl):
`ttnn.fused_rms_minimal` ("fused"), `ttnn.experimental.all_gather_async` ("all_gather_async") and pre ->
all_gather_async -> post ("compose") on mock T3000 (1x8), Galaxy (8x4), P300 (1x2) and Blackhole Galaxy (8x4).

Each call starts valid, built from what the contract has: the input's width, rows, dtype and shard grid (the fused
op's program config derived from it), the weight's form, residual, stats buffer in the accumulation format on the
grid's first core, global semaphores and the barrier on the full grid or the input's, num_links, topology,
cluster_axis, dim, output and persistent-buffer memory layouts. Most calls then take one or more mutations, each a
single step across one rule of `tt_rmsnorm.rules.ccl_checks` (or across ttnn's own L1 limits).
"""

from __future__ import annotations

from tests.mock.fuzz_draws import DTYPE_WEIGHTS as FUZZ_DTYPE_WEIGHTS
from tests.mock.fuzz_draws import TILE, gather_l1_edge_input, grid_cores, largest_divisor, pick, subblock_limit
from tests.mock.mock_cases import CK, DPC, GRIDS, PC, S, T
from tests.mock.mock_cases_ccl import OPS, SEM, SYSTEMS, fabric_links, one_row
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES

CCL_OPS = OPS  # the ops of the CCL battery, on its systems
CCL_SYSTEMS = SYSTEMS
# Ethernet links of the mock fabrics between neighbours (tt_rmsnorm.systems)
LINKS = {system: fabric_links(system) for system in SYSTEMS}
DTYPE_WEIGHTS = FUZZ_DTYPE_WEIGHTS


def _axis(rng, system) -> int:
    return 1 if one_row(system) or rng.random() < 0.7 else 0


def _devices(system, axis) -> int:
    shape = MESH_SHAPES[system]
    return shape[axis] if axis in (0, 1) else 1


def _compute(rng):
    if rng.random() < 0.4:
        return None
    return CK(fp32=rng.random() < 0.4, fidelity=rng.choice(("HiFi4", "HiFi2", "LoFi")), dst_sync=rng.random() < 0.2)


def _one_core(core, width, rows=TILE):
    return S("WIDTH", (*core, *core), (rows, width))


def _width_grid(rng, system, width):
    """A ROW_MAJOR WIDTH_SHARDED grid (x0, y0, x1, y1) for `width` whose core count divides its tiles."""
    gx, gy = GRIDS[system]
    tiles = width // TILE
    shapes = [(cx, cy) for cx in range(1, gx + 1) for cy in range(1, gy + 1) if tiles % (cx * cy) == 0]
    cx, cy = rng.choice(shapes)
    x0 = rng.randrange(gx - cx + 1) if rng.random() < 0.3 else 0
    y0 = rng.randrange(gy - cy + 1) if rng.random() < 0.3 else 0
    return (x0, y0, x0 + cx - 1, y0 + cy - 1)


def _acc(ck) -> str:
    return "fp32" if ck and ck[1] else "bf16"


# ---------------------------------------------------------------------------------------------------------------------
# fused_rms_minimal


def _fused(rng, system):
    axis = _axis(rng, system)
    n = _devices(system, axis)
    width = rng.choice((256, 512, 1024, 1024, 2048, 2048, 4096, 8192))
    rows = rng.choice((1, 8, 32, 32))
    grid = _width_grid(rng, system, width)
    shard_w = width // grid_cores(grid)
    xm = S("WIDTH", grid, (TILE, shard_w))
    ck = _compute(rng)
    if rng.random() < 0.2 and shard_w // TILE > 1:  # dst_full_sync doubles the subblock limit
        ck = CK(fp32=bool(ck and ck[1]), dst_sync=True)
    block_w = shard_w // TILE
    pc = PC((grid[2] + 1, grid[3] + 1), largest_divisor(block_w, subblock_limit(ck)), 1, block_w)
    first = grid[:2]
    c = {
        "op": "fused",
        "system": system,
        "x": T((1, 1, rows, width), pick(rng, DTYPE_WEIGHTS), mem=xm),
        "weight": T((1, 1, width // TILE, TILE), rng.choice(("bf16", "bf16", "fp32")), "RM"),
        "stats": T((1, 1, TILE, TILE * n), _acc(ck), mem=_one_core(first, TILE * n)),
        "sems": SEM(grid if rng.random() < 0.5 else "full"),
        "kw": {"program_config": pc, "cluster_axis": axis, "topology": rng.choice(("Linear", "Linear", "Ring"))},
    }
    if rng.random() < 0.15:
        c["weight"] = T((width // TILE, TILE), c["weight"]["dtype"], "RM")
    if ck:
        c["kw"]["compute_kernel_config"] = ck
    if rng.random() < 0.6:
        c["kw"]["num_links"] = rng.randint(1, LINKS[system])
    if rng.random() < 0.5:
        c["kw"]["epsilon"] = rng.choice((1e-5, 1e-6))
    if rng.random() < 0.25:
        c["residual"] = T((1, 1, rows, width), rng.choice(("bf16", "bf8")), mem=xm)
    out = xm
    if rng.random() < 0.3:
        k = rng.choice([d for d in (1, 2, 4, 8) if (width // TILE) % d == 0])
        out = S("WIDTH", (0, 0, k - 1, 0), (TILE, width // k))
        c["kw"]["memory_config"] = out
    elif rng.random() < 0.3:
        c["kw"]["memory_config"] = xm
    if rng.random() < 0.15:
        c["kw"]["dtype"] = rng.choice(("bf16", "bf8"))
    if rng.random() < 0.15:
        c["persistent"] = T((1, 1, rows, width), c["kw"].get("dtype") or c["x"]["dtype"], mem=out)
    return c


def _m_fused(rng, c):
    x, pc = c["x"], c["kw"]["program_config"]
    if pc[0] != "sharded_pc" or not isinstance(x["mem"], tuple):  # one mutation of the input or config per call
        return None
    first = x["mem"][2][:2]
    _, grid, sub, bh, bw, _, _ = pc
    n = max(1, _devices(c["system"], c["kw"]["cluster_axis"]))
    stats = c.get("stats") or T((1, 1, TILE, TILE * n), mem=_one_core(first, TILE * n))
    choice = rng.choice(
        (
            "sems2",
            "sem_one_core",
            "no_stats",
            "no_weight",
            "stats_dtype",
            "stats_dram",
            "stats_two_cores",
            "stats_other_core",
            "stats_half",
            "stats_rm",
            "acc_flip",
            "out_interleaved",
            "out_col",
            "x_col",
            "x_interleaved",
            "x_rm",
            "x_rows64",
            "weight_tile",
            "weight_short",
            "residual_dram",
            "block_w",
            "subblock",
            "default_pc",
            "grid_small",
            "axis",
            "links",
            "persistent",
        )
    )
    grid_rect = x["mem"][2]
    if choice == "sems2":
        c["sems"] = SEM(c["sems"][1], count=2)
    elif choice == "sem_one_core" and grid_cores(grid_rect) > 1:
        c["sems"] = SEM((*first, *first))
    elif choice in ("no_stats", "no_weight"):
        c.pop(choice[3:], None)
    elif choice == "stats_dtype":
        c["stats"] = {
            **stats,
            "dtype": rng.choice([d for d in ("bf16", "bf8", "fp32") if d != stats["dtype"]]),
        }
    elif choice == "stats_dram":
        c["stats"] = {**stats, "mem": "DRAM"}
    elif choice == "stats_two_cores":
        w = stats["shape"][-1]
        c["stats"] = T((1, 1, TILE, 2 * w), stats["dtype"], mem=S("WIDTH", (0, 0, 1, 0), (TILE, w)))
    elif choice == "stats_other_core":
        other = (first[0] + 1, first[1]) if first[0] + 1 < GRIDS[c["system"]][0] else (0, first[1])
        c["stats"] = {**stats, "mem": _one_core(other, stats["shape"][-1])}
    elif choice == "stats_half":
        c["stats"] = T((1, 1, TILE, 16 * n), stats["dtype"], mem=_one_core(first, 16 * n))
    elif choice == "stats_rm":
        c["stats"] = {**stats, "layout": "RM", "dtype": "bf16" if stats["dtype"] == "bf8" else stats["dtype"]}
    elif choice == "acc_flip":
        ck = c["kw"].get("compute_kernel_config") or CK()
        c["kw"]["compute_kernel_config"] = (*ck[:1], not ck[1], *ck[2:])
    elif choice == "out_interleaved":
        c["kw"]["memory_config"] = rng.choice(("L1", "DRAM"))
    elif choice == "out_col":
        c["kw"]["memory_config"] = S("WIDTH", grid_rect, x["mem"][3], "COL")
    elif choice == "x_col":
        c["x"] = {**x, "mem": S("WIDTH", grid_rect, x["mem"][3], "COL")}
    elif choice == "x_interleaved":
        c["x"] = {**x, "mem": rng.choice(("L1", "DRAM"))}
    elif choice == "x_rm" and x["dtype"] != "bf8" and x["shape"][-2] == TILE:  # a row-major shard is not padded
        c["x"] = {**x, "layout": "RM"}
    elif choice == "x_rows64":
        c["x"] = {**x, "shape": (1, 1, 64, x["shape"][-1]), "mem": S("WIDTH", grid_rect, (64, x["mem"][3][1]))}
        c.pop("residual", None)
    elif choice == "weight_tile" and c.get("weight"):
        c["weight"] = T((1, 1, 1, x["shape"][-1]))
    elif choice == "weight_short" and x["shape"][-1] >= 2 * TILE * TILE:
        c["weight"] = T((1, 1, x["shape"][-1] // 2 // TILE, TILE), layout="RM")
    elif choice == "residual_dram":
        c["residual"] = T(x["shape"], x["dtype"] if x["dtype"] != "fp32" else "bf16")
    elif choice == "block_w":
        c["kw"]["program_config"] = PC(grid, sub, bh, bw * 2)
    elif choice == "subblock":
        bigger = [d for d in range(sub + 1, bw + 1) if bw % d == 0]
        c["kw"]["program_config"] = PC(grid, bigger[0] if bigger else sub + 1, bh, bw)
    elif choice == "default_pc":
        c["kw"]["program_config"] = DPC()
    elif choice == "grid_small" and (grid[0] > 1 or grid[1] > 1):
        c["kw"]["program_config"] = PC((max(1, grid[0] - 1), max(1, grid[1] - 1)), sub, bh, bw)
    elif choice == "axis":
        c["kw"]["cluster_axis"] = rng.choice((0, 2) if c["kw"]["cluster_axis"] == 1 else (1, 2))
    elif choice == "links":
        c["kw"]["num_links"] = rng.choice((0, LINKS[c["system"]] + 1))
    elif choice == "persistent":
        c["persistent"] = rng.choice(
            (T((1, 1, TILE, TILE), mem=_one_core((0, 0), TILE)), T(x["shape"], "fp32", mem=x["mem"]), T(x["shape"]))
        )
    else:
        return None
    return f"fused.{choice}"


# ---------------------------------------------------------------------------------------------------------------------
# all_gather_async


def _gathered(x, dim, n, mem):
    shape = list(x["shape"])
    shape[dim % len(shape)] *= n
    return T(tuple(shape), x["dtype"], x["layout"], mem=mem)


def _gather(rng, system):
    axis = _axis(rng, system)
    n = _devices(system, axis)
    if rng.random() < 0.25:  # decode: sharded stats on one core
        x = T((1, 1, TILE, TILE), mem=_one_core((0, 0), TILE))
        out = _one_core((0, 0), TILE * n) if rng.random() < 0.8 else "DRAM"
    else:
        rows = rng.choice((32, 32, 128, 128, 512, 2048))
        width = rng.choice((32, 32, 32, 64, 1024))
        x = T(
            (1, 1, rows, width),
            pick(rng, DTYPE_WEIGHTS),
            mem=rng.choice(("DRAM", "DRAM", "L1")),
        )
        out = rng.choice(("DRAM", "DRAM", "L1", None))
    c = {
        "op": "all_gather_async",
        "system": system,
        "x": x,
        "sems": SEM(count=2),
        "kw": {"dim": rng.choice((3, 3, 3, -1, 2)), "cluster_axis": axis, "topology": rng.choice(("Linear", "Ring"))},
    }
    if rng.random() < 0.75:
        c["barrier"] = SEM()
    if out is not None:
        c["kw"]["memory_config"] = out
    if rng.random() < 0.5:
        c["kw"]["num_links"] = rng.choice((None, 1, 1, LINKS[system]))
    if isinstance(x["mem"], tuple):  # the one-core stats shard gathers along its width
        c["kw"]["dim"] = rng.choice((3, -1))
    if rng.random() < 0.7:
        c["persistent"] = _gathered(x, c["kw"]["dim"], n, out or x["mem"])
        if rng.random() < 0.25:
            c["kw"]["overload"] = "mesh"
    return c


def _m_gather(rng, c):
    kw = c["kw"]
    n = _devices(c["system"], kw["cluster_axis"])
    choice = rng.choice(
        (
            "sems1",
            "sems3",
            "shared",
            "barrier_is_gather",
            "dim4",
            "links0",
            "links_beyond",
            "axis",
            "no_axis",
            "persistent_wide",
            "persistent_rows",
            "persistent_dtype",
            "persistent_rm",
            "persistent_mem",
            "persistent_rank3",
            "persistent_truncated",
            "no_memory_config",
            "l1_edge",
            "l1_edge",
        )
    )
    p = c.get("persistent")
    if choice == "sems1":
        c["sems"] = SEM()
    elif choice == "sems3":
        c["sems"] = SEM(count=3)
    elif choice == "shared":
        c["sems"] = SEM(count=2, shared=True)
    elif choice == "barrier_is_gather":
        c["barrier"] = "gather0"
    elif choice == "dim4":
        kw["dim"] = 4
    elif choice == "links0":
        kw["num_links"] = 0
    elif choice == "links_beyond":
        kw["num_links"] = LINKS[c["system"]] + 1
    elif choice == "axis":
        kw["cluster_axis"] = rng.choice((0, 2) if kw["cluster_axis"] == 1 else (1, 2))
    elif choice == "no_axis":
        kw["cluster_axis"] = None
        kw.pop("overload", None)  # the mesh overload takes the axis positionally: None does not bind
    elif choice.startswith("persistent") and p is not None:
        if choice == "persistent_wide":
            c["persistent"] = {**p, "shape": (*p["shape"][:-1], p["shape"][-1] * 2), "mem": "DRAM"}
        elif choice == "persistent_rows":
            c["persistent"] = {**p, "shape": (*p["shape"][:-2], p["shape"][-2] * 2, p["shape"][-1]), "mem": "DRAM"}
        elif choice == "persistent_dtype":
            c["persistent"] = {**p, "dtype": "fp32" if p["dtype"] != "fp32" else "bf16"}
        elif choice == "persistent_rm" and p["dtype"] != "bf8":
            c["persistent"] = {**p, "layout": "RM"}
        elif choice == "persistent_mem":
            c["persistent"] = {**p, "mem": "L1" if p["mem"] == "DRAM" else "DRAM"}
        elif choice == "persistent_rank3":
            c["persistent"] = {**p, "shape": p["shape"][1:]}
        elif choice == "persistent_truncated" and kw["dim"] % 4 == 3 and not isinstance(p["mem"], tuple):
            c["persistent"] = {**p, "shape": (*p["shape"][:-1], p["shape"][-1] // 2)}
        else:
            return None
    elif choice == "no_memory_config":
        kw.pop("memory_config", None)
    elif choice == "l1_edge":
        if MESH_SHAPES[c["system"]][0] > 1:  # a Galaxy's 32 copies of an input that size cost too much to build
            return None
        c["x"] = gather_l1_edge_input(rng, n, c["system"])
        kw["dim"], kw["memory_config"] = 3, "L1"
        c.pop("persistent", None)
        kw.pop("overload", None)
    else:
        return None
    return f"async.{choice}"


# ---------------------------------------------------------------------------------------------------------------------
# pre -> all_gather_async -> post


def _compose(rng, system):
    axis = _axis(rng, system)
    n = _devices(system, axis)
    width = rng.choice((512, 1024, 2048, 4096))
    c = {"op": "compose", "system": system, "sems": SEM(count=2), "barrier": SEM()}
    gather = {"dim": 3, "cluster_axis": axis, "topology": "Linear", "num_links": 1}
    kw = {}
    if rng.random() < 0.5:  # decode: sharded input, stats on the grid's first core
        grid = _width_grid(rng, system, width)
        shard_w = width // grid_cores(grid)
        xm = S("WIDTH", grid, (TILE, shard_w))
        c["x"] = T((1, 1, TILE, width), mem=xm)
        kw["program_config"] = PC((grid[2] + 1, grid[3] + 1), largest_divisor(shard_w // TILE, 8), 1, shard_w // TILE)
        stats_mem = _one_core(grid[:2], TILE * n)
        gather["memory_config"] = stats_mem
        if rng.random() < 0.2:
            c["residual"] = T((1, 1, TILE, width), mem=xm)
        if rng.random() < 0.6:
            c["persistent"] = T((1, 1, TILE, TILE * n), mem=stats_mem)
    else:
        rows = rng.choice((32, 128, 128, 512))
        c["x"] = T((1, 1, rows, width), pick(rng, {"bf16": 0.7, "bf8": 0.3}))
        stats_dtype = rng.choice(("bf16", "bf16", "bf8", "fp32"))
        ck = CK(fp32=True) if stats_dtype == "fp32" or rng.random() < 0.2 else None
        if ck:
            kw["compute_kernel_config"] = ck
        if stats_dtype != "bf16":
            kw["pre"] = {"dtype": stats_dtype}
        out = rng.choice(("DRAM", "DRAM", "L1"))
        gather["memory_config"] = out
        if rng.random() < 0.6:
            c["persistent"] = T((1, 1, rows, TILE * n), stats_dtype, mem=out)
    c["weight"] = T((1, 1, width // TILE, TILE), layout="RM")
    c["kw"] = {**kw, "gather": gather}
    return c


def _m_compose(rng, c):
    choice = rng.choice(("stats_fp32_no_acc", "persistent_rows", "truncated", "to_dram", "no_memory_config"))
    p, g, n = c.get("persistent"), c["kw"]["gather"], _devices(c["system"], c["kw"]["gather"]["cluster_axis"])
    if choice == "stats_fp32_no_acc" and not isinstance(c["x"]["mem"], tuple):
        c["kw"].pop("compute_kernel_config", None)
        c["kw"]["pre"] = {"dtype": "fp32"}
        if p:
            c["persistent"] = {**p, "dtype": "fp32"}
    elif choice == "persistent_rows" and p:
        c["persistent"] = {**p, "shape": (1, 1, 64 if p["shape"][-2] == TILE else TILE, p["shape"][-1])}
        if isinstance(p["mem"], tuple):
            c["persistent"]["mem"] = "DRAM"
    elif choice == "truncated" and p:
        half = TILE * n // 2
        mem = _one_core(p["mem"][2][:2], half) if isinstance(p["mem"], tuple) else p["mem"]
        c["persistent"] = {**p, "shape": (*p["shape"][:-1], half), "mem": mem}
        if isinstance(mem, tuple):
            g["memory_config"] = mem
    elif choice == "to_dram" and isinstance(c["x"]["mem"], tuple):
        g["memory_config"] = "DRAM"
        if p:
            c["persistent"] = {**p, "mem": "DRAM"}
    elif choice == "no_memory_config" and isinstance(c["x"]["mem"], tuple) and "memory_config" in g:
        g.pop("memory_config")
    else:
        return None
    return f"compose.{choice}"


BASES = {"fused": _fused, "all_gather_async": _gather, "compose": _compose}
MUTATIONS = {"fused": _m_fused, "all_gather_async": _m_gather, "compose": _m_compose}


def generate_one(rng, op: str, k: int) -> tuple[dict, list[str]]:
    """A valid `op` call on a CCL system, then `k` mutations (fewer where none applies)."""
    c = BASES[op](rng, rng.choice(CCL_SYSTEMS))
    done = []
    for _ in range(20 * k):
        if len(done) == k:
            break
        name = MUTATIONS[op](rng, c)
        if name:
            done.append(name)
    return c, done
