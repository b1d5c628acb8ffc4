"""The L1 models of ttnn 0.81.1's RMSNorm program factories and the budget rules on them.

Each model gives where a factory's circular buffers end in one core's L1: the interleaved pre and post
(`pre_l1_bytes`, `post_l1_bytes`, the whole local row on one core), the interleaved `rms_norm` (`rms_norm_l1_bytes`:
the whole row, or streamed where that does not fit the L1 below its tensors) and the sharded factory
(`sharded_l1_bytes`, its static buffers against its tensors' shards). ttnn rejects a program whose buffers pass the end
of L1 or the lowest L1 buffer of its tensors; the `*.l1_budget` rules raise there first.
The models are calibrated on one ttnn release (`L1_MODEL_TTNN_VERSION`); on any other the first check warns. Every
address is read from the architecture of the input's description (`tt_rmsnorm.architecture`: where L1 ends and where
the allocator starts); the circular-buffer sizes are the same on Wormhole and Blackhole (byte-exact on mock N150 and
P150).
"""

from __future__ import annotations

import importlib.metadata
import math
import warnings

import ttnn
from loguru import logger

from tt_rmsnorm.rules.common import bbox_extent, compute_flags, enum_name, fail
from tt_rmsnorm.rules.sharding import check_reduce_workers
from tt_rmsnorm.tensors import DTYPE_BYTES, TILE_BYTES, TensorDesc
from tt_rmsnorm.tiles import TILE

# The ttnn release the L1 model (the allocator bases of tt_rmsnorm.architecture and the circular-buffer sums of
# pre_l1_bytes / post_l1_bytes) is calibrated on.
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


def pre_l1_bytes(
    x: TensorDesc,
    compute_kernel_config=None,
    residual: TensorDesc | None = None,
    stats_dtype=ttnn.bfloat16,
    use_2d_core_grid: bool = False,
) -> int:
    """L1 end address of the interleaved pre's circular buffers (layernorm_pre_all_gather_program_factory): the
    input double-buffered, x^2 (double-buffered where that still ends inside L1, whatever L1 tensors lie there), a
    reduce scaler and the output; the 2-D factory double-buffers x^2 always and adds merge buffers and one block of
    x^2. Calibrated against ttnn on a mock N150 (tests/tt/data/l1_verdicts*.txt, tests/tt/test_rules_boundaries.py)."""
    wt = x.padded_width // TILE
    cb = TILE_BYTES[ttnn.float32 if compute_flags(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    fused = 2 * wt * residual.tile_bytes() + wt * cb if residual is not None else 0  # residual x2, fused a+b
    if use_2d_core_grid:  # three merge tiles and a block of the largest divisor of Wt up to 8 tiles
        block = max((d for d in range(1, min(wt, 8) + 1) if wt % d == 0), default=1)  # 1 for an empty row
        return x.arch.l1_base + wt * (2 * x.tile_bytes() + 2 * cb) + (3 + block) * cb + TILE_BYTES[stats_dtype] + fused
    single = x.arch.l1_base + 2 * wt * x.tile_bytes() + wt * cb + cb + TILE_BYTES[stats_dtype] + fused
    double = single + wt * cb  # the second x^2 buffer
    return double if double <= x.arch.l1_size else single


def post_l1_bytes(
    x: TensorDesc,
    stats: TensorDesc,
    compute_kernel_config=None,
    weight=None,
    bias=None,
    out_dtype=None,
    use_2d_core_grid: bool = False,
    grid_y: int | None = None,
) -> int:
    """L1 end address of the interleaved post. 1-D: the whole row is buffered unless it exceeds 95% of L1, then it is
    streamed in short chunks; 2-D: each core buffers Wt / cores_y tiles (cores_y = the largest divisor of Wt <= grid.y).
    Calibrated against ttnn on a mock N150 (tests/tt/data/l1_verdicts*.txt); the end address is the one ttnn reports,
    to the byte, at the edge of L1 (tests/tt/test_rules_boundaries.py)."""
    wt = x.padded_width // TILE
    available = x.arch.l1_span
    grid_y = grid_y or x.arch.default_compute_grid[1]
    if use_2d_core_grid:
        cb_length = wt // max((d for d in range(1, min(wt, grid_y) + 1) if wt % d == 0), default=1)
    elif wt * x.tile_bytes() > 0.95 * available:
        cb_length = int((available // x.tile_bytes()) * 0.95 / 7)
    else:
        cb_length = wt
    cb = TILE_BYTES[ttnn.float32 if compute_flags(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    per_tile = x.tile_bytes() + TILE_BYTES[out_dtype or x.dtype]
    for g in (weight, bias):  # each affine operand: its own buffer and one intermediate in the compute format
        if g is not None:
            per_tile += TILE_BYTES.get(g.dtype, 2048) + cb
    # the stats, two scalar tiles (epsilon and the reduce scaler: bfloat16, one of them float32 for a float32 input)
    # and two one-tile intermediates in the compute format
    scalars = TILE_BYTES[ttnn.bfloat16] + TILE_BYTES[ttnn.float32 if x.dtype == ttnn.float32 else ttnn.bfloat16]
    small = (stats.padded_width // TILE) * stats.tile_bytes() + scalars + 2 * cb
    return x.arch.l1_base + cb_length * per_tile + small


def rms_norm_l1_bytes(
    x: TensorDesc,
    compute_kernel_config=None,
    residual: TensorDesc | None = None,
    weight: TensorDesc | None = None,
    bias: TensorDesc | None = None,
    floor: int | None = None,
) -> int:
    """L1 end address of the interleaved rms_norm's circular buffers (layernorm_op_multi_core) when the lowest L1
    buffer of its tensors starts at `floor` (None: the end of L1). ttnn keeps the whole row when its buffers fit 95% of
    the span between the allocator base and `floor`; otherwise it streams the row through buffers of a few dst blocks
    (`_rms_norm_stream_bytes`). A ROW_MAJOR weight or bias has no streaming variant: the whole row stays in L1."""
    row = _rms_norm_row_bytes(x, compute_kernel_config, residual, weight, bias)
    if _fits_rms_norm_span(x, row, floor) or _row_major_affine(weight, bias):
        return x.arch.l1_base + row
    return x.arch.l1_base + _rms_norm_stream_bytes(x, compute_kernel_config, residual, weight, bias)


def _row_major_affine(weight: TensorDesc | None, bias: TensorDesc | None) -> bool:
    """A ROW_MAJOR weight or bias: the interleaved rms_norm's kernel for it has no streaming variant."""
    return any(g is not None and g.layout == ttnn.ROW_MAJOR_LAYOUT for g in (weight, bias))


def _fits_rms_norm_span(x: TensorDesc, cb_bytes: int, floor: int | None) -> bool:
    """ttnn's test for the interleaved rms_norm's buffers: at most 95% of the L1 span from the allocator base to
    `floor`."""
    return cb_bytes <= 0.95 * (_below(x, floor) - x.arch.l1_base)


def _below(x: TensorDesc, floor: int | None) -> int:
    """Where x's architecture's L1 ends for a program whose tensors' lowest L1 buffer starts at `floor`."""
    return x.arch.l1_size if floor is None else min(floor, x.arch.l1_size)


def _rms_norm_formats(x: TensorDesc, compute_kernel_config) -> tuple[int, int, int]:
    """(dst block in tiles, compute-format tile bytes, bf16 tile bytes) of the interleaved rms_norm."""
    fp32_acc = compute_flags(compute_kernel_config).fp32_dest_acc_en
    return (4 if fp32_acc else 8), TILE_BYTES[ttnn.float32 if fp32_acc else ttnn.bfloat16], TILE_BYTES[ttnn.bfloat16]


def _rms_norm_row_bytes(x, compute_kernel_config, residual, weight, bias) -> int:
    """The whole-row buffers: the row rounded up to the dst block (4 tiles with fp32_dest_acc_en, else 8) in the
    input (or, with a residual, the sum), x^2 and each affine operand, two blocks of output and of residual."""
    block, single, bf16 = _rms_norm_formats(x, compute_kernel_config)
    row = -(-(x.padded_width // TILE) // block) * block
    total = (row if residual is None else 2 * block) * x.tile_bytes()  # in0: the row, or a block pair with a residual
    total += 2 * block * x.tile_bytes() + 4 * bf16 + 2 * single + row * single + 8 * single  # out, scaler, eps, im2-4
    if residual is not None:
        total += row * single + 2 * block * residual.tile_bytes()  # the sum x + residual, the residual
    if weight is not None or bias is not None:
        total += 2 * block * single  # the normalized row on its way to the affine
    total += sum(row * g.tile_bytes() for g in (weight, bias) if g is not None)
    return total


def _rms_norm_stream_bytes(x, compute_kernel_config, residual, weight, bias) -> int:
    """The streaming buffers, at any width (calibrated on ttnn's reported sizes on a mock N150): three dst blocks of
    input/output, two blocks and eleven tiles in the compute format, the scaler and epsilon; a residual adds two
    blocks of its own and one of the input's format, each affine operand a block, and any affine two compute blocks."""
    block, single, bf16 = _rms_norm_formats(x, compute_kernel_config)
    total = 3 * block * x.tile_bytes() + (2 * block + 11) * single + 4 * bf16
    if residual is not None:
        total += 2 * block * residual.tile_bytes() + block * x.tile_bytes()
    if weight is not None or bias is not None:
        total += 2 * block * single
    total += sum(block * g.tile_bytes() for g in (weight, bias) if g is not None)
    return total


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
    compute_grid=None,
    inplace: bool = False,
) -> tuple[int, int]:
    """(end of the static dataflow buffers, lowest L1 shard address) of the sharded factory
    (sharded_layernorm_factory_helpers: DFBSizeParams, add_dataflow_buffer_specs) for op 'pre', 'post' or 'rms_norm'.
    With `inplace` (the program config's) the post and rms_norm write their output over the input's shards: no
    output shard of its own.

    The input, residual, stats and (unless it is resharded) output buffers borrow their tensors' shards; every other
    buffer is allocated statically from the allocator base up, while tensor shards are allocated from the top of L1
    down, at the same address on every core. ttnn rejects the program when the static region passes the lowest shard."""
    compute_grid = compute_grid or x.arch.default_compute_grid
    shard_h, shard_w = x.shard_spec.shape
    block_ht, block_wt = shard_h // TILE, shard_w // TILE
    kt = x.padded_width // TILE
    single = TILE_BYTES[ttnn.float32 if compute_flags(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    bf16 = TILE_BYTES[ttnn.bfloat16]
    gx, gy = bbox_extent(x.shard_spec)
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
    in_place = inplace and op != "pre"
    resharded = op == "post" and not in_place and memory_config is not None and memory_config != x.memory_config
    out_shard = block_ht * block_wt * TILE_BYTES[out_dtype]
    if resharded:
        static += out_shard
    if in_place:
        out_shard = 0
    elif op == "pre":
        out_shard = bf16
    elif memory_config is not None and memory_config.is_sharded() and memory_config.shard_spec is not None:
        oh, ow = memory_config.shard_spec.shape
        out_shard = (oh // TILE) * (ow // TILE) * TILE_BYTES[out_dtype]
    shards = shard_bytes(x) + shard_bytes(residual) + shard_bytes(stats) + out_shard
    return x.arch.l1_base + static, x.arch.l1_size - shards


def shard_bytes(t: TensorDesc | None) -> int:
    """Bytes of one core's shard of an L1-sharded tensor (0 for anything else)."""
    if t is None or not t.is_sharded or t.memory_config.buffer_type != ttnn.BufferType.L1:
        return 0
    h, w = t.shard_spec.shape
    if t.layout == ttnn.TILE_LAYOUT:
        return (h // TILE) * (w // TILE) * t.tile_bytes()
    return h * w * DTYPE_BYTES.get(t.dtype, 2)


def _bank_bytes(t: TensorDesc | None, banks: int) -> int:
    """Bytes a tensor takes at the top of every core's L1: its shard, or its share of an L1-interleaved buffer (pages
    dealt round-robin over `banks`, one per core of the compute grid). DRAM and host tensors take none."""
    if t is None or not t.on_device or t.memory_config.buffer_type != ttnn.BufferType.L1:
        return 0
    if t.is_sharded:
        return shard_bytes(t)
    if t.layout == ttnn.TILE_LAYOUT:
        pages, page = math.prod(t.padded_shape) // (TILE * TILE), t.tile_bytes()
    else:
        pages, page = math.prod(t.padded_shape[:-1]), t.padded_width * DTYPE_BYTES.get(t.dtype, 2)
    return -(-pages // banks) * page


def l1_floor(grid, x: TensorDesc, *tensors) -> int:
    """The lowest L1 address of the buffers of `x` and the other tensors (allocated from the top of x's
    architecture's L1 down)."""
    return x.arch.l1_size - sum(_bank_bytes(t, grid[0] * grid[1]) for t in (x, *tensors))


def pre_l1_floor(grid, x: TensorDesc, residual: TensorDesc | None, out: TensorDesc) -> int:
    """The lowest L1 address of the interleaved pre's tensors. A bfloat8_b input or residual in L1 whose rows are off
    the tile grid reaches the factory as a copy: ttnn fills its tile padding through a bfloat16 copy, typecast back to
    bfloat8_b below it. The bfloat16 copies are freed and leave one hole of that size at the copy's place (the
    residual's copy reuses the input's), where the stats output then goes."""
    banks = grid[0] * grid[1]
    refilled = [t for t in (x, residual) if t is not None and _refills_padding(t) and _bank_bytes(t, banks)]
    if not refilled:
        return l1_floor(grid, x, residual, out)
    bf16_copy = TensorDesc(
        refilled[0].shape, dtype=ttnn.bfloat16, memory_config=refilled[0].memory_config, arch=refilled[0].arch
    )
    hole = _bank_bytes(bf16_copy, banks)
    copies = hole + sum(_bank_bytes(t, banks) for t in refilled)
    return l1_floor(grid, x, residual) - copies - max(0, _bank_bytes(out, banks) - hole)


def _refills_padding(t: TensorDesc) -> bool:
    """A bfloat8_b TILE tensor whose rows are off the tile grid: ttnn refills its padding through a bfloat16 copy."""
    return t.dtype == ttnn.bfloat8_b and t.layout == ttnn.TILE_LAYOUT and t.shape[-2] % TILE != 0


def output_desc(x: TensorDesc, shape, dtype, memory_config) -> TensorDesc:
    return TensorDesc(tuple(shape), dtype=dtype or x.dtype, memory_config=memory_config or x.memory_config, arch=x.arch)


def check_l1(needed: int, op: str, x: TensorDesc, floor: int | None = None):
    """ttnn rejects the program when its circular buffers pass the end of L1 or the lowest L1 buffer of its tensors."""
    check_l1_model_version()
    l1_size = x.arch.l1_size
    if needed > _below(x, floor):
        below = f", below its tensors' L1 buffers from {floor} B" if floor is not None and floor < l1_size else ""
        fail(
            f"{op}.l1_budget",
            f"the interleaved {op} keeps the whole local row in one core's L1 ({l1_size} B on {x.arch}{below}) and "
            f"needs {needed} B",
            f"local width {x.padded_width} {enum_name(x.dtype)}",
            "shard the hidden dim over more devices, use bfloat8_b input, keep the input in DRAM, or turn "
            f"fp32_dest_acc_en off (L1 model of ttnn {L1_MODEL_TTNN_VERSION})",
        )


def check_sharded_l1(op: str, x: TensorDesc, **kw):
    """The sharded factory's work split (reduce workers) and its L1, on the device's compute grid."""
    check_reduce_workers(x, x.shard_spec.shape[0] // TILE, kw["compute_grid"])
    end, floor = sharded_l1_bytes(op, x, **kw)
    if end > _below(x, floor):
        fail(
            "sharded.l1_budget",
            f"the sharded {op}'s circular buffers end at {end} B of L1, above its tensors' shards (from {floor} B)",
            f"shard {list(x.shard_spec.shape)} {enum_name(x.dtype)} on {x.shard_spec.grid.num_cores()} cores",
            "shard the width over more cores (smaller shards), or turn fp32_dest_acc_en off",
        )


def check_rms_norm_l1(x: TensorDesc, compute_kernel_config, residual, weight, bias, memory_config, grid):
    """The interleaved rms_norm's buffers end below the end of L1 and below its tensors' L1 buffers; the tiled kernels
    (whole row or streamed) take at most 95% of the span below them."""
    floor = l1_floor(grid, x, residual, weight, bias, output_desc(x, x.shape, None, memory_config))
    needed = rms_norm_l1_bytes(x, compute_kernel_config, residual, weight, bias, floor)
    if _row_major_affine(weight, bias):
        if needed > _below(x, floor):
            fail(
                "rms_norm.l1_budget",
                f"the interleaved rms_norm's buffers end at {needed} B of L1, above {_below(x, floor)} B (the end"
                f" of {x.arch}'s L1 or its tensors' L1 buffers)",
                f"width {x.padded_width} {enum_name(x.dtype)}, ROW_MAJOR weight/bias (no streaming variant)",
                "use a TILE weight/bias [1, 1, 1, W] (ttnn then streams the row), or turn fp32_dest_acc_en off",
            )
    elif not _fits_rms_norm_span(x, needed - x.arch.l1_base, floor):
        span = _below(x, floor) - x.arch.l1_base
        fail(
            "rms_norm.l1_budget",
            f"the interleaved rms_norm streams the row and its streaming buffers need {needed - x.arch.l1_base} B, "
            "above 95%"
            f" of the {span} B of L1 below its tensors' L1 buffers (from {floor} B)",
            f"width {x.padded_width} {enum_name(x.dtype)}",
            "keep the residual, weight or output in DRAM, or shard the L1 tensor over more cores (smaller shards)",
        )
