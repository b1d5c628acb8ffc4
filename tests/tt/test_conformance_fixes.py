"""Regression tests for what running tt-metal's own RMSNorm tests through the package found (tests/conformance):
the bias guard's scope, the known-wrong sharded rms_norm, marking raw stats tensors, and the L1 model's ttnn version."""

import warnings

import pytest
import torch
import ttnn
from loguru import logger

import tt_rmsnorm
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules import l1_budget, op_checks, sharding
from tt_rmsnorm.tensors import STATS_MEANS, STATS_SUMS, TensorDesc, mark_stats, stats_kind_of

RM = ttnn.ROW_MAJOR_LAYOUT
WIDTH, BLOCK = ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.TensorMemoryLayout.BLOCK_SHARDED
DECODE = layouts.plan((1, 1, 32, 1024), 8, compute_grid=(8, 7))
FP32_ACC = layouts.compute_kernel_config(fp32_dest_acc_en=True)
NO_FP32_ACC = layouts.compute_kernel_config(fp32_dest_acc_en=False)


def shard(layout, grid, shape, orientation=ttnn.ShardOrientation.ROW_MAJOR):
    crs = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(grid[0] - 1, grid[1] - 1))})
    return ttnn.MemoryConfig(layout, ttnn.BufferType.L1, ttnn.ShardSpec(crs, list(shape), orientation))


def rule_of(check) -> str | None:
    try:
        check()
    except RuleError as e:
        return e.rule
    return None


# --- bias without weight: refused only where the kernel drops it ------------------------------------------------------
BIAS = TensorDesc((1, 1, 32, 32), layout=RM)
X_DECODE = TensorDesc((1, 1, 32, 1024), memory_config=DECODE.input_memory_config)
MEANS = TensorDesc((1, 1, 32, 256), memory_config=DECODE.stats_memory_config, stats_kind=STATS_MEANS)


@pytest.mark.parametrize(
    "path, check, refused",
    [
        (
            "interleaved-post",
            lambda: op_checks.check_post_all_gather(
                TensorDesc((1, 1, 128, 1024)), TensorDesc((1, 1, 128, 256), stats_kind=STATS_SUMS), bias=BIAS
            ),
            True,
        ),
        (
            "sharded-post",
            lambda: op_checks.check_post_all_gather(
                X_DECODE, MEANS, bias=BIAS, program_config=DECODE.program_config, compute_grid=(8, 7)
            ),
            False,
        ),
        ("rms_norm-interleaved", lambda: op_checks.check_rms_norm(TensorDesc((1, 1, 128, 1024)), bias=BIAS), False),
        (
            "rms_norm-sharded",
            lambda: op_checks.check_rms_norm(
                X_DECODE, bias=BIAS, program_config=DECODE.program_config, compute_grid=(8, 7)
            ),
            False,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bias_without_weight_refused_only_on_the_interleaved_post(path, check, refused):
    assert rule_of(check) == ("bias.needs_weight" if refused else None)


# --- the known-wrong sharded rms_norm ---------------------------------------------------------------------------------
BAD_USER = TensorDesc((576, 2048), memory_config=shard(WIDTH, (8, 8), (576, 32)))


def test_bad_user_repro_refused_naming_the_block_sharded_program_config():
    with pytest.raises(RuleError) as err:
        op_checks.check_rms_norm(BAD_USER, compute_kernel_config=FP32_ACC, compute_grid=(8, 8))
    assert err.value.rule == "sharded.stats_gather_burst"
    assert "3 fp32 stats tiles (12288 B" in str(err.value)
    assert "compute_with_storage_grid_size=(8, 6), subblock_w=4, block_h=3, block_w=8" in err.value.fix
    # the named fix passes every rule, and so does the same sharding with bf16 accumulation (3 x 2048 B)
    fixed = TensorDesc((576, 2048), memory_config=shard(BLOCK, (8, 6), (96, 256)))
    pc = layouts.program_config_from_shard_spec(fixed.shard_spec, FP32_ACC)
    assert (pc.compute_with_storage_grid_size.x, pc.subblock_w, pc.block_h, pc.block_w) == (8, 4, 3, 8)
    op_checks.check_rms_norm(fixed, program_config=pc, compute_kernel_config=FP32_ACC, compute_grid=(8, 8))
    op_checks.check_rms_norm(BAD_USER, compute_kernel_config=NO_FP32_ACC, compute_grid=(8, 8))


@pytest.mark.parametrize(
    "rows, width, grid, shard_shape, dtype, ck",
    [
        (512, 2048, (8, 8), (512, 32), ttnn.bfloat16, NO_FP32_ACC),  # test_layernorm_1d_sharded_mix_precision_rm
        (64, 8192, (8, 8), (64, 128), ttnn.float32, NO_FP32_ACC),
        (256, 320, (5, 2), (256, 32), ttnn.float32, None),  # test_rms_norm_sharded two-stage: 2 fp32 tiles = 8192 B
        (256, 512, (4, 2), (256, 64), ttnn.float32, None),
    ],
    ids=["512x2048-8x8", "64x8192-8x8", "256x320-5x2-fp32", "256x512-4x2-fp32"],
)
def test_tt_metal_passing_width_sharded_cases_stay_accepted(rows, width, grid, shard_shape, dtype, ck):
    x = TensorDesc((rows, width), dtype=dtype, memory_config=shard(WIDTH, grid, shard_shape))
    assert sharding.sharded_reduce_worker_tiles(x, (8, 8), rows // 32) * (4096 if ck is None else 2048) <= 8192
    op_checks.check_rms_norm(x, compute_kernel_config=ck, compute_grid=(8, 8))


def test_reduce_worker_tiles_follow_the_factory():
    # two-stage (1-D width sharding on 8 rows of cores): each row's 8 cores share 18 tile rows -> 3 each
    assert sharding.sharded_reduce_worker_tiles(BAD_USER, (8, 8), 18) == 3
    # one row of cores: single stage over the 8 cores of the shard
    one_row = TensorDesc((576, 2048), memory_config=shard(WIDTH, (8, 1), (576, 256)))
    assert sharding.sharded_reduce_worker_tiles(one_row, (8, 8), 18) == 3
    # block sharding (several shards in height): the grid's columns share each block's rows
    block = TensorDesc((576, 2048), memory_config=shard(BLOCK, (8, 6), (96, 256)))
    assert sharding.sharded_reduce_worker_tiles(block, (8, 6), 3) == 1
    # one core: no core-to-core reduce at all
    single = TensorDesc((576, 64), memory_config=shard(WIDTH, (1, 1), (576, 64)))
    assert sharding.sharded_reduce_worker_tiles(single, (1, 1), 18) == 0


# --- raw stats tensors marked as sums or means ------------------------------------------------------------------------
def test_mark_stats_is_public_and_marks_raw_ttnn_tensors():
    assert tt_rmsnorm.mark_stats is mark_stats
    t = ttnn.from_torch(torch.zeros(1, 1, 32, 256, dtype=torch.bfloat16), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    assert stats_kind_of(t) is None
    assert mark_stats(t, "sums") is t
    assert stats_kind_of(t) == STATS_SUMS and TensorDesc.from_tensor(t).stats_kind == STATS_SUMS
    with pytest.raises(ValueError, match="stats kind"):
        mark_stats(t, "mean")


def test_deepseek_sums_into_the_sharded_post_caught_once_marked():
    # models/demos/deepseek_v3/tests/unit/test_rmsnorm.py::test_rmsnorm_post_all_gather: per-device sum(x^2) built on
    # the host, sharded onto one core, fed to the sharded post (which averages means): output off by 1/sqrt(896)
    grid = shard(WIDTH, (4, 7), (32, 32))
    x = TensorDesc((1, 1, 32, 896), memory_config=grid)
    raw = TensorDesc((1, 1, 32, 256), memory_config=DECODE.stats_memory_config)
    kw = dict(program_config=layouts.program_config_from_shard_spec(grid.shard_spec), compute_grid=(8, 8))
    assert rule_of(lambda: op_checks.check_post_all_gather(x, raw, **kw)) is None  # unmarked: nothing to go on
    marked = mark_stats(raw, "sums")
    assert marked.stats_kind == STATS_SUMS and raw.stats_kind is None
    assert rule_of(lambda: op_checks.check_post_all_gather(x, marked, **kw)) == "stats.kind_mismatch"
    assert rule_of(lambda: op_checks.check_post_all_gather(x, mark_stats(raw, "means"), **kw)) is None


# --- the L1 model's ttnn version --------------------------------------------------------------------------------------
@pytest.fixture
def fresh_version_warnings(monkeypatch):
    monkeypatch.setattr(l1_budget, "_warned_versions", set())
    lines = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    yield lines
    logger.remove(sink)


def test_l1_model_is_tagged_with_the_calibrated_version(fresh_version_warnings):
    assert l1_budget.L1_MODEL_TTNN_VERSION == "0.81.1" == l1_budget.installed_ttnn_version()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert l1_budget.check_l1_model_version() is True
    assert fresh_version_warnings == []


def test_other_ttnn_version_warns_once(monkeypatch, fresh_version_warnings):
    monkeypatch.setattr(l1_budget, "installed_ttnn_version", lambda: "0.82.0")
    with pytest.warns(l1_budget.L1ModelVersionWarning, match="calibrated on ttnn 0.81.1 but ttnn 0.82.0"):
        op_checks.check_pre_all_gather(TensorDesc((1, 1, 32, 1024)), compute_grid=(8, 8))  # the L1 rule runs
    assert any("0.82.0" in line for line in fresh_version_warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call with the same version stays quiet
        op_checks.check_pre_all_gather(TensorDesc((1, 1, 32, 1024)), compute_grid=(8, 8))
    with pytest.raises(RuleError, match=r"L1 model of ttnn 0\.81\.1"):
        op_checks.check_pre_all_gather(TensorDesc((1, 1, 32, 16384)), compute_grid=(8, 8))
