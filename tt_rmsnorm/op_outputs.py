"""The tensors the norm and CCL ops produce, described (`TensorDesc`): the stats of the pre, a gather's output and the
stats buffer of `fused_rms_minimal`. The planner sizes persistent buffers with them, the paths describe what each op
receives, and the rules (`tt_rmsnorm.rules.ccl_checks`) check buffers against them.
"""

from __future__ import annotations

import ttnn

from tt_rmsnorm.tensors import STATS_MEANS, STATS_SUMS, TensorDesc, describe
from tt_rmsnorm.tiles import TILE


def gathered_desc(x, dim: int, num_devices: int, memory_config=None) -> TensorDesc:
    """What gathering `x` on `dim` over `num_devices` returns (the persistent output buffer must have this spec)."""
    x = describe(x)
    shape = list(x.shape)
    shape[dim % x.rank] *= num_devices
    return TensorDesc(
        tuple(shape), x.dtype, x.layout, memory_config or x.memory_config, stats_kind=x.stats_kind, arch=x.arch
    )


def pre_stats_desc(x, *, dtype=ttnn.bfloat16, memory_config=None) -> TensorDesc:
    """The stats `ttnn.rms_norm_pre_all_gather(x, ...)` returns: [.., S, 32] sums (interleaved: `dtype`, the given or
    the input's memory config), or [1, 1, 32, 32] bfloat16 means on one L1 core, the input grid's first (sharded)."""
    x = describe(x)
    if not x.is_sharded:
        return TensorDesc(
            (*x.shape[:-1], TILE),
            dtype or ttnn.bfloat16,
            memory_config=memory_config or x.memory_config,
            stats_kind=STATS_SUMS,
            arch=x.arch,
        )
    start = x.shard_spec.grid.bounding_box().start
    return TensorDesc(
        (*x.shape[:-1], TILE),
        ttnn.bfloat16,
        memory_config=one_core_l1((start.x, start.y), TILE),
        stats_kind=STATS_MEANS,
        arch=x.arch,
    )


def fused_stats_desc(x, num_devices: int, compute_kernel_config=None) -> TensorDesc:
    """The stats buffer `fused_rms_minimal` needs for input `x`: [1, 1, 32, 32 * devices] TILE on the input grid's first
    core, in the accumulation format (float32 with fp32_dest_acc_en, else bfloat16)."""
    x = describe(x)
    start = x.shard_spec.grid.bounding_box().start
    return TensorDesc(
        (1, 1, TILE, TILE * num_devices),
        accumulation_dtype(compute_kernel_config),
        memory_config=one_core_l1((start.x, start.y), TILE * num_devices),
        arch=x.arch,
    )


def one_core_l1(core, width: int) -> ttnn.MemoryConfig:
    """A [32, width] width-sharded L1 config on one core: where the stats live."""
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(*core), ttnn.CoreCoord(*core))})
    spec = ttnn.ShardSpec(grid, [TILE, width], ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1, spec)


def accumulation_dtype(compute_kernel_config):
    """The dtype a compute config accumulates in: float32 with fp32_dest_acc_en, else bfloat16 (ttnn's default)."""
    fp32 = compute_kernel_config is not None and bool(compute_kernel_config.fp32_dest_acc_en)
    return ttnn.float32 if fp32 else ttnn.bfloat16
