"""The planner without a device: config copies and keys that follow every field the rules read, the layout each
path takes for an input as given, where the output is written and where it is moved, and the plan as planned without
CCL resources (`ccl=True`)."""

import pytest
import ttnn

import tt_rmsnorm
from tt_rmsnorm import signature
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts, planner

T3K = (1, 8)
SHAPE = (1, 1, 32, 1024)  # one T3000 device's decode slice of H = 8192


def _sharded_pc():
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(8, 4),
        subblock_w=1,
        block_h=1,
        block_w=1,
        inplace=False,
        use_welford=False,
    )


def _configs():
    """(config, {field: another value}) for each kind of ttnn config the rules read."""
    return [
        (
            _sharded_pc(),
            {"subblock_w": 2, "block_h": 2, "block_w": 2, "inplace": True, "use_welford": True},
        ),
        (ttnn.LayerNormDefaultProgramConfig(), {"legacy_reduction": True, "use_welford": True}),
        (
            ttnn.WormholeComputeKernelConfig(
                math_fidelity=ttnn.MathFidelity.HiFi4,
                math_approx_mode=False,
                fp32_dest_acc_en=True,
                packer_l1_acc=False,
                dst_full_sync_en=False,
            ),
            {
                "math_fidelity": ttnn.MathFidelity.LoFi,
                "math_approx_mode": True,
                "fp32_dest_acc_en": False,
                "packer_l1_acc": True,
                "dst_full_sync_en": True,
            },
        ),
    ]


@pytest.mark.parametrize("index", range(3), ids=["sharded_program", "default_program", "compute_kernel"])
def test_a_config_copy_has_every_field_and_the_key_follows_each(index):
    cfg, others = _configs()[index]
    copy = planner.copy_config(cfg)
    assert copy is not cfg and type(copy) is type(cfg)
    assert signature.config_key(copy) == signature.config_key(cfg)
    for field, value in others.items():
        before = signature.config_key(cfg)
        assert getattr(copy, field) == getattr(cfg, field), field
        setattr(cfg, field, value)
        assert signature.config_key(cfg) != before, field  # the key sees the change
        assert signature.config_key(planner.copy_config(cfg)) == signature.config_key(cfg), field
        assert getattr(copy, field) != value, field  # the copy keeps what was checked


def test_the_grid_of_a_sharded_program_config_is_copied_and_keyed():
    cfg = _sharded_pc()
    copy = planner.copy_config(cfg)
    g = copy.compute_with_storage_grid_size
    assert (g.x, g.y) == (8, 4)
    other = _sharded_pc()
    other.compute_with_storage_grid_size = ttnn.CoreCoord(4, 8)
    assert signature.config_key(other) != signature.config_key(cfg)


def test_configs_of_other_kinds_pass_as_they_are():
    assert planner.copy_config(None) is None and signature.config_key(None) is None
    other = object()
    assert planner.copy_config(other) is other
    assert signature.config_key(other) == ("object", id(other))


def _plan(shape=SHAPE, **kw):
    return tt_rmsnorm.plan_distributed_rms_norm(shape, T3K, compute_grid=(8, 8), **kw)


def test_the_layout_follows_the_input_and_the_call():
    sharded_mc = _plan(sharded=True).norm.input_memory_config
    assert _plan(ccl=True, path="async").norm.layout == "interleaved"  # a DRAM input stays interleaved
    assert _plan(ccl=True, path="async", sharded=True).norm.layout == "sharded"
    assert _plan(ccl=True, path="fused").norm.layout == "sharded"  # the fused op takes L1 shards
    held = _plan(ccl=True, path="async", input_memory_config=sharded_mc)
    # a sharded input stays where it is: nothing to move, the program config from its shard spec
    assert held.norm.layout == "sharded" and held.norm.input_memory_config is None
    assert held.norm.program_config is not None
    with pytest.raises(RuleError) as err:
        _plan(ccl=True, path="async", input_memory_config=sharded_mc, sharded=False)
    assert err.value.rule == "mesh.sharded_override"
    local = tt_rmsnorm.plan_distributed_rms_norm((1, 1, 32, 4096), (1, 1), compute_grid=(8, 8))
    assert local.name == "local" and local.norm.layout == "interleaved"
    local_sharded = tt_rmsnorm.plan_distributed_rms_norm(
        (1, 1, 32, 4096),
        (1, 1),
        compute_grid=(8, 8),
        input_memory_config=layouts.sharded_memory_config((1, 1, 32, 4096), (8, 4)),
    )
    assert local_sharded.norm.layout == "sharded"


def _target(layout=ttnn.TensorMemoryLayout.WIDTH_SHARDED, buffer=ttnn.BufferType.L1, orientation=None):
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(3, 3))})
    spec = ttnn.ShardSpec(grid, [32, 64], orientation or ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(layout, buffer, spec)


def test_the_fused_op_writes_a_width_sharded_l1_target_itself_and_anything_else_is_moved():
    wide = _target()
    plan = _plan(ccl=True, path="fused", memory_config=wide)
    assert plan.written_memory_config == wide and plan.move_output is None
    col = _target(orientation=ttnn.ShardOrientation.COL_MAJOR)
    plan = _plan(ccl=True, path="fused", memory_config=col)
    assert plan.written_memory_config == plan.norm.input_memory_config and plan.move_output == col
    plan = _plan(ccl=True, path="fused", memory_config=ttnn.DRAM_MEMORY_CONFIG)
    assert plan.written_memory_config == plan.norm.input_memory_config
    assert plan.move_output == ttnn.DRAM_MEMORY_CONFIG
    # no target: the output goes back to x's own memory config (DRAM here)
    plan = _plan(ccl=True, path="fused")
    assert plan.move_output == ttnn.DRAM_MEMORY_CONFIG


def test_a_sharded_gather_path_writes_into_its_input_shards_and_moves_to_the_target():
    plan = _plan(ccl=True, path="async", sharded=True, memory_config=_target())
    assert plan.written_memory_config == plan.norm.input_memory_config and plan.move_output == _target()
    plan = _plan(ccl=True, path="async", memory_config=ttnn.L1_MEMORY_CONFIG)
    assert plan.written_memory_config is None and plan.move_output is None  # interleaved: the op writes the target


def test_planning_without_resources_carries_buffer_descriptions_and_no_ccl():
    plan = _plan(ccl=True, path="async")
    assert plan.ccl is None and plan.mesh_device is None
    assert tuple(plan.gathered.shape) == (1, 1, 32, 256) and plan.fused_stats is None
    fused = _plan(ccl=True, path="fused")
    assert fused.gathered is None and fused.fused_stats is not None
    classic = _plan()
    assert classic.gathered is None and classic.fused_stats is None


@pytest.mark.parametrize("name, buffer", [("async", "gathered"), ("fused", "fused_stats")])
def test_a_path_named_at_run_time_gets_its_persistent_buffer(name, buffer):
    """A path name read from a config file is a different str object than the literal: the buffers go by value."""
    plan = _plan(ccl=True, path="".join(list(name)))
    assert plan.name == name and getattr(plan, buffer) is not None
