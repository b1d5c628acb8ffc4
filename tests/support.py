"""Helpers the TT test modules share: ttnn program and memory configs written the short way, and the per-device shapes
the planner's layouts are tested on, and the stand-in tensor a signature reads without a device."""

import ttnn

from tt_rmsnorm.planning import layouts
from tt_rmsnorm.systems import SYSTEMS


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


# Per-device shapes of the tests, by system (tt_rmsnorm.systems): Llama-70B (hidden 8192) on T3000 1x8 and
# on the Wormhole and Blackhole Galaxies 8x4 (2048 a column); 8192 over the two chips of an N300 or a P300.
PLAN_CASES = [
    # (name, local_shape, system); the hidden dim is sharded over the system mesh's columns
    *[(f"t3k_prefill_{s}", (1, 1, s, 1024), "T3000") for s in (128, 512, 2048)],
    ("t3k_decode_32", (1, 1, 32, 1024), "T3000"),
    *[(f"galaxy_prefill_{s}", (1, 1, s, 2048), "Galaxy") for s in (128, 512, 2048)],
    ("galaxy_decode_32", (1, 1, 32, 2048), "Galaxy"),
    ("n300_decode_32", (1, 1, 32, 4096), "N300"),
    ("n300_prefill_128", (1, 1, 128, 4096), "N300"),
    ("p300_decode_32", (1, 1, 32, 4096), "P300"),
    ("p300_prefill_128", (1, 1, 128, 4096), "P300"),
    *[(f"bh-galaxy_prefill_{s}", (1, 1, s, 2048), "Blackhole Galaxy") for s in (128, 2048)],
    ("bh-galaxy_decode_32", (1, 1, 32, 2048), "Blackhole Galaxy"),
]


def plan_case_system(name: str):
    """The system (tt_rmsnorm.systems.System) a plan case runs on."""
    system = next(sys_name for case, _, sys_name in PLAN_CASES if case == name)
    return next(s for s in SYSTEMS if s.name == system)


def plan_case_configurations() -> list[tuple[str, layouts.NormPlan]]:
    """The layouts the planner picks for the plan cases (the mock battery checks that ttnn accepts them)."""
    plans = []
    for name, shape, _ in PLAN_CASES:
        system = plan_case_system(name)
        plans.append(
            (name, layouts.plan(shape, system.mesh_shape[1], compute_grid=system.compute_grid, arch=system.arch))
        )
    return plans


class SpecStandIn:
    """What ttnn's TensorSpec does that matters here: equal by content, hashed by identity (a new object each read)."""

    def __init__(self, content):
        self.content = content

    def __eq__(self, other):
        return isinstance(other, SpecStandIn) and self.content == other.content

    __hash__ = object.__hash__


class TensorStandIn:
    """What a signature reads of a ttnn tensor: its spec (a new, equal object on every read) and its storage."""

    def __init__(self, content, storage="DEVICE"):
        self.content, self.storage = content, storage

    @property
    def spec(self):
        return SpecStandIn(self.content)

    def storage_type(self):
        return self.storage
