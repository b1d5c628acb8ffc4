"""Tile geometry shared by the package and hosts without ttnn (the parity runner on GPU machines): no ttnn import."""

from __future__ import annotations

import math

TILE = 32


def tile_padded(shape) -> tuple[int, ...]:
    """ttnn's TILE padding: the last two dims rounded up to multiples of 32."""
    s = [int(d) for d in shape]
    for i in (-1, -2):
        if len(s) >= -i:
            s[i] = -(-s[i] // TILE) * TILE
    return tuple(s)


def one_tile_row(shape) -> bool:
    """True when the activation is one tile row: padded height 32 and batch 1 (what the sharded distributed ops
    take). ttnn tiles a rank-1 [W] as one tile row."""
    padded = tile_padded(shape)
    if len(padded) < 2:
        padded = (TILE, *padded)
    return padded[-2] == TILE and math.prod(padded[:-1]) == TILE
