"""The single-op mutations of the differential fuzzer: each takes a valid generated call (fuzz_cases) one step across
one rule boundary (a program-config field off by one, stats of the other kind, a width at an L1 edge, a gather into L1
at the edge of a bank, ...) and returns its name, or None where it does not apply to the call."""

from __future__ import annotations

import math

from tests.mock.fuzz_draws import (
    L1_EDGE_WIDTHS,
    MAX_ELEMENTS,
    ROWS,
    TILE,
    gather_l1_edge_input,
    gather_size,
    grid_cores,
    largest_divisor,
    padded,
    sharded_pc,
    subblock_limit,
)
from tests.mock.mock_cases import BLOCK_FLOAT_DTYPES, CK, DPC, DTYPES, GRIDS, PC, S, T, package_side
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES


def is_sharded(c):
    return isinstance(c["x"]["mem"], tuple)


def _pc(c):
    pc = c["kw"].get("program_config")
    return pc if pc and pc[0] == "sharded_pc" else None


def _set_pc(c, **field):
    names = ("kind", "grid", "subblock_w", "block_h", "block_w", "inplace", "welford")
    pc = dict(zip(names, _pc(c), strict=True))
    pc.update(field)
    c["kw"]["program_config"] = tuple(pc[n] for n in names)


def _m_pc_field(rng, c):
    pc = _pc(c)
    if pc is None:
        return None
    _, grid, sub, bh, bw, _, _ = pc
    choice = rng.choice(("block_w+1", "block_w-1", "block_h+1", "subblock", "grid_x-1", "grid_y-1", "welford", "ovr"))
    if choice == "block_w+1":
        _set_pc(c, block_w=bw + 1)
    elif choice == "block_w-1":
        _set_pc(c, block_w=bw - 1)
    elif choice == "block_h+1":
        _set_pc(c, block_h=bh + 1)
    elif choice == "subblock":
        bigger = [d for d in range(sub + 1, bw + 1) if bw % d == 0]
        _set_pc(c, subblock_w=bigger[0] if bigger else sub + 1)
    elif choice == "grid_x-1" and grid[0] > 1:
        _set_pc(c, grid=(grid[0] - 1, grid[1]))
    elif choice == "grid_y-1" and grid[1] > 1:
        _set_pc(c, grid=(grid[0], grid[1] - 1))
    elif choice == "welford":
        _set_pc(c, welford=True)
    else:
        _set_pc(c, subblock_w=bw, inplace=True)
    return f"pc.{choice}"


def _m_no_pc(rng, c):
    if not is_sharded(c):
        return None
    if rng.random() < 0.5:
        c["kw"].pop("program_config", None)
        return "pc.none"
    c["kw"]["program_config"] = DPC()
    return "pc.default"


def _m_sharded_pc_on_interleaved(rng, c):
    if is_sharded(c) or c["op"] == "all_gather":
        return None
    c["kw"]["program_config"] = PC((4, 2), 4, 1, 4)
    return "pc.sharded_on_interleaved"


def _m_welford(rng, c):
    if is_sharded(c) or c["op"] == "all_gather":
        return None
    c["kw"]["program_config"] = DPC(welford=True)
    return "pc.welford"


def _m_compute(rng, c):
    if c["op"] == "all_gather":
        return None
    ck = c["kw"].get("compute_kernel_config") or CK()
    flip = rng.choice(("fp32", "dst_sync"))
    i = 1 if flip == "fp32" else 4
    c["kw"]["compute_kernel_config"] = (*ck[:i], not ck[i], *ck[i + 1 :])
    return f"compute.{flip}"


def _m_dtype(rng, c):
    new = rng.choice([d for d in DTYPES if d != c["x"]["dtype"]])
    if new in BLOCK_FLOAT_DTYPES and c["x"]["layout"] != "TILE":
        return None
    c["x"] = {**c["x"], "dtype": new}
    return f"x.dtype.{new}"


def _m_layout(rng, c):
    if c["x"]["dtype"] == "bf8" or (is_sharded(c) and c["x"]["shape"][-2] % TILE):  # ROW_MAJOR shards are not padded
        return None
    c["x"] = {**c["x"], "layout": "RM" if c["x"]["layout"] == "TILE" else "TILE"}
    return "x.layout"


def _m_width(rng, c):
    """Another L1-edge width at the same rows (interleaved) or more tiles per core (sharded)."""
    x = c["x"]
    if is_sharded(c):
        _, strategy, grid, (sh, sw), orient = x["mem"]
        if strategy != "WIDTH":
            return None
        tiles = rng.choice((64, 96, 128, 160, 192, 224, 256))
        cores = grid_cores(grid)
        if x["shape"][-2] * cores * tiles * TILE > MAX_ELEMENTS:
            return None
        c["x"] = {
            **x,
            "shape": (*x["shape"][:-1], cores * tiles * TILE),
            "mem": S(strategy, grid, (sh, tiles * TILE), orient),
        }
        if _pc(c):
            c["kw"]["program_config"] = sharded_pc(c["x"], c["kw"].get("compute_kernel_config"))
    else:
        w = rng.choice(L1_EDGE_WIDTHS)
        rows = max(1, min(x["shape"][-2], MAX_ELEMENTS // w // math.prod(x["shape"][:-2])))
        c["x"] = {**x, "shape": (*x["shape"][:-2], rows, w)}
    _refit(c)
    return "x.width"


def l1_edge_tiles(c) -> int | None:
    """The tiles of width (per core for a width-sharded input) of a pre, post or rms_norm call the l1-edge mutation
    can move; None for any other call."""
    x = c["x"]
    if c["op"] not in ("pre", "post", "rms_norm") or x["layout"] != "TILE":
        return None
    if is_sharded(c):
        return x["mem"][3][1] // TILE if x["mem"][1] == "WIDTH" else None
    return x["shape"][-1] // TILE


def _width_cores(c) -> int:
    """The cores the input's width is split over: its shard grid's, or one for an interleaved input."""
    return grid_cores(c["x"]["mem"][2]) if is_sharded(c) else 1


def at_l1_edge_tiles(c, tiles: int) -> dict:
    """`c` with `tiles` tiles of width (per core for a width-sharded input), its other tensors and a sharded program
    config following."""
    x = c["x"]
    trial = {**c, "x": {**x, "shape": (*x["shape"][:-1], _width_cores(c) * tiles * TILE)}, "kw": dict(c["kw"])}
    if is_sharded(c):
        _, strategy, grid, (sh, _), orient = x["mem"]
        trial["x"]["mem"] = S(strategy, grid, (sh, tiles * TILE), orient)
    pc = _pc(c)
    if pc:  # the same program config with the new block width and the subblock that divides it
        subblock = largest_divisor(tiles, subblock_limit(c["kw"].get("compute_kernel_config")))
        trial["kw"]["program_config"] = (*pc[:2], subblock, pc[3], tiles, *pc[5:])
    _refit(trial)
    return trial


def l1_side(c) -> str | None:
    """The package's verdict on `c`: "accept", "l1" (rejected by an `*.l1_budget` rule), or None (another rule)."""
    got = package_side(c)
    if got["verdict"] == "accept":
        return "accept"
    return "l1" if (got["rule"] or "").endswith("l1_budget") else None


def _m_l1_edge(rng, c):
    """The width, in tile steps (per core for a width-sharded input), where the package's L1 verdict on this pre, post
    or rms_norm flips: the last width it accepts or the first it rejects with an `*.l1_budget` rule (found by
    bisection). A model off by less than the steps of the fixed edge widths shows here."""
    tiles = l1_edge_tiles(c)
    if tiles is None:
        return None
    lo, hi = 1, MAX_ELEMENTS // math.prod(c["x"]["shape"][:-1]) // (_width_cores(c) * TILE)
    if hi <= lo or l1_side(at_l1_edge_tiles(c, lo)) != "accept" or l1_side(at_l1_edge_tiles(c, hi)) != "l1":
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        side = l1_side(at_l1_edge_tiles(c, mid))
        if side is None:
            return None
        lo, hi = (mid, hi) if side == "accept" else (lo, mid)
    c.update(at_l1_edge_tiles(c, rng.choice((lo, hi))))
    return "x.l1_edge_width"


def _refit(c):
    """Residual, stats, weight and bias follow a new input shape."""
    x = c["x"]
    if c.get("residual"):
        c["residual"] = {**c["residual"], "shape": x["shape"], "mem": x["mem"]}
    if c.get("stats") and not isinstance(c["stats"]["mem"], tuple):
        c["stats"] = {**c["stats"], "shape": (*x["shape"][:-1], c["stats"]["shape"][-1])}
    for slot in ("weight", "bias"):
        g = c.get(slot)
        if g is None:
            continue
        w = x["shape"][-1]
        if g["layout"] == "RM" and len(g["shape"]) == 4:
            c[slot] = {**g, "shape": (1, 1, padded(w) // TILE, TILE)}
        else:
            c[slot] = {**g, "shape": (*g["shape"][:-1], w)}


def _m_rows(rng, c):
    x = c["x"]
    if is_sharded(c):
        return None
    rows = rng.choice(ROWS)
    if rows * x["shape"][-1] * x["shape"][0] > MAX_ELEMENTS:
        return None
    c["x"] = {**x, "shape": (*x["shape"][:-2], rows, x["shape"][-1])}
    _refit(c)
    if c.get("stats"):
        c["stats"] = {**c["stats"], "shape": x["shape"][:-1] + (c["stats"]["shape"][-1],)}  # the old rows
    return "x.rows_vs_stats" if c.get("stats") else "x.rows"


def _m_rank(rng, c):
    shape = c["x"]["shape"]
    new = rng.choice((shape[-2:], shape[-3:], (1, *shape)))
    c["x"] = {**c["x"], "shape": tuple(new)}
    if c.get("residual"):
        c["residual"] = {**c["residual"], "shape": tuple(new)}
    return f"x.rank{len(new)}"


def _m_host(rng, c):
    slot = rng.choice([s for s in ("x", "stats", "weight", "bias", "residual") if c.get(s)] or ["x"])
    if slot == "x" and rng.random() < 0.85:  # ttnn segfaults on a host input, costing a worker restart: keep it rare
        return None
    c[slot] = {**c[slot], "host": True, "mem": "DRAM"}
    return f"{slot}.host"


def _m_memory_config(rng, c):
    options = ["DRAM", "L1", S("WIDTH", (0, 0, 3, 1), (TILE, 128)), S("BLOCK", (0, 0, 1, 0), (TILE, 64))]
    if is_sharded(c):
        _, strategy, grid, (sh, sw), orient = c["x"]["mem"]
        options += [S(strategy, grid, (sh * 2, sw), orient), S("HEIGHT", grid, (sh, sw), orient)]
        options += [S("BLOCK" if strategy == "WIDTH" else "WIDTH", grid, (sh, sw), orient)]
    c["kw"]["memory_config"] = rng.choice(options)
    return "kw.memory_config"


def _m_residual(rng, c):
    if c["op"] not in ("pre", "rms_norm"):
        return None
    x = c["x"]
    choice = rng.choice(("shape", "layout", "sharding", "dtype", "other_grid"))
    res = dict(x)
    if choice == "shape":
        res["shape"] = (*x["shape"][:-2], x["shape"][-2] * 2 if x["shape"][-2] < 64 else 32, x["shape"][-1])
        if is_sharded(c):
            res["mem"] = "DRAM"
    elif choice == "layout" and x["dtype"] != "bf8" and not (is_sharded(c) and x["shape"][-2] % TILE):
        res["layout"] = "RM"
    elif choice == "sharding":
        res["mem"] = (
            "DRAM" if is_sharded(c) else S("WIDTH", (0, 0, 0, 0), (padded(x["shape"][-2]), padded(x["shape"][-1])))
        )
        if not is_sharded(c) and (math.prod(x["shape"][:-1]) > 256 or x["shape"][-1] > 8192 or len(x["shape"]) != 4):
            return None
    elif choice == "dtype":
        res["dtype"] = "bf8" if x["dtype"] != "bf8" else "bf16"
    elif is_sharded(c):
        _, strategy, (x0, y0, x1, y1), shard, orient = x["mem"]
        if x1 + 1 >= GRIDS[c["system"]][0]:
            return None
        res["mem"] = S(strategy, (x0 + 1, y0, x1 + 1, y1), shard, orient)
    else:
        res["mem"] = "L1" if x["mem"] == "DRAM" else "DRAM"
    c["residual"] = res
    return f"residual.{choice}"


def _m_weight(rng, c):
    if c["op"] not in ("post", "rms_norm"):
        return None
    w = padded(c["x"]["shape"][-1])
    choice = rng.choice(
        ("tile_half", "tile_tall", "tile_bf8", "rm_short", "rm_1d", "tile_1d", "bias_other", "bias_only")
    )
    if choice == "tile_half":
        c["weight"] = T((1, 1, 1, max(TILE, w // 2)))
    elif choice == "tile_tall":
        c["weight"] = T((1, 1, 64, w))
    elif choice == "tile_bf8":
        c["weight"] = T((1, 1, 1, c["x"]["shape"][-1]), "bf8")
    elif choice == "rm_short":
        c["weight"] = T((1, 1, max(1, w // TILE // 2), TILE), layout="RM")
    elif choice == "rm_1d":
        c["weight"] = T((c["x"]["shape"][-1],), layout="RM")
    elif choice == "tile_1d":
        c["weight"] = T((c["x"]["shape"][-1],), rng.choice(("bf16", "fp32", "bf8")))
    elif choice == "bias_other":
        c["weight"] = c.get("weight") or T((1, 1, w // TILE, TILE), layout="RM")
        other = (
            T((1, 1, 1, c["x"]["shape"][-1]))
            if c["weight"]["layout"] == "RM"
            else T((1, 1, w // TILE, TILE), layout="RM")
        )
        c["bias"] = other
    else:
        c["bias"] = c.pop("weight", None) or T((1, 1, w // TILE, TILE), layout="RM")
    return f"weight.{choice}"


def _m_stats(rng, c):
    s = c.get("stats")
    if s is None:
        return None
    choice = rng.choice(("kind", "dtype", "layout", "rows", "batch", "placement", "width48", "cores"))
    if choice == "kind":
        s = {**s, "kind": "sums" if s["kind"] == "means" or (s["kind"] is None and is_sharded(c)) else "means"}
    elif choice == "dtype":
        s = {**s, "dtype": rng.choice([d for d in ("bf16", "bf8", "fp32") if d != s["dtype"]])}
    elif choice == "layout" and s["dtype"] != "bf8":
        s = {**s, "layout": "RM"}
    elif choice == "rows":
        rows = 64 if s["shape"][-2] <= 32 else 32
        mem = s["mem"]
        if isinstance(mem, tuple):
            mem = S("WIDTH", (0, 0, 0, 0), (rows * math.prod(s["shape"][:-2]), padded(s["shape"][-1])))
        s = {**s, "shape": (*s["shape"][:-2], rows, s["shape"][-1]), "mem": mem}
    elif choice == "batch" and not isinstance(s["mem"], tuple):
        s = {**s, "shape": (2, *s["shape"][1:])}
    elif choice == "placement":
        if isinstance(s["mem"], tuple):
            s = {**s, "mem": "DRAM"}
        elif math.prod(s["shape"][:-1]) <= 2048:
            rows = math.prod(padded(d) if i == len(s["shape"]) - 2 else d for i, d in enumerate(s["shape"][:-1]))
            s = {**s, "mem": S("WIDTH", (0, 0, 0, 0), (rows, padded(s["shape"][-1])))}
    elif choice == "width48" and not isinstance(s["mem"], tuple):
        s = {**s, "shape": (*s["shape"][:-1], 48)}
    elif choice == "cores" and isinstance(s["mem"], tuple) and s["shape"][-1] >= 64:
        s = {**s, "mem": S("WIDTH", (0, 0, 1, 0), (TILE, s["shape"][-1] // 2))}
    else:
        return None
    c["stats"] = s
    return f"stats.{choice}"


def _m_epsilon(rng, c):
    if c["op"] not in ("post", "rms_norm"):
        return None
    c["kw"]["epsilon"] = rng.choice((-1e-5, 0.0))
    return "kw.epsilon"


def _m_2d_grid(rng, c):
    if c["op"] not in ("pre", "post"):
        return None
    c["kw"]["use_2d_core_grid"] = True
    return "kw.use_2d_core_grid"


def _m_out_dtype(rng, c):
    if c["op"] not in ("pre", "post"):
        return None
    c["kw"]["dtype"] = rng.choice(("bf16", "bf8", "fp32"))
    return "kw.dtype"


def _m_gather(rng, c):
    if c["op"] != "all_gather":
        return None
    choice = rng.choice(
        ("dim", "axis", "sharded_in", "sharded_out", "wrong_width_out", "no_axis", "l1_edge", "l1_edge", "l1_edge")
    )
    n = gather_size(c["system"], c["kw"].get("cluster_axis"))
    rank = len(c["x"]["shape"])
    if choice == "dim":
        c["kw"]["dim"] = rng.choice((rank, -rank - 1, rank - 2, 0))
    elif choice == "axis":
        c["kw"]["cluster_axis"] = rng.choice((0, 1, 2))
    elif choice == "no_axis":
        c["kw"].pop("cluster_axis", None)
    elif choice == "l1_edge":
        if MESH_SHAPES[c["system"]][0] != 1 or MESH_SHAPES[c["system"]][1] < 2:
            return None  # one-row meshes of several chips: a Galaxy's 32 copies of an input that size cost too much
        c["x"], c["kw"] = (
            gather_l1_edge_input(rng, max(n, 2), c["system"]),
            {"dim": 3, "cluster_axis": 1, "memory_config": "L1"},
        )
    elif rank == 4 and c["x"]["shape"][-2:] == (32, 32) and c["x"]["layout"] == "TILE":
        if choice == "sharded_in":
            c["x"] = {**c["x"], "mem": S("WIDTH", (0, 0, 0, 0), (TILE, TILE))}
            if rng.random() < 0.6:
                c["kw"]["memory_config"] = S("WIDTH", (0, 0, 0, 0), (TILE, TILE * n))
        elif choice == "sharded_out":
            c["kw"]["memory_config"] = S("WIDTH", (0, 0, 0, 0), (TILE, TILE * n))
            c["kw"]["dim"] = 3
        else:
            c["kw"]["memory_config"] = S("WIDTH", (0, 0, 0, 0), (TILE, TILE * max(1, n // 2)))
            c["kw"]["dim"] = 3
    else:
        return None
    return f"gather.{choice}"


MUTATIONS = (
    _m_pc_field,
    _m_pc_field,
    _m_no_pc,
    _m_sharded_pc_on_interleaved,
    _m_welford,
    _m_compute,
    _m_dtype,
    _m_layout,
    _m_width,
    _m_width,
    _m_l1_edge,
    _m_l1_edge,
    _m_l1_edge,
    _m_rows,
    _m_rank,
    _m_host,
    _m_memory_config,
    _m_residual,
    _m_weight,
    _m_weight,
    _m_stats,
    _m_stats,
    _m_epsilon,
    _m_2d_grid,
    _m_out_dtype,
    _m_gather,
    _m_gather,
)


def mutate(rng, c, k: int) -> list[str]:
    done = []
    for _ in range(50):
        if len(done) == k:
            break
        name = rng.choice(MUTATIONS)(rng, c)
        if name:
            done.append(name)
    return done
