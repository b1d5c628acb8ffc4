"""The contracts of the CCL ops the production paths call: `ttnn.experimental.all_gather_async` (the trace-safe stats
gather) and `ttnn.fused_rms_minimal` (pre + stats gather + post + residual in one decode op), checked before any
device work.

A mirror of their validation in ttnn 0.81.1 (`all_gather_async_device_operation.cpp`,
`rms_allgather_device_operation.cpp` and its program factory), as real ttnn behaved on mock T3000 and Galaxy meshes,
plus guards ttnn lacks (listed in `tt_rmsnorm.rules.table.PACKAGE_ONLY_RULES`). ttnn's global semaphores expose nothing
to Python, so the checks take a `SemaphoreDesc`: the cores they were created on and the handles a call passes. Tensor
arguments are real ttnn tensors or `TensorDesc`s; every violation raises `tt_rmsnorm.errors.RuleError`.

The tensors the ops produce are described in `tt_rmsnorm.op_outputs`, so that persistent buffers are sized from the
same facts the checks use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ttnn

from tt_rmsnorm.op_outputs import accumulation_dtype, fused_stats_desc, gathered_desc
from tt_rmsnorm.rules import op_checks, operands, sharding
from tt_rmsnorm.rules.ccl_l1 import check_fused_l1, check_gather_l1
from tt_rmsnorm.rules.common import (
    bbox_extent,
    check_dtype,
    check_on_device,
    check_tile,
    enum_name,
    fail,
    is_sharded_program_config,
    max_subblock_w,
)
from tt_rmsnorm.systems import system_of
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.tiles import TILE

FUSED_INPUT_DTYPES = (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)


@dataclass(frozen=True)
class SemaphoreDesc:
    """Global semaphores as the rules see them: `grid`, the CoreRangeSet they were created on; `count`, how many
    handles the call passes; `ids`, identities of those handles (to catch one handle passed twice), or ()."""

    grid: ttnn.CoreRangeSet
    count: int = 1
    ids: tuple = ()

    @classmethod
    def of(cls, handles, grid) -> SemaphoreDesc:
        """Describe the handle (or list of handles) created with `ttnn.create_global_semaphore(mesh, grid, 0)`."""
        handles = list(handles) if isinstance(handles, list | tuple) else [handles]
        return cls(grid, len(handles), tuple(id(h) for h in handles))


def _check_count(sems: SemaphoreDesc | None, want: int, rule: str, fix: str):
    if sems is None or sems.count != want:
        op = {"fused": "fused_rms_minimal"}.get(rule.split(".")[0], rule.split(".")[0])
        fail(rule, f"{op} takes exactly {want} global semaphore(s)", f"{sems.count if sems else 0} handle(s)", fix)


def _check_num_links(num_links, mesh_shape, rule: str, x: TensorDesc, axis=None, grid_rows: int | None = None):
    """1 <= num_links <= the Ethernet links between neighbours on the gather axis of the system (tt_rmsnorm.systems,
    from x's architecture and the mesh) and, for the gather, the compute grid's rows."""
    if num_links is None:
        return
    system = system_of(x.arch, mesh_shape)
    fabric = None if system is None else system.links_on(axis)
    most = min((v for v in (fabric, grid_rows) if v is not None), default=None)
    if num_links < 1 or (most is not None and num_links > most):
        fail(
            rule,
            f"num_links must be between 1 and {most or 'the links of the fabric'} on mesh {tuple(mesh_shape)}",
            num_links,
            "num_links=1 (what tt-metal models use for the stats gather)",
        )


# ---------------------------------------------------------------------------------------------------------------------
# ttnn.experimental.all_gather_async


def check_all_gather_async(
    input_tensor,
    dim,
    *,
    multi_device_global_semaphore: SemaphoreDesc | None,
    mesh_shape,
    cluster_axis=None,
    persistent_output_buffer=None,
    memory_config=None,
    barrier_semaphore: SemaphoreDesc | None = None,
    num_links=None,
    compute_grid=None,
) -> int:
    """Validate `ttnn.experimental.all_gather_async` arguments (any of its overloads; `persistent_output_buffer` is
    also what the mesh overload calls `persistent_output_tensor`). Returns the number of devices gathered.

    The arguments it shares with `ttnn.all_gather` (dim, cluster_axis, devices on the axis, a sharded input's output
    memory config) follow `tt_rmsnorm.rules.op_checks.check_all_gather` and keep its rule ids."""
    n = op_checks.check_all_gather(
        input_tensor,
        dim,
        cluster_axis=cluster_axis,
        mesh_shape=mesh_shape,
        memory_config=memory_config,
        output_given=persistent_output_buffer is not None,
    )
    sems = multi_device_global_semaphore
    if sems is None or sems.count < 1 or not _takes_llama_stats_gather(describe(input_tensor), memory_config):
        _check_count(
            sems,
            2,
            "all_gather_async.semaphore_count",
            "multi_device_global_semaphore=[s0, s1], each created once with ttnn.create_global_semaphore",
        )
    ids = [*sems.ids, *(barrier_semaphore.ids if barrier_semaphore is not None else ())]
    if len(ids) != len(set(ids)):
        fail(
            "all_gather_async.distinct_semaphores",
            "the gather semaphores and the barrier semaphore must be distinct handles (ttnn accepts one twice)",
            f"{len(ids)} handles, {len(set(ids))} distinct",
            "create each semaphore once and cycle whole sets between calls",
        )
    _check_num_links(
        num_links,
        mesh_shape,
        "all_gather_async.num_links",
        describe(input_tensor),
        cluster_axis,
        (compute_grid or (None, None))[1],
    )
    if persistent_output_buffer is not None:
        _check_persistent_buffer(describe(input_tensor), dim, n, describe(persistent_output_buffer), memory_config)
    # the caller's semaphores (no pair of the op's own): the gather pair and the barrier
    out = persistent_output_buffer
    if out is None:
        out = gathered_desc(input_tensor, dim, n, memory_config)
    semaphores = sems.count + (barrier_semaphore.count if barrier_semaphore is not None else 0)
    check_gather_l1(input_tensor, dim, out, n, mesh_shape, semaphores)
    return n


def _takes_llama_stats_gather(x: TensorDesc, memory_config) -> bool:
    """ttnn hands one shape to its Llama minimal sharded gather (use_all_gather_async_llama_sharded): decode stats of
    1x1x32x32 on one L1 core gathered into a 32x128 shard on one core (4 devices). That gather accepts any number of
    semaphores."""
    out = memory_config or x.memory_config

    def one_l1_core(mc, shard):
        return (
            mc.memory_layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED
            and mc.buffer_type == ttnn.BufferType.L1
            and mc.shard_spec is not None
            and mc.shard_spec.grid.num_cores() == 1
            and tuple(mc.shard_spec.shape) == shard
        )

    return (
        x.padded_shape == (1, 1, TILE, TILE)
        and x.layout == ttnn.TILE_LAYOUT
        and one_l1_core(x.memory_config, (TILE, TILE))
        and one_l1_core(out, (TILE, 4 * TILE))
    )


def _check_persistent_buffer(x: TensorDesc, dim: int, n: int, buf: TensorDesc, memory_config):
    want = gathered_desc(x, dim, n, memory_config)
    dim %= x.rank
    if not buf.on_device:
        fail(
            "all_gather_async.persistent_on_device",
            "the persistent output buffer must be on device",
            "host storage",
            "allocate it once on the mesh (tt_rmsnorm.CCLResources does)",
        )
    seen = f"buffer {buf.shape} (padded {buf.padded_shape}), gathered {want.shape} (padded {want.padded_shape})"
    others_differ = buf.rank != x.rank or any(
        b != p for i, (b, p) in enumerate(zip(buf.padded_shape, x.padded_shape, strict=True)) if i != dim
    )
    if others_differ or buf.padded_shape[dim] > x.padded_shape[dim] * n:
        fail(
            "all_gather_async.persistent_shape",
            "the persistent buffer must have the input's rank and dims, and at most input * devices on the gather dim",
            seen,
            f"allocate it with shape {want.shape} (tt_rmsnorm.op_outputs.gathered_desc)",
        )
    if buf.shape[dim] != want.shape[dim]:
        fail(
            "all_gather_async.persistent_truncated",
            "the persistent buffer must hold the whole gather (ttnn accepts a smaller one and returns it truncated)",
            seen,
            f"allocate it with shape {want.shape} (tt_rmsnorm.op_outputs.gathered_desc)",
        )
    for field, rule in (
        ("dtype", "all_gather_async.persistent_dtype"),
        ("layout", "all_gather_async.persistent_layout"),
    ):
        if getattr(buf, field) != getattr(x, field):
            fail(
                rule,
                f"the persistent buffer's {field} must equal the input's",
                f"{enum_name(getattr(buf, field))} vs input {enum_name(getattr(x, field))}",
                f"allocate it with the input's {field}",
            )
    if buf.memory_config != want.memory_config:
        fail(
            "all_gather_async.persistent_memory_config",
            "the persistent buffer's memory config must equal memory_config (the input's when memory_config is None)",
            f"{enum_name(buf.memory_layout)} {enum_name(buf.memory_config.buffer_type)} "
            f"vs {enum_name(want.memory_layout)} {enum_name(want.memory_config.buffer_type)}",
            "pass memory_config=<the buffer's memory config>",
        )


# ---------------------------------------------------------------------------------------------------------------------
# ttnn.fused_rms_minimal


def check_fused_rms_minimal(
    input_tensor,
    program_config,
    cluster_axis,
    mesh_shape,
    global_semaphore: SemaphoreDesc | None,
    *,
    persistent_output_tensor=None,
    num_links=None,
    dtype=None,
    compute_kernel_config=None,
    memory_config=None,
    residual_input_tensor=None,
    weight=None,
    stats=None,
    hosts: int | None = None,
) -> int:
    """Validate `ttnn.fused_rms_minimal` arguments (positional as ttnn: input, program_config, cluster_axis, the mesh's
    shape for mesh_device, global_semaphore). `hosts`: how many hosts hold the mesh, where known (the planner checks
    it for every call: `tt_rmsnorm.planning.planner`). Returns the number of devices on the gather axis."""
    x = describe(input_tensor)
    check_on_device(x, "input")
    n = _check_fused_axis(cluster_axis, mesh_shape)
    if hosts is not None:
        check_fused_one_host(x.arch, mesh_shape, hosts)
    _check_count(
        global_semaphore,
        1,
        "fused.semaphore",
        "pass one handle created once on the input's shard grid (cycle two between calls)",
    )
    for what, t in (("stats", stats), ("weight", weight)):
        if t is None:
            fail(
                f"fused.{what}_required",
                f"fused_rms_minimal requires {what}",
                None,
                "tt_rmsnorm.op_outputs.fused_stats_desc(...) sizes the stats buffer"
                if what == "stats"
                else "tt_rmsnorm.prepare_weight(...) (ROW_MAJOR [1, 1, W/32, 32])",
            )
    _check_fused_input(x, global_semaphore)
    out_config = memory_config or x.memory_config
    if out_config.shard_spec is None or out_config.shard_spec.orientation != ttnn.ShardOrientation.ROW_MAJOR:
        fail(
            "fused.output_memory_config",
            "fused_rms_minimal writes a ROW_MAJOR sharded output (it never writes interleaved)",
            f"{enum_name(out_config.memory_layout)}"
            + ("" if out_config.shard_spec is None else f" {enum_name(out_config.shard_spec.orientation)}"),
            "a WIDTH_SHARDED L1 ROW_MAJOR memory_config (reshard afterwards if DRAM is needed)",
        )
    sharding.check_output_memory_config(x, out_config)
    _check_fused_program_config(x, program_config, compute_kernel_config)
    _check_fused_grid(x)
    w = describe(weight)
    check_on_device(w, "weight")
    if w.layout != ttnn.ROW_MAJOR_LAYOUT:
        fail(
            "fused.weight_layout", "the weight must be ROW_MAJOR", enum_name(w.layout), "tt_rmsnorm.prepare_weight(...)"
        )
    operands.check_gamma(x, w, "weight", "sharded")
    operands.check_residual(x, describe(residual_input_tensor))
    _check_fused_stats(x, describe(stats), n, compute_kernel_config)
    if persistent_output_tensor is not None:
        _check_fused_persistent(x, describe(persistent_output_tensor), out_config, dtype)
    _check_num_links(num_links, mesh_shape, "fused.num_links", x, cluster_axis)
    check_fused_l1(
        x,
        w,
        describe(residual_input_tensor),
        describe(stats),
        out_config,
        dtype,
        compute_kernel_config,
        describe(persistent_output_tensor),
        mesh_shape,
    )
    return n


def check_fused_one_host(arch, mesh_shape, hosts: int | None = None) -> None:
    """fused_rms_minimal runs on the devices of one host: on a mesh that spans hosts ttnn 0.81.1 indexes the mesh's
    devices as if all were local (an index past the local ones, or "Cannot get device for remote device"). `hosts`:
    as the mesh device counts them, else as the systems table names the mesh (tt_rmsnorm.systems)."""
    system = system_of(arch, mesh_shape)
    if hosts is None:
        hosts = system.hosts if system is not None else 1
    if hosts > 1:
        fail(
            "fused.one_host",
            "fused_rms_minimal runs on one host's devices; this mesh spans hosts",
            f"mesh {tuple(mesh_shape)} over {hosts} hosts" + (f" ({system.name})" if system is not None else ""),
            'path="async" (pre -> all_gather_async -> post gathers the stats across hosts)',
        )


def _check_fused_axis(cluster_axis, mesh_shape) -> int:
    mesh_shape = tuple(mesh_shape)
    if not isinstance(cluster_axis, int) or not 0 <= cluster_axis < len(mesh_shape):
        fail(
            "fused.cluster_axis",
            f"cluster_axis must be an axis of the mesh {mesh_shape} (ttnn reads any other value as axis 1)",
            cluster_axis,
            "cluster_axis=1: the hidden dim sharded over mesh columns",
        )
    n = mesh_shape[cluster_axis]
    if n < 2:
        fail(
            "fused.num_devices",
            "fused_rms_minimal needs more than one device on the gather axis",
            f"{n} device on axis {cluster_axis} of mesh {mesh_shape}",
            "with one device on the axis use ttnn.rms_norm (tt_rmsnorm picks the local path)",
        )
    return n


def _check_fused_input(x: TensorDesc, sem: SemaphoreDesc):
    if x.rank != 4 or x.shape[0] != 1 or x.shape[1] != 1 or x.shape[2] > TILE or x.shape[3] % TILE:
        fail(
            "fused.input_shape",
            "fused_rms_minimal takes (1, 1, M, N) with M <= 32 and N a multiple of 32",
            x.shape,
            "decode only: at most 32 rows, batch folded into M; pad the local width to a multiple of 32",
        )
    check_tile(x, "input")
    check_dtype(x, FUSED_INPUT_DTYPES, "fused.input.dtype", "input")
    if x.memory_layout != ttnn.TensorMemoryLayout.WIDTH_SHARDED or x.memory_config.buffer_type != ttnn.BufferType.L1:
        fail(
            "fused.input_sharded",
            "the input must be WIDTH_SHARDED in L1",
            f"{enum_name(x.memory_layout)} {enum_name(x.memory_config.buffer_type)}",
            "ttnn.to_memory_config(x, <width-sharded L1 config on the semaphore's grid>)",
        )
    if x.shard_spec.orientation != ttnn.ShardOrientation.ROW_MAJOR:
        fail(
            "fused.input_orientation",
            "the input's shards must be in ROW_MAJOR orientation",
            enum_name(x.shard_spec.orientation),
            "ttnn.ShardSpec(grid, shape, ttnn.ShardOrientation.ROW_MAJOR)",
        )
    if not sem.grid.contains(x.shard_spec.grid):
        fail(
            "fused.semaphore_grid",
            "the input must be sharded on (a part of) the grid the global semaphore was created on",
            f"input grid {x.shard_spec.grid} vs semaphore grid {sem.grid}",
            "create the semaphore on the input's shard grid: ttnn.create_global_semaphore(mesh, grid, 0)",
        )


def _check_fused_grid(x: TensorDesc):
    """The factory places its reduce workers with `num_cores_to_corerangeset` in coordinates relative to the grid but
    compares them with the grid's absolute end: a grid one core wide and several high that does not start at x = 0
    puts the next worker at x = 1, outside the grid ("Start core must be within grid size")."""
    gx, gy = bbox_extent(x.shard_spec)
    start = x.shard_spec.grid.bounding_box().start
    if gx == 1 and gy > 1 and start.x != 0:
        fail(
            "fused.reduce_workers",
            "fused_rms_minimal cannot place its reduce workers on a shard grid one core wide off x = 0",
            f"{gx}x{gy} cores from ({start.x},{start.y})",
            "shard on a grid that starts at x = 0, or on a row of cores",
        )


def _check_fused_program_config(x: TensorDesc, pc, compute_kernel_config):
    if not is_sharded_program_config(pc):
        fail(
            "fused.program_config",
            "fused_rms_minimal needs a LayerNormShardedMultiCoreProgramConfig",
            type(pc).__name__,
            "tt_rmsnorm.planning.layouts.program_config_from_shard_spec(x.memory_config().shard_spec, ...)",
        )
    ex, ey, grid = *bbox_extent(x.shard_spec), pc.compute_with_storage_grid_size
    if ex > grid.x or ey > grid.y:
        fail(
            "fused.grid_fits_shards",
            "the input's shard grid (its bounding box) must fit compute_with_storage_grid_size",
            f"shard grid {ex}x{ey} vs program grid {grid.x}x{grid.y}",
            f"compute_with_storage_grid_size=({ex}, {ey})",
        )
    want = math.ceil(x.padded_width // TILE / x.shard_spec.grid.num_cores())
    if pc.block_w != want or pc.block_w * TILE != x.shard_spec.shape[1]:
        fail(
            "fused.block_w",
            "block_w must equal ceil(Wt / shard cores) and block_w * 32 the shard width",
            f"block_w={pc.block_w}, shard width {x.shard_spec.shape[1]}, {x.shard_spec.grid.num_cores()} cores",
            f"block_w={want}",
        )
    if pc.subblock_w < 1 or pc.block_w % pc.subblock_w:
        fail(
            "fused.subblock_w",
            "block_w must be divisible by subblock_w",
            f"block_w={pc.block_w} subblock_w={pc.subblock_w}",
            "pick subblock_w as a divisor of block_w",
        )
    limit = max_subblock_w(compute_kernel_config)
    if pc.subblock_w > limit:
        fail(
            "fused.subblock_w_limit",
            "subblock_w must fit the dst registers (8; 4 with fp32_dest_acc_en; doubled with dst_full_sync_en)",
            pc.subblock_w,
            f"the largest divisor of block_w <= {limit}",
        )


def _check_fused_stats(x: TensorDesc, s: TensorDesc, n: int, compute_kernel_config):
    check_on_device(s, "stats")
    want = accumulation_dtype(compute_kernel_config)
    if s.dtype != want:
        fail(
            "fused.stats_dtype",
            "the stats buffer's dtype must be the accumulation format (float32 with fp32_dest_acc_en, else bfloat16)",
            f"{enum_name(s.dtype)} with fp32_dest_acc_en={want == ttnn.float32}",
            f"allocate it as {enum_name(want)} (tt_rmsnorm.op_outputs.fused_stats_desc)",
        )
    if not s.is_sharded or s.memory_config.buffer_type != ttnn.BufferType.L1 or s.shard_spec.grid.num_cores() != 1:
        fail(
            "fused.stats_one_core",
            "the stats buffer must be sharded in L1 on exactly one core (it backs a circular buffer)",
            f"{enum_name(s.memory_layout)} {enum_name(s.memory_config.buffer_type)}"
            + (f" on {s.shard_spec.grid.num_cores()} cores" if s.is_sharded else ""),
            "tt_rmsnorm.op_outputs.fused_stats_desc(...) gives the memory config",
        )
    start = x.shard_spec.grid.bounding_box().start
    core = s.shard_spec.grid.bounding_box().start
    expected = fused_stats_desc(x, n, compute_kernel_config)
    for ok, rule, what, seen in (
        (s.layout == ttnn.TILE_LAYOUT, "fused.stats_layout", "in TILE layout", enum_name(s.layout)),
        (s.padded_width == TILE * n, "fused.stats_width", f"{TILE * n} wide (32 per device)", s.padded_shape),
        (
            (core.x, core.y) == (start.x, start.y),
            "fused.stats_core",
            "on the input grid's first core",
            (core.x, core.y),
        ),
    ):
        if not ok:
            fail(
                rule,
                f"the stats buffer must be {what}",
                seen,
                f"shape {expected.shape} on core ({start.x},{start.y}) (tt_rmsnorm.op_outputs.fused_stats_desc)",
            )


def _check_fused_persistent(x: TensorDesc, p: TensorDesc, out_config, dtype):
    want = (x.padded_shape, out_config, dtype or x.dtype, ttnn.TILE_LAYOUT)
    if not p.on_device or (p.padded_shape, p.memory_config, p.dtype, p.layout) != want:
        fail(
            "fused.persistent_output",
            "persistent_output_tensor becomes the op's output: it needs the output's shape, memory config and dtype",
            f"{p.shape} {enum_name(p.memory_layout)} {enum_name(p.dtype)}",
            "pass None, or a buffer with the input's shape, the output memory config and dtype",
        )
