"""The rules of sharded layouts and of the configs checked against a layout, for ttnn 0.81.1's RMSNorm ops.

This module owns: the sharded input (no height sharding, a shard grid on the device, one tile row for the distributed
ops); the program config against the input (a sharded `LayerNormShardedMultiCoreProgramConfig` whose blocks match the
shards, or a default config without Welford on an interleaved input); the output memory config against the input's
and against the output it will hold; and the sharded factory's stats reduce, whose workers must fit the shard grid
and move their stats tiles in one NOC burst.
"""

from __future__ import annotations

import math

import ttnn

from tt_rmsnorm.rules.common import (
    ComputeFlags,
    bbox_extent,
    check_on_device,
    compute_flags,
    enum_name,
    fail,
    is_sharded_program_config,
    max_subblock_w,
)
from tt_rmsnorm.tensors import TILE_BYTES, TensorDesc
from tt_rmsnorm.tiles import TILE


def require_sharded_program_config(program_config):
    """The distributed ops' sharded layout takes no default: ttnn needs the sharded program config given."""
    if not is_sharded_program_config(program_config):
        fail(
            "sharded.program_config",
            "a sharded input needs a LayerNormShardedMultiCoreProgramConfig",
            type(program_config).__name__,
            "tt_rmsnorm.planning.layouts.sharded_program_config(...)",
        )


def _check_not_height_sharded(t: TensorDesc, what: str):
    if t.memory_layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
        fail(
            f"{what}.height_sharded",
            f"{what}: height-sharded tensors are not supported by the layernorm op",
            "HEIGHT_SHARDED",
            "use WIDTH_SHARDED or BLOCK_SHARDED (tt_rmsnorm.planning.layouts.sharded_memory_config)",
        )


def _check_shard_grid_on_device(t: TensorDesc, compute_grid, what: str):
    box = t.shard_spec.grid.bounding_box()
    if box.end.x >= compute_grid[0] or box.end.y >= compute_grid[1]:
        fail(
            f"{what}.shard_grid_on_device",
            f"{what} shard grid must lie inside the device's compute grid {compute_grid[0]}x{compute_grid[1]}",
            f"grid up to core ({box.end.x},{box.end.y})",
            "choose a grid from mesh_device.compute_with_storage_grid_size() (tt_rmsnorm.planning.layouts picks one)",
        )


def check_sharded_input(x: TensorDesc, compute_grid, distributed: bool):
    _check_not_height_sharded(x, "input")
    _check_shard_grid_on_device(x, compute_grid, "input")
    check_shard_fits(x.padded_shape, x.memory_config, "input")  # what ttnn checked when it made x
    if distributed and x.padded_shape[-2] != TILE:
        fail(
            "sharded.height_32",
            "the sharded distributed layout needs padded height 32 (decode: <= 32 rows)",
            f"padded height {x.padded_shape[-2]}",
            "use an interleaved input (prefill path) or at most 32 rows",
        )


def check_sharded_program_config(x: TensorDesc, pc, compute_kernel_config, distributed: bool):
    """tt-facts §3.2: a LayerNormShardedMultiCoreProgramConfig against the input's shard spec."""
    if pc.block_w < 1:
        fail("program_config.block_w", "block_w must be >= 1", pc.block_w, "block_w = shard width / 32")
    if pc.subblock_w < 1 or pc.block_w % pc.subblock_w != 0:
        fail(
            "program_config.subblock_w_divides",
            "block_w must be divisible by subblock_w",
            f"block_w={pc.block_w} subblock_w={pc.subblock_w}",
            "pick subblock_w as a divisor of block_w",
        )
    limit = max_subblock_w(compute_kernel_config)
    if pc.subblock_w > limit:
        c = compute_flags(compute_kernel_config)
        fail(
            "program_config.subblock_w_limit",
            f"subblock_w must be <= {limit} with fp32_dest_acc_en={c.fp32_dest_acc_en}, "
            f"dst_full_sync_en={c.dst_full_sync_en}",
            pc.subblock_w,
            f"use the largest divisor of block_w <= {limit} (tt_rmsnorm.planning.layouts.sharded_program_config does)",
        )
    if pc.use_welford:
        fail(
            "program_config.welford",
            "Welford is not supported for RMSNorm",
            "use_welford=True",
            "set use_welford=False",
        )
    _check_blocks_match_shards(x, pc)


def _check_blocks_match_shards(x: TensorDesc, pc):
    """The program config's grid holds the shard grid and its blocks are the input's shards, laid out 1-D (the whole
    height in one block) or 2-D (block sharding)."""
    grid = pc.compute_with_storage_grid_size
    ex, ey = bbox_extent(x.shard_spec)
    if ex > grid.x or ey > grid.y:
        fail(
            "program_config.grid_fits_shards",
            "the input's shard grid (its bounding box) must fit compute_with_storage_grid_size",
            f"shard grid {ex}x{ey} vs program grid {grid.x}x{grid.y}",
            f"compute_with_storage_grid_size=({ex}, {ey})",
        )
    shard_h, shard_w = x.shard_spec.shape
    if pc.block_h * TILE != shard_h:
        fail(
            "program_config.block_h_shard",
            "block_h * 32 must equal the shard height",
            f"block_h={pc.block_h}, shard height {shard_h}",
            f"block_h={shard_h // TILE}",
        )
    if pc.block_w * TILE != shard_w:
        fail(
            "program_config.block_w_shard",
            "block_w * 32 must equal the shard width",
            f"block_w={pc.block_w}, shard width {shard_w}",
            f"block_w={shard_w // TILE}",
        )
    mt, kt = x.physical_rows // TILE, x.padded_width // TILE
    if x.physical_rows == pc.block_h * TILE:  # the whole height in one block: 1-D multicast
        n = x.shard_spec.grid.num_cores()
        if pc.block_w != math.ceil(kt / n):
            fail(
                "program_config.block_w_cores",
                "block_w must equal ceil(Wt / shard cores)",
                f"block_w={pc.block_w}, Wt={kt}, cores={n}",
                f"block_w={math.ceil(kt / n)}",
            )
    else:
        row_major = x.shard_spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
        across, down = (ex, ey) if row_major else (ey, ex)
        if pc.block_w != math.ceil(kt / across) or mt % down or pc.block_h != mt // down:
            fail(
                "program_config.block_2d",
                "block sharding needs block_w = ceil(Wt / grid columns) and block_h = Ht / grid rows",
                f"block_w={pc.block_w} block_h={pc.block_h}, Wt={kt}, Ht={mt}, grid {across}x{down}",
                f"block_w={math.ceil(kt / across)}, block_h={mt // down if down else '?'}",
            )


def check_interleaved_program_config(program_config, welford_rule: str, welford_message: str) -> None:
    """The interleaved pre/post take a default (non-sharded) program config without Welford; each op words its own
    Welford error."""
    if program_config is None:
        return
    if is_sharded_program_config(program_config):
        fail(
            "program_config.ignored",
            "a sharded program config on an interleaved input is silently ignored",
            "LayerNormShardedMultiCoreProgramConfig",
            "omit program_config or use ttnn.LayerNormDefaultProgramConfig()",
        )
    if program_config.use_welford:
        fail(welford_rule, welford_message, "use_welford=True", "LayerNormDefaultProgramConfig(use_welford=False)")


def check_output_memory_config(x: TensorDesc, memory_config):
    if memory_config is None:
        return
    if x.is_sharded:
        if not memory_config.is_sharded() or memory_config.memory_layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
            fail(
                "memory_config.sharded_output",
                "sharded inputs require a WIDTH/BLOCK-sharded output memory_config",
                enum_name(memory_config.memory_layout),
                "omit memory_config (the input's is used) or pass a sharded one",
            )
        if memory_config.buffer_type != x.memory_config.buffer_type or memory_config.memory_layout != x.memory_layout:
            fail(
                "memory_config.matches_input",
                "output and input buffer types and memory layouts must match",
                f"{enum_name(memory_config.buffer_type)}/{enum_name(memory_config.memory_layout)} vs input "
                f"{enum_name(x.memory_config.buffer_type)}/{enum_name(x.memory_layout)}",
                "use the input's memory layout and buffer type",
            )
    elif memory_config.is_sharded():
        fail(
            "memory_config.interleaved_output",
            "an interleaved input gives an interleaved output; a sharded memory_config is rejected",
            enum_name(memory_config.memory_layout),
            "use ttnn.DRAM_MEMORY_CONFIG or ttnn.L1_MEMORY_CONFIG, then reshard the result",
        )


def check_shard_spec_given(memory_config, what: str) -> None:
    """A sharded memory config without a shard spec: ttnn reads the spec it lacks ("bad optional access"). Only the
    sharded rms_norm and pre derive one (from the input's)."""
    if memory_config is not None and memory_config.is_sharded() and memory_config.shard_spec is None:
        fail(
            "memory_config.shard_fits",
            f"the {what}'s sharded memory_config has no shard spec, and this op derives none (ttnn fails with 'bad "
            "optional access')",
            f"{enum_name(memory_config.memory_layout)} without a shard spec",
            "give the shard spec (tt_rmsnorm.planning.layouts.sharded_memory_config) or an interleaved memory_config",
        )


def check_shard_fits(padded_shape, memory_config, what: str, spec_from_input: bool = False, tiled: bool = True) -> None:
    """ttnn's tensor-spec validation of a sharded memory config against the tensor it will hold (physical 2-D view:
    all padded dims but the last fold into the height): shards of at least one element, whole tiles for a TILE
    tensor (`tiled`), no more shards than cores. `spec_from_input`: the op derives a missing shard spec from its
    sharded input."""
    if not spec_from_input:
        check_shard_spec_given(memory_config, what)
    if memory_config is None or not memory_config.is_sharded() or memory_config.shard_spec is None:
        return
    spec = memory_config.shard_spec
    height, width = math.prod(padded_shape[:-1]), padded_shape[-1]
    shard_h, shard_w = spec.shape
    cores, layout = spec.grid.num_cores(), memory_config.memory_layout
    problem = None
    if shard_h < 1 or shard_w < 1:
        problem = "a shard needs at least one row and one column"
    elif tiled and (shard_h % TILE or shard_w % TILE):
        problem = "the shards of a TILE tensor are whole tiles (both dims multiples of 32)"
    elif layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
        if shard_w != width or math.ceil(height / shard_h) > cores:
            problem = f"height sharding needs shard width {width} and at most {cores} shards of {shard_h} rows"
    elif layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED:
        if shard_h != height or math.ceil(width / shard_w) > cores:
            problem = f"width sharding needs shard height {height} and at most {cores} shards of width {shard_w}"
    else:
        ex, ey = bbox_extent(spec)
        rows, cols = (ey, ex) if spec.orientation == ttnn.ShardOrientation.ROW_MAJOR else (ex, ey)
        if math.ceil(height / shard_h) > rows or math.ceil(width / shard_w) > cols:
            problem = f"block sharding needs at most {rows} x {cols} shards"
    if problem:
        fail(
            "memory_config.shard_fits",
            f"the {what}'s sharded memory_config does not fit a {height} x {width} tensor: {problem}",
            f"shard {list(spec.shape)} on {cores} cores, {enum_name(layout)}",
            "derive the shard shape from the output shape (tt_rmsnorm.planning.layouts.sharded_memory_config)",
        )


def sharded_reduce_worker_tiles(x: TensorDesc, program_grid, block_ht: int) -> int:
    """Stats tiles that each all-to-all reduce worker of ttnn's sharded layernorm factory gathers and multicasts
    (its GridParams / WorkerDistribution): ceil(block_ht / n), n = the cores sharing a row's reduce; 0 if no
    core-to-core reduce happens. 1-D (whole height in one shard) width sharding on a grid of several rows reduces in
    two stages, first along each row of cores."""
    spec = x.shard_spec
    gx, gy = bbox_extent(spec)
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
            if ht % gy or wt % gx or -(-(ht // gy) // gx) * tile > x.arch.noc_max_burst_bytes:
                continue
            if best is None or gx * gy > best[0] * best[1]:
                best = (gx, gy)
    if best is None:
        return "shard the rows over more cores (BLOCK_SHARDED) so each core holds fewer tile rows"
    gx, gy = best
    block_h, block_w = ht // gy, wt // gx
    limit = max_subblock_w(ComputeFlags(fp32, False))
    subblock_w = max(d for d in range(1, min(block_w, limit) + 1) if block_w % d == 0)
    return (
        f"block-shard the input: BLOCK_SHARDED L1 on a {gx}x{gy} grid, shard [{block_h * TILE}, {block_w * TILE}], "
        "with "
        f"program_config=LayerNormShardedMultiCoreProgramConfig(compute_with_storage_grid_size=({gx}, {gy}), "
        f"subblock_w={subblock_w}, block_h={block_h}, block_w={block_w}, inplace=False)"
    )


def check_stats_gather(x: TensorDesc, program_config, compute_kernel_config, compute_grid):
    """sharded.stats_gather_burst: see PACKAGE_ONLY_RULES. Without a program config ttnn derives one from the shard
    spec (create_layernorm_program_config: bounding-box grid, block_h = shard height / 32)."""
    if is_sharded_program_config(program_config):
        grid = (program_config.compute_with_storage_grid_size.x, program_config.compute_with_storage_grid_size.y)
        block_ht = program_config.block_h
    else:
        grid, block_ht = bbox_extent(x.shard_spec), x.shard_spec.shape[0] // TILE
    if compute_kernel_config is None:  # rms_norm's default accumulates in fp32 for a FLOAT32 input only
        fp32 = x.dtype == ttnn.float32
    else:
        fp32 = compute_flags(compute_kernel_config).fp32_dest_acc_en
    # One NOC burst of x's architecture (NOC_MAX_BURST_SIZE): the reduce workers read and multicast their share of the
    # per-row stats, and the sender kernel takes a separate path above it.
    burst = x.arch.noc_max_burst_bytes
    tiles = sharded_reduce_worker_tiles(x, grid, block_ht)
    tile = TILE_BYTES[ttnn.float32 if fp32 else ttnn.bfloat16]
    if tiles * tile > burst:
        alt = ""
        if fp32 and tiles * TILE_BYTES[ttnn.bfloat16] <= burst:
            alt = "; or keep this sharding with fp32_dest_acc_en=False (bfloat16 stats tiles fit one burst)"
        fail(
            "sharded.stats_gather_burst",
            f"each stats-reduce worker would move {tiles} {'fp32' if fp32 else 'bf16'} stats tiles ({tiles * tile} B, "
            f"more than one {burst} B NOC burst on {x.arch}); ttnn runs this sharding and returns wrong rows "
            "(tt-metal's test_rms_norm_bad_user_repro)",
            f"block_h={block_ht} on a {bbox_extent(x.shard_spec)[0]}x{bbox_extent(x.shard_spec)[1]} shard grid",
            _block_sharded_fix(x, compute_grid, fp32) + alt,
        )


def check_reduce_workers(x: TensorDesc, block_ht: int, compute_grid) -> None:
    """The sharded factory places its all-to-all reduce workers with tt-metal's `num_cores_to_corerangeset`, which
    requires each start core inside the (origin-shifted) shard grid and enough cores after it. One tile-row blocks
    (1-D multicast) are laid out from core (0, 0) in the shard orientation; a COL_MAJOR grid one core high, and a
    ROW_MAJOR grid one core wide that does not start at x = 0, leave a start core outside the grid."""
    spec = x.shard_spec
    if x.physical_rows != block_ht * TILE:  # 2-D blocks: plain rectangles, no work split
        return
    box = spec.grid.bounding_box()
    gx, gy = bbox_extent(spec)
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
            fail(
                "sharded.reduce_workers",
                "ttnn's sharded factory cannot place its reduce workers on this shard grid",
                f"{enum_name(spec.orientation)} grid {gx}x{gy} from core ({box.start.x},{box.start.y}), start core "
                f"({sx},{sy}) for {target} cores",
                "use ROW_MAJOR orientation on a grid that starts at x = 0 "
                "(tt_rmsnorm.planning.layouts.sharded_memory_config)",
            )


def check_sharded_post_output(x: TensorDesc, memory_config):
    """The sharded post writes a sharded output of the input's buffer type, layout and shard height."""
    if memory_config is not None and not memory_config.is_sharded():
        fail(
            "memory_config.sharded_output",
            "sharded inputs require a sharded output memory_config",
            enum_name(memory_config.memory_layout),
            "omit memory_config (the input's is used)",
        )
    check_output_memory_config(x, memory_config)
    if (
        memory_config is not None
        and memory_config.shard_spec is not None
        and memory_config.shard_spec.shape[0] != x.shard_spec.shape[0]
    ):
        fail(
            "memory_config.shard_height",
            "the output shard height must equal the input shard height",
            f"{memory_config.shard_spec.shape[0]} vs {x.shard_spec.shape[0]}",
            "keep the input's shard height",
        )
    check_shard_fits(x.padded_shape, memory_config, "output")


def check_rms_norm_output_shard(x: TensorDesc, memory_config):
    """The sharded rms_norm writes each core's output block (its input shard's tiles) straight into the output
    tensor's shard on that core, resharded or not: every output shard must hold one input shard."""
    if memory_config is None or not memory_config.is_sharded() or memory_config.shard_spec is None:
        return
    (sh, sw), (oh, ow) = x.shard_spec.shape, memory_config.shard_spec.shape
    block, held = math.ceil(sh / TILE) * math.ceil(sw / TILE), math.ceil(oh / TILE) * math.ceil(ow / TILE)
    if held < block:
        fail(
            "rms_norm.output_shard_holds_block",
            f"the sharded rms_norm writes each core's {block}-tile block into the output's shard, which holds {held}",
            f"output shard {[oh, ow]} vs input shard {[sh, sw]}",
            "give the output shards at least the input's shard shape, or omit memory_config (the input's is used)",
        )


def check_move(x: TensorDesc, memory_config) -> None:
    """A move of `x` into `memory_config` (to_memory_config, sharded_to_interleaved): x on device, and a sharded target
    whose shard spec fits x as ttnn's tensor-spec validation checks it when it makes the moved tensor."""
    check_on_device(x, "input")
    check_shard_fits(x.padded_shape, memory_config, "moved tensor", tiled=x.layout == ttnn.TILE_LAYOUT)
