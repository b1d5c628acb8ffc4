"""The rule table of ttnn 0.81.1's distributed RMSNorm ops, the error every rule raises, and the checks they share.

`RULES` lists every rule id the package raises with what it guards, and `PACKAGE_ONLY_RULES` the guards ttnn lacks
(it accepts, or crashes instead of raising). A violation raises `RuleError` (a ValueError) naming the rule, the value
seen and the fix; the ids are stable: tests and the agreement battery refer to them.

This module also owns the checks every op shares: a tensor on device, in TILE layout, of rank 4 and an allowed dtype;
the per-device width; epsilon; and the compute kernel config as the ops resolve it (the dst-register limit on
subblock_w, FLOAT32 needing fp32 accumulation). The rules live by concern beside it:

- `tt_rmsnorm.op_rules`: the entry points, one per op (`check_pre_all_gather`, `check_post_all_gather`,
  `check_rms_norm`, `check_all_gather`), each running the steps below in ttnn's order;
- `tt_rmsnorm.sharding_rules`: sharded inputs, program and output memory configs, the sharded factory's stats reduce;
- `tt_rmsnorm.operand_rules`: the residual, the gathered stats, the weight and the bias;
- `tt_rmsnorm.l1_budget`: the L1 models of the factories and the budget rules on them;
- `tt_rmsnorm.ccl_rules`: `all_gather_async` and `fused_rms_minimal`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ttnn

from tt_rmsnorm.errors import AccuracyWarning, RuleError  # noqa: F401  (re-exported for the rule modules)
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.tiles import TILE


# Package-only guards: ttnn accepts these (or crashes instead of raising); we reject on purpose.
PACKAGE_ONLY_RULES = {
    "input.on_device": "ttnn segfaults on a host-resident input tensor instead of raising (ttnn-findings #2)",
    "distributed.rank": "pre accepts rank 5 and returns a wrong-shaped stats tensor (ttnn-findings #5)",
    "distributed.width_multiple_of_32": "post divides sum(x^2) by the *padded* local width: a ragged width is biased",
    "bias.needs_weight": (
        "the interleaved post's kernel (rmsnorm_post_allgather.cpp) adds beta only inside its gamma branch: a bias "
        "without a weight is silently dropped there (the sharded post and rms_norm kernels apply it)"
    ),
    "stats.kind_mismatch": "sharded pre stores means, interleaved post expects sums (and the reverse): off by W_local",
    "stats.rows_match": "the sharded post never compares stats rows/batch with the input's (ttnn-findings #3)",
    "program_config.ignored": "a sharded program config on an interleaved input is silently ignored by pre/post",
    "sharded_pre.dtype_ignored": "the sharded pre always writes bfloat16 stats and ignores `dtype`",
    "use_2d_core_grid.ignored": "use_2d_core_grid only exists on the interleaved path; the sharded path ignores it",
    # tt_rmsnorm.ccl_rules: all_gather_async and fused_rms_minimal
    "all_gather_async.distinct_semaphores": "ttnn accepts one handle passed twice; cycling needs distinct handles",
    "all_gather_async.persistent_truncated": "ttnn accepts a buffer smaller than the gather and returns it truncated",
    "fused.cluster_axis": "fused_rms_minimal reads any cluster_axis other than 0 as the column axis (2 is accepted)",
    "fused.num_devices": "fused_rms_minimal accepts a gather axis with one device (ttnn.rms_norm is the right call)",
    "fused.num_links": "fused_rms_minimal accepts num_links 0 and more links than the fabric has (4 on T3000's 2)",
    "fused.stats_layout": "fused_rms_minimal accepts a ROW_MAJOR stats buffer; the docstring and kernels want TILE",
    "fused.stats_width": "fused_rms_minimal takes the device count from stats width / 32 and accepts any width",
    "fused.stats_core": "the stats circular buffer sits on the input grid's first core; ttnn accepts stats elsewhere",
    "fused.persistent_output": "persistent_output_tensor is returned as the output: ttnn accepts a (32, 32) buffer",
    "sharded.stats_gather_burst": (
        "ttnn runs it and returns wrong rows: tt-metal's test_rms_norm_bad_user_repro (576 rows width-sharded over 8x8 "
        "cores, fp32 accumulation) is the one sharded RMSNorm case whose per-worker stats gather exceeds one NOC burst"
    ),
    "epsilon.non_negative": "ttnn takes any epsilon, but rsqrt(E[x^2] + eps) is NaN for rows with E[x^2] < -eps",
    "all_gather.composite_l1_bound": (
        "ttnn's composite gather of an L1 input stages broadcast copies and concat buffers in L1 that the package "
        "bounds from above (tt_rmsnorm.ccl_l1); a gather beyond the bound may still fit, the package refuses it"
    ),
}


# Every rule id the package raises, with what it guards. The test suite has a violating case for each.
RULES = {
    **{f"{t}.on_device": f"{t} tensor stored on device" for t in ("input", "residual", "stats", "weight", "bias")},
    **{f"{t}.layout": f"{t} tensor in TILE layout" for t in ("input", "residual", "stats")},
    "distributed.rank": "distributed ops take rank-4 tensors",
    "pre.input.dtype": "pre input is bfloat16, bfloat8_b or float32",
    "post.input.dtype": "post input is bfloat16, bfloat8_b or float32",
    "rms_norm.input.dtype": "rms_norm input is bfloat16, bfloat8_b or float32",
    "stats.dtype": "interleaved post stats are bfloat16, bfloat8_b or float32",
    "weight.dtype": "weight (RM, or TILE on the interleaved post) is bfloat16 or float32",
    "bias.dtype": "bias (RM, or TILE on the interleaved post) is bfloat16 or float32",
    "use_2d_core_grid.ignored": "use_2d_core_grid only on the interleaved path",
    "input.height_sharded": "no height sharding",
    "input.shard_grid_on_device": "shard grid inside the device's compute grid",
    "sharded.height_32": "sharded distributed input is one tile row high",
    "sharded.program_config": "sharded input needs a sharded program config",
    "program_config.block_w": "block_w >= 1",
    "program_config.subblock_w_divides": "subblock_w divides block_w",
    "program_config.subblock_w_limit": "subblock_w within the dst-register limit",
    "program_config.welford": "no Welford for RMSNorm (sharded config)",
    "program_config.grid_fits_shards": "shard grid fits the program config grid",
    "program_config.block_h_shard": "block_h * 32 == shard height",
    "program_config.block_w_shard": "block_w * 32 == shard width",
    "program_config.block_w_cores": "1-D: block_w == ceil(Wt / cores)",
    "program_config.block_2d": "2-D: block_w == ceil(Wt / columns), block_h == Ht / rows",
    "program_config.ignored": "no sharded program config on an interleaved input",
    "memory_config.sharded_output": "sharded input, sharded output",
    "memory_config.matches_input": "output buffer type and layout equal the input's",
    "memory_config.interleaved_output": "interleaved input, interleaved output",
    "memory_config.shard_height": "output shard height equals the input's",
    "memory_config.shard_fits": "a sharded output memory_config's shards cover the output on its cores",
    "rms_norm.output_shard_holds_block": "sharded rms_norm: each output shard holds one input shard's tiles",
    "sharded.reduce_workers": "the sharded factory can place its reduce workers on the shard grid",
    "sharded_pre.dtype_ignored": "the sharded pre writes bfloat16 only",
    "residual.shape": "residual shape equals the input's",
    "residual.same_sharding": "residual sharded as the input",
    "residual.interleaved": "interleaved input, interleaved residual (pre)",
    "pre.welford": "no Welford in the pre",
    "post.welford": "no Welford in the post",
    "rms_norm.welford": "no Welford in rms_norm (default config)",
    "pre.fp32_needs_fp32_acc": "FLOAT32 pre input needs fp32_dest_acc_en",
    "post.fp32_needs_fp32_acc": "FLOAT32 post input or stats need fp32_dest_acc_en",
    "pre.l1_budget": "the interleaved pre's row fits one core's L1",
    "post.l1_budget": "the interleaved post's row fits one core's L1",
    "sharded.l1_budget": "the sharded factory's buffers fit below the L1 shards of its tensors",
    "rms_norm.l1_budget": "the interleaved rms_norm's buffers fit in one core's L1",
    "stats.present": "post needs stats",
    "stats.width": "stats padded width % 32 == 0",
    "epsilon.non_negative": "epsilon >= 0",
    "distributed.width_multiple_of_32": "per-device width % 32 == 0",
    "stats.kind_mismatch": "sums for the interleaved post, means for the sharded post",
    "stats.sharded": "sharded post stats are sharded",
    "stats.bf16_sharded": "sharded post stats are bfloat16",
    "stats.one_core": "sharded post stats on one core",
    "stats.rows_match": "sharded post stats rows equal the input's",
    "post.stats_dims": "interleaved post stats dims 0-2 equal the input's",
    "weight.tile_width": "TILE weight width matches the input",
    "bias.tile_width": "TILE bias width matches the input",
    "weight.tile_height": "TILE weight is one tile high",
    "bias.tile_height": "TILE bias is one tile high",
    "weight.row_major_shape": "RM weight is [1, 1, W/32, 32]",
    "bias.row_major_shape": "RM bias is [1, 1, W/32, 32]",
    "bias.needs_weight": "no bias without weight on the interleaved post",
    "sharded.stats_gather_burst": "sharded rms_norm: each reduce worker's stats tiles fit one NOC burst",
    "bias.same_layout": "weight and bias share a layout (sharded post, rms_norm)",
    "rms_norm.sharded_config_interleaved": "rms_norm: no sharded config on an interleaved input",
    "all_gather.dim": "gather dim within the rank",
    "all_gather.cluster_axis": "cluster_axis is an axis of the mesh",
    "all_gather.num_devices": "more than one device on the gather axis",
    "all_gather.sharded_needs_memory_config": "sharded input needs an output memory_config",
    # tt_rmsnorm.ccl_rules: experimental.all_gather_async (dim, cluster_axis, devices: the all_gather ids above)
    "all_gather_async.semaphore_count": "exactly 2 gather semaphores",
    "all_gather_async.distinct_semaphores": "gather and barrier semaphores are distinct handles",
    "all_gather_async.num_links": "1 <= num_links <= the fabric's links (and the grid rows)",
    "all_gather_async.persistent_on_device": "persistent output buffer on device",
    "all_gather_async.persistent_shape": "persistent buffer: input rank and dims, gather dim <= input * devices",
    "all_gather_async.persistent_truncated": "persistent buffer holds the whole gather",
    "all_gather_async.persistent_dtype": "persistent buffer dtype equals the input's",
    "all_gather_async.persistent_layout": "persistent buffer layout equals the input's",
    "all_gather_async.persistent_memory_config": "persistent buffer memory config equals memory_config or the input's",
    # tt_rmsnorm.ccl_rules: fused_rms_minimal
    "fused.cluster_axis": "cluster_axis is an axis of the mesh",
    "fused.num_devices": "more than one device on the gather axis",
    "fused.semaphore": "one global semaphore",
    "fused.stats_required": "a stats buffer is given",
    "fused.weight_required": "a weight is given",
    "fused.input_shape": "input (1, 1, M <= 32, N % 32 == 0)",
    "fused.input.dtype": "input is bfloat16, bfloat8_b or float32",
    "fused.input_sharded": "input WIDTH_SHARDED in L1",
    "fused.input_orientation": "input shards in ROW_MAJOR orientation",
    "fused.semaphore_grid": "the semaphore's grid contains the input's shard grid",
    "fused.output_memory_config": "output memory config sharded, ROW_MAJOR orientation",
    "fused.program_config": "a LayerNormShardedMultiCoreProgramConfig",
    "fused.grid_fits_shards": "shard grid fits the program config grid",
    "fused.block_w": "block_w == ceil(Wt / cores), block_w * 32 == shard width",
    "fused.subblock_w": "subblock_w divides block_w",
    "fused.subblock_w_limit": "subblock_w within the dst-register limit",
    "fused.weight_layout": "weight is ROW_MAJOR",
    "fused.stats_dtype": "stats dtype is the accumulation format",
    "fused.stats_one_core": "stats sharded in L1 on one core",
    "fused.stats_layout": "stats in TILE layout",
    "fused.stats_width": "stats 32 * devices wide",
    "fused.stats_core": "stats on the input grid's first core",
    "fused.persistent_output": "persistent output has the output's shape, memory config and dtype",
    "fused.num_links": "1 <= num_links <= the fabric's links",
    "fused.reduce_workers": "the reduce workers fit the shard grid (not one core wide off x = 0)",
    "fused.l1_budget": "static circular buffers end below the tensors' L1 buffers (tt_rmsnorm.ccl_l1)",
    "all_gather.empty": "the gathered tensor has elements",
    "all_gather.l1_budget": "circular buffer, semaphores, L1 input and output fit a bank (ccl_l1)",
    "all_gather.composite_l1_bound": "the composite gather of an L1 input stays within the package's L1 bound",
}


PRE_INPUT_DTYPES = (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)
STATS_DTYPES = (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)
GAMMA_DTYPES = (ttnn.bfloat16, ttnn.float32)
DEFAULT_COMPUTE_GRID = (8, 8)


def _name(x) -> str:
    return str(x).rsplit(".", 1)[-1] if x is not None else "None"


def _fail(rule: str, message: str, seen, fix: str):
    raise RuleError(rule, message, seen, fix)


# Compute kernel config as the ops resolve it (defaults: rmsnorm_default_compute_config = HiFi4, approx, fp32 off).
@dataclass(frozen=True)
class _Compute:
    fp32_dest_acc_en: bool
    dst_full_sync_en: bool


def _compute(cfg) -> _Compute:
    if cfg is None:
        return _Compute(False, False)
    return _Compute(bool(cfg.fp32_dest_acc_en), bool(getattr(cfg, "dst_full_sync_en", False)))


def max_subblock_w(cfg) -> int:
    """The dst-register limit on subblock_w (sharded factory `assert_subblock_compute_config_compatible`)."""
    c = _compute(cfg)
    return {(False, False): 8, (True, False): 4, (False, True): 16, (True, True): 8}[
        (c.fp32_dest_acc_en, c.dst_full_sync_en)
    ]


def _is_sharded_pc(pc) -> bool:
    return isinstance(pc, ttnn.LayerNormShardedMultiCoreProgramConfig)


def _bbox_extent(shard_spec) -> tuple[int, int]:
    box = shard_spec.grid.bounding_box()
    return box.end.x - box.start.x + 1, box.end.y - box.start.y + 1


def _check_on_device(t: TensorDesc, what: str):
    if not t.on_device:
        _fail(
            "input.on_device" if what == "input" else f"{what}.on_device",
            f"{what} tensor must be on device (ttnn crashes on a host input)",
            "host storage",
            f"move it first: ttnn.to_device({what}, mesh_device) or ttnn.from_torch(..., device=mesh_device)",
        )


def _check_tile(t: TensorDesc, what: str):
    if t.layout != ttnn.TILE_LAYOUT:
        _fail(
            f"{what}.layout",
            f"{what} tensor must be in TILE layout",
            _name(t.layout),
            f"ttnn.to_layout({what}, ttnn.TILE_LAYOUT)",
        )


def _check_rank4(t: TensorDesc, op: str):
    if t.rank != 4:
        _fail(
            "distributed.rank",
            f"{op} needs a rank-4 input [batch, 1, seq, hidden_local] (it indexes dim 3)",
            f"rank {t.rank} shape {t.shape}",
            "reshape to 4 dims, e.g. x.reshape(1, 1, seq, hidden_local)",
        )


def _check_dtype(t: TensorDesc, allowed, rule: str, what: str):
    if t.dtype not in allowed:
        _fail(
            rule,
            f"{what} dtype must be one of {[_name(d) for d in allowed]}",
            _name(t.dtype),
            f"convert it, e.g. ttnn.typecast({what}, ttnn.bfloat16)",
        )


def _check_width_multiple_of_32(x: TensorDesc):
    if x.width % TILE:
        _fail(
            "distributed.width_multiple_of_32",
            "the per-device width must be a multiple of 32: the post divides sum(x^2) by the padded width",
            x.width,
            "shard the hidden dim so each device holds a multiple of 32 "
            "(pad the hidden size with zeros and the weight with ones)",
        )


def _check_fp32_needs_acc(tensors: dict, compute_kernel_config, op: str):
    if _compute(compute_kernel_config).fp32_dest_acc_en:
        return
    for what, t in tensors.items():
        if t is not None and t.dtype == ttnn.float32:
            _fail(
                f"{op}.fp32_needs_fp32_acc",
                f"the interleaved {op} with a FLOAT32 {what} requires fp32_dest_acc_en=True",
                f"{what} FLOAT32 with fp32_dest_acc_en=False",
                "pass compute_kernel_config=tt_rmsnorm.configs.compute_kernel_config(fp32_dest_acc_en=True)",
            )


def _check_epsilon(epsilon):
    if epsilon is not None and epsilon < 0:
        _fail("epsilon.non_negative", "epsilon must be >= 0", epsilon, "use e.g. 1e-5 (Llama) or 1e-6")
