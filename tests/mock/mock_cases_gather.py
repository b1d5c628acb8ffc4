"""The agreement battery's table of `ttnn.all_gather` of the stats on mock N300, T3000 and Galaxy (the spec format of
mock_cases), with what real ttnn does with each case."""

from tests.mock.mock_cases import A, R, S, T, collector
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES

CASES: list[dict] = []
case = collector(CASES)

# --- all_gather of the stats ------------------------------------------------------------------------------------------
STAT = (1, 1, 32, 32)
SHARD1 = S("WIDTH", (0, 0, 0, 0), (32, 32))  # the stats of one device on one core
for system, axes in (("n300", (None, 1)), ("t3k", (None, 1)), ("galaxy", (0, 1))):
    for axis in axes:
        for dim in (0, 1, 2, 3, -1, -4):
            case(f"axis{axis}-dim{dim}", "all_gather", T(STAT), A, system=system, dim=dim, cluster_axis=axis)
    for dim in (4, -5):
        case(f"dim{dim}", "all_gather", T(STAT), R, system=system, dim=dim, cluster_axis=1)
    case("axis2", "all_gather", T(STAT), R, system=system, dim=3, cluster_axis=2)
    for dtype in ("bf8", "fp32", "uint32"):
        case(f"dtype-{dtype}", "all_gather", T(STAT, dtype), A, system=system, dim=3, cluster_axis=1)
    case("row-major", "all_gather", T(STAT, layout="RM"), A, system=system, dim=3, cluster_axis=1)
    case("ragged", "all_gather", T((1, 1, 7, 100)), A, system=system, dim=3, cluster_axis=1)
    case("ragged-bf8", "all_gather", T((1, 1, 7, 100), "bf8"), A, system=system, dim=3, cluster_axis=1)
    case("ragged-bf4", "all_gather", T((1, 1, 7, 100), "bf4"), R, system=system, dim=3, cluster_axis=1)
    case("rows-off-grid-bf4", "all_gather", T((1, 1, 7, 64), "bf4"), R, system=system, dim=2, cluster_axis=1)
    case("tiled-bf4", "all_gather", T((1, 1, 32, 64), "bf4"), A, system=system, dim=3, cluster_axis=1)
    case(
        "prefill-stats",
        "all_gather",
        T((1, 1, 2048, 32)),
        A,
        system=system,
        dim=3,
        cluster_axis=1,
        memory_config="DRAM",
    )
    case("out-L1", "all_gather", T(STAT), A, system=system, dim=3, cluster_axis=1, memory_config="L1")
    no_spec = ("sharded_no_spec", "WIDTH")
    case("out-sharded-no-spec", "all_gather", T(STAT), R, system=system, dim=3, cluster_axis=1, memory_config=no_spec)
    n = MESH_SHAPES[system][1]
    for shard in ((0, 32 * n), (16, 32 * n)):
        out = S("WIDTH", (0, 0, 0, 0), shard)
        case(f"out-shard{shard[0]}", "all_gather", T(STAT), R, system=system, dim=3, cluster_axis=1, memory_config=out)
    case("sharded-no-memcfg", "all_gather", T(STAT, mem=SHARD1), R, system=system, dim=3, cluster_axis=1)
    for id, x in (("sharded-1core", T(STAT, mem=SHARD1)), ("interleaved-to-1core", T(STAT))):
        out = S("WIDTH", (0, 0, 0, 0), (32, 32 * n))
        case(id, "all_gather", x, A, system=system, dim=3, cluster_axis=1, memory_config=out)
    case("rank3", "all_gather", T((1, 32, 32)), A, system=system, dim=2, cluster_axis=1)
for system in ("n300", "t3k"):
    case("axis0", "all_gather", T(STAT), R, system=system, dim=3, cluster_axis=0)
case("axisNone", "all_gather", T(STAT), R, system="galaxy", dim=3)
case("single-device", "all_gather", T(STAT), R, system="n150", dim=3, cluster_axis=1)
case("single-device-axisNone", "all_gather", T(STAT), R, system="n150", dim=3)
case("host-input", "all_gather", T(STAT, host=True), "pkg:input.on_device", system="n300", dim=3, cluster_axis=1)

# --- classes found by differential fuzzing (tools/differential.py) ---------------------------------------------------
case(
    "out-misfit",
    "all_gather",
    T(STAT),
    R,
    system="t3k",
    dim=3,
    cluster_axis=1,
    memory_config=S("WIDTH", (0, 0, 0, 0), (32, 128)),
)
# ttnn's composite gather (a gather dim off the tile grid) needs no cluster_axis on a 2-D mesh
case("axisNone-unaligned", "all_gather", T((1, 1, 7, 100)), A, system="galaxy", dim=3)
case("empty", "all_gather", T((0, 1024), layout="RM"), R, system="t3k", dim=0, cluster_axis=1)
# a gather into L1 fits beside its circular buffer (3 fabric packets) and semaphores: 674 tiles per bank on T3000
case("out-L1-edge", "all_gather", T((1, 1, 150976, 32)), A, system="t3k", dim=3, cluster_axis=1, memory_config="L1")
case(
    "out-L1-past-edge", "all_gather", T((1, 1, 151008, 32)), R, system="t3k", dim=3, cluster_axis=1, memory_config="L1"
)
case(
    "L1-input-past-edge",
    "all_gather",
    T((1, 1, 134208, 32), mem="L1"),
    R,
    system="t3k",
    dim=3,
    cluster_axis=1,
    memory_config="L1",
)
# the composite gather takes a padded gather dim: the last off the tile grid, or (TILE only) the rows on dim -2
case("axisNone-dim0-unaligned", "all_gather", T((1, 1, 7, 100)), R, system="galaxy", dim=0)
case("axisNone-rows-unaligned", "all_gather", T((1, 1, 7, 128)), A, system="galaxy", dim=2)
case("axisNone-row-major-rows-unaligned", "all_gather", T((1, 1, 7, 100), layout="RM"), R, system="galaxy", dim=2)
case("axisNone-row-major-unaligned", "all_gather", T((1, 1, 32, 100), layout="RM"), A, system="galaxy", dim=3)
# the composite gather of an L1 input: the package bounds what it stages from above and refuses beyond the bound
case(
    "composite-L1-input-beyond-bound",
    "all_gather",
    T((1, 1, 341, 6144), "fp32", mem="L1"),
    "pkg:all_gather.composite_l1_bound",
    system="galaxy",
    dim=2,
    cluster_axis=1,
)
