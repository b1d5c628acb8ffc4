"""Hypothesis strategies for every argument ttnn's RMSNorm and CCL ops take, as the rules see them: `TensorDesc`s of any
dtype, layout, memory layout and buffer type (shard specs that fit their tensor or not), ranks 1 to 4 with dims on and
off the tile grid (0 and 1 included), host storage, stats kinds; program and compute kernel configs with any field
values ttnn constructs; the meshes and compute grids of the mock systems, Wormhole and Blackhole, and each tensor's
architecture (the arguments drawn against an input share its architecture); and the keyword values of each entry
point.

No device is opened: ttnn's Python objects (memory configs, shard specs, program configs) are built on the host."""

from __future__ import annotations

import math

import ttnn
from hypothesis import strategies as st

from tt_rmsnorm.architecture import ARCHITECTURES
from tt_rmsnorm.op_outputs import fused_stats_desc
from tt_rmsnorm.rules.ccl_checks import SemaphoreDesc
from tt_rmsnorm.tensors import STATS_KINDS, TensorDesc
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES
from tt_rmsnorm.tiles import TILE

DTYPES = (
    ttnn.bfloat16,
    ttnn.float32,
    ttnn.bfloat8_b,
    ttnn.bfloat4_b,
    ttnn.int32,
    ttnn.uint32,
    ttnn.uint16,
    ttnn.uint8,
)
LAYOUTS = (ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT)
SHARDED = (
    ttnn.TensorMemoryLayout.HEIGHT_SHARDED,
    ttnn.TensorMemoryLayout.WIDTH_SHARDED,
    ttnn.TensorMemoryLayout.BLOCK_SHARDED,
)
BUFFERS = (ttnn.BufferType.DRAM, ttnn.BufferType.L1)
ORIENTATIONS = (ttnn.ShardOrientation.ROW_MAJOR, ttnn.ShardOrientation.COL_MAJOR)
# compute_with_storage_grid_size of each mock system as tt_rmsnorm.testing.mock_cluster.open_mesh opens it
GRIDS = {
    "n150": (8, 8),
    "n300": (8, 7),
    "t3k": (8, 7),
    "galaxy": (8, 9),
    "p150": (13, 10),
    "p300": (11, 10),
    "bh-galaxy": (12, 10),
}
SYSTEMS = tuple(MESH_SHAPES)
ARCHES = tuple(ARCHITECTURES)

# Dims where verdicts change: empty, one, around a tile, tile multiples, widths at the L1 limits of the ops.
EDGE_DIMS = (0, 1, 2, 7, 31, 32, 33, 63, 64, 96, 100, 128, 256, 1000, 1024, 2048, 4096, 8192, 12288, 24576)


def mostly(common: st.SearchStrategy, rare: st.SearchStrategy, odds: int = 4) -> st.SearchStrategy:
    """`common` in `odds` of `odds + 1` draws, else `rare` (hypothesis' one_of picks its branches about evenly)."""
    return st.sampled_from((True,) * odds + (False,)).flatmap(lambda c: common if c else rare)


def dims() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(EDGE_DIMS), st.integers(0, 70000))


@st.composite
def shapes(draw, min_rank: int = 1, max_rank: int = 4) -> tuple[int, ...]:
    """Mostly rank 4 (what the distributed ops take), with a batch of 1 and one tile row or a few."""
    rank = draw(st.sampled_from([r for r in (4, 4, 4, 4, 3, 2, 1) if min_rank <= r <= max_rank]))
    small = st.sampled_from((1, 1, 1, 1, 0, 2, 3, 8))  # batch dims: mostly 1
    rows = st.one_of(st.sampled_from((1, 7, 32, 32, 32, 33, 64, 128)), dims())
    lead = [draw(small) for _ in range(max(0, rank - 2))]
    tail = [draw(rows), draw(dims())] if rank >= 2 else [draw(dims())]
    return (*lead, *tail)


def _rect(x0: int, y0: int, nx: int, ny: int) -> ttnn.CoreRangeSet:
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(x0, y0), ttnn.CoreCoord(x0 + nx - 1, y0 + ny - 1))})


@st.composite
def core_grids(draw, max_x: int = 14, max_y: int = 12) -> ttnn.CoreRangeSet:
    """One rectangle of cores (possibly off the device's grid), or two disjoint ones side by side."""
    x0, y0 = draw(st.integers(0, max_x - 1)), draw(st.integers(0, max_y - 1))
    x1, y1 = draw(st.integers(x0, max_x - 1)), draw(st.integers(y0, max_y - 1))
    ranges = [ttnn.CoreRange(ttnn.CoreCoord(x0, y0), ttnn.CoreCoord(x1, y1))]
    if x1 + 2 < max_x and draw(st.booleans()):
        x2 = draw(st.integers(x1 + 1, max_x - 1))
        ranges.append(ttnn.CoreRange(ttnn.CoreCoord(x2, y0), ttnn.CoreCoord(x2, draw(st.integers(y0, max_y - 1)))))
    return ttnn.CoreRangeSet(set(ranges))


def shard_dims() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from((0, 1, 16, 32, 32, 64, 96, 128, 256, 1024)), st.integers(0, 4096))


@st.composite
def shard_specs(draw) -> ttnn.ShardSpec:
    shape = [draw(shard_dims()), draw(shard_dims())]
    return ttnn.ShardSpec(draw(core_grids()), shape, draw(st.sampled_from(ORIENTATIONS)))


def _tiles(n: int) -> int:
    return -(-n // TILE) * TILE


@st.composite
def fitting_shard_specs(draw, padded_shape, layout) -> ttnn.ShardSpec:
    """A shard spec that covers a tensor of `padded_shape` with `layout` on a rectangle of cores."""
    rows, width = math.prod(padded_shape[:-1]), padded_shape[-1]
    nx, ny = draw(st.sampled_from((1, 2, 4, 8))), draw(st.sampled_from((1, 1, 2, 4, 7, 8)))
    x0 = draw(st.sampled_from((0, 0, 0, 1, 8 - nx)))
    y0 = draw(st.sampled_from((0, 0, 0, 1, 8 - ny)))
    orientation = draw(st.sampled_from(ORIENTATIONS))
    n = nx * ny
    if layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED:
        shape = [rows, _tiles(-(-width // n))]
    elif layout == ttnn.TensorMemoryLayout.HEIGHT_SHARDED:
        shape = [_tiles(-(-rows // n)), width]
    else:
        across, down = (nx, ny) if orientation == ttnn.ShardOrientation.ROW_MAJOR else (ny, nx)
        shape = [_tiles(-(-rows // down)), _tiles(-(-width // across))]
    return ttnn.ShardSpec(_rect(max(0, x0), max(0, y0), nx, ny), shape, orientation)


@st.composite
def sharded_memory_configs(draw, with_spec: bool = True, padded_shape=None) -> ttnn.MemoryConfig:
    """A sharded config; with `padded_shape`, half of them fit a tensor of that shape."""
    layout = draw(st.sampled_from(SHARDED))
    buffer = draw(st.sampled_from((ttnn.BufferType.L1, ttnn.BufferType.L1, ttnn.BufferType.DRAM)))
    if not with_spec:
        return ttnn.MemoryConfig(layout, buffer)
    fit = padded_shape is not None and all(padded_shape) and draw(st.booleans())
    spec = draw(fitting_shard_specs(padded_shape, layout) if fit else shard_specs())
    return ttnn.MemoryConfig(layout, buffer, spec)


def interleaved_memory_configs() -> st.SearchStrategy[ttnn.MemoryConfig]:
    return st.sampled_from((ttnn.DRAM_MEMORY_CONFIG, ttnn.DRAM_MEMORY_CONFIG, ttnn.L1_MEMORY_CONFIG))


def tensor_memory_configs(padded_shape=None) -> st.SearchStrategy[ttnn.MemoryConfig]:
    """A tensor's memory config: a sharded tensor always carries its shard spec."""
    return st.one_of(interleaved_memory_configs(), sharded_memory_configs(padded_shape=padded_shape))


def output_memory_configs(padded_shape=None) -> st.SearchStrategy[ttnn.MemoryConfig | None]:
    """An op's memory_config argument: none, interleaved, sharded, or sharded with the shard spec left to the op."""
    return st.one_of(
        st.none(),
        interleaved_memory_configs(),
        sharded_memory_configs(padded_shape=padded_shape),
        sharded_memory_configs(with_spec=False),
    )


def dtypes() -> st.SearchStrategy:
    """Every dtype, the norms' own (bfloat16, bfloat8_b, float32) drawn more often."""
    return st.one_of(st.sampled_from(DTYPES), st.sampled_from((ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)))


def _padded(shape, layout) -> tuple[int, ...]:
    return TensorDesc(shape, layout=layout).padded_shape


def arches() -> st.SearchStrategy[str]:
    return st.sampled_from(ARCHES)


@st.composite
def tensors(draw, min_rank: int = 1, max_rank: int = 4, shape=None, stats_kind=None, arch=None) -> TensorDesc:
    shape = draw(shapes(min_rank, max_rank)) if shape is None else shape
    layout = draw(st.sampled_from((ttnn.TILE_LAYOUT, ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT)))
    return TensorDesc(
        shape,
        dtype=draw(dtypes()),
        layout=layout,
        memory_config=draw(tensor_memory_configs(_padded(shape, layout))),
        on_device=draw(st.sampled_from((True, True, True, False))),
        stats_kind=draw(st.none() | st.sampled_from(STATS_KINDS)) if stats_kind is None else stats_kind,
        arch=draw(arches()) if arch is None else arch,
    )


def optional_tensors(**kw) -> st.SearchStrategy[TensorDesc | None]:
    return st.none() | tensors(**kw)


@st.composite
def sharded_program_configs(draw) -> ttnn.LayerNormShardedMultiCoreProgramConfig:
    small = st.one_of(st.integers(0, 9), st.integers(0, 300))
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(draw(st.integers(0, 12)), draw(st.integers(0, 12))),
        subblock_w=draw(small),
        block_h=draw(small),
        block_w=draw(small),
        inplace=draw(st.booleans()),
        use_welford=draw(st.booleans()),
    )


@st.composite
def default_program_configs(draw) -> ttnn.LayerNormDefaultProgramConfig:
    return ttnn.LayerNormDefaultProgramConfig(legacy_reduction=draw(st.booleans()), use_welford=draw(st.booleans()))


def program_configs() -> st.SearchStrategy:
    return st.one_of(st.none(), default_program_configs(), sharded_program_configs())


@st.composite
def compute_kernel_configs(draw):
    if draw(st.booleans()):
        return None
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=draw(st.sampled_from((ttnn.MathFidelity.LoFi, ttnn.MathFidelity.HiFi2, ttnn.MathFidelity.HiFi4))),
        math_approx_mode=draw(st.booleans()),
        fp32_dest_acc_en=draw(st.booleans()),
        packer_l1_acc=draw(st.booleans()),
        dst_full_sync_en=draw(st.booleans()),
    )


def systems() -> st.SearchStrategy[str]:
    return st.sampled_from(SYSTEMS)


def compute_grids() -> st.SearchStrategy[tuple[int, int]]:
    """The mock systems' grids, and any other grid a device might report."""
    return mostly(st.sampled_from(tuple(GRIDS.values())), st.tuples(st.integers(1, 14), st.integers(1, 12)))


def out_dtypes() -> st.SearchStrategy:
    return st.none() | st.sampled_from(DTYPES)


def epsilons() -> st.SearchStrategy[float | None]:
    return mostly(st.sampled_from((1e-5, 1e-6, 1e-12, 0.0, None)), st.floats())


def dims_of_rank() -> st.SearchStrategy[int]:
    return st.integers(-6, 6)


def cluster_axes() -> st.SearchStrategy:
    return st.one_of(st.none(), st.integers(-2, 3))


def num_links() -> st.SearchStrategy:
    return st.one_of(st.none(), st.integers(-1, 6))


@st.composite
def semaphores(draw) -> SemaphoreDesc | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    count = draw(st.integers(0, 3))
    ids = draw(st.one_of(st.just(()), st.lists(st.integers(0, 4), min_size=count, max_size=count).map(tuple)))
    return SemaphoreDesc(draw(core_grids()), count, ids)


# ---------------------------------------------------------------------------------------------------------------------
# Arguments drawn against an input: half of them fit it (so that the deeper rules run), half are drawn on their own.


@st.composite
def program_configs_for(draw, x: TensorDesc):
    """A sharded program config whose blocks are x's shards (on its shard grid or a wider one), or any config."""
    if not x.is_sharded or draw(st.sampled_from((False, False, False, True))):
        return draw(program_configs())
    spec = x.shard_spec
    box = spec.grid.bounding_box()
    grid = (box.end.x - box.start.x + 1, box.end.y - box.start.y + 1)
    grid = draw(st.sampled_from((grid, grid, (8, 8), (8, 7), x.arch.default_compute_grid)))
    block_w = spec.shape[1] // TILE
    subblock = draw(st.sampled_from([d for d in range(1, min(block_w, 16) + 1) if block_w % d == 0] or [1]))
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*grid),
        subblock_w=subblock,
        block_h=spec.shape[0] // TILE,
        block_w=block_w,
        inplace=False,
        use_welford=draw(st.sampled_from((False, False, False, True))),
    )


@st.composite
def affine_for(draw, x: TensorDesc):
    """A weight or bias for x: ROW_MAJOR [1, 1, W/32, 32] or TILE [1, 1, 1, W] on device, or anything else."""
    form = draw(st.sampled_from(("none", "rm", "tile", "any")))
    if form == "none":
        return None
    if form == "any":
        return draw(tensors(arch=x.arch))
    dtype = draw(st.sampled_from((ttnn.bfloat16, ttnn.bfloat16, ttnn.float32)) | dtypes())
    if form == "rm":
        shape, layout = (1, 1, x.padded_width // TILE, TILE), ttnn.ROW_MAJOR_LAYOUT
    else:
        shape, layout = (1, 1, 1, x.width), ttnn.TILE_LAYOUT
    on_device = draw(st.sampled_from((True, True, True, False)))
    return TensorDesc(shape, dtype=dtype, layout=layout, on_device=on_device, arch=x.arch)


@st.composite
def residuals_for(draw, x: TensorDesc):
    form = draw(st.sampled_from(("none", "none", "same", "any")))
    if form == "none":
        return None
    if form == "any":
        return draw(tensors(arch=x.arch))
    return TensorDesc(x.shape, dtype=draw(dtypes()), layout=x.layout, memory_config=x.memory_config, arch=x.arch)


def one_core_l1(core: tuple[int, int], shard: tuple[int, int]) -> ttnn.MemoryConfig:
    spec = ttnn.ShardSpec(_rect(*core, 1, 1), list(shard), ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1, spec)


@st.composite
def stats_for(draw, x: TensorDesc, num_devices: int | None = None):
    """Gathered stats for x: [.., 32 * devices] sums (interleaved) or means on one L1 core (sharded), or anything."""
    n = num_devices or draw(st.sampled_from((1, 2, 4, 8)))
    form = draw(st.sampled_from(("sums", "means", "sums", "means", "any", "none")))
    if form == "none":
        return None
    if form == "any" or x.rank < 2:
        return draw(tensors(arch=x.arch))
    dtype = draw(st.sampled_from((ttnn.bfloat16, ttnn.bfloat16, ttnn.float32)) | dtypes())
    kind = draw(st.sampled_from((form, form, None, "sums" if form == "means" else "means")))
    if form == "sums":
        mc = draw(interleaved_memory_configs())
        return TensorDesc((*x.shape[:-1], TILE * n), dtype=dtype, memory_config=mc, stats_kind=kind, arch=x.arch)
    start = x.shard_spec.grid.bounding_box().start if x.is_sharded else ttnn.CoreCoord(0, 0)
    mc = one_core_l1((start.x, start.y), (TILE, TILE * n))
    return TensorDesc((*x.shape[:-2], TILE, TILE * n), dtype=dtype, memory_config=mc, stats_kind=kind, arch=x.arch)


@st.composite
def semaphores_for(draw, x: TensorDesc, count: int):
    """`count` distinct handles on x's shard grid or the full grid, or anything."""
    if draw(st.sampled_from((False, False, False, True))):
        return draw(semaphores())
    grid = x.shard_spec.grid if x.is_sharded and draw(st.booleans()) else _rect(0, 0, 8, 7)
    return SemaphoreDesc(grid, count, tuple(range(count)))


# ---------------------------------------------------------------------------------------------------------------------
# Inputs the ops take (so that the deeper rules run), and at most one field of them drawn freely.


def tile_widths() -> st.SearchStrategy[int]:
    return mostly(st.integers(1, 256).map(lambda k: k * TILE) | st.sampled_from((32, 1024, 2048, 4096, 8192)), dims())


@st.composite
def inputs(draw) -> TensorDesc:
    """A rank-4 TILE activation on device in a norm dtype, interleaved or sharded to fit; then, in some, one field
    (dtype, layout, storage, rank, memory config) replaced by any value."""
    rows = draw(st.sampled_from((1, 7, 32, 32, 32, 64, 128, 512)) | dims())
    batch = draw(st.sampled_from((1, 1, 1, 2)))
    shape = (batch, 1, rows, draw(tile_widths()))
    padded = TensorDesc(shape).padded_shape
    if draw(st.booleans()):
        mc = draw(interleaved_memory_configs())
    else:
        layout = draw(st.sampled_from(SHARDED[1:] + SHARDED))
        buffer = draw(st.sampled_from((ttnn.BufferType.L1,) * 5 + (ttnn.BufferType.DRAM,)))
        mc = ttnn.MemoryConfig(layout, buffer, draw(fitting_shard_specs(padded, layout)))
    dtype = draw(st.sampled_from((ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)))
    x = TensorDesc(shape, dtype=dtype, memory_config=mc, arch=draw(arches()))
    off = draw(st.sampled_from((None,) * 10 + ("dtype", "layout", "host", "rank", "memory_config")))
    if off is None:
        return x
    if off == "rank":
        return draw(tensors(shape=x.shape[draw(st.integers(1, 3)) :], arch=x.arch))
    value = {
        "dtype": dtypes(),
        "layout": st.just(ttnn.ROW_MAJOR_LAYOUT),
        "host": st.just(False),
        "memory_config": tensor_memory_configs(padded),
    }[off]
    field = "on_device" if off == "host" else off
    return TensorDesc(**{**_fields(x), field: draw(value)})


def _fields(t: TensorDesc) -> dict:
    """t's constructor arguments, the padded shape left to the constructor (it follows the layout)."""
    return {
        "shape": t.shape,
        "dtype": t.dtype,
        "layout": t.layout,
        "memory_config": t.memory_config,
        "on_device": t.on_device,
        "stats_kind": t.stats_kind,
        "arch": t.arch,
    }


def any_inputs() -> st.SearchStrategy[TensorDesc]:
    """Inputs the ops take (most draws) or any tensor at all."""
    return mostly(inputs(), tensors(), 3)


def gather_axes(mesh_shape) -> st.SearchStrategy:
    """An axis with more than one device on it (most draws), or any value."""
    good = [a for a, d in enumerate(mesh_shape) if d > 1]
    return mostly(st.sampled_from(good or [None]), cluster_axes())


@st.composite
def decode_inputs(draw) -> TensorDesc:
    """What fused_rms_minimal takes: (1, 1, M <= 32, N) WIDTH_SHARDED in L1, ROW_MAJOR shards whole tiles wide."""
    cores = draw(st.sampled_from(((1, 1), (2, 1), (4, 1), (8, 1), (4, 2), (8, 2), (8, 4), (1, 4), (2, 8))))
    tiles = draw(st.sampled_from((1, 1, 2, 4, 8, 16)))
    start = draw(st.sampled_from(((0, 0), (0, 0), (1, 0), (0, 1))))
    width = cores[0] * cores[1] * tiles * TILE
    spec = ttnn.ShardSpec(_rect(*start, *cores), [TILE, tiles * TILE], ttnn.ShardOrientation.ROW_MAJOR)
    mc = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1, spec)
    dtype = draw(st.sampled_from((ttnn.bfloat16, ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)))
    rows = draw(st.sampled_from((1, 8, 32, 32)))
    return TensorDesc((1, 1, rows, width), dtype=dtype, memory_config=mc, arch=draw(arches()))


@st.composite
def fused_stats_for(draw, x: TensorDesc, num_devices: int | None, compute_kernel_config):
    """fused_rms_minimal's stats buffer for x (op_outputs.fused_stats_desc), or any stats."""
    if not x.is_sharded or not num_devices or draw(st.sampled_from((False, False, True))):
        return draw(stats_for(x, num_devices))
    return fused_stats_desc(x, num_devices, compute_kernel_config)
