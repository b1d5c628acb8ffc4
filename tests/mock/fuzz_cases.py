"""A seeded generator of random calls to the RMSNorm ops, in the agreement battery's spec format (mock_cases).

Each call is a battery case without `expect` (the differential run finds out what ttnn does): `op` is "pre", "post",
"rms_norm", "all_gather", or "chain" (pre -> all_gather -> post on one multi-chip mesh, with per-step keyword arguments
`pre_kw`, `gather_kw`, `post_kw`). A call starts from a valid one built from the sampled shape, grid, dtype and
configs; most then take one or more mutations, each a single step across one rule: a width at an L1 edge, one
program-config field off by one, stats of the other kind, a weight of the wrong shape, ... Roughly half of the calls
are one mutation from a valid call; `mutations` names the steps taken.

Only calls whose tensors can be built on the mock are generated: shard grids lie inside the device's grid, bfloat8_b is
always TILE, and tensors stay below ~2M elements.
"""

from __future__ import annotations

import math
import random

import fuzz_cases_ccl
from fuzz_draws import TILE, gather_l1_edge_input, largest_divisor, padded, pick, subblock_limit
from mock_cases import CK, DPC, GRIDS, PC, S, T

from tt_rmsnorm.mock_cluster import MESH_SHAPES

SYSTEMS = ("n150", "n300", "t3k", "galaxy")
MULTI_CHIP = ("n300", "t3k", "galaxy")
OPS = ("pre", "post", "rms_norm", "all_gather", "chain", *fuzz_cases_ccl.CCL_OPS)
OP_WEIGHTS = (0.19, 0.2, 0.15, 0.1, 0.11, 0.1, 0.1, 0.05)
MAX_ELEMENTS = 1 << 21

# Widths where tile padding and the interleaved pre/post L1 limits change verdicts (bf16 pre: 7168 | 8192; bf8 pre:
# 10240 | 12288; post: 10240 | 12288 and again 20480 | 24576; fp32 at a quarter to half of those).
TILE_EDGE_WIDTHS = (32, 64, 96, 100, 128, 256, 480, 512, 992, 1000, 1024, 2048, 3072, 4096)
L1_EDGE_WIDTHS = (
    3072,
    4096,
    5120,
    6144,
    7168,
    7200,
    8192,
    9216,
    10240,
    11264,
    12288,
    14336,
    16384,
    18432,
    20480,
    22528,
    24576,
)
ROWS = (1, 7, 31, 32, 33, 64, 128, 256)
# tiles per core of a sharded input: the sharded factories' L1 use grows with it (1x1 grids reach 256 tiles = 8192)
SHARD_TILES = (1, 1, 2, 2, 3, 4, 4, 6, 8, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
DTYPE_WEIGHTS = {"bf16": 0.6, "bf8": 0.25, "fp32": 0.15}


def _compute(rng):
    if rng.random() < 0.35:
        return None
    return CK(
        fp32=rng.random() < 0.5,
        fidelity=rng.choice(("HiFi4", "HiFi4", "HiFi2", "LoFi")),
        approx=rng.random() < 0.5,
        dst_sync=rng.random() < 0.25,
    )


def _gather_size(system: str, axis) -> int:
    shape = MESH_SHAPES[system]
    if axis is None:
        return math.prod(shape)
    return shape[axis] if 0 <= axis < len(shape) else 1  # an invalid axis (a mutation) gathers nothing


def _valid_axis(system: str):
    return 1 if MESH_SHAPES[system][0] > 1 or MESH_SHAPES[system][1] > 1 else None


# ---------------------------------------------------------------------------------------------------------------------
# Inputs.


def _interleaved_x(rng, op):
    wide = rng.random() < 0.45
    width = rng.choice(L1_EDGE_WIDTHS if wide else TILE_EDGE_WIDTHS)
    if op == "rms_norm" and wide and rng.random() < 0.3:
        width = rng.choice((32768, 65536))
    rows = rng.choice((32, 32, 1, 64)) if wide else rng.choice(ROWS)
    batch = 2 if rng.random() < 0.15 else 1
    while batch * rows * width > MAX_ELEMENTS:
        rows = max(1, rows // 2)
    dtype = pick(rng, DTYPE_WEIGHTS)
    mem = "L1" if rng.random() < 0.25 else "DRAM"
    if rows * width * batch * 4 > 1 << 21:  # L1-interleaved inputs stay small: the mock's L1 is per core
        mem = "DRAM"
    return T((batch, 1, rows, width), dtype, mem=mem)


def _shard_layout(rng, system, rows, tiles_per_core, strategy=None, orient=None):
    """A sharded memory spec and the padded width it implies: strategy, grid (with an offset), orientation."""
    gx, gy = GRIDS[system]
    strategy = strategy or pick(rng, {"WIDTH": 0.8, "BLOCK": 0.15, "HEIGHT": 0.05})
    orient = orient or ("COL" if rng.random() < 0.25 else "ROW")
    padded_rows = padded(rows)
    if strategy == "WIDTH":
        cx, cy = rng.choice(((1, 1), (2, 1), (4, 1), (8, 1), (4, 2), (8, 2), (8, 4), (2, 4), (1, 4), (3, 2)))
        cx, cy = min(cx, gx), min(cy, gy)
        width = cx * cy * tiles_per_core * TILE
        shard = (padded_rows, tiles_per_core * TILE)
    elif strategy == "BLOCK":
        down = padded_rows // TILE  # one tile row of each block per grid row
        across_max, down_max = (gx, gy) if orient == "ROW" else (gy, gx)
        across = min(rng.choice((1, 2, 4, 8)), across_max)
        if down > down_max:
            down, padded_rows, rows = 1, TILE, min(rows, TILE)
        cx, cy = (across, down) if orient == "ROW" else (down, across)
        width = across * tiles_per_core * TILE
        shard = (padded_rows // down, tiles_per_core * TILE)
    else:
        cx, cy = min(padded_rows // TILE, gx), 1
        width = tiles_per_core * TILE
        shard = (padded_rows // cx, width)
    x0 = rng.randrange(gx - cx + 1) if rng.random() < 0.3 else 0
    y0 = rng.randrange(gy - cy + 1) if rng.random() < 0.3 else 0
    return S(strategy, (x0, y0, x0 + cx - 1, y0 + cy - 1), shard, orient), width, rows


def _sharded_x(rng, system, op):
    rows = rng.choice((1, 7, 32, 32)) if op != "rms_norm" else rng.choice((1, 32, 32, 64, 128))
    tiles = rng.choice(SHARD_TILES)
    mem, width, rows = _shard_layout(rng, system, rows, tiles)
    while rows * width > MAX_ELEMENTS:
        mem, width, rows = _shard_layout(rng, system, rows, max(1, tiles // 4))
        tiles = max(1, tiles // 4)
    dtype = pick(rng, DTYPE_WEIGHTS)
    return T((1, 1, rows, width), dtype, mem=mem)


def sharded_pc(x, ck, widen=False, system="n150"):
    """The valid LayerNormShardedMultiCoreProgramConfig for a sharded input spec (the generator's own derivation)."""
    _, strategy, (x0, y0, x1, y1), (shard_h, shard_w), orient = x["mem"]
    block_w = shard_w // TILE
    grid = (x1 - x0 + 1, y1 - y0 + 1)
    if widen:
        grid = GRIDS[system]
    return PC(grid, largest_divisor(block_w, subblock_limit(ck)), shard_h // TILE, block_w)


# ---------------------------------------------------------------------------------------------------------------------
# Affine operands, residuals and stats.


def _weight(rng, width, op):
    kind = pick(rng, {"none": 0.3, "rm": 0.3, "tile": 0.25, "tile1d": 0.1, "rm1d": 0.05})
    pw = padded(width)
    dtype = pick(rng, {"bf16": 0.75, "fp32": 0.2, "bf8": 0.05})
    if kind == "none":
        return None
    if kind == "rm":
        return T((1, 1, pw // TILE, TILE), "bf16" if dtype == "bf8" else dtype, "RM")
    if kind == "rm1d":
        return T((width,), "bf16" if dtype == "bf8" else dtype, "RM")
    if kind == "tile1d":
        return T((width,), dtype)
    return T((1, 1, 1, width), dtype)


def _stats_for(rng, x, system, sharded):
    n = _gather_size(system, _valid_axis(system)) if system != "n150" else rng.choice((1, 2, 8))
    if sharded:
        return T(
            (1, 1, TILE, TILE * n), mem=S("WIDTH", (0, 0, 0, 0), (TILE, TILE * n)), kind=rng.choice(("means", None))
        )
    dtype = pick(rng, {"bf16": 0.7, "bf8": 0.15, "fp32": 0.15})
    mem = pick(rng, {"DRAM": 0.7, "L1": 0.2, "shard1": 0.1})
    shape = (*x["shape"][:-1], TILE * n)
    if mem == "shard1":
        rows = math.prod(padded(d) if i == len(shape) - 2 else d for i, d in enumerate(shape[:-1]))
        mem = S("WIDTH", (0, 0, 0, 0), (rows, TILE * n))
    return T(shape, dtype, mem=mem, kind=rng.choice(("sums", None)))


# ---------------------------------------------------------------------------------------------------------------------
# One valid call per op, then mutations (each names one rule boundary).


def _base(rng, op, system):
    sharded = op != "all_gather" and rng.random() < 0.45
    ck = _compute(rng)
    c = {"op": op, "system": system, "kw": {}}
    if op == "all_gather":
        return _base_gather(rng, c, system)
    x = _sharded_x(rng, system, op) if sharded else _interleaved_x(rng, op)
    if x["dtype"] == "fp32" and not sharded and op != "rms_norm":
        ck = CK(fp32=True, dst_sync=bool(ck and ck[4]))
    c["x"] = x
    if ck:
        c["kw"]["compute_kernel_config"] = ck
    if sharded and (op != "rms_norm" or rng.random() < 0.8):
        c["kw"]["program_config"] = sharded_pc(x, ck, widen=rng.random() < 0.15, system=system)
    elif not sharded and rng.random() < 0.3:
        c["kw"]["program_config"] = DPC(legacy_reduction=rng.random() < 0.5)
    width = x["shape"][-1]
    if op in ("pre", "rms_norm") and rng.random() < 0.2:
        c["residual"] = dict(x)
    if op in ("post", "rms_norm"):
        w = _weight(rng, width, op)
        if w is not None:
            if op == "post" and not sharded and w["dtype"] == "bf8":
                w = {**w, "dtype": "bf16"}
            c["weight"] = w
            if rng.random() < 0.3:
                c["bias"] = dict(w)
        c["kw"]["epsilon"] = rng.choice((1e-5, 1e-6, 1e-12))
    if op == "post":
        if width % TILE:
            c["x"] = x = {**x, "shape": (*x["shape"][:-1], padded(width))}
        c["stats"] = _stats_for(rng, x, system, sharded)
        if rng.random() < 0.2:
            c["kw"]["dtype"] = rng.choice(("bf16", "bf8", "fp32"))
    if op == "pre" and not sharded and rng.random() < 0.3:
        c["kw"]["dtype"] = rng.choice(("bf16", "bf8", "fp32"))
    if op in ("pre", "post") and not sharded and rng.random() < 0.1:
        c["kw"]["use_2d_core_grid"] = rng.random() < 0.5
    if rng.random() < 0.15:
        c["kw"]["memory_config"] = x["mem"] if sharded else rng.choice(("DRAM", "L1"))
    return c


def _base_gather(rng, c, system):
    shape = rng.choice(((1, 1, 32, 32), (1, 1, 32, 32), (1, 1, 32, 64), (1, 1, 7, 100), (1, 32, 32), (1, 1, 2048, 32)))
    dtype = pick(rng, {"bf16": 0.6, "bf8": 0.15, "fp32": 0.15, "uint32": 0.1})
    layout = "RM" if rng.random() < 0.15 and dtype != "bf8" else "TILE"
    c["x"] = T(shape, dtype, layout, mem=rng.choice(("DRAM", "DRAM", "L1")))
    axis = _valid_axis(system)
    c["kw"] = {"dim": rng.choice((3, 3, 3, -1, 2, 0)) if len(shape) == 4 else 2, "cluster_axis": axis}
    if axis is None and rng.random() < 0.3:
        del c["kw"]["cluster_axis"]
    if rng.random() < 0.3:
        c["kw"]["memory_config"] = rng.choice(("DRAM", "L1"))
    return c


def _sharded(c):
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
    if not _sharded(c):
        return None
    if rng.random() < 0.5:
        c["kw"].pop("program_config", None)
        return "pc.none"
    c["kw"]["program_config"] = DPC()
    return "pc.default"


def _m_sharded_pc_on_interleaved(rng, c):
    if _sharded(c) or c["op"] == "all_gather":
        return None
    c["kw"]["program_config"] = PC((4, 2), 4, 1, 4)
    return "pc.sharded_on_interleaved"


def _m_welford(rng, c):
    if _sharded(c) or c["op"] == "all_gather":
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
    new = rng.choice([d for d in ("bf16", "bf8", "fp32", "uint32") if d != c["x"]["dtype"]])
    if new == "bf8" and c["x"]["layout"] != "TILE":
        return None
    c["x"] = {**c["x"], "dtype": new}
    return f"x.dtype.{new}"


def _m_layout(rng, c):
    if c["x"]["dtype"] == "bf8" or (_sharded(c) and c["x"]["shape"][-2] % TILE):  # ROW_MAJOR shards are not padded
        return None
    c["x"] = {**c["x"], "layout": "RM" if c["x"]["layout"] == "TILE" else "TILE"}
    return "x.layout"


def _m_width(rng, c):
    """Another L1-edge width at the same rows (interleaved) or more tiles per core (sharded)."""
    x = c["x"]
    if _sharded(c):
        _, strategy, grid, (sh, sw), orient = x["mem"]
        if strategy != "WIDTH":
            return None
        tiles = rng.choice((64, 96, 128, 160, 192, 224, 256))
        cores = (grid[2] - grid[0] + 1) * (grid[3] - grid[1] + 1)
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
    if _sharded(c):
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
    if _sharded(c):
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
        if _sharded(c):
            res["mem"] = "DRAM"
    elif choice == "layout" and x["dtype"] != "bf8" and not (_sharded(c) and x["shape"][-2] % TILE):
        res["layout"] = "RM"
    elif choice == "sharding":
        res["mem"] = (
            "DRAM" if _sharded(c) else S("WIDTH", (0, 0, 0, 0), (padded(x["shape"][-2]), padded(x["shape"][-1])))
        )
        if not _sharded(c) and (math.prod(x["shape"][:-1]) > 256 or x["shape"][-1] > 8192 or len(x["shape"]) != 4):
            return None
    elif choice == "dtype":
        res["dtype"] = "bf8" if x["dtype"] != "bf8" else "bf16"
    elif _sharded(c):
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
        s = {**s, "kind": "sums" if s["kind"] == "means" or (s["kind"] is None and _sharded(c)) else "means"}
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
    choice = rng.choice(("dim", "axis", "sharded_in", "sharded_out", "wrong_width_out", "no_axis", "l1_edge"))
    n = _gather_size(c["system"], c["kw"].get("cluster_axis"))
    rank = len(c["x"]["shape"])
    if choice == "dim":
        c["kw"]["dim"] = rng.choice((rank, -rank - 1, rank - 2, 0))
    elif choice == "axis":
        c["kw"]["cluster_axis"] = rng.choice((0, 1, 2))
    elif choice == "no_axis":
        c["kw"].pop("cluster_axis", None)
    elif choice == "l1_edge":
        if c["system"] not in ("n300", "t3k"):  # Galaxy's 32 copies of an input that size cost too much to build
            return None
        c["x"], c["kw"] = (
            gather_l1_edge_input(rng, max(n, 2)),
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


_TILE_BYTES = {"bf16": 2048, "bf8": 1088, "fp32": 4096, "uint32": 4096}
L1_SHARD_BUDGET = 1_300_000  # what the mock can allocate for the shards of one call, below its ~1.39 MB per core


def _shard_bytes(spec) -> int:
    if not spec or not isinstance(spec["mem"], tuple):
        return 0
    h, w = spec["mem"][3]
    return (h // TILE) * (w // TILE) * _TILE_BYTES[spec["dtype"]]


def buildable(c: dict) -> bool:
    """The call's tensors can be built on the mock: bfloat8_b only in TILE layout, and L1 shards (the op's output
    shard included) that fit."""
    slots = [c.get(k) for k in ("x", "residual", "stats", "weight", "bias", "persistent")]
    if any(t and t["dtype"] == "bf8" and t["layout"] != "TILE" for t in slots):  # bfloat8_b exists only in tiles
        return False
    return 2 * _shard_bytes(c.get("x")) + sum(_shard_bytes(t) for t in slots[1:]) <= L1_SHARD_BUDGET


def _mutate(rng, c, k: int) -> list[str]:
    done = []
    for _ in range(50):
        if len(done) == k:
            break
        name = rng.choice(MUTATIONS)(rng, c)
        if name:
            done.append(name)
    return done


# ---------------------------------------------------------------------------------------------------------------------
# Compositions: pre -> all_gather -> post on one mesh.


def _chain(rng, system):
    base = _base(rng, "post", system)
    while base["x"]["shape"][-1] % TILE or len(base["x"]["shape"]) != 4:
        base = _base(rng, "post", system)
    sharded = _sharded(base)
    kw = base["kw"]
    common = {k: kw[k] for k in ("compute_kernel_config", "program_config") if k in kw}
    axis = _valid_axis(system)
    n = _gather_size(system, axis)
    gather_kw = {"dim": 3, "cluster_axis": axis}
    if sharded:
        gather_kw["memory_config"] = S("WIDTH", (0, 0, 0, 0), (TILE, TILE * n))
    post_kw = dict(kw)
    c = {
        "op": "chain",
        "system": system,
        "x": base["x"],
        "pre_kw": dict(common),
        "gather_kw": gather_kw,
        "post_kw": post_kw,
        "kw": {},
    }
    for slot in ("weight", "bias"):
        if base.get(slot):
            c[slot] = base[slot]
    if rng.random() < 0.2:
        c["residual"] = dict(base["x"])
    return c


def _mutate_chain(rng, c, k: int) -> list[str]:
    """Mutate one step of the chain with the single-op mutations (as a single-op case), then put it back."""
    done = []
    for _ in range(k):
        step = rng.choice(("pre", "gather", "post"))
        op = {"pre": "pre", "gather": "all_gather", "post": "post"}[step]
        as_case = {**c, "op": op, "kw": c[f"{step}_kw"]}
        if step == "gather":
            as_case["x"] = T((1, 1, 32, 32))
        name = _mutate(rng, as_case, 1)
        if not name:
            continue
        if step != "gather":
            for slot in ("x", "weight", "bias", "residual"):
                if as_case.get(slot):
                    c[slot] = as_case[slot]
                else:
                    c.pop(slot, None)
        c[f"{step}_kw"] = as_case["kw"]
        done.append(f"{step}:{name[0]}")
    return done


# ---------------------------------------------------------------------------------------------------------------------


def generate(seed: int, n: int) -> list[dict]:
    """`n` calls drawn with `random.Random(seed)`; the same seed gives the same calls."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        op = rng.choices(OPS, weights=OP_WEIGHTS)[0]
        if op in ("all_gather", "chain"):
            system = rng.choice(MULTI_CHIP) if op == "chain" or rng.random() < 0.9 else "n150"
        elif op in fuzz_cases_ccl.CCL_OPS:
            system = None  # drawn by the CCL generator
        else:
            system = rng.choices(SYSTEMS, weights=(0.55, 0.15, 0.15, 0.15))[0]
        k = rng.choices((0, 1, 2, 3), weights=(0.25, 0.5, 0.18, 0.07))[0]
        while True:
            if op in fuzz_cases_ccl.CCL_OPS:
                c, done = fuzz_cases_ccl.generate_one(rng, op, k)
            elif op == "chain":
                c = _chain(rng, system)
                done = _mutate_chain(rng, c, k)
            else:
                c = _base(rng, op, system)
                done = _mutate(rng, c, k)
            if buildable(c):
                break
        c["id"] = f"fuzz{seed}-{i}"
        c["mutations"] = done
        cases.append(c)
    return cases
