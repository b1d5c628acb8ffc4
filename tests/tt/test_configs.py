"""Program, memory and compute configs: derived from shape and grid, within the hardware limits, accepted by the
rules."""

import pytest
import ttnn

from tests import support
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules import op_checks
from tt_rmsnorm.rules.common import max_subblock_w
from tt_rmsnorm.tensors import TensorDesc as D

GRIDS = [(8, 4), (1, 4), (8, 2), (2, 8)]
WIDTHS = [1024, 2048]


@pytest.mark.parametrize("grid", GRIDS, ids=[f"grid{x}x{y}" for x, y in GRIDS])
@pytest.mark.parametrize("width", WIDTHS, ids=[f"w{w}" for w in WIDTHS])
@pytest.mark.parametrize("fp32_acc", [True, False], ids=["fp32acc", "bf16acc"])
def test_width_sharded_config_consistent(grid, width, fp32_acc):
    shape = (1, 1, 32, width)
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=fp32_acc)
    pc = layouts.sharded_program_config(shape, grid, layouts.WIDTH, cfg)
    mc = layouts.sharded_memory_config(shape, grid, layouts.WIDTH)
    cores = grid[0] * grid[1]
    assert mc.memory_layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED and mc.buffer_type == ttnn.BufferType.L1
    assert mc.shard_spec.grid.num_cores() == cores
    assert list(mc.shard_spec.shape) == [32, pc.block_w * 32]
    assert pc.block_w * 32 * cores == width
    assert pc.block_h == 1 and pc.block_w % pc.subblock_w == 0
    assert pc.subblock_w <= max_subblock_w(cfg)
    assert (pc.compute_with_storage_grid_size.x, pc.compute_with_storage_grid_size.y) == grid
    same = layouts.program_config_from_shard_spec(mc.shard_spec, cfg)
    assert (same.block_w, same.block_h, same.subblock_w) == (pc.block_w, pc.block_h, pc.subblock_w)


def test_subblock_w_is_largest_divisor_within_dst_limit():
    shape = (1, 1, 32, 8 * 32 * 8)  # block_w 8 on an 8x1 grid
    assert (
        layouts.sharded_program_config(
            shape, (8, 1), compute_kernel_config=layouts.compute_kernel_config(fp32_dest_acc_en=True)
        ).subblock_w
        == 4
    )
    assert (
        layouts.sharded_program_config(
            shape, (8, 1), compute_kernel_config=layouts.compute_kernel_config(fp32_dest_acc_en=False)
        ).subblock_w
        == 8
    )
    shape6 = (1, 1, 32, 6 * 32 * 8)
    assert (
        layouts.sharded_program_config(
            shape6, (8, 1), compute_kernel_config=layouts.compute_kernel_config(fp32_dest_acc_en=True)
        ).subblock_w
        == 3
    )


@pytest.mark.parametrize(
    "width, grid, expect",
    [
        (1024, (8, 7), (8, 1)),
        (2048, (8, 9), (8, 2)),  # tt-metal's TG Llama decode: 2048 per device on 16 cores
        (4096, (8, 7), (8, 4)),
        (8192, (8, 7), (8, 4)),  # capped at MAX_DECODE_CORES: 8 tiles per core
        (896, (8, 8), (7, 1)),
        (96, (8, 8), (1, 1)),
        (7 * 32, (8, 8), (1, 1)),
    ],
)
def test_width_shard_grid(width, grid, expect):
    got = layouts.width_shard_grid(width, grid, max_cores=layouts.MAX_DECODE_CORES)
    assert got == expect
    assert (width // 32) % (got[0] * got[1]) == 0 and got[0] <= grid[0] and got[1] <= grid[1]
    assert width // 32 // (got[0] * got[1]) >= min(layouts.DECODE_TILES_PER_CORE, width // 32)


def test_block_sharded_rms_norm_config_accepted():
    shape = (1, 1, 128, 1024)
    pc = layouts.sharded_program_config(shape, (8, 4), layouts.BLOCK)
    mc = layouts.sharded_memory_config(shape, (8, 4), layouts.BLOCK)
    assert (pc.block_h, pc.block_w) == (1, 4) and list(mc.shard_spec.shape) == [32, 128]
    assert op_checks.check_rms_norm(D(shape, memory_config=mc), program_config=pc, compute_grid=(8, 8)) == "sharded"


@pytest.mark.parametrize(
    "shape, sharded, path",
    [
        ((1, 1, 32, 1024), None, "sharded"),
        ((1, 1, 7, 1024), None, "sharded"),
        ((1, 1, 128, 1024), None, "interleaved"),
        ((2, 1, 32, 1024), None, "interleaved"),
        ((1, 1, 32, 1024), False, "interleaved"),
        ((1, 1, 2048, 8192), None, "interleaved"),
    ],
    ids=["decode32", "decode7", "prefill128", "batch2", "override_interleaved", "prefill2048"],
)
def test_choose_path(shape, sharded, path):
    assert layouts.choose_layout(shape, sharded) == path


def test_choose_sharded_on_prefill_raises():
    with pytest.raises(RuleError) as err:
        layouts.choose_layout((1, 1, 128, 1024), True)
    assert err.value.rule == "sharded.height_32" and "padded height 32" in str(err.value)


def test_stats_memory_config_one_core():
    mc = layouts.stats_memory_config(8)
    assert mc.shard_spec.grid.num_cores() == 1 and list(mc.shard_spec.shape) == [32, 256]
    assert mc.memory_layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED and mc.buffer_type == ttnn.BufferType.L1


def test_compute_kernel_config_defaults():
    c = layouts.compute_kernel_config()
    assert c.math_fidelity == ttnn.MathFidelity.HiFi3 and c.math_approx_mode is False
    assert c.fp32_dest_acc_en is True and c.packer_l1_acc is False and c.dst_full_sync_en is False
    # without fp32 accumulation the Wormhole HiFi4 defect does not apply: the highest fidelity
    assert layouts.compute_kernel_config(fp32_dest_acc_en=False).math_fidelity == ttnn.MathFidelity.HiFi4


@pytest.mark.parametrize(
    "shape, reasons",
    [
        ((1, 1, 32, 2048), ("fp32_dest_acc_en", "math_fidelity", "decode_grid", "subblock_w")),
        ((1, 1, 128, 1024), ("fp32_dest_acc_en", "math_fidelity", "legacy_reduction", "use_2d_core_grid")),
        ((1, 1, 32, 8192), ("fp32_dest_acc_en", "legacy_reduction", "use_2d_core_grid")),  # no fp32 acc: HiFi4
    ],
    ids=["decode", "prefill", "prefill-no-fp32-acc"],
)
def test_plan_describes_why_it_departs_from_tt_metal(shape, reasons):
    plan = layouts.plan(shape, 4, compute_grid=(8, 9), sharded=shape[-2] == 32 and shape[-1] <= 2048)
    assert plan.reasons == reasons
    text = plan.describe()
    assert all(layouts.PLANNER_REASONS[k][0] in text for k in reasons)
    assert plan.explain().count("\n") == len(reasons) - 1 and "tt-metal" in plan.explain()


def test_plan_drops_fp32_acc_only_where_l1_needs_it():
    assert layouts.plan((1, 1, 128, 1024), 8).compute_kernel_config.fp32_dest_acc_en is True
    assert layouts.plan((1, 1, 128, 7168), 1).compute_kernel_config.fp32_dest_acc_en is False
    assert (
        layouts.plan((1, 1, 32, 3072), 1, dtype=ttnn.float32, sharded=False).compute_kernel_config.fp32_dest_acc_en
        is True
    )


@pytest.mark.parametrize(
    "name, plan", support.plan_case_configurations(), ids=[n for n, _ in support.plan_case_configurations()]
)
def test_demo_plans_pass_the_rules(name, plan):
    system = support.plan_case_system(name)
    grid, arch = system.compute_grid, system.arch
    shape, n = plan.local_shape, plan.num_devices
    kw = dict(program_config=plan.program_config, compute_kernel_config=plan.compute_kernel_config, compute_grid=grid)
    weight = D((1, 1, shape[-1] // 32, 32), layout=ttnn.ROW_MAJOR_LAYOUT, arch=arch)
    if plan.layout == "sharded":
        x = D(shape, memory_config=plan.input_memory_config, arch=arch)
        stats = D(shape[:-1] + (32 * n,), memory_config=plan.stats_memory_config, stats_kind="means", arch=arch)
    else:
        x = D(shape, arch=arch)
        stats = D(shape[:-1] + (32 * n,), stats_kind="sums", arch=arch)
    assert op_checks.check_pre_all_gather(x, **kw) == plan.layout
    assert op_checks.check_post_all_gather(x, stats, epsilon=1e-5, weight=weight, **kw) == plan.layout
    if n > 1:
        op_checks.check_all_gather(
            D(
                shape[:-1] + (32,),
                memory_config=plan.stats_memory_config if plan.layout == "sharded" else ttnn.DRAM_MEMORY_CONFIG,
                arch=arch,
            ),
            3,
            cluster_axis=1,
            mesh_shape=system.mesh_shape,
            memory_config=plan.stats_memory_config,
        )
    assert plan.layout in plan.describe()


def test_a_shard_narrower_than_a_tile_plans_a_block_the_rules_refuse():
    """A shard under 32 wide is a block of no tiles: the derived config takes subblock_w 1 and block_w 0, and the
    rules refuse that block (the derivation raised ValueError on an empty divisor range)."""
    spec = ttnn.ShardSpec(
        ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(0, 0))}),
        [32, 16],
        ttnn.ShardOrientation.ROW_MAJOR,
    )
    pc = layouts.program_config_from_shard_spec(spec)
    assert (pc.block_w, pc.subblock_w) == (0, 1)
    x = D((1, 1, 32, 1024), memory_config=layouts.sharded_memory_config((1, 1, 32, 1024), (8, 4)))
    with pytest.raises(RuleError) as err:
        op_checks.check_pre_all_gather(x, program_config=pc, compute_grid=(8, 8))
    assert err.value.rule == "program_config.block_w"
