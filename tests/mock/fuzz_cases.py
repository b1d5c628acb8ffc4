"""A seeded generator of random calls to the RMSNorm ops, in the agreement battery's spec format (mock_cases).

Each call is a battery case without `expect` (the differential run finds out what ttnn does): `op` is "pre", "post",
"rms_norm", "all_gather", or "chain" (pre -> all_gather -> post on one multi-chip mesh, with per-step keyword arguments
`pre_kw`, `gather_kw`, `post_kw`), or one of the CCL battery's ops drawn by fuzz_cases_ccl ("fused",
"all_gather_async", "compose"). A call starts from a valid one built from the sampled shape, grid, dtype and configs;
most then take one or more mutations, each a single step across one rule (fuzz_mutations): a width at an L1 edge, one
program-config field off by one, stats of the other kind, a weight of the wrong shape, ... Roughly half of the calls
are one mutation from a valid call; `mutations` names the steps taken.

Only calls whose tensors can be built on the mock are generated: shard grids lie inside the device's grid, bfloat8_b is
always TILE, and tensors stay below ~2M elements (gathers at the edge of an L1 bank: ~5M on N300 and T3000).
"""

from __future__ import annotations

import math
import random

from tests.mock import fuzz_cases_ccl
from tests.mock.fuzz_draws import (
    DTYPE_WEIGHTS,
    L1_EDGE_WIDTHS,
    MAX_ELEMENTS,
    ROWS,
    SHARD_TILES,
    TILE,
    TILE_EDGE_WIDTHS,
    compute_config,
    gather_size,
    padded,
    pick,
    sharded_pc,
    valid_axis,
)
from tests.mock.fuzz_mutations import is_sharded, mutate
from tests.mock.mock_cases import BLOCK_FLOAT_DTYPES, CK, DPC, GRIDS, S, T

# Wormhole and Blackhole systems, one chip drawn most (the norm ops' rules are per chip)
SYSTEMS = ("n150", "n300", "t3k", "galaxy", "p150", "p300", "bh-galaxy")
SYSTEM_WEIGHTS = (0.3, 0.08, 0.08, 0.08, 0.28, 0.09, 0.09)
ONE_CHIP = ("n150", "p150")
MULTI_CHIP = ("n300", "t3k", "galaxy", "p300", "bh-galaxy")
OPS = ("pre", "post", "rms_norm", "all_gather", "chain", *fuzz_cases_ccl.CCL_OPS)
OP_WEIGHTS = (0.19, 0.2, 0.15, 0.1, 0.11, 0.1, 0.1, 0.05)
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
    n = gather_size(system, valid_axis(system)) if system not in ONE_CHIP else rng.choice((1, 2, 8))
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
    ck = compute_config(rng)
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
    dtype = pick(rng, DTYPE_WEIGHTS)
    layout = "RM" if rng.random() < 0.15 and dtype not in BLOCK_FLOAT_DTYPES else "TILE"
    c["x"] = T(shape, dtype, layout, mem=rng.choice(("DRAM", "DRAM", "L1")))
    axis = valid_axis(system)
    c["kw"] = {"dim": rng.choice((3, 3, 3, -1, 2, 0)) if len(shape) == 4 else 2, "cluster_axis": axis}
    if axis is None and rng.random() < 0.3:
        del c["kw"]["cluster_axis"]
    if rng.random() < 0.3:
        c["kw"]["memory_config"] = rng.choice(("DRAM", "L1"))
    return c


_TILE_BYTES = {
    "bf16": 2048,
    "bf8": 1088,
    "fp32": 4096,
    "bf4": 576,
    "int32": 4096,
    "uint32": 4096,
    "uint16": 2048,
    "uint8": 1024,
}
L1_SHARD_BUDGET = 1_300_000  # what the mock can allocate for the shards of one call, below its ~1.39 MB per core


def _shard_bytes(spec) -> int:
    if not spec or not isinstance(spec["mem"], tuple):
        return 0
    h, w = spec["mem"][3]
    return (h // TILE) * (w // TILE) * _TILE_BYTES[spec["dtype"]]


def _width_shards_match(spec) -> bool:
    """A WIDTH_SHARDED spec's shard height is the tensor's physical height (tiles pad the rows), as ttnn requires to
    build it; later mutations of the shape can break that."""
    if not spec or not isinstance(spec["mem"], tuple) or spec["mem"][1] != "WIDTH" or len(spec["shape"]) < 2:
        return True
    rows = spec["shape"][-2] if spec["layout"] != "TILE" else padded(spec["shape"][-2])
    return spec["mem"][3][0] == math.prod(spec["shape"][:-2]) * rows


def buildable(c: dict) -> bool:
    """The call's tensors can be built on the mock: bfloat8_b only in TILE layout, WIDTH shards as high as their
    tensor, and L1 shards (the op's output shard included) that fit."""
    slots = [c.get(k) for k in ("x", "residual", "stats", "weight", "bias", "persistent")]
    if any(t and t["dtype"] in BLOCK_FLOAT_DTYPES and t["layout"] != "TILE" for t in slots):  # tiles only
        return False
    if not all(_width_shards_match(t) for t in slots):
        return False
    return 2 * _shard_bytes(c.get("x")) + sum(_shard_bytes(t) for t in slots[1:]) <= L1_SHARD_BUDGET


# ---------------------------------------------------------------------------------------------------------------------
# Compositions: pre -> all_gather -> post on one mesh.


def _chain(rng, system):
    base = _base(rng, "post", system)
    while base["x"]["shape"][-1] % TILE or len(base["x"]["shape"]) != 4:
        base = _base(rng, "post", system)
    sharded = is_sharded(base)
    kw = base["kw"]
    common = {k: kw[k] for k in ("compute_kernel_config", "program_config") if k in kw}
    axis = valid_axis(system)
    n = gather_size(system, axis)
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
        name = mutate(rng, as_case, 1)
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
            system = rng.choice(MULTI_CHIP) if op == "chain" or rng.random() < 0.9 else rng.choice(ONE_CHIP)
        elif op in fuzz_cases_ccl.CCL_OPS:
            system = None  # drawn by the CCL generator
        else:
            system = rng.choices(SYSTEMS, weights=SYSTEM_WEIGHTS)[0]
        k = rng.choices((0, 1, 2, 3), weights=(0.25, 0.5, 0.18, 0.07))[0]
        while True:
            if op in fuzz_cases_ccl.CCL_OPS:
                c, done = fuzz_cases_ccl.generate_one(rng, op, k)
            elif op == "chain":
                c = _chain(rng, system)
                done = _mutate_chain(rng, c, k)
            else:
                c = _base(rng, op, system)
                done = mutate(rng, c, k)
            if buildable(c):
                break
        c["id"] = f"fuzz{seed}-{i}"
        c["mutations"] = done
        cases.append(c)
    return cases
