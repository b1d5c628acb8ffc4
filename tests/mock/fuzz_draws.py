"""Small draws and derivations the fuzzer's generators share (fuzz_cases, fuzz_cases_ccl)."""

from __future__ import annotations

import random

from mock_cases import T

TILE = 32


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


def gather_l1_edge_input(rng, n: int) -> dict:
    """An input whose gather over `n` devices into L1 lands at the edge of a bank (56 banks of 1,393,312 B above
    L1_BASE on N300 and T3000 meshes): 650 to 680 pages of a tile per bank, around the 674 that fit beside the
    gather's circular buffer; sometimes an L1 input besides."""
    pages = rng.choice((650, 666, 670, 672, 673, 674, 675, 680))
    return T((1, 1, pages * 56 // n * TILE, TILE), mem=rng.choice(("DRAM", "DRAM", "L1")))
