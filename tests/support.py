"""Helpers the TT test modules share: ttnn program and memory configs written the short way."""

import ttnn


def pc(grid=(8, 4), subblock_w=1, block_h=1, block_w=1, **kw):
    """A LayerNormShardedMultiCoreProgramConfig on a `grid` of (x, y) cores."""
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*grid),
        subblock_w=subblock_w,
        block_h=block_h,
        block_w=block_w,
        inplace=False,
        **kw,
    )


def shard_mc(layout, grid, shard, start=(0, 0), buffer=ttnn.BufferType.L1):
    """A sharded memory config: `shard` on a `grid` of (x, y) cores from core `start`, ROW_MAJOR orientation."""
    crs = ttnn.CoreRangeSet(
        {ttnn.CoreRange(ttnn.CoreCoord(*start), ttnn.CoreCoord(start[0] + grid[0] - 1, start[1] + grid[1] - 1))}
    )
    return ttnn.MemoryConfig(layout, buffer, ttnn.ShardSpec(crs, list(shard), ttnn.ShardOrientation.ROW_MAJOR))
