"""Small draws and derivations the fuzzer's generators share (fuzz_cases, fuzz_cases_ccl)."""

from __future__ import annotations

import math
import random

import ttnn

from tests.mock.mock_cases import CK, GRIDS, PC, T
from tt_rmsnorm.architecture import architecture
from tt_rmsnorm.rules.ccl_l1 import GATHER_OWN_SEMAPHORES
from tt_rmsnorm.systems import l1_banks
from tt_rmsnorm.tensors import TILE_BYTES
from tt_rmsnorm.testing.mock_cluster import ARCHES, MESH_SHAPES

TILE = 32


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
# Every dtype ttnn describes; the integer and bfloat4_b draws are the ones ttnn's own verdict judges.
DTYPE_WEIGHTS = {
    "bf16": 0.45,
    "bf8": 0.2,
    "fp32": 0.12,
    "bf4": 0.05,
    "int32": 0.05,
    "uint32": 0.05,
    "uint16": 0.04,
    "uint8": 0.04,
}


def compute_config(rng):
    if rng.random() < 0.35:
        return None
    return CK(
        fp32=rng.random() < 0.5,
        fidelity=rng.choice(("HiFi4", "HiFi4", "HiFi2", "LoFi")),
        approx=rng.random() < 0.5,
        dst_sync=rng.random() < 0.25,
    )


def gather_size(system: str, axis) -> int:
    shape = MESH_SHAPES[system]
    if axis is None:
        return math.prod(shape)
    return shape[axis] if 0 <= axis < len(shape) else 1  # an invalid axis (a mutation) gathers nothing


def valid_axis(system: str):
    return 1 if MESH_SHAPES[system][0] > 1 or MESH_SHAPES[system][1] > 1 else None


def grid_cores(grid) -> int:
    """Cores of a shard grid spec: a core range (x0, y0, x1, y1) or a tuple of single cores ((x, y), ...)."""
    if isinstance(grid[0], tuple):
        return len(grid)
    return (grid[2] - grid[0] + 1) * (grid[3] - grid[1] + 1)


def sharded_pc(x, ck, widen=False, system="n150"):
    """The valid LayerNormShardedMultiCoreProgramConfig for a sharded input spec (the generator's own derivation)."""
    _, strategy, (x0, y0, x1, y1), (shard_h, shard_w), orient = x["mem"]
    block_w = shard_w // TILE
    grid = (x1 - x0 + 1, y1 - y0 + 1)
    if widen:
        grid = GRIDS[system]
    return PC(grid, largest_divisor(block_w, subblock_limit(ck)), shard_h // TILE, block_w)


def pick(rng: random.Random, weights: dict):
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def subblock_limit(ck) -> int:
    """The dst-register limit of the sharded factories (tt-metal's table; the generator's own copy)."""
    fp32, sync = (ck[1], ck[4]) if ck else (False, False)
    return {(False, False): 8, (True, False): 4, (False, True): 16, (True, True): 8}[(fp32, sync)]


def largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def padded(n: int) -> int:
    return -(-n // TILE) * TILE


def gather_l1_edge_input(rng, n: int, system: str) -> dict:
    """An input whose gather over `n` devices into L1 lands at the edge of a bank of `system` (N300 and T3000: 56
    banks of 1,393,312 B above the allocator base, 674 bf16 tiles fitting beside the gather's circular buffer of six;
    P300: 110 banks of 1,461,120 B, 707 tiles): pages of a tile per bank from 24 below to 6 above the edge; sometimes
    an L1 input besides."""
    arch, banks = architecture(ARCHES[system]), l1_banks(ARCHES[system], MESH_SHAPES[system])
    tile = TILE_BYTES[ttnn.bfloat16]
    edge = (arch.l1_span - 6 * tile - GATHER_OWN_SEMAPHORES * arch.global_semaphore_bytes) // tile
    pages = edge + rng.choice((-24, -8, -4, -2, -1, 0, 1, 6))
    return T((1, 1, pages * banks // n * TILE, TILE), mem=rng.choice(("DRAM", "DRAM", "L1")))
