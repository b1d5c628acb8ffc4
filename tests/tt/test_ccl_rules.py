"""tt_rmsnorm.rules.ccl_checks without a device: one violating case per rule id of all_gather_async and
fused_rms_minimal (the message names the value seen and the fix), the model-code configurations that must pass on
T3000 and Galaxy, and the shapes the package predicts for the gather's and the fused op's buffers."""

import pytest
import ttnn

from tests.support import pc
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.op_outputs import fused_stats_desc, gathered_desc, pre_stats_desc
from tt_rmsnorm.rules import ccl_l1, op_checks
from tt_rmsnorm.rules.ccl_checks import SemaphoreDesc, check_all_gather_async, check_fused_rms_minimal
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES, RULES
from tt_rmsnorm.tensors import TensorDesc as D

RM = ttnn.ROW_MAJOR_LAYOUT
L1 = ttnn.BufferType.L1
WIDTH, HEIGHT = ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.TensorMemoryLayout.HEIGHT_SHARDED
FP32_ACC = ttnn.WormholeComputeKernelConfig(fp32_dest_acc_en=True)
CCL_PREFIXES = ("fused.", "all_gather_async.")


def cores(x0, y0, x1, y1):
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(x0, y0), ttnn.CoreCoord(x1, y1))})


def sharded(grid, shard, layout=WIDTH, orientation=ttnn.ShardOrientation.ROW_MAJOR, buffer=L1):
    return ttnn.MemoryConfig(layout, buffer, ttnn.ShardSpec(cores(*grid), list(shard), orientation))


# T3000 decode (1x8, 1024 per device, 32 cores) and Galaxy decode (8x4, 2048 per device on tt-metal's 16-core grid).
T3K = dict(mesh=(1, 8), n=8, w=1024, grid=(0, 0, 7, 3), shard=32, pc=pc())
GALAXY = dict(mesh=(8, 4), n=4, w=2048, grid=(1, 0, 2, 7), shard=128, pc=pc((2, 8), 4, block_w=4))


def fused_args(sys=T3K, **overrides):
    """Valid fused_rms_minimal arguments for `sys`; `overrides` replace any of them."""
    start = sys["grid"][:2]
    x = D((1, 1, 32, sys["w"]), memory_config=sharded(sys["grid"], (32, sys["shard"])))
    args = dict(
        input_tensor=x,
        program_config=sys["pc"],
        cluster_axis=1,
        mesh_shape=sys["mesh"],
        global_semaphore=SemaphoreDesc(cores(*sys["grid"])),
        weight=D((1, 1, sys["w"] // 32, 32), layout=RM),
        stats=D((1, 1, 32, 32 * sys["n"]), memory_config=sharded((*start, *start), (32, 32 * sys["n"]))),
        num_links=1,
    )
    return {**args, **overrides}


def fused(**overrides):
    return lambda: check_fused_rms_minimal(**fused_args(**overrides))


def xm(**kw):
    """The T3000 decode input's memory config with some fields changed."""
    return sharded(**{"grid": T3K["grid"], "shard": (32, 32), **kw})


def stats(width=256, core=(0, 0), **kw):
    return D((1, 1, 32, width), memory_config=sharded((*core, *core), (32, width)), **kw)


SEMS = SemaphoreDesc(cores(0, 0, 7, 6), 2, (1, 2))
BARRIER = SemaphoreDesc(cores(0, 0, 7, 6), 1, (3,))
STATS = D((1, 1, 128, 32))
BUFFER = D((1, 1, 128, 256))


def gather(x=STATS, dim=3, **kw):
    args = dict(
        multi_device_global_semaphore=SEMS,
        barrier_semaphore=BARRIER,
        mesh_shape=(1, 8),
        cluster_axis=1,
        persistent_output_buffer=BUFFER,
        compute_grid=(8, 7),
    )
    return lambda: check_all_gather_async(x, dim, **{**args, **kw})


BAD = [
    ("fused.one_host", "spans hosts", fused(mesh_shape=(1, 16), hosts=2)),
    (
        "all_gather_async.semaphore_count",
        "exactly 2",
        gather(multi_device_global_semaphore=SemaphoreDesc(cores(0, 0, 7, 6))),
    ),
    ("all_gather_async.semaphore_count", "exactly 2", gather(multi_device_global_semaphore=None)),
    (
        "all_gather_async.distinct_semaphores",
        "distinct",
        gather(multi_device_global_semaphore=SemaphoreDesc(cores(0, 0, 0, 0), 2, (1, 1))),
    ),
    (
        "all_gather_async.distinct_semaphores",
        "distinct",
        gather(barrier_semaphore=SemaphoreDesc(cores(0, 0, 0, 0), 1, (2,))),
    ),
    ("all_gather_async.num_links", "between 1 and 2", gather(num_links=3)),
    ("all_gather_async.num_links", "between 1 and 2", gather(num_links=0)),
    (
        "all_gather_async.persistent_on_device",
        "on device",
        gather(persistent_output_buffer=D((1, 1, 128, 256), on_device=False)),
    ),
    (
        "all_gather_async.persistent_shape",
        "at most input * devices",
        gather(persistent_output_buffer=D((1, 1, 128, 512))),
    ),
    ("all_gather_async.persistent_shape", "the input's rank", gather(persistent_output_buffer=D((1, 128, 256)))),
    ("all_gather_async.persistent_shape", "the input's rank", gather(persistent_output_buffer=D((1, 1, 64, 256)))),
    ("all_gather_async.persistent_truncated", "whole gather", gather(persistent_output_buffer=D((1, 1, 128, 128)))),
    ("all_gather_async.persistent_dtype", "dtype", gather(persistent_output_buffer=D((1, 1, 128, 256), ttnn.float32))),
    ("all_gather_async.persistent_layout", "layout", gather(persistent_output_buffer=D((1, 1, 128, 256), layout=RM))),
    (
        "all_gather_async.persistent_memory_config",
        "memory config",
        gather(persistent_output_buffer=D((1, 1, 128, 256), memory_config=ttnn.L1_MEMORY_CONFIG)),
    ),
    ("fused.cluster_axis", "an axis of the mesh", fused(cluster_axis=2)),
    ("fused.num_devices", "more than one device", fused(cluster_axis=0)),
    ("fused.semaphore", "exactly 1 global semaphore", fused(global_semaphore=SemaphoreDesc(cores(0, 0, 7, 3), 2))),
    ("fused.semaphore", "exactly 1 global semaphore", fused(global_semaphore=None)),
    ("fused.stats_required", "requires stats", fused(stats=None)),
    ("fused.weight_required", "requires weight", fused(weight=None)),
    ("fused.input_shape", "M <= 32", fused(input_tensor=D((1, 1, 64, 1024), memory_config=xm(shard=(64, 32))))),
    ("fused.input_shape", "M <= 32", fused(input_tensor=D((2, 1, 32, 1024), memory_config=xm(shard=(64, 32))))),
    (
        "fused.input.dtype",
        "dtype must be one of",
        fused(input_tensor=D((1, 1, 32, 1024), ttnn.uint32, memory_config=xm())),
    ),
    (
        "fused.input_sharded",
        "WIDTH_SHARDED in L1",
        fused(input_tensor=D((1, 1, 32, 1024), memory_config=ttnn.L1_MEMORY_CONFIG)),
    ),
    (
        "fused.input_sharded",
        "WIDTH_SHARDED in L1",
        fused(input_tensor=D((1, 1, 32, 1024), memory_config=xm(grid=(0, 0, 0, 0), shard=(32, 1024), layout=HEIGHT))),
    ),
    (
        "fused.input_orientation",
        "ROW_MAJOR orientation",
        fused(input_tensor=D((1, 1, 32, 1024), memory_config=xm(orientation=ttnn.ShardOrientation.COL_MAJOR))),
    ),
    ("fused.semaphore_grid", "grid the global semaphore", fused(global_semaphore=SemaphoreDesc(cores(0, 0, 0, 0)))),
    ("fused.output_memory_config", "ROW_MAJOR sharded output", fused(memory_config=ttnn.L1_MEMORY_CONFIG)),
    (
        "fused.output_memory_config",
        "ROW_MAJOR sharded output",
        fused(memory_config=xm(orientation=ttnn.ShardOrientation.COL_MAJOR)),
    ),
    (
        "fused.program_config",
        "LayerNormShardedMultiCoreProgramConfig",
        fused(program_config=ttnn.LayerNormDefaultProgramConfig()),
    ),
    ("fused.grid_fits_shards", "must fit", fused(program_config=pc((1, 1)))),
    ("fused.block_w", "ceil(Wt / shard cores)", fused(program_config=pc(block_w=2))),
    ("fused.subblock_w", "divisible by subblock_w", fused(program_config=pc(subblock_w=3, block_w=1))),
    (
        "fused.subblock_w_limit",
        "dst registers",
        fused(
            input_tensor=D((1, 1, 32, 1024), memory_config=xm(grid=(0, 0, 3, 0), shard=(32, 256))),
            program_config=pc((4, 1), 8, block_w=8),
            global_semaphore=SemaphoreDesc(cores(0, 0, 3, 0)),
            compute_kernel_config=FP32_ACC,
            stats=stats(dtype=ttnn.float32),
        ),
    ),
    ("fused.weight_layout", "ROW_MAJOR", fused(weight=D((1, 1, 1, 1024)))),
    ("fused.stats_dtype", "accumulation format", fused(stats=stats(dtype=ttnn.float32))),
    ("fused.stats_dtype", "accumulation format", fused(compute_kernel_config=FP32_ACC)),
    ("fused.stats_one_core", "exactly one core", fused(stats=D((1, 1, 32, 256)))),
    (
        "fused.stats_one_core",
        "exactly one core",
        fused(stats=D((1, 1, 32, 256), memory_config=sharded((0, 0, 1, 0), (32, 128)))),
    ),
    ("fused.stats_layout", "TILE layout", fused(stats=stats(layout=RM))),
    ("fused.stats_width", "256 wide", fused(stats=stats(128))),
    ("fused.stats_core", "first core", fused(stats=stats(core=(1, 0)))),
    ("fused.persistent_output", "becomes the op's output", fused(persistent_output_tensor=stats(32))),
    (
        "fused.persistent_output",
        "becomes the op's output",
        fused(persistent_output_tensor=D((1, 1, 32, 1024), memory_config=xm(), dtype=ttnn.float32)),
    ),
    ("fused.num_links", "between 1 and 2", fused(num_links=0)),
    ("fused.num_links", "between 1 and 2", fused(num_links=4)),
    (
        "fused.reduce_workers",
        "one core wide off x = 0",
        fused(
            input_tensor=D((1, 1, 32, 1024), memory_config=xm(grid=(3, 0, 3, 1), shard=(32, 512))),
            program_config=pc((4, 2), 8, block_w=16),
            stats=stats(core=(3, 0)),
        ),
    ),
    (
        "fused.l1_budget",
        "must end below",
        fused(
            input_tensor=D((1, 1, 32, 8192), memory_config=xm(grid=(0, 0, 0, 0), shard=(32, 8192))),
            program_config=pc((1, 1), 8, block_w=256),
            stats=stats(),
            weight=D((1, 1, 256, 32), layout=RM),
        ),
    ),
]
IDS = [f"{rule}-{i}" for i, (rule, _, _) in enumerate(BAD)]


@pytest.mark.parametrize("rule, fragment, check", BAD, ids=IDS)
def test_violation_names_rule_value_and_fix(rule, fragment, check):
    with pytest.raises(RuleError) as err:
        check()
    e, msg = err.value, str(err.value)
    assert e.rule == rule, msg
    assert fragment in msg, msg
    assert f"got {e.seen}" in msg and e.fix and msg.endswith(f"Fix: {e.fix}"), msg


def test_every_ccl_rule_has_a_violating_case():
    ccl = {r for r in RULES if r.startswith(CCL_PREFIXES)}
    covered = {b[0] for b in BAD}
    assert covered == ccl, f"untested: {ccl - covered}; unknown: {covered - ccl}"
    assert {r for r in PACKAGE_ONLY_RULES if r.startswith(CCL_PREFIXES)} <= ccl


def test_shared_all_gather_rules_apply_to_all_gather_async():
    for rule, check in [
        ("all_gather.dim", gather(dim=4)),
        ("all_gather.cluster_axis", gather(mesh_shape=(8, 4), cluster_axis=None)),
        ("all_gather.num_devices", gather(cluster_axis=0)),
        ("input.on_device", gather(x=D((1, 1, 128, 32), on_device=False))),
    ]:
        with pytest.raises(RuleError) as err:
            check()
        assert err.value.rule == rule


@pytest.mark.parametrize("sys", [T3K, GALAXY], ids=["t3k", "galaxy"])
@pytest.mark.parametrize("fp32", [False, True], ids=["fp32-acc-off", "fp32-acc-on"])
def test_model_code_fused_decode_passes(sys, fp32):
    ck = FP32_ACC if fp32 else None
    x = fused_args(sys)["input_tensor"]
    out = sharded((0, 0, 7, 0), (32, sys["w"] // 8))  # a fused reshard for the next matmul
    args = fused_args(
        sys,
        compute_kernel_config=ck,
        stats=fused_stats_desc(x, sys["n"], ck),
        residual_input_tensor=x,
        memory_config=out,
        persistent_output_tensor=D(x.shape, memory_config=out),
    )
    assert check_fused_rms_minimal(**args) == sys["n"]


@pytest.mark.parametrize(
    "sys, axis, n", [(T3K, 1, 8), (GALAXY, 1, 4), (GALAXY, 0, 8)], ids=["t3k", "galaxy-axis1", "galaxy-axis0"]
)
def test_model_code_gathers_pass(sys, axis, n):
    grid = (8, 7) if sys is T3K else (8, 9)
    kw = dict(multi_device_global_semaphore=SEMS, barrier_semaphore=BARRIER, mesh_shape=sys["mesh"], cluster_axis=axis)
    prefill = pre_stats_desc(D((1, 1, 128, sys["w"])))
    assert check_all_gather_async(prefill, 3, persistent_output_buffer=gathered_desc(prefill, 3, n), **kw) == n
    x = fused_args(sys)["input_tensor"]
    decode = pre_stats_desc(x)
    one_core = fused_stats_desc(x, n).memory_config  # the pre's core, 32 per device
    buffer = gathered_desc(decode, 3, n, one_core)
    assert (
        check_all_gather_async(
            decode, 3, persistent_output_buffer=buffer, memory_config=one_core, num_links=1, compute_grid=grid, **kw
        )
        == n
    )


def test_predicted_shapes():
    x = fused_args(GALAXY)["input_tensor"]
    s = pre_stats_desc(x)
    assert (s.shape, s.dtype, s.stats_kind) == ((1, 1, 32, 32), ttnn.bfloat16, "means")
    assert s.shard_spec.grid.bounding_box().start.x == 1  # the sharded pre writes on the grid's first core
    g = gathered_desc(s, 3, 4, fused_stats_desc(x, 4).memory_config)
    assert g.shape == (1, 1, 32, 128) and list(g.shard_spec.shape) == [32, 128] and g.stats_kind == "means"
    p = pre_stats_desc(D((1, 1, 7, 100)), dtype=ttnn.float32, memory_config=ttnn.L1_MEMORY_CONFIG)
    assert (p.shape, p.padded_shape, p.dtype, p.stats_kind) == ((1, 1, 7, 32), (1, 1, 32, 32), ttnn.float32, "sums")
    assert gathered_desc(D((1, 1, 7, 100)), -1, 8).shape == (1, 1, 7, 800)
    assert fused_stats_desc(x, 4, FP32_ACC).dtype == ttnn.float32


def test_semaphore_desc_of_handles():
    a, b = object(), object()
    grid = cores(0, 0, 7, 6)
    assert SemaphoreDesc.of([a, b], grid).count == 2
    assert SemaphoreDesc.of(a, grid) == SemaphoreDesc(grid, 1, (id(a),))
    assert len(set(SemaphoreDesc.of([a, a], grid).ids)) == 1
    assert grid.contains(cores(1, 0, 2, 6)) and not cores(0, 0, 0, 0).contains(cores(0, 0, 7, 3))


# ---------------------------------------------------------------------------------------------------------------------
# L1 of the CCL ops (tt_rmsnorm.rules.ccl_l1), against what ttnn did on the mock meshes.

DRAM_MC, L1_MC = ttnn.DRAM_MEMORY_CONFIG, ttnn.L1_MEMORY_CONFIG

# The largest all_gather into L1 (cluster_axis=1, dim 3) that ttnn accepted on mock T3000; one tile row (one row for
# ROW_MAJOR) more was rejected with "static circular buffer region ends at 118112 (bf8, 64-B rows: 118880)".
GATHER_EDGES = [
    ((1, 1, 150976, 32), ttnn.bfloat16, ttnn.TILE_LAYOUT, DRAM_MC, 32),
    ((1, 1, 134176, 32), ttnn.bfloat16, ttnn.TILE_LAYOUT, L1_MC, 32),
    ((1, 1, 75488, 32), ttnn.float32, ttnn.TILE_LAYOUT, DRAM_MC, 32),
    ((1, 1, 75488, 32), ttnn.uint32, ttnn.TILE_LAYOUT, DRAM_MC, 32),
    ((1, 1, 284032, 32), ttnn.bfloat8_b, ttnn.TILE_LAYOUT, DRAM_MC, 32),
    ((1, 1, 4704, 1024), ttnn.bfloat16, ttnn.TILE_LAYOUT, DRAM_MC, 32),
    ((1, 1, 150920, 32), ttnn.bfloat16, RM, DRAM_MC, 1),
    ((1, 1, 4704, 1024), ttnn.bfloat16, RM, DRAM_MC, 1),
]


@pytest.mark.parametrize("shape, dtype, layout, input_memory, step", GATHER_EDGES, ids=lambda v: str(v))
def test_all_gather_into_l1_stops_where_ttnn_does(shape, dtype, layout, input_memory, step):
    def check(rows):
        x = D((*shape[:2], rows, shape[3]), dtype, layout, input_memory)
        return op_checks.check_all_gather(x, 3, cluster_axis=1, mesh_shape=(1, 8), memory_config=L1_MC)

    assert check(shape[2]) == 8
    with pytest.raises(RuleError) as err:
        check(shape[2] + step)
    assert err.value.rule == "all_gather.l1_budget"


# Bytes per bank above L1_BASE each gather needed beside its L1 input on mock T3000 (bisected with an L1 filler).
GATHER_NEEDS = [
    # the native gather: byte-exact
    ((1, 1, 32, 32), ttnn.TILE_LAYOUT, 3, DRAM_MC, L1_MC, 14400, 0),
    ((1, 1, 256, 1024), ttnn.TILE_LAYOUT, 3, DRAM_MC, L1_MC, 88128, 0),
    ((1, 1, 256, 1024), ttnn.TILE_LAYOUT, 3, L1_MC, L1_MC, 88128, 10240),
    ((1, 1, 64, 128), RM, 3, L1_MC, L1_MC, 17216, 512),
    # the composite gather of a DRAM input stages nothing in L1 (its output stays in DRAM): byte-exact
    ((1, 1, 7, 100), ttnn.TILE_LAYOUT, 2, DRAM_MC, L1_MC, 12352, 0),
    ((1, 1, 85, 4096), ttnn.TILE_LAYOUT, 2, DRAM_MC, L1_MC, 16448, 0),
    # the composite gather of an L1 input: an upper bound
    ((1, 1, 7, 100), ttnn.TILE_LAYOUT, 2, L1_MC, L1_MC, 28736, 2048),
    ((1, 1, 7, 100), ttnn.TILE_LAYOUT, 3, L1_MC, L1_MC, 30784, 2048),
    ((1, 1, 7, 8192), ttnn.TILE_LAYOUT, 2, L1_MC, L1_MC, 245824, 10240),
    ((1, 1, 85, 4096), ttnn.TILE_LAYOUT, 2, L1_MC, DRAM_MC, 262208, 14336),
    ((1, 1, 64, 100), RM, 3, L1_MC, L1_MC, 17728, 416),
]


@pytest.mark.parametrize("shape, layout, dim, input_memory, output_memory, need, input_bytes", GATHER_NEEDS)
def test_gather_l1_need_against_ttnn(shape, layout, dim, input_memory, output_memory, need, input_bytes):
    x = D(shape, layout=layout, memory_config=input_memory)
    out = gathered_desc(x, dim, 8, output_memory)
    model = ccl_l1.gather_l1_need(x, dim, out, 8, (1, 8))
    if ccl_l1.takes_composite_gather(x, dim) and input_memory == L1_MC:
        assert model >= need + input_bytes
    else:
        assert model == need + input_bytes


def test_fused_l1_as_ttnn_reported():
    """Static circular buffer ends (and the lowest L1 buffer) ttnn reported when it refused these fused calls on mock
    Galaxy: byte-exact."""
    one_core = fused_args(
        GALAXY,
        input_tensor=D((1, 1, 32, 4096), memory_config=sharded((0, 0, 0, 0), (32, 4096))),
        program_config=pc((1, 1), 8, block_w=128),
        weight=D((1, 1, 128, 32), ttnn.float32, RM),
        stats=D((1, 1, 32, 128), ttnn.float32, memory_config=sharded((0, 0, 0, 0), (32, 128))),
        compute_kernel_config=ttnn.WormholeComputeKernelConfig(fp32_dest_acc_en=True, dst_full_sync_en=True),
        global_semaphore=SemaphoreDesc(cores(0, 0, 0, 0)),
    )
    resharded = fused_args(
        GALAXY,
        input_tensor=D((1, 1, 8, 8192), memory_config=sharded((0, 7, 1, 7), (32, 4096))),
        program_config=pc((2, 8), 16, block_w=128),
        weight=D((1, 1, 256, 32), layout=RM),
        stats=D((1, 1, 32, 128), memory_config=sharded((0, 7, 0, 7), (32, 128))),
        compute_kernel_config=ttnn.WormholeComputeKernelConfig(dst_full_sync_en=True),
        memory_config=sharded((0, 0, 1, 0), (32, 4096)),
        global_semaphore=SemaphoreDesc(cores(0, 7, 1, 7)),
    )
    for args, end in ((one_core, 1716322), (resharded, 1179746)):
        got = ccl_l1.fused_l1_bytes(
            args["input_tensor"],
            args["weight"],
            None,
            args["stats"],
            args.get("memory_config") or args["input_tensor"].memory_config,
            None,
            args["compute_kernel_config"],
            None,
            (8, 4),
        )
        assert got[0] == end
        with pytest.raises(RuleError) as err:
            check_fused_rms_minimal(**args)
        assert err.value.rule == "fused.l1_budget"
    assert got[1] == 966624


@pytest.mark.parametrize(
    "dtype", ["bfloat16", "float32", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16", "uint8"]
)
@pytest.mark.parametrize("mesh_shape", [(1, 2), (1, 8)], ids=["n300", "t3k"])
def test_all_gather_of_every_dtype_is_judged(dtype, mesh_shape):
    """An all_gather of any dtype ttnn can describe is accepted or refused by a rule, never a KeyError of the L1
    model's tables (ttnn runs an int32 gather over [1, 1, 32, 32] on mock N300 and T3000)."""
    for memory_config in (ttnn.DRAM_MEMORY_CONFIG, ttnn.L1_MEMORY_CONFIG):
        x = D((1, 1, 32, 32), dtype=getattr(ttnn, dtype), memory_config=memory_config)
        try:
            n = op_checks.check_all_gather(x, 3, mesh_shape=mesh_shape)
        except RuleError:
            assert dtype != "int32"  # ttnn runs the int32 gather: no rule may refuse it
        else:
            assert n == mesh_shape[1]


class _Mesh:
    def __init__(self, devices):
        self.devices = devices

    def get_num_devices(self):
        return self.devices


@pytest.mark.parametrize(
    "system, devices, topology, refused",
    [
        ("TG", 32, "Ring", True),  # the 4U Galaxy's axes are lines
        ("TG", 32, "Linear", False),
        ("GALAXY", 32, "Ring", False),  # the 6U Galaxy closes its rows and columns into rings
        ("T3K", 8, "Ring", False),
        ("TG", 2, "Ring", False),  # two chips are their own ring
    ],
)
def test_ring_is_refused_where_the_system_has_no_wraparound_link(monkeypatch, system, devices, topology, refused):
    from tt_rmsnorm import ccl

    monkeypatch.setattr(ccl, "cluster_type", lambda: system)
    try:
        ccl.check_topology(getattr(ttnn.Topology, topology), _Mesh(devices))
    except RuleError as e:
        assert refused and e.rule == "ccl.ring" and "Linear" in e.fix, e
        return
    assert not refused
