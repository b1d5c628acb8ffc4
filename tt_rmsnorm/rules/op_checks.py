"""The checks of the four ttnn ops a distributed RMSNorm runs, one entry point each, before anything reaches a device.

`check_pre_all_gather`, `check_post_all_gather`, `check_rms_norm` and `check_all_gather` mirror the validation of
ttnn 0.81.1's `rms_norm_pre_all_gather`, `rms_norm_post_all_gather` (interleaved and sharded layouts), `rms_norm` and
`all_gather`, as read from tt-metal's op validation and program factories and as ttnn behaved on mock devices (the
agreement battery, the fuzzer and the conformance corpus in tests/). Each takes real ttnn tensors or `TensorDesc`s,
runs its steps in ttnn's order and raises `tt_rmsnorm.errors.RuleError` at the first violated rule. The steps live by
concern in the other modules of `tt_rmsnorm.rules`.
"""

from __future__ import annotations

import math
import warnings

import ttnn
from loguru import logger

from tt_rmsnorm.errors import AccuracyWarning
from tt_rmsnorm.rules import ccl_l1
from tt_rmsnorm.rules.common import (
    PRE_INPUT_DTYPES,
    check_dtype,
    check_epsilon,
    check_fp32_needs_acc,
    check_on_device,
    check_rank4,
    check_tile,
    check_width_multiple_of_32,
    enum_name,
    fail,
    is_sharded_program_config,
)
from tt_rmsnorm.rules.l1_budget import (
    check_l1,
    check_rms_norm_l1,
    check_sharded_l1,
    l1_floor,
    output_desc,
    post_l1_bytes,
    pre_l1_bytes,
    pre_l1_floor,
)
from tt_rmsnorm.rules.operands import (
    check_gamma_beta,
    check_interleaved_post_stats,
    check_residual,
    check_sharded_post_stats,
    check_stats,
)
from tt_rmsnorm.rules.sharding import (
    check_interleaved_program_config,
    check_output_memory_config,
    check_rms_norm_output_shard,
    check_shard_fits,
    check_shard_spec_given,
    check_sharded_input,
    check_sharded_post_output,
    check_sharded_program_config,
    check_stats_gather,
    require_sharded_program_config,
)
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.tiles import TILE


def _resolve_grid(compute_grid, x):
    """The compute grid the op runs on: as given, else the grid of x's device, else the default grid of x's
    architecture (a device-free check)."""
    if compute_grid is not None:
        return tuple(compute_grid)
    if isinstance(x, ttnn.Tensor):
        try:
            g = x.device().compute_with_storage_grid_size()
            return (g.x, g.y)
        except Exception:
            pass
    return describe(x).arch.default_compute_grid


def _inplace(program_config) -> bool:
    """A sharded program config with inplace=True: the op returns its input, written over."""
    return is_sharded_program_config(program_config) and bool(program_config.inplace)


def _warn_2d_core_grid(use_2d_core_grid, sharded: bool):
    if not use_2d_core_grid:
        return
    if sharded:
        fail(
            "use_2d_core_grid.ignored",
            "use_2d_core_grid applies to the interleaved layout only and is ignored for sharded inputs",
            True,
            "drop use_2d_core_grid",
        )
    msg = (
        "use_2d_core_grid=True has a known accuracy bug (tt-metal #35435: bad PCC at seq 128, hidden 8192); "
        "default is False"
    )
    logger.warning(msg)
    warnings.warn(msg, AccuracyWarning, stacklevel=3)


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
    """Validate `ttnn.rms_norm_pre_all_gather` arguments. Returns the layout: 'interleaved' or 'sharded'."""
    grid = _resolve_grid(compute_grid, input_tensor)
    x, res = describe(input_tensor), describe(residual_input_tensor)
    check_on_device(x, "input")
    check_rank4(x, "rms_norm_pre_all_gather")
    check_tile(x, "input")
    check_dtype(x, PRE_INPUT_DTYPES, "pre.input.dtype", "input")
    _warn_2d_core_grid(use_2d_core_grid, x.is_sharded)
    if x.is_sharded:
        check_sharded_input(x, grid, distributed=True)
        require_sharded_program_config(program_config)
        check_sharded_program_config(x, program_config, compute_kernel_config, distributed=True)
        check_output_memory_config(x, memory_config)
        if dtype not in (None, ttnn.bfloat16):
            fail(
                "sharded_pre.dtype_ignored",
                "the sharded pre always writes bfloat16 stats",
                enum_name(dtype),
                "pass dtype=ttnn.bfloat16 (or omit it)",
            )
        check_residual(x, res)
        check_sharded_l1("pre", x, compute_kernel_config=compute_kernel_config, residual=res, compute_grid=grid)
        return "sharded"
    check_interleaved_program_config(
        program_config, "pre.welford", "RMSNorm with Welford's algorithm is not supported in pre_all_gather"
    )
    check_fp32_needs_acc({"input": x}, compute_kernel_config, "pre")
    check_output_memory_config(x, memory_config)
    check_residual(x, res)
    out = output_desc(x, (*x.shape[:-1], TILE), dtype or ttnn.bfloat16, memory_config)
    check_l1(
        pre_l1_bytes(x, compute_kernel_config, res, dtype or ttnn.bfloat16, bool(use_2d_core_grid)),
        "pre",
        x,
        pre_l1_floor(grid, x, res, out),
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
    """Validate `ttnn.rms_norm_post_all_gather` arguments. Returns the layout: 'interleaved' or 'sharded'."""
    grid = _resolve_grid(compute_grid, input_tensor)
    x, s, w, b = describe(input_tensor), describe(stats), describe(weight), describe(bias)
    check_on_device(x, "input")
    check_rank4(x, "rms_norm_post_all_gather")
    check_tile(x, "input")
    check_dtype(x, PRE_INPUT_DTYPES, "post.input.dtype", "input")
    check_stats(s)
    check_epsilon(epsilon)
    check_width_multiple_of_32(x)
    _warn_2d_core_grid(use_2d_core_grid, x.is_sharded)
    if x.is_sharded:
        check_sharded_input(x, grid, distributed=True)
        check_sharded_post_stats(x, s, program_config)
        check_sharded_program_config(x, program_config, compute_kernel_config, distributed=True)
        check_sharded_post_output(x, memory_config)
        check_gamma_beta(x, w, b, "sharded")
        check_sharded_l1(
            "post",
            x,
            compute_kernel_config=compute_kernel_config,
            weight=w,
            bias=b,
            stats=s,
            out_dtype=dtype,
            memory_config=memory_config,
            compute_grid=grid,
            inplace=_inplace(program_config),
        )
        return "sharded"
    check_interleaved_post_stats(x, s)
    check_interleaved_program_config(
        program_config, "post.welford", "RMS norm is not compatible with the Welford algorithm"
    )
    check_fp32_needs_acc({"input": x, "stats": s}, compute_kernel_config, "post")
    # unlike the pre, the interleaved post honours a sharded output memory_config (a fused reshard)
    check_shard_fits(x.padded_shape, memory_config, "output")
    check_gamma_beta(x, w, b, "interleaved_post")
    out = output_desc(x, x.shape, dtype, memory_config)
    check_l1(
        post_l1_bytes(x, s, compute_kernel_config, w, b, dtype, bool(use_2d_core_grid), grid[1]),
        "post",
        x,
        l1_floor(grid, x, s, w, b, out),
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
    check_on_device(x, "input")
    check_tile(x, "input")
    check_dtype(x, PRE_INPUT_DTYPES, "rms_norm.input.dtype", "input")
    check_epsilon(epsilon)
    if x.is_sharded:
        check_sharded_input(x, grid, distributed=False)
        if program_config is not None and not is_sharded_program_config(program_config):
            fail(
                "sharded.program_config",
                "a sharded input takes a LayerNormShardedMultiCoreProgramConfig or none (ttnn derives one)",
                type(program_config).__name__,
                "omit program_config or pass tt_rmsnorm.planning.layouts.sharded_program_config(...)",
            )
        if program_config is not None:
            check_sharded_program_config(x, program_config, compute_kernel_config, distributed=False)
        check_stats_gather(x, program_config, compute_kernel_config, grid)
        check_output_memory_config(x, memory_config)
        check_shard_fits(x.padded_shape, memory_config, "output", spec_from_input=True)
        check_rms_norm_output_shard(x, memory_config)
    else:
        if program_config is not None and is_sharded_program_config(program_config):
            fail(
                "rms_norm.sharded_config_interleaved",
                "a sharded program config needs a sharded input (ttnn fails with 'bad optional access')",
                "LayerNormShardedMultiCoreProgramConfig",
                "shard the input (tt_rmsnorm.planning.layouts.sharded_memory_config) or omit program_config",
            )
        if program_config is not None and program_config.use_welford:
            fail(
                "rms_norm.welford",
                "Welford's algorithm is not supported for RMSNorm",
                "use_welford=True",
                "LayerNormDefaultProgramConfig(use_welford=False)",
            )
        if memory_config is not None and memory_config.is_sharded():  # rms_norm writes any sharded output
            check_shard_fits(x.padded_shape, memory_config, "output")
        else:
            check_output_memory_config(x, memory_config)
    check_residual(x, res, sharded_residual_ok=True)
    check_gamma_beta(x, w, b, "sharded")
    if x.is_sharded:
        check_sharded_l1(
            "rms_norm",
            x,
            compute_kernel_config=compute_kernel_config,
            residual=res,
            weight=w,
            bias=b,
            memory_config=memory_config,
            compute_grid=grid,
            inplace=_inplace(program_config),
        )
        return "sharded"
    check_rms_norm_l1(x, compute_kernel_config, res, w, b, memory_config, grid)
    return "interleaved"


def check_all_gather(
    input_tensor, dim, *, cluster_axis=None, mesh_shape, memory_config=None, output_given: bool = False
) -> int:
    """Validate `ttnn.all_gather(input, dim, cluster_axis=...)` on a mesh of `mesh_shape`. Returns the gather size."""
    x = describe(input_tensor)
    check_on_device(x, "input")
    if not -x.rank <= dim < x.rank:
        fail(
            "all_gather.dim",
            f"dim must be in [{-x.rank}, {x.rank}) for a rank-{x.rank} tensor",
            dim,
            "gather the stats on dim=3 (the last)",
        )
    mesh_shape = tuple(mesh_shape)
    # a gather dim off the tile grid takes ttnn's composite gather, which needs no axis
    if cluster_axis is None and sum(d > 1 for d in mesh_shape) > 1 and not ccl_l1.takes_composite_gather(x, dim):
        fail(
            "all_gather.cluster_axis",
            "on a 2-D mesh the 1-D fabric needs cluster_axis",
            f"cluster_axis=None on mesh {mesh_shape}",
            "cluster_axis=1 gathers along mesh columns (Galaxy: the tensor-parallel axis)",
        )
    if cluster_axis is None:
        n = math.prod(mesh_shape)
    else:
        if not isinstance(cluster_axis, int) or not 0 <= cluster_axis < len(mesh_shape):
            fail(
                "all_gather.cluster_axis",
                f"cluster_axis must be an axis of the {len(mesh_shape)}-D mesh {mesh_shape}",
                cluster_axis,
                "cluster_axis=1 gathers along mesh columns (the tensor-parallel axis of 1xN and 8x4 meshes)",
            )
        n = mesh_shape[cluster_axis]
    if n < 2:
        fail(
            "all_gather.num_devices",
            "all_gather needs more than one device along the gather axis",
            f"{n} device(s) on axis {cluster_axis} of mesh {mesh_shape}",
            "on one device skip the gather (tt_rmsnorm.distributed_rms_norm does); "
            "otherwise pick the axis the hidden dim is sharded over",
        )
    if x.is_sharded and memory_config is None:
        fail(
            "all_gather.sharded_needs_memory_config",
            "a sharded input needs an explicit output memory_config",
            enum_name(x.memory_layout),
            "memory_config=tt_rmsnorm.planning.layouts.stats_memory_config(num_devices)",
        )
    if math.prod(x.shape) == 0:
        fail("all_gather.empty", "all_gather has no chunks to send for an empty tensor", x.shape, "skip the gather")
    if x.dtype == ttnn.bfloat4_b and ccl_l1.takes_composite_gather(x, dim):
        fail(
            "all_gather.composite_dtype",
            "ttnn's composite gather (a gather dim off the tile grid) untilizes its input, and a bfloat4_b tensor "
            "exists only in tiles (it typecasts bfloat8_b first, not bfloat4_b)",
            f"bfloat4_b {x.shape} gathered on dim {dim}",
            "typecast to bfloat16 (or bfloat8_b) before the gather, or pad the gathered dim to a multiple of 32",
        )
    check_shard_spec_given(memory_config, "gathered output")
    gathered = list(x.shape)
    gathered[dim] *= n
    out = TensorDesc(
        tuple(gathered), dtype=x.dtype, layout=x.layout, memory_config=memory_config or x.memory_config, arch=x.arch
    )
    if not output_given:  # a given output buffer is the output's spec; its own rules check it
        check_shard_fits(out.padded_shape, memory_config, "gathered output", tiled=x.layout == ttnn.TILE_LAYOUT)
    ccl_l1.check_gather_l1(x, dim, out, n, mesh_shape)
    return n
