"""Program, memory and compute-kernel configs for the distributed RMSNorm, derived from shape, grid and shard strategy.

- interleaved (prefill): `LayerNormDefaultProgramConfig`, DRAM-interleaved activations;
- sharded (decode, padded height 32): `LayerNormShardedMultiCoreProgramConfig` over a width- (or block-) sharded L1
  input, stats gathered onto one core (`stats_memory_config`).

`choose_layout` picks between them from the shape; every choice here is accepted by the rules in
`tt_rmsnorm.rules.op_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ttnn
from loguru import logger

from tt_rmsnorm.architecture import architecture
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.rules import l1_budget
from tt_rmsnorm.rules.common import enum_name, max_subblock_w
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.tiles import TILE, one_tile_row, tile_padded

WIDTH, BLOCK = "width", "block"
# Decode norm grids in tt-metal model code use 16-32 cores (1-4 tiles each): with more, multicasting the partial
# stats between cores costs more than the tiny per-core work saves.
MAX_DECODE_CORES = 32
# Tiles of the local width each core of a decode (sharded) norm holds: TG Llama's 2048 per device on 16 cores, the grid
# with published device timings (12.5 us / 10.9 us for pre + post on Galaxy 4U / 6U).
DECODE_TILES_PER_CORE = 4

# Where the planner's choices depart from what tt-metal's tests and model code usually pass, and why: key -> (summary,
# reason). NormPlan.reasons picks the keys that apply to a plan; docs/planner.md has the evidence.
PLANNER_REASONS = {
    "fp32_dest_acc_en": (
        "fp32 accumulation (a bf16 dest loses sum(x^2) precision)",
        "fp32_dest_acc_en=True (ttnn's default is False): sum(x^2) over 1024-8192 elements in a bf16 dest register "
        "keeps ~8 bits; tt-metal's own pre test needs rtol 0.1*W without it (its issue 9908) and its distributed "
        "helpers and models/common/rmsnorm.py turn it on. Off only where the interleaved pre's row does not fit L1 "
        "with it",
    ),
    "math_fidelity": (
        "HiFi3 (ttnn warns HiFi4 with fp32 accumulation is less accurate on Wormhole)",
        "HiFi3 with fp32 accumulation on Wormhole, HiFi4 otherwise: ttnn 0.81.1 itself warns that on Wormhole fp32 "
        "accumulation with HiFi4 can be less accurate than HiFi3 (a hardware bug) and to prefer HiFi3; tt-metal's "
        "models use HiFi2 there. Blackhole has no such bug (tt_rmsnorm.architecture) and keeps HiFi4",
    ),
    "legacy_reduction": (
        "new reduction (keeps the post's reduction in fp32)",
        "legacy_reduction=False, as ttnn's default and tt-metal's exhaustive and ULP tests (thresholds stated 'with "
        "new reduction'); its allclose test also runs True, with no tighter bound. False keeps the post's reduction "
        "in fp32",
    ),
    "use_2d_core_grid": (
        "no 2-D grid (wrong output in 0.81.1: #35435, #56908)",
        "use_2d_core_grid never: tt-metal's own reproducer of #35435 xfails with it (bad PCC), its exhaustive 2-D "
        "test is skipped for accuracy, and #56908 (rows corrupted when a core owns several row tiles) is fixed after "
        "0.81.1; the 2-D pre also needs more L1. Galaxy model code hard-codes it off",
    ),
    "decode_grid": (
        "4 tiles per core (tt-metal's TG Llama decode grid)",
        f"decode grid: {DECODE_TILES_PER_CORE} tiles of the local width per core (2048 -> 16 cores), tt-metal's TG "
        "Llama grid, the one with published timings; rows of cores filled first (8x2 as tt-metal's post test, where "
        "TG Llama lays the same 16 cores out 2x8 around its prefetcher). tt-metal's 1x4 for 1024 is a test of the "
        "one-column reduce, not a model choice; 1024 gets 8x1 (4 tiles per core). An activation that arrives "
        "sharded keeps its own grid (DeepSeek's 4x7 for 896 follows its matmuls' sharding)",
    ),
    "subblock_w": (
        "largest subblock_w within the dst limit",
        "subblock_w = the largest divisor of block_w within the dst limit (4 with fp32 accumulation, 8 without), as "
        "tt-metal's create_sharded_norm_config; tt-metal's TG Llama test passes 1, which adds dst round trips",
    ),
}


def compute_kernel_config(
    *, fp32_dest_acc_en: bool = True, math_fidelity=None, dst_full_sync_en: bool = False, arch=None
):
    """Defaults for RMSNorm on `arch` (None: the default architecture), with the reason for each (PLANNER_REASONS:
    the departures from tt-metal's usual configs):

    - math_fidelity HiFi4, except HiFi3 with fp32 accumulation on Wormhole: x*x and x*rsqrt go through the FPU
      multiplier and lower fidelities drop mantissa bits of bf16 operands (LoFi keeps ~4 of 7), but on Wormhole HiFi4
      with fp32 accumulation can be less accurate than HiFi3 (a hardware bug ttnn 0.81.1 warns about);
    - math_approx_mode False: RMSNorm's one transcendental (rsqrt) should be exact; the cost is one op per row;
    - fp32_dest_acc_en True: the sum of squares over 1024-8192 elements accumulated in a bf16 dest register loses most
      of its 8 bits (tt-metal's pre test needs rtol 0.1*W without it); costs L1 on the interleaved pre (its local width
      limit drops from 7168 to ~4096 bf16) - `distributed_rms_norm` turns it off, with a warning, where it does not fit;
    - packer_l1_acc False: these kernels pack each tile once; L1 accumulation only helps multi-pass matmul packing;
    - dst_full_sync_en False: double-buffered dest; keeps subblock_w <= 4 (fp32) which the sharded configs respect.
    """
    hifi4_bug = fp32_dest_acc_en and architecture(arch).hifi4_fp32_accuracy_bug
    default_fidelity = ttnn.MathFidelity.HiFi3 if hifi4_bug else ttnn.MathFidelity.HiFi4
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=math_fidelity or default_fidelity,
        math_approx_mode=False,
        fp32_dest_acc_en=fp32_dest_acc_en,
        packer_l1_acc=False,
        dst_full_sync_en=dst_full_sync_en,
    )


_default_compute = compute_kernel_config  # `plan` has a parameter of the same name


def interleaved_program_config():
    """legacy_reduction=False keeps the fp32 reduction in the post when fp32_dest_acc_en is on (PLANNER_REASONS
    "legacy_reduction"); no Welford for RMS (ttnn refuses it)."""
    return ttnn.LayerNormDefaultProgramConfig(legacy_reduction=False, use_welford=False)


def choose_layout(shape, sharded: bool | None = None) -> str:
    """'sharded' only where the activation is one tile row high (padded height 32, batch 1): the sharded distributed
    ops accept nothing taller. `sharded=True/False` overrides; True on a taller shape raises RuleError."""
    fits = one_tile_row(shape)
    if sharded is None:
        return "sharded" if fits else "interleaved"
    if sharded and not fits:
        raise RuleError(
            "sharded.height_32",
            "the sharded layout of the distributed ops needs one tile row (padded height 32, batch 1)",
            f"shape {tuple(shape)}",
            "use sharded=False (the interleaved layout, as prefill) or at most 32 rows",
        )
    return "sharded" if sharded else "interleaved"


def width_shard_grid(
    padded_width: int,
    compute_grid,
    max_cores: int | None = None,
    tiles_per_core: int = DECODE_TILES_PER_CORE,
) -> tuple[int, int]:
    """The largest rectangle of cores (x, y) inside compute_grid whose core count divides the width in tiles, with at
    least `tiles_per_core` tiles on each core (PLANNER_REASONS "decode_grid"); one core for narrower widths.

    Rows are filled first (x up to the grid width), as tt_transformers lays out its norm grids."""
    kt = padded_width // TILE
    gx, gy = compute_grid
    best = (1, 1)
    for n in range(1, min(max(kt // tiles_per_core, 1), gx * gy, max_cores or gx * gy) + 1):
        if kt % n:
            continue
        x = min(n, gx)
        while n % x:
            x -= 1
        y = n // x
        if y <= gy:
            best = (x, y)
    return best


def _grid_range(grid: tuple[int, int]):
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(grid[0] - 1, grid[1] - 1))})


def _shard_shape(padded_shape, grid, strategy) -> tuple[int, int]:
    rows = 1
    for d in padded_shape[:-1]:
        rows *= d
    width = padded_shape[-1]
    gx, gy = grid
    if strategy == WIDTH:
        n = gx * gy
        return rows, -(-(width // TILE) // n) * TILE
    return -(-(rows // TILE) // gy) * TILE, -(-(width // TILE) // gx) * TILE


def sharded_memory_config(shape, grid: tuple[int, int], strategy: str = WIDTH):
    """L1 memory config sharding a (per-device) activation over `grid` = (x, y) cores, ROW_MAJOR orientation."""
    padded = tile_padded(tuple(shape))
    layout = ttnn.TensorMemoryLayout.WIDTH_SHARDED if strategy == WIDTH else ttnn.TensorMemoryLayout.BLOCK_SHARDED
    spec = ttnn.ShardSpec(
        _grid_range(grid), list(_shard_shape(padded, grid, strategy)), ttnn.ShardOrientation.ROW_MAJOR
    )
    return ttnn.MemoryConfig(layout, ttnn.BufferType.L1, spec)


def _largest_divisor_at_most(n: int, limit: int) -> int:
    """1 for a block of no tiles (a shard narrower than a tile): the rules then refuse the block, not this."""
    if n < 1:
        return 1
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def sharded_program_config(shape, grid: tuple[int, int], strategy: str = WIDTH, compute_kernel_config=None):
    """LayerNormShardedMultiCoreProgramConfig for `shape` sharded as `sharded_memory_config(shape, grid, strategy)`:
    block_w/block_h are the shard in tiles, subblock_w the largest divisor of block_w within the dst limit
    (PLANNER_REASONS "subblock_w")."""
    shard_h, shard_w = _shard_shape(tile_padded(tuple(shape)), grid, strategy)
    block_w = shard_w // TILE
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(grid[0], grid[1]),
        subblock_w=_largest_divisor_at_most(block_w, max_subblock_w(compute_kernel_config)),
        block_h=shard_h // TILE,
        block_w=block_w,
        inplace=False,
    )


def program_config_from_shard_spec(shard_spec, compute_kernel_config=None):
    """The sharded program config matching an existing sharded input (as ttnn.create_layernorm_program_config, but
    with subblock_w as large as the dst limit allows)."""
    box = shard_spec.grid.bounding_box()
    shard_h, shard_w = shard_spec.shape
    block_w = shard_w // TILE
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(box.end.x - box.start.x + 1, box.end.y - box.start.y + 1),
        subblock_w=_largest_divisor_at_most(block_w, max_subblock_w(compute_kernel_config)),
        block_h=shard_h // TILE,
        block_w=block_w,
        inplace=False,
    )


def stats_memory_config(num_devices: int, rows: int = TILE):
    """The gathered stats of the sharded layout: one core, WIDTH_SHARDED L1, shard [rows, 32 * num_devices]."""
    spec = ttnn.ShardSpec(_grid_range((1, 1)), [rows, TILE * num_devices], ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1, spec)


@dataclass(frozen=True)
class NormPlan:
    """Everything `distributed_rms_norm` hands to ttnn for one per-device activation shape."""

    layout: str  # "interleaved" | "sharded"
    local_shape: tuple[int, ...]
    num_devices: int
    program_config: object
    compute_kernel_config: object
    input_memory_config: object  # what the activation is moved to before the pre (None: leave it)
    stats_memory_config: object
    grid: tuple[int, int] | None

    def describe(self) -> str:
        c = self.compute_kernel_config
        compute = (
            "compute: ttnn's default (HiFi4, approximate, bf16 accumulation)"
            if c is None
            else f"compute {enum_name(c.math_fidelity)} fp32_acc={c.fp32_dest_acc_en} approx={c.math_approx_mode}"
        )
        if self.layout == "sharded":
            pc = self.program_config
            grid = pc.compute_with_storage_grid_size
            shard = (
                "input already sharded (kept)"
                if self.input_memory_config is None
                else f"input WIDTH_SHARDED L1 shard {list(self.input_memory_config.shard_spec.shape)}"
            )
            cfg = (
                f"LayerNormShardedMultiCoreProgramConfig(grid={grid.x}x{grid.y}, block_w={pc.block_w}, "
                f"block_h={pc.block_h}, subblock_w={pc.subblock_w}); {shard}; "
                f"stats on 1 core {list(self.stats_memory_config.shard_spec.shape)}"
            )
        else:
            cfg = "LayerNormDefaultProgramConfig(legacy_reduction=False); input/stats/output DRAM interleaved"
        why = "; ".join(PLANNER_REASONS[key][0] for key in self.reasons)
        return f"{self.layout}: {cfg}; {compute}; why: {why}"

    def explain(self) -> str:
        """One line per choice of this plan that departs from tt-metal's usual configs, with its full reason."""
        return "\n".join(f"{key}: {PLANNER_REASONS[key][1]}" for key in self.reasons)

    @property
    def reasons(self) -> tuple[str, ...]:
        """The PLANNER_REASONS keys behind this plan's choices where they differ from tt-metal's usual layouts."""
        c = self.compute_kernel_config
        keys = [] if c is None else ["fp32_dest_acc_en"]
        if c is not None and c.fp32_dest_acc_en and c.math_fidelity == ttnn.MathFidelity.HiFi3:
            keys.append("math_fidelity")
        keys += ["decode_grid", "subblock_w"] if self.layout == "sharded" else ["legacy_reduction", "use_2d_core_grid"]
        return tuple(keys)


def plan(
    local_shape,
    num_devices: int,
    *,
    compute_grid=None,
    arch=None,
    dtype=ttnn.bfloat16,
    sharded: bool | None = None,
    program_config=None,
    compute_kernel_config=None,
    grid: tuple[int, int] | None = None,
    strategy: str = WIDTH,
    fp32_accumulation: bool = True,
) -> NormPlan:
    """Choose the layout and configs for a per-device activation of `local_shape` on a device of architecture `arch`
    (None: the default) with `compute_grid` (None: the architecture's default grid). Without a
    `compute_kernel_config`, the package's (fp32 accumulation) where `fp32_accumulation`, else None: ttnn's own
    default, which the ops then resolve (HiFi4, approximate, bf16 accumulation)."""
    local_shape = tuple(local_shape)
    arch = architecture(arch)
    compute_grid = tuple(compute_grid or arch.default_compute_grid)
    layout = choose_layout(local_shape, sharded)
    if layout == "sharded":
        cfg = compute_kernel_config
        if cfg is None and fp32_accumulation:
            cfg = _default_compute(arch=arch)
        g = grid or width_shard_grid(tile_padded(local_shape)[-1], compute_grid, max_cores=MAX_DECODE_CORES)
        return NormPlan(
            layout=layout,
            local_shape=local_shape,
            num_devices=num_devices,
            program_config=program_config or sharded_program_config(local_shape, g, strategy, cfg),
            compute_kernel_config=cfg,
            input_memory_config=sharded_memory_config(local_shape, g, strategy),
            stats_memory_config=stats_memory_config(num_devices),
            grid=g,
        )
    cfg = compute_kernel_config
    if cfg is None and fp32_accumulation:
        fits = (
            l1_budget.pre_l1_bytes(
                TensorDesc(local_shape, dtype=dtype, arch=arch), _default_compute(fp32_dest_acc_en=True, arch=arch)
            )
            <= arch.l1_size
        )
        if not fits and dtype != ttnn.float32:  # FLOAT32 input needs fp32 accumulation whatever it costs
            logger.warning(
                f"local width {local_shape[-1]} does not fit the interleaved pre with fp32_dest_acc_en: "
                "using bf16 accumulation"
            )
        cfg = _default_compute(fp32_dest_acc_en=fits or dtype == ttnn.float32, arch=arch)
    return NormPlan(
        layout=layout,
        local_shape=local_shape,
        num_devices=num_devices,
        program_config=program_config or interleaved_program_config(),
        compute_kernel_config=cfg,
        input_memory_config=None,
        stats_memory_config=ttnn.DRAM_MEMORY_CONFIG,
        grid=None,
    )
