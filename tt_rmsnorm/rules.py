"""Every rule of ttnn 0.81.1's distributed RMSNorm ops, checked in Python before anything reaches a device.

A mirror of the validation of `rms_norm_pre_all_gather`, `rms_norm_post_all_gather` (interleaved and sharded paths),
`rms_norm` and the `all_gather` arguments, as read from tt-metal's op validation and program factories and as ttnn
actually behaved on mock devices (the agreement battery, the fuzzer and the conformance corpus in tests/), plus guards
ttnn lacks (`PACKAGE_ONLY_RULES`).

Each check takes real ttnn tensors or `TensorDesc`s and raises `RuleError` (a ValueError) naming the rule, the value
seen and the fix. The rule ids are stable: tests and the agreement battery refer to them.
"""

from __future__ import annotations

import importlib.metadata
import math
import warnings
from dataclasses import dataclass

import ttnn
from loguru import logger

from tt_rmsnorm.tensors import DTYPE_BYTES, STATS_MEANS, STATS_SUMS, TILE_BYTES, TensorDesc, describe
from tt_rmsnorm.tiles import TILE


class RuleError(ValueError):
    """A violated rule: `rule` (stable id), `seen` (the offending value) and `fix` (what to do)."""

    def __init__(self, rule: str, message: str, seen, fix: str):
        self.rule, self.seen, self.fix = rule, seen, fix
        super().__init__(f"[{rule}] {message}; got {seen}. Fix: {fix}")


class AccuracyWarning(UserWarning):
    """A requested option is accepted but known to lose accuracy."""


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

# Every rule id this module raises, with what it guards. The test suite has a violating case for each.
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

# L1 of a Wormhole Tensix core (soc descriptor: worker_l1_size) and the allocator's base address. The base is calibrated
# on a mock device: the interleaved pre at W=8192 bf16 asked for 1,682,784 B (ttnn-findings #1) and its circular buffers
# (below) sum to 1,576,960 B.
L1_SIZE = 1_499_136
L1_BASE = 105_824
# The ttnn release the L1 model (L1_BASE and the circular-buffer sums of pre_l1_bytes / post_l1_bytes) is calibrated on.
# Other releases size the factories differently (newer pre factories stream wide rows in chunks), so the limits move.
L1_MODEL_TTNN_VERSION = "0.81.1"


class L1ModelVersionWarning(UserWarning):
    """The installed ttnn is not the release the L1 model was calibrated on: its L1 verdicts may be wrong."""


def installed_ttnn_version() -> str | None:
    try:
        return importlib.metadata.version("ttnn")
    except importlib.metadata.PackageNotFoundError:
        return getattr(ttnn, "__version__", None)


_warned_versions: set[str | None] = set()


def check_l1_model_version() -> bool:
    """True when the installed ttnn is L1_MODEL_TTNN_VERSION; otherwise warns (loguru and `L1ModelVersionWarning`),
    once per installed version, and returns False. The L1 rules still run: their verdicts are those of the calibrated
    release."""
    installed = installed_ttnn_version()
    if installed == L1_MODEL_TTNN_VERSION:
        return True
    if installed not in _warned_versions:
        _warned_versions.add(installed)
        msg = (
            f"tt_rmsnorm's L1 model is calibrated on ttnn {L1_MODEL_TTNN_VERSION} but ttnn {installed} is installed: "
            "the pre.l1_budget / post.l1_budget verdicts may accept calls that do not fit or refuse calls that do"
        )
        logger.warning(msg)
        warnings.warn(msg, L1ModelVersionWarning, stacklevel=3)
    return False


def _name(x) -> str:
    return str(x).rsplit(".", 1)[-1] if x is not None else "None"


def _fail(rule: str, message: str, seen, fix: str):
    raise RuleError(rule, message, seen, fix)


# ---------------------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------------------
# Shared checks.


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


def _check_not_height_sharded(t: TensorDesc, what: str):
    if t.memory_layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
        _fail(
            f"{what}.height_sharded",
            f"{what}: height-sharded tensors are not supported by the layernorm op",
            "HEIGHT_SHARDED",
            "use WIDTH_SHARDED or BLOCK_SHARDED (tt_rmsnorm.configs.sharded_memory_config)",
        )


def _bbox_extent(shard_spec) -> tuple[int, int]:
    box = shard_spec.grid.bounding_box()
    return box.end.x - box.start.x + 1, box.end.y - box.start.y + 1


def _check_shard_grid_on_device(t: TensorDesc, compute_grid, what: str):
    box = t.shard_spec.grid.bounding_box()
    if box.end.x >= compute_grid[0] or box.end.y >= compute_grid[1]:
        _fail(
            f"{what}.shard_grid_on_device",
            f"{what} shard grid must lie inside the device's compute grid {compute_grid[0]}x{compute_grid[1]}",
            f"grid up to core ({box.end.x},{box.end.y})",
            "choose a grid from mesh_device.compute_with_storage_grid_size() (tt_rmsnorm.configs picks one)",
        )


def _check_sharded_input(x: TensorDesc, compute_grid, distributed: bool):
    _check_not_height_sharded(x, "input")
    _check_shard_grid_on_device(x, compute_grid, "input")
    if distributed and x.padded_shape[-2] != TILE:
        _fail(
            "sharded.height_32",
            "the sharded distributed path needs padded height 32 (decode: <= 32 rows)",
            f"padded height {x.padded_shape[-2]}",
            "use an interleaved input (prefill path) or at most 32 rows",
        )


def _check_sharded_program_config(x: TensorDesc, pc, compute_kernel_config, distributed: bool):
    """tt-facts §3.2: a LayerNormShardedMultiCoreProgramConfig against the input's shard spec."""
    if pc.block_w < 1:
        _fail("program_config.block_w", "block_w must be >= 1", pc.block_w, "block_w = shard width / 32")
    if pc.subblock_w < 1 or pc.block_w % pc.subblock_w != 0:
        _fail(
            "program_config.subblock_w_divides",
            "block_w must be divisible by subblock_w",
            f"block_w={pc.block_w} subblock_w={pc.subblock_w}",
            "pick subblock_w as a divisor of block_w",
        )
    limit = max_subblock_w(compute_kernel_config)
    if pc.subblock_w > limit:
        c = _compute(compute_kernel_config)
        _fail(
            "program_config.subblock_w_limit",
            f"subblock_w must be <= {limit} with fp32_dest_acc_en={c.fp32_dest_acc_en}, "
            f"dst_full_sync_en={c.dst_full_sync_en}",
            pc.subblock_w,
            f"use the largest divisor of block_w <= {limit} (tt_rmsnorm.configs.sharded_program_config does)",
        )
    if pc.use_welford:
        _fail(
            "program_config.welford",
            "Welford is not supported for RMSNorm",
            "use_welford=True",
            "set use_welford=False",
        )
    grid = pc.compute_with_storage_grid_size
    ex, ey = _bbox_extent(x.shard_spec)
    if ex > grid.x or ey > grid.y:
        _fail(
            "program_config.grid_fits_shards",
            "the input's shard grid (its bounding box) must fit compute_with_storage_grid_size",
            f"shard grid {ex}x{ey} vs program grid {grid.x}x{grid.y}",
            f"compute_with_storage_grid_size=({ex}, {ey})",
        )
    shard_h, shard_w = x.shard_spec.shape
    if pc.block_h * TILE != shard_h:
        _fail(
            "program_config.block_h_shard",
            "block_h * 32 must equal the shard height",
            f"block_h={pc.block_h}, shard height {shard_h}",
            f"block_h={shard_h // TILE}",
        )
    if pc.block_w * TILE != shard_w:
        _fail(
            "program_config.block_w_shard",
            "block_w * 32 must equal the shard width",
            f"block_w={pc.block_w}, shard width {shard_w}",
            f"block_w={shard_w // TILE}",
        )
    mt, kt = x.physical_rows // TILE, x.padded_width // TILE
    if x.physical_rows == pc.block_h * TILE:  # the whole height in one block: 1-D multicast
        n = x.shard_spec.grid.num_cores()
        if pc.block_w != math.ceil(kt / n):
            _fail(
                "program_config.block_w_cores",
                "block_w must equal ceil(Wt / shard cores)",
                f"block_w={pc.block_w}, Wt={kt}, cores={n}",
                f"block_w={math.ceil(kt / n)}",
            )
    else:
        row_major = x.shard_spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
        across, down = (ex, ey) if row_major else (ey, ex)
        if pc.block_w != math.ceil(kt / across) or mt % down or pc.block_h != mt // down:
            _fail(
                "program_config.block_2d",
                "block sharding needs block_w = ceil(Wt / grid columns) and block_h = Ht / grid rows",
                f"block_w={pc.block_w} block_h={pc.block_h}, Wt={kt}, Ht={mt}, grid {across}x{down}",
                f"block_w={math.ceil(kt / across)}, block_h={mt // down if down else '?'}",
            )


# One NOC packet on Wormhole (NOC_MAX_BURST_SIZE). The sharded factory's reduce workers read and multicast their
# share of the per-row stats; the sender kernel takes a separate path above this size.
NOC_MAX_BURST_BYTES = 8192


def sharded_reduce_worker_tiles(x: TensorDesc, program_grid, block_ht: int) -> int:
    """Stats tiles that each all-to-all reduce worker of ttnn's sharded layernorm factory gathers and multicasts
    (its GridParams / WorkerDistribution): ceil(block_ht / n), n = the cores sharing a row's reduce; 0 if no
    core-to-core reduce happens. 1-D (whole height in one shard) width sharding on a grid of several rows reduces in
    two stages, first along each row of cores."""
    spec = x.shard_spec
    gx, gy = _bbox_extent(spec)
    mcast_1d = x.physical_rows == block_ht * TILE
    row_wise = spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
    num_blocks = spec.grid.num_cores() if mcast_1d else (gx if row_wise else gy)
    if num_blocks <= 1:
        return 0
    two_stage = mcast_1d and (
        (row_wise and 1 < gx <= program_grid[0] and gy > 1) or (not row_wise and gx > 1 and gy == program_grid[1])
    )
    sharing = (gx if row_wise else gy) if two_stage else num_blocks
    return -(-block_ht // sharing)


def _block_sharded_fix(x: TensorDesc, compute_grid, fp32: bool) -> str:
    """The BLOCK_SHARDED layout and program config with the most cores whose reduce workers stay within one burst."""
    ht, wt = x.physical_rows // TILE, x.padded_width // TILE
    tile = TILE_BYTES[ttnn.float32 if fp32 else ttnn.bfloat16]
    best = None
    for gy in range(1, compute_grid[1] + 1):
        for gx in range(1, compute_grid[0] + 1):
            if ht % gy or wt % gx or -(-(ht // gy) // gx) * tile > NOC_MAX_BURST_BYTES:
                continue
            if best is None or gx * gy > best[0] * best[1]:
                best = (gx, gy)
    if best is None:
        return "shard the rows over more cores (BLOCK_SHARDED) so each core holds fewer tile rows"
    gx, gy = best
    block_h, block_w = ht // gy, wt // gx
    limit = max_subblock_w(_Compute(fp32, False))
    subblock_w = max(d for d in range(1, min(block_w, limit) + 1) if block_w % d == 0)
    return (
        f"block-shard the input: BLOCK_SHARDED L1 on a {gx}x{gy} grid, shard [{block_h * TILE}, {block_w * TILE}], "
        "with "
        f"program_config=LayerNormShardedMultiCoreProgramConfig(compute_with_storage_grid_size=({gx}, {gy}), "
        f"subblock_w={subblock_w}, block_h={block_h}, block_w={block_w}, inplace=False)"
    )


def _check_stats_gather(x: TensorDesc, program_config, compute_kernel_config, compute_grid):
    """sharded.stats_gather_burst: see PACKAGE_ONLY_RULES. Without a program config ttnn derives one from the shard
    spec (create_layernorm_program_config: bounding-box grid, block_h = shard height / 32)."""
    if _is_sharded_pc(program_config):
        grid = (program_config.compute_with_storage_grid_size.x, program_config.compute_with_storage_grid_size.y)
        block_ht = program_config.block_h
    else:
        grid, block_ht = _bbox_extent(x.shard_spec), x.shard_spec.shape[0] // TILE
    if compute_kernel_config is None:  # rms_norm's default accumulates in fp32 for a FLOAT32 input only
        fp32 = x.dtype == ttnn.float32
    else:
        fp32 = _compute(compute_kernel_config).fp32_dest_acc_en
    tiles = sharded_reduce_worker_tiles(x, grid, block_ht)
    tile = TILE_BYTES[ttnn.float32 if fp32 else ttnn.bfloat16]
    if tiles * tile > NOC_MAX_BURST_BYTES:
        alt = ""
        if fp32 and tiles * TILE_BYTES[ttnn.bfloat16] <= NOC_MAX_BURST_BYTES:
            alt = "; or keep this sharding with fp32_dest_acc_en=False (bfloat16 stats tiles fit one burst)"
        _fail(
            "sharded.stats_gather_burst",
            f"each stats-reduce worker would move {tiles} {'fp32' if fp32 else 'bf16'} stats tiles ({tiles * tile} B, "
            f"more than one {NOC_MAX_BURST_BYTES} B NOC burst); ttnn runs this sharding and returns wrong rows "
            "(tt-metal's test_rms_norm_bad_user_repro)",
            f"block_h={block_ht} on a {_bbox_extent(x.shard_spec)[0]}x{_bbox_extent(x.shard_spec)[1]} shard grid",
            _block_sharded_fix(x, compute_grid, fp32) + alt,
        )


def _check_shard_fits(padded_shape, memory_config, what: str) -> None:
    """ttnn's tensor-spec validation of a sharded memory config against the tensor it will hold (physical 2-D view:
    all padded dims but the last fold into the height)."""
    if memory_config is None or not memory_config.is_sharded() or memory_config.shard_spec is None:
        return
    spec = memory_config.shard_spec
    height, width = math.prod(padded_shape[:-1]), padded_shape[-1]
    shard_h, shard_w = spec.shape
    cores, layout = spec.grid.num_cores(), memory_config.memory_layout
    problem = None
    if layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
        if shard_w != width or math.ceil(height / shard_h) > cores:
            problem = f"height sharding needs shard width {width} and at most {cores} shards of {shard_h} rows"
    elif layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED:
        if shard_h != height or math.ceil(width / shard_w) > cores:
            problem = f"width sharding needs shard height {height} and at most {cores} shards of width {shard_w}"
    else:
        ex, ey = _bbox_extent(spec)
        rows, cols = (ey, ex) if spec.orientation == ttnn.ShardOrientation.ROW_MAJOR else (ex, ey)
        if math.ceil(height / shard_h) > rows or math.ceil(width / shard_w) > cols:
            problem = f"block sharding needs at most {rows} x {cols} shards"
    if problem:
        _fail(
            "memory_config.shard_fits",
            f"the {what}'s sharded memory_config does not fit a {height} x {width} tensor: {problem}",
            f"shard {list(spec.shape)} on {cores} cores, {_name(layout)}",
            "derive the shard shape from the output shape (tt_rmsnorm.configs.sharded_memory_config)",
        )


def _check_reduce_workers(x: TensorDesc, block_ht: int, compute_grid) -> None:
    """The sharded factory places its all-to-all reduce workers with tt-metal's `num_cores_to_corerangeset`, which
    requires each start core inside the (origin-shifted) shard grid and enough cores after it. One tile-row blocks
    (1-D multicast) are laid out from core (0, 0) in the shard orientation; a COL_MAJOR grid one core high, and a
    ROW_MAJOR grid one core wide that does not start at x = 0, leave a start core outside the grid."""
    spec = x.shard_spec
    if x.physical_rows != block_ht * TILE:  # 2-D blocks: plain rectangles, no work split
        return
    box = spec.grid.bounding_box()
    gx, gy = _bbox_extent(spec)
    row_wise = spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
    nb = spec.grid.num_cores()
    two_stage = nb == gx * gy and (
        (row_wise and 1 < gx <= compute_grid[0] and gy > 1) or (not row_wise and gx > 1 and gy == compute_grid[1])
    )
    per = math.ceil(block_ht / ((gx if row_wise else gy) if two_stage else nb))
    first = math.ceil(block_ht / per)
    n_all = first * ((gy if row_wise else gx) if two_stage else 1)
    n_none = nb - n_all
    all_grid = ((first, gy) if row_wise else (gx, first)) if two_stage else (gx, gy)

    def nth(i, grid):
        return (i % grid[0], i // grid[0]) if row_wise else (i // grid[1], i % grid[1])

    calls = [((0, 0), n_all, all_grid)]
    if nb > 1:
        if not row_wise:
            start = (0, 1)
        elif two_stage:
            start = (0, 1) if all_grid[0] == 1 else (1, 0)
        else:
            start = (0, 1) if box.end.x == 0 else (1, 0)
        calls.append((start, n_all - 1, all_grid))
    if n_none > 0 and not two_stage:
        ex, ey = nth(n_all - 1, all_grid)
        if row_wise:
            start = (0, ey + 1) if ex == box.end.x else (ex + 1, ey)
        else:
            start = (ex + 1, 0) if ey == box.end.y else (ex, ey + 1)
        calls.append((start, n_none, (gx, gy)))
    for (sx, sy), target, (nx, ny) in calls:
        inside = sx < nx and sy < ny
        available = ((ny - 1 - sy) * nx + nx - sx) if row_wise else ((nx - 1 - sx) * ny + ny - sy)
        if not inside or target > available:
            _fail(
                "sharded.reduce_workers",
                "ttnn's sharded factory cannot place its reduce workers on this shard grid",
                f"{_name(spec.orientation)} grid {gx}x{gy} from core ({box.start.x},{box.start.y}), start core "
                f"({sx},{sy}) for {target} cores",
                "use ROW_MAJOR orientation on a grid that starts at x = 0 (tt_rmsnorm.configs.sharded_memory_config)",
            )


def _check_interleaved_program_config(program_config, welford_rule: str, welford_message: str) -> None:
    """The interleaved pre/post take a default (non-sharded) program config without Welford; each op words its own
    Welford error."""
    if program_config is None:
        return
    if _is_sharded_pc(program_config):
        _fail(
            "program_config.ignored",
            "a sharded program config on an interleaved input is silently ignored",
            "LayerNormShardedMultiCoreProgramConfig",
            "omit program_config or use ttnn.LayerNormDefaultProgramConfig()",
        )
    if program_config.use_welford:
        _fail(welford_rule, welford_message, "use_welford=True", "LayerNormDefaultProgramConfig(use_welford=False)")


def _check_output_memory_config(x: TensorDesc, memory_config):
    if memory_config is None:
        return
    if x.is_sharded:
        if not memory_config.is_sharded() or memory_config.memory_layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
            _fail(
                "memory_config.sharded_output",
                "sharded inputs require a WIDTH/BLOCK-sharded output memory_config",
                _name(memory_config.memory_layout),
                "omit memory_config (the input's is used) or pass a sharded one",
            )
        if memory_config.buffer_type != x.memory_config.buffer_type or memory_config.memory_layout != x.memory_layout:
            _fail(
                "memory_config.matches_input",
                "output and input buffer types and memory layouts must match",
                f"{_name(memory_config.buffer_type)}/{_name(memory_config.memory_layout)} vs input "
                f"{_name(x.memory_config.buffer_type)}/{_name(x.memory_layout)}",
                "use the input's memory layout and buffer type",
            )
    elif memory_config.is_sharded():
        _fail(
            "memory_config.interleaved_output",
            "an interleaved input gives an interleaved output; a sharded memory_config is rejected",
            _name(memory_config.memory_layout),
            "use ttnn.DRAM_MEMORY_CONFIG or ttnn.L1_MEMORY_CONFIG, then reshard the result",
        )


def _check_residual(x: TensorDesc, residual: TensorDesc | None, sharded_residual_ok: bool = False):
    """`sharded_residual_ok`: rms_norm reads a residual through its buffer's own layout, so an interleaved input may
    take a sharded residual there (the pre may not)."""
    if residual is None:
        return
    _check_on_device(residual, "residual")
    _check_tile(residual, "residual")
    if residual.shape != x.shape or residual.padded_shape != x.padded_shape:
        _fail(
            "residual.shape",
            "input and residual logical and padded shapes must match",
            f"residual {residual.shape}/{residual.padded_shape} vs input {x.shape}/{x.padded_shape}",
            "pass a residual of the input's shape",
        )
    if x.is_sharded:
        if not residual.is_sharded or residual.memory_config != x.memory_config:
            _fail(
                "residual.same_sharding",
                "with a sharded input the residual must be sharded with the same shard spec and memory config",
                _name(residual.memory_layout),
                "ttnn.to_memory_config(residual, x.memory_config())",
            )
    elif residual.is_sharded and not sharded_residual_ok:
        _fail(
            "residual.interleaved",
            "with an interleaved input the residual must be interleaved",
            _name(residual.memory_layout),
            "ttnn.to_memory_config(residual, ttnn.DRAM_MEMORY_CONFIG)",
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


def _check_width_multiple_of_32(x: TensorDesc):
    if x.width % TILE:
        _fail(
            "distributed.width_multiple_of_32",
            "the per-device width must be a multiple of 32: the post divides sum(x^2) by the padded width",
            x.width,
            "shard the hidden dim so each device holds a multiple of 32 "
            "(pad the hidden size with zeros and the weight with ones)",
        )


def _check_bias_needs_weight(weight, bias):
    """Only the interleaved post loses a lone bias: its compute kernel adds beta inside the gamma branch. The sharded
    post (layernorm_sharded_post_allgather.cpp) and rms_norm (layernorm.cpp, layernorm_sharded.cpp) add beta to the
    normalised x when there is no gamma; tt-metal's test_rms_norm_sharded_with_bias_only runs that."""
    if bias is not None and weight is None:
        _fail(
            "bias.needs_weight",
            "a bias given without a weight is silently dropped by the interleaved rms_norm_post_all_gather",
            "bias given, weight None",
            "pass weight (ones if you only want the bias)",
        )


def _warn_2d_core_grid(use_2d_core_grid, sharded: bool):
    if not use_2d_core_grid:
        return
    if sharded:
        _fail(
            "use_2d_core_grid.ignored",
            "use_2d_core_grid applies to the interleaved path only and is ignored for sharded inputs",
            True,
            "drop use_2d_core_grid",
        )
    msg = (
        "use_2d_core_grid=True has a known accuracy bug (tt-metal #35435: bad PCC at seq 128, hidden 8192); "
        "default is False"
    )
    logger.warning(msg)
    warnings.warn(msg, AccuracyWarning, stacklevel=3)


def _check_gamma(x: TensorDesc, g: TensorDesc | None, what: str, path: str):
    """Weight/bias rules. path: 'interleaved_post' | 'sharded' (sharded post and rms_norm)."""
    if g is None:
        return
    _check_on_device(g, what)
    if g.layout == ttnn.TILE_LAYOUT:
        if path == "interleaved_post":
            if g.width != x.width or g.padded_width != x.padded_width:
                _fail(
                    f"{what}.tile_width",
                    f"a TILE {what} must have the input's last logical and padded dims",
                    f"{what} {g.width}/{g.padded_width} vs input {x.width}/{x.padded_width}",
                    f"{what} shape [1, 1, 1, {x.width}]",
                )
        elif g.padded_width != x.padded_width or g.width < x.width:
            _fail(
                f"{what}.tile_width",
                f"a TILE {what} must have the input's padded width and at least its logical width",
                f"{what} {g.width}/{g.padded_width} vs input {x.width}/{x.padded_width}",
                f"{what} shape [1, 1, 1, {x.width}]",
            )
        if g.padded_shape[-2] != TILE:
            _fail(
                f"{what}.tile_height",
                f"a TILE {what} must be one tile high (padded height 32)",
                g.padded_shape[-2],
                f"{what} shape [1, 1, 1, {x.width}]",
            )
        if path == "interleaved_post":
            _check_dtype(g, GAMMA_DTYPES, f"{what}.dtype", what)
    elif g.layout == ttnn.ROW_MAJOR_LAYOUT:
        volume = math.prod(g.padded_shape)
        if g.padded_width != TILE or volume // TILE != x.padded_width // TILE:
            _fail(
                f"{what}.row_major_shape",
                f"a ROW_MAJOR {what} must be [1, 1, W/32, 32] for the input's padded width W",
                f"{what} {g.padded_shape} for W={x.padded_width}",
                f"{what}.reshape(1, 1, {x.padded_width // TILE}, 32) (tt_rmsnorm.prepare_weight does this)",
            )
        _check_dtype(g, GAMMA_DTYPES, f"{what}.dtype", what)


def _check_gamma_beta(x, weight, bias, path):
    if path == "interleaved_post":
        _check_bias_needs_weight(weight, bias)
    _check_gamma(x, weight, "weight", path)
    _check_gamma(x, bias, "bias", path)
    if path == "sharded" and weight is not None and bias is not None and weight.layout != bias.layout:
        _fail(
            "bias.same_layout",
            "weight and bias must have the same layout",
            f"{_name(weight.layout)} vs {_name(bias.layout)}",
            "prepare both the same way",
        )


def _is_sharded_pc(pc) -> bool:
    return isinstance(pc, ttnn.LayerNormShardedMultiCoreProgramConfig)


# ---------------------------------------------------------------------------------------------------------------------
# L1 budgets of the interleaved distributed factories (the whole local row sits in circular buffers on one core).


def pre_l1_bytes(
    x: TensorDesc,
    compute_kernel_config=None,
    residual: TensorDesc | None = None,
    stats_dtype=ttnn.bfloat16,
    use_2d_core_grid: bool = False,
) -> int:
    """L1 end address of the interleaved pre's circular buffers (layernorm_pre_all_gather_program_factory): the
    input double-buffered, x^2, a reduce scaler and the output; the 2-D factory double-buffers x^2 too and adds
    merge buffers. Calibrated against ttnn on a mock N150 (tests/tt/data/l1_verdicts*.txt)."""
    wt = x.padded_width // TILE
    cb = TILE_BYTES[ttnn.float32 if _compute(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    fused = 2 * wt * residual.tile_bytes() + wt * cb if residual is not None else 0  # residual x2, fused a+b
    if use_2d_core_grid:
        return L1_BASE + wt * (2 * x.tile_bytes() + 2 * cb) + 11 * cb + TILE_BYTES[stats_dtype] + fused
    total = 2 * wt * x.tile_bytes() + wt * cb + cb + TILE_BYTES[stats_dtype]  # input x2, x^2, reduce scaler, out
    return L1_BASE + total + fused


def post_l1_bytes(
    x: TensorDesc,
    stats: TensorDesc,
    compute_kernel_config=None,
    weight=None,
    bias=None,
    out_dtype=None,
    use_2d_core_grid: bool = False,
    grid_y: int = DEFAULT_COMPUTE_GRID[1],
) -> int:
    """L1 end address of the interleaved post. 1-D: the whole row is buffered unless it exceeds 95% of L1, then it is
    streamed in short chunks; 2-D: each core buffers Wt / cores_y tiles (cores_y = the largest divisor of Wt <= grid.y).
    Calibrated against ttnn on a mock N150 (tests/tt/data/l1_verdicts*.txt)."""
    wt = x.padded_width // TILE
    available = L1_SIZE - L1_BASE
    if use_2d_core_grid:
        cb_length = wt // max(d for d in range(1, min(wt, grid_y) + 1) if wt % d == 0)
    elif wt * x.tile_bytes() > 0.95 * available:
        cb_length = int((available // x.tile_bytes()) * 0.95 / 7)
    else:
        cb_length = wt
    cb = TILE_BYTES[ttnn.float32 if _compute(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    per_tile = x.tile_bytes() + TILE_BYTES[out_dtype or x.dtype]
    for g in (weight, bias):  # each affine operand: its own buffer and one intermediate in the compute format
        if g is not None:
            per_tile += TILE_BYTES.get(g.dtype, 2048) + cb
    small = (stats.padded_width // TILE) * stats.tile_bytes() + 2 * 2048 + 5 * cb
    return L1_BASE + cb_length * per_tile + small


def _bank_bytes(t: TensorDesc | None, banks: int) -> int:
    """Bytes a tensor takes at the top of every core's L1: its shard, or its share of an L1-interleaved buffer (pages
    dealt round-robin over `banks`, one per core of the compute grid). DRAM and host tensors take none."""
    if t is None or not t.on_device or t.memory_config.buffer_type != ttnn.BufferType.L1:
        return 0
    if t.is_sharded:
        return _shard_bytes(t)
    if t.layout == ttnn.TILE_LAYOUT:
        pages, page = math.prod(t.padded_shape) // (TILE * TILE), t.tile_bytes()
    else:
        pages, page = math.prod(t.padded_shape[:-1]), t.padded_width * DTYPE_BYTES.get(t.dtype, 2)
    return -(-pages // banks) * page


def _l1_floor(grid, *tensors) -> int:
    """The lowest L1 address of the given tensors' buffers (allocated from the top of L1 down)."""
    return L1_SIZE - sum(_bank_bytes(t, grid[0] * grid[1]) for t in tensors)


def _output_desc(x: TensorDesc, shape, dtype, memory_config) -> TensorDesc:
    return TensorDesc(tuple(shape), dtype=dtype or x.dtype, memory_config=memory_config or x.memory_config)


def _check_l1(needed: int, op: str, x: TensorDesc, floor: int = L1_SIZE):
    """ttnn rejects the program when its circular buffers pass the end of L1 or the lowest L1 buffer of its tensors."""
    check_l1_model_version()
    if needed > min(floor, L1_SIZE):
        below = f", below its tensors' L1 buffers from {floor} B" if floor < L1_SIZE else ""
        _fail(
            f"{op}.l1_budget",
            f"the interleaved {op} keeps the whole local row in one core's L1 ({L1_SIZE} B{below}) and needs "
            f"{needed} B",
            f"local width {x.padded_width} {_name(x.dtype)}",
            "shard the hidden dim over more devices, use bfloat8_b input, keep the input in DRAM, or turn "
            f"fp32_dest_acc_en off (L1 model of ttnn {L1_MODEL_TTNN_VERSION})",
        )


def _shard_bytes(t: TensorDesc | None) -> int:
    """Bytes of one core's shard of an L1-sharded tensor (0 for anything else)."""
    if t is None or not t.is_sharded or t.memory_config.buffer_type != ttnn.BufferType.L1:
        return 0
    h, w = t.shard_spec.shape
    if t.layout == ttnn.TILE_LAYOUT:
        return (h // TILE) * (w // TILE) * t.tile_bytes()
    return h * w * DTYPE_BYTES.get(t.dtype, 2)


def sharded_l1_bytes(
    op: str,
    x: TensorDesc,
    compute_kernel_config=None,
    residual: TensorDesc | None = None,
    weight: TensorDesc | None = None,
    bias: TensorDesc | None = None,
    stats: TensorDesc | None = None,
    out_dtype=None,
    memory_config=None,
    compute_grid=DEFAULT_COMPUTE_GRID,
) -> tuple[int, int]:
    """(end of the static dataflow buffers, lowest L1 shard address) of the sharded factory
    (sharded_layernorm_factory_helpers: DFBSizeParams, add_dataflow_buffer_specs) for op 'pre', 'post' or 'rms_norm'.

    The input, residual, stats and (unless it is resharded) output buffers borrow their tensors' shards; every other
    buffer is allocated statically from L1_BASE up, while tensor shards are allocated from the top of L1 down, at
    the same address on every core. ttnn rejects the program when the static region passes the lowest shard."""
    shard_h, shard_w = x.shard_spec.shape
    block_ht, block_wt = shard_h // TILE, shard_w // TILE
    kt = x.padded_width // TILE
    single = TILE_BYTES[ttnn.float32 if _compute(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    bf16 = TILE_BYTES[ttnn.bfloat16]
    gx, gy = _bbox_extent(x.shard_spec)
    row_wise = x.shard_spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
    mcast_1d = x.physical_rows == shard_h
    nb = x.shard_spec.grid.num_cores() if mcast_1d else (gx if row_wise else gy)
    two_stage = (
        mcast_1d
        and x.shard_spec.grid.num_cores() == gx * gy
        and ((row_wise and 1 < gx <= compute_grid[0] and gy > 1) or (not row_wise and gx > 1 and gy == compute_grid[1]))
    )
    if two_stage:
        first, second = (gx, gy) if row_wise else (gy, gx)
        ex_external = (first + second - 1) * single
        rows_per_worker = math.ceil(block_ht / first)
    else:
        ex_external = math.ceil(kt / block_wt) * single
        rows_per_worker = math.ceil(block_ht / nb)
    block = block_ht * block_wt * single
    static = bf16 + single  # reduce scaler, global scaler
    if op == "pre":
        static += 2 * block_ht * single + ex_external + block  # E[x^2] partial and result, gathered partials, x
    else:
        static += bf16 + block_ht * single + 2 * block  # epsilon, E[x^2], x, x * rsqrt
        static += sum(block_wt * g.tile_bytes() for g in (weight, bias) if g is not None)
        static += block_ht * single  # the multicast E[x^2]
        if op == "post":
            static += 2 * single  # reduced stats, variance
        else:
            static += block_ht * single + ex_external + rows_per_worker * single
    out_dtype = out_dtype or x.dtype
    resharded = op == "post" and memory_config is not None and memory_config != x.memory_config
    out_shard = block_ht * block_wt * TILE_BYTES[out_dtype]
    if resharded:
        static += out_shard
    if op == "pre":
        out_shard = bf16
    elif memory_config is not None and memory_config.is_sharded() and memory_config.shard_spec is not None:
        oh, ow = memory_config.shard_spec.shape
        out_shard = (oh // TILE) * (ow // TILE) * TILE_BYTES[out_dtype]
    shards = _shard_bytes(x) + _shard_bytes(residual) + _shard_bytes(stats) + out_shard
    return L1_BASE + static, L1_SIZE - shards


def rms_norm_l1_bytes(
    x: TensorDesc,
    compute_kernel_config=None,
    residual: TensorDesc | None = None,
    weight: TensorDesc | None = None,
    bias: TensorDesc | None = None,
) -> int:
    """L1 end address of the interleaved rms_norm's circular buffers (layernorm_op_multi_core). Each buffer holds
    the row rounded up to the dst block (4 tiles with fp32_dest_acc_en, else 8), unless that exceeds 95% of L1: then a
    TILE weight/bias or a FLOAT32 input streams the row in 56-tile chunks and no weight in 112-tile chunks. A
    ROW_MAJOR weight or bias has no streaming variant: the whole row stays in L1."""
    fp32_acc = _compute(compute_kernel_config).fp32_dest_acc_en
    block = 4 if fp32_acc else 8
    single, bf16 = TILE_BYTES[ttnn.float32 if fp32_acc else ttnn.bfloat16], TILE_BYTES[ttnn.bfloat16]
    row = -(-(x.padded_width // TILE) // block) * block
    gamma_tile = weight.tile_bytes() if weight is not None else bf16
    beta_tile = bias.tile_bytes() if bias is not None else bf16
    res_tile = residual.tile_bytes() if residual is not None else 0

    def sizes(n):
        in0, im6 = (2 * block, n) if residual is not None else (n, 2 * block)
        return {
            "in0": in0 * x.tile_bytes(),
            "in1": 2 * block * res_tile,
            "out": 2 * block * x.tile_bytes(),
            "im0": n * single,
            "im3": n * single,
            "gamma": n * gamma_tile,
            "beta": n * beta_tile,
            "im6": im6 * single,
            "im5": 2 * block * single,
            "im4": 8 * single,
            "small": 2 * single + 2 * bf16 + 2 * bf16 + 2 * single,  # im1, scaler, epsilon, im2
        }

    row_major_affine = any(g is not None and g.layout == ttnn.ROW_MAJOR_LAYOUT for g in (weight, bias))
    streamed = not row_major_affine and sum(sizes(row).values()) >= 0.95 * L1_SIZE
    if streamed:
        row = 56 if weight is not None or bias is not None or x.dtype == ttnn.float32 else 112
    c = sizes(row)
    total = c["in0"] + c["out"] + 4 * bf16 + 2 * single + c["im3"] + c["im4"]  # in0, out, scaler, eps, im2, im3, im4
    if residual is not None or streamed:
        total += c["im0"]
    if streamed:
        total += TILE_BYTES[ttnn.float32] if fp32_acc else single  # the streaming accumulator
    if weight is not None or bias is not None:
        total += c["im5"]
    total += (c["gamma"] if weight is not None else 0) + (c["beta"] if bias is not None else 0)
    if residual is not None:
        total += c["in1"]
    return L1_BASE + total


def _check_sharded_l1(op: str, x: TensorDesc, **kw):
    """The sharded factory's work split (reduce workers) and its L1, on the device's compute grid."""
    _check_reduce_workers(x, x.shard_spec.shape[0] // TILE, kw["compute_grid"])
    end, floor = sharded_l1_bytes(op, x, **kw)
    if end > min(floor, L1_SIZE):
        _fail(
            "sharded.l1_budget",
            f"the sharded {op}'s circular buffers end at {end} B of L1, above its tensors' shards (from {floor} B)",
            f"shard {list(x.shard_spec.shape)} {_name(x.dtype)} on {x.shard_spec.grid.num_cores()} cores",
            "shard the width over more cores (smaller shards), or turn fp32_dest_acc_en off",
        )


# ---------------------------------------------------------------------------------------------------------------------
# The ops.


def _resolve_grid(compute_grid, *tensors):
    if compute_grid is not None:
        return tuple(compute_grid)
    for t in tensors:
        if isinstance(t, ttnn.Tensor):
            try:
                g = t.device().compute_with_storage_grid_size()
                return (g.x, g.y)
            except Exception:
                pass
    return DEFAULT_COMPUTE_GRID


def check_pre_all_gather(
    input_tensor,
    *,
    dtype=ttnn.bfloat16,
    residual_input_tensor=None,
    compute_kernel_config=None,
    program_config=None,
    memory_config=None,
    use_2d_core_grid=None,
    compute_grid=None,
) -> str:
    """Validate `ttnn.rms_norm_pre_all_gather` arguments. Returns the path taken: 'interleaved' or 'sharded'."""
    grid = _resolve_grid(compute_grid, input_tensor)
    x, res = describe(input_tensor), describe(residual_input_tensor)
    _check_on_device(x, "input")
    _check_rank4(x, "rms_norm_pre_all_gather")
    _check_tile(x, "input")
    _check_dtype(x, PRE_INPUT_DTYPES, "pre.input.dtype", "input")
    _warn_2d_core_grid(use_2d_core_grid, x.is_sharded)
    if x.is_sharded:
        _check_sharded_input(x, grid, distributed=True)
        if not _is_sharded_pc(program_config):
            _fail(
                "sharded.program_config",
                "a sharded input needs a LayerNormShardedMultiCoreProgramConfig",
                type(program_config).__name__,
                "tt_rmsnorm.configs.sharded_program_config(...)",
            )
        _check_sharded_program_config(x, program_config, compute_kernel_config, distributed=True)
        _check_output_memory_config(x, memory_config)
        if dtype not in (None, ttnn.bfloat16):
            _fail(
                "sharded_pre.dtype_ignored",
                "the sharded pre always writes bfloat16 stats",
                _name(dtype),
                "pass dtype=ttnn.bfloat16 (or omit it)",
            )
        _check_residual(x, res)
        _check_sharded_l1("pre", x, compute_kernel_config=compute_kernel_config, residual=res, compute_grid=grid)
        return "sharded"
    _check_interleaved_program_config(
        program_config, "pre.welford", "RMSNorm with Welford's algorithm is not supported in pre_all_gather"
    )
    _check_fp32_needs_acc({"input": x}, compute_kernel_config, "pre")
    _check_output_memory_config(x, memory_config)
    _check_residual(x, res)
    out = _output_desc(x, (*x.shape[:-1], TILE), dtype or ttnn.bfloat16, memory_config)
    _check_l1(
        pre_l1_bytes(x, compute_kernel_config, res, dtype or ttnn.bfloat16, bool(use_2d_core_grid)),
        "pre",
        x,
        _l1_floor(grid, x, res, out),
    )
    return "interleaved"


def check_post_all_gather(
    input_tensor,
    stats,
    *,
    epsilon=1e-12,
    weight=None,
    bias=None,
    memory_config=None,
    compute_kernel_config=None,
    program_config=None,
    dtype=None,
    use_2d_core_grid=None,
    compute_grid=None,
) -> str:
    """Validate `ttnn.rms_norm_post_all_gather` arguments. Returns the path: 'interleaved' or 'sharded'."""
    grid = _resolve_grid(compute_grid, input_tensor)
    x, s, w, b = describe(input_tensor), describe(stats), describe(weight), describe(bias)
    _check_on_device(x, "input")
    _check_rank4(x, "rms_norm_post_all_gather")
    _check_tile(x, "input")
    _check_dtype(x, PRE_INPUT_DTYPES, "post.input.dtype", "input")
    if s is None:
        _fail(
            "stats.present",
            "post_all_gather requires the gathered stats",
            None,
            "pass the all_gather output of rms_norm_pre_all_gather",
        )
    _check_on_device(s, "stats")
    _check_tile(s, "stats")
    if s.padded_width % TILE:
        _fail(
            "stats.width",
            "the stats' padded last dim must be a multiple of 32 (one tile per device)",
            s.padded_width,
            "gather the [.., 32]-wide per-device stats on dim 3",
        )
    if epsilon is not None and epsilon < 0:
        _fail("epsilon.non_negative", "epsilon must be >= 0", epsilon, "use e.g. 1e-5 (Llama) or 1e-6")
    _check_width_multiple_of_32(x)
    _warn_2d_core_grid(use_2d_core_grid, x.is_sharded)
    if x.is_sharded:
        _check_sharded_input(x, grid, distributed=True)
        if s.stats_kind == STATS_SUMS:
            _fail(
                "stats.kind_mismatch",
                "the sharded post averages per-device MEANS but these stats hold SUMS (from the interleaved pre)",
                STATS_SUMS,
                "run the sharded pre on the same sharded input (tt_rmsnorm.distributed_rms_norm does)",
            )
        if not s.is_sharded:
            _fail(
                "stats.sharded",
                "the sharded post needs its stats sharded on one core",
                _name(s.memory_layout),
                "all_gather with memory_config=tt_rmsnorm.configs.stats_memory_config(num_devices)",
            )
        if s.dtype != ttnn.bfloat16:
            _fail(
                "stats.bf16_sharded",
                "the sharded post supports only bfloat16 stats",
                _name(s.dtype),
                "gather the stats in bfloat16",
            )
        if not _is_sharded_pc(program_config):
            _fail(
                "sharded.program_config",
                "a sharded input needs a LayerNormShardedMultiCoreProgramConfig",
                type(program_config).__name__,
                "tt_rmsnorm.configs.sharded_program_config(...)",
            )
        if s.shard_spec.grid.num_cores() != 1:
            _fail(
                "stats.one_core",
                "with a sharded program config the stats must be sharded on exactly 1 core",
                f"{s.shard_spec.grid.num_cores()} cores",
                "memory_config=tt_rmsnorm.configs.stats_memory_config(num_devices)",
            )
        if s.padded_shape[:-1] != x.padded_shape[:-1]:
            _fail(
                "stats.rows_match",
                "stats rows and batch dims must equal the input's",
                f"stats {s.padded_shape} vs input {x.padded_shape}",
                "gather the stats of this same input",
            )
        _check_sharded_program_config(x, program_config, compute_kernel_config, distributed=True)
        if memory_config is not None and not memory_config.is_sharded():
            _fail(
                "memory_config.sharded_output",
                "sharded inputs require a sharded output memory_config",
                _name(memory_config.memory_layout),
                "omit memory_config (the input's is used)",
            )
        _check_output_memory_config(x, memory_config)
        if (
            memory_config is not None
            and memory_config.shard_spec is not None
            and memory_config.shard_spec.shape[0] != x.shard_spec.shape[0]
        ):
            _fail(
                "memory_config.shard_height",
                "the output shard height must equal the input shard height",
                f"{memory_config.shard_spec.shape[0]} vs {x.shard_spec.shape[0]}",
                "keep the input's shard height",
            )
        _check_shard_fits(x.padded_shape, memory_config, "output")
        _check_gamma_beta(x, w, b, "sharded")
        _check_sharded_l1(
            "post",
            x,
            compute_kernel_config=compute_kernel_config,
            weight=w,
            bias=b,
            stats=s,
            out_dtype=dtype,
            memory_config=memory_config,
            compute_grid=grid,
        )
        return "sharded"
    if s.stats_kind == STATS_MEANS:
        _fail(
            "stats.kind_mismatch",
            "the interleaved post expects per-device SUMS but these stats hold MEANS (from the sharded pre)",
            STATS_MEANS,
            "run the interleaved pre on an interleaved input, or use the sharded post",
        )
    _check_dtype(s, STATS_DTYPES, "stats.dtype", "stats")
    if s.padded_shape[:-1] != x.padded_shape[:-1]:
        _fail(
            "post.stats_dims",
            "stats and input padded dims 0, 1 and 2 must match",
            f"stats {s.padded_shape} vs input {x.padded_shape}",
            "gather the stats of this same input",
        )
    _check_interleaved_program_config(
        program_config, "post.welford", "RMS norm is not compatible with the Welford algorithm"
    )
    _check_fp32_needs_acc({"input": x, "stats": s}, compute_kernel_config, "post")
    # unlike the pre, the interleaved post honours a sharded output memory_config (a fused reshard)
    _check_shard_fits(x.padded_shape, memory_config, "output")
    _check_gamma_beta(x, w, b, "interleaved_post")
    out = _output_desc(x, x.shape, dtype, memory_config)
    _check_l1(
        post_l1_bytes(x, s, compute_kernel_config, w, b, dtype, bool(use_2d_core_grid), grid[1]),
        "post",
        x,
        _l1_floor(grid, x, s, w, b, out),
    )
    return "interleaved"


def check_rms_norm(
    input_tensor,
    *,
    epsilon=1e-12,
    weight=None,
    bias=None,
    residual_input_tensor=None,
    memory_config=None,
    program_config=None,
    compute_kernel_config=None,
    compute_grid=None,
) -> str:
    """Validate single-device `ttnn.rms_norm` arguments. Returns 'interleaved' or 'sharded'."""
    grid = _resolve_grid(compute_grid, input_tensor)
    x, res, w, b = describe(input_tensor), describe(residual_input_tensor), describe(weight), describe(bias)
    _check_on_device(x, "input")
    _check_tile(x, "input")
    _check_dtype(x, PRE_INPUT_DTYPES, "rms_norm.input.dtype", "input")
    if epsilon is not None and epsilon < 0:
        _fail("epsilon.non_negative", "epsilon must be >= 0", epsilon, "use e.g. 1e-5 (Llama) or 1e-6")
    if x.is_sharded:
        _check_sharded_input(x, grid, distributed=False)
        if program_config is not None and not _is_sharded_pc(program_config):
            _fail(
                "sharded.program_config",
                "a sharded input takes a LayerNormShardedMultiCoreProgramConfig or none (ttnn derives one)",
                type(program_config).__name__,
                "omit program_config or pass tt_rmsnorm.configs.sharded_program_config(...)",
            )
        if program_config is not None:
            _check_sharded_program_config(x, program_config, compute_kernel_config, distributed=False)
        _check_stats_gather(x, program_config, compute_kernel_config, grid)
        _check_output_memory_config(x, memory_config)
        _check_shard_fits(x.padded_shape, memory_config, "output")
        path = "sharded"
    else:
        if program_config is not None and _is_sharded_pc(program_config):
            _fail(
                "rms_norm.sharded_config_interleaved",
                "a sharded program config needs a sharded input (ttnn fails with 'bad optional access')",
                "LayerNormShardedMultiCoreProgramConfig",
                "shard the input (tt_rmsnorm.configs.sharded_memory_config) or omit program_config",
            )
        if program_config is not None and program_config.use_welford:
            _fail(
                "rms_norm.welford",
                "Welford's algorithm is not supported for RMSNorm",
                "use_welford=True",
                "LayerNormDefaultProgramConfig(use_welford=False)",
            )
        if memory_config is not None and memory_config.is_sharded():  # rms_norm writes any sharded output
            _check_shard_fits(x.padded_shape, memory_config, "output")
        else:
            _check_output_memory_config(x, memory_config)
        path = "interleaved"
    _check_residual(x, res, sharded_residual_ok=True)
    _check_gamma_beta(x, w, b, "sharded")
    if path == "interleaved":
        needed = rms_norm_l1_bytes(x, compute_kernel_config, res, w, b)
        floor = _l1_floor(grid, x, res, w, b, _output_desc(x, x.shape, None, memory_config))
        if needed > min(floor, L1_SIZE):
            _fail(
                "rms_norm.l1_budget",
                f"the interleaved rms_norm's buffers end at {needed} B of L1, above {min(floor, L1_SIZE)} B (the end"
                " of L1 or its tensors' L1 buffers)",
                f"width {x.padded_width} {_name(x.dtype)}"
                + (", ROW_MAJOR weight/bias (no streaming variant)" if w is not None or b is not None else ""),
                "use a TILE weight/bias [1, 1, 1, W] (ttnn then streams the row), or turn fp32_dest_acc_en off",
            )
    if path == "sharded":
        _check_sharded_l1(
            "rms_norm",
            x,
            compute_kernel_config=compute_kernel_config,
            residual=res,
            weight=w,
            bias=b,
            memory_config=memory_config,
            compute_grid=grid,
        )
    return path


def check_all_gather(
    input_tensor, dim, *, cluster_axis=None, mesh_shape, memory_config=None, output_given: bool = False
) -> int:
    """Validate `ttnn.all_gather(input, dim, cluster_axis=...)` on a mesh of `mesh_shape`. Returns the gather size."""
    x = describe(input_tensor)
    _check_on_device(x, "input")
    if not -x.rank <= dim < x.rank:
        _fail(
            "all_gather.dim",
            f"dim must be in [{-x.rank}, {x.rank}) for a rank-{x.rank} tensor",
            dim,
            "gather the stats on dim=3 (the last)",
        )
    mesh_shape = tuple(mesh_shape)
    from tt_rmsnorm import ccl_l1  # builds on this module, so it is imported when first called

    # a gather dim off the tile grid takes ttnn's composite gather, which needs no axis
    if cluster_axis is None and sum(d > 1 for d in mesh_shape) > 1 and not ccl_l1.takes_composite_gather(x, dim):
        _fail(
            "all_gather.cluster_axis",
            "on a 2-D mesh the 1-D fabric needs cluster_axis",
            f"cluster_axis=None on mesh {mesh_shape}",
            "cluster_axis=1 gathers along mesh columns (Galaxy: the tensor-parallel axis)",
        )
    if cluster_axis is None:
        n = math.prod(mesh_shape)
    else:
        if not isinstance(cluster_axis, int) or not 0 <= cluster_axis < len(mesh_shape):
            _fail(
                "all_gather.cluster_axis",
                f"cluster_axis must be an axis of the {len(mesh_shape)}-D mesh {mesh_shape}",
                cluster_axis,
                "cluster_axis=1 gathers along mesh columns (the tensor-parallel axis of 1xN and 8x4 meshes)",
            )
        n = mesh_shape[cluster_axis]
    if n < 2:
        _fail(
            "all_gather.num_devices",
            "all_gather needs more than one device along the gather axis",
            f"{n} device(s) on axis {cluster_axis} of mesh {mesh_shape}",
            "on one device skip the gather (tt_rmsnorm.distributed_rms_norm does); "
            "otherwise pick the axis the hidden dim is sharded over",
        )
    if x.is_sharded and memory_config is None:
        _fail(
            "all_gather.sharded_needs_memory_config",
            "a sharded input needs an explicit output memory_config",
            _name(x.memory_layout),
            "memory_config=tt_rmsnorm.configs.stats_memory_config(num_devices)",
        )
    if math.prod(x.shape) == 0:
        _fail("all_gather.empty", "all_gather has no chunks to send for an empty tensor", x.shape, "skip the gather")
    gathered = list(x.shape)
    gathered[dim] *= n
    out = TensorDesc(tuple(gathered), dtype=x.dtype, layout=x.layout, memory_config=memory_config or x.memory_config)
    if not output_given:  # a given output buffer is the output's spec; its own rules check it
        _check_shard_fits(out.padded_shape, memory_config, "gathered output")
    ccl_l1.check_gather_l1(x, dim, out, n, mesh_shape)
    return n
