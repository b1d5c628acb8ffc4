"""Distributed RMSNorm over a mesh: pre -> all_gather(stats, dim=3, cluster_axis) -> post, as one call.

The hidden dim is sharded over one mesh axis (the tensor-parallel axis): all devices of a 1xN mesh (N300 1x2,
T3000 1x8), the columns of a Galaxy 8x4 (`cluster_axis=1`, replicated over rows), as tt-metal model code lays it out.
"""

from __future__ import annotations

import math

import torch
import ttnn
from loguru import logger

from tt_rmsnorm import configs, ops, rules
from tt_rmsnorm.hardware import mock_cluster_active
from tt_rmsnorm.tensors import describe
from tt_rmsnorm.tiles import TILE


def open_mesh(shape: tuple[int, int], **kwargs):
    """Open a mesh of `shape` (rows, cols) with the fabric configured for the stats all_gather, on real hardware or on
    a mock cluster (where `mock_cluster` supplies the dispatch config that keeps the mock's grids consistent).
    Extra kwargs go to ttnn.open_mesh_device."""
    if math.prod(shape) > 1:
        ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    if mock_cluster_active():
        from tt_rmsnorm import mock_cluster

        dispatch = mock_cluster.dispatch_core_config()
        if dispatch is not None:
            kwargs.setdefault("dispatch_core_config", dispatch)
    return ttnn.open_mesh_device(ttnn.MeshShape(*(int(v) for v in shape)), **kwargs)


def close_mesh(mesh_device) -> None:
    """Close a mesh opened by `open_mesh`, and turn the fabric off again so the next mesh can configure it."""
    multi = mesh_device.get_num_devices() > 1
    ttnn.close_mesh_device(mesh_device)
    if multi:
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def resolve_cluster_axis(mesh_shape, cluster_axis=None) -> tuple[int | None, int]:
    """(axis, devices on it). A 1-D mesh gathers along its long axis; a 2-D mesh must name the axis."""
    mesh_shape = tuple(mesh_shape)
    if cluster_axis is not None:
        if cluster_axis not in (0, 1) or len(mesh_shape) != 2:
            raise rules.RuleError(
                "mesh.cluster_axis",
                f"cluster_axis must be 0 or 1 on a 2-D mesh {mesh_shape}",
                cluster_axis,
                "cluster_axis=1: the hidden dim sharded over mesh columns",
            )
        return cluster_axis, mesh_shape[cluster_axis]
    rows, cols = mesh_shape
    if rows > 1 and cols > 1:
        raise rules.RuleError(
            "mesh.cluster_axis_required",
            "a 2-D mesh needs cluster_axis: the axis the hidden dim is sharded over",
            f"mesh {mesh_shape}, cluster_axis=None",
            "cluster_axis=1 (Galaxy 8x4: hidden over the 4 columns, as tt-metal model code)",
        )
    if rows == 1 and cols == 1:
        return None, 1
    return (1, cols) if rows == 1 else (0, rows)


def _mapper(mesh_device, axis, dim):
    mesh_shape = tuple(mesh_device.shape)
    if axis is None:
        return ttnn.ReplicateTensorToMesh(mesh_device)
    dims = [None, None]
    dims[axis] = dim
    return ttnn.ShardTensor2dMesh(mesh_device, mesh_shape=mesh_shape, dims=tuple(dims))


def _check_local_width(hidden: int, n: int, what: str):
    if hidden % (TILE * n):
        raise rules.RuleError(
            "distributed.width_multiple_of_32",
            f"{what}: the hidden size must split into per-device widths that are multiples of 32",
            f"hidden {hidden} over {n} devices = {hidden / n:g} each",
            f"pad the hidden size to a multiple of {TILE * n}",
        )


def prepare_weight(
    torch_weight,
    mesh_device,
    *,
    cluster_axis=None,
    dtype=ttnn.bfloat16,
    layout=ttnn.ROW_MAJOR_LAYOUT,
    memory_config=None,
):
    """Each device gets its contiguous slice of gamma, as tt-metal's models/common/rmsnorm.py does: ROW_MAJOR
    [1, 1, H/32, 32] sharded on dim 2 over the tensor-parallel axis (or TILE [1, 1, 1, H] sharded on dim 3)."""
    if dtype not in rules.GAMMA_DTYPES:
        raise rules.RuleError(
            "weight.dtype",
            "weight dtype must be bfloat16 or float32 for the distributed post",
            dtype,
            "dtype=ttnn.bfloat16",
        )
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    w = torch.as_tensor(torch_weight).reshape(-1)
    _check_local_width(w.numel(), n, "weight")
    if layout == ttnn.ROW_MAJOR_LAYOUT:
        w, dim = w.reshape(1, 1, w.numel() // TILE, TILE), 2
    elif layout == ttnn.TILE_LAYOUT:
        w, dim = w.reshape(1, 1, 1, w.numel()), 3
    else:
        raise rules.RuleError(
            "weight.layout", "weight layout must be ROW_MAJOR or TILE", layout, "layout=ttnn.ROW_MAJOR_LAYOUT"
        )
    return ttnn.from_torch(
        w,
        dtype=dtype,
        layout=layout,
        device=mesh_device,
        memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG,
        mesh_mapper=_mapper(mesh_device, axis, dim),
    )


def shard_activation(torch_x, mesh_device, *, cluster_axis=None, dtype=ttnn.bfloat16, memory_config=None):
    """Put [.., S, H] on the mesh with H sharded over the tensor-parallel axis (replicated over the other)."""
    x = torch.as_tensor(torch_x)
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    _check_local_width(x.shape[-1], n, "activation")
    return ttnn.from_torch(
        x,
        dtype=dtype,
        layout=ttnn.TILE_LAYOUT,
        device=mesh_device,
        memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG,
        mesh_mapper=_mapper(mesh_device, axis, x.dim() - 1),
    )


def gather_output(tt_tensor, mesh_device, *, cluster_axis=None) -> torch.Tensor:
    """The full [.., S, H] result on the host: the slices of one line of devices along the tensor-parallel axis."""
    rows, cols = tuple(mesh_device.shape)
    axis, n = resolve_cluster_axis((rows, cols), cluster_axis)
    shards = ttnn.get_device_tensors(tt_tensor)
    index = list(range(cols)) if axis in (1, None) else [r * cols for r in range(rows)]
    return torch.cat([ttnn.to_torch(shards[i]) for i in index[:n]], dim=-1)


def plan_distributed_rms_norm(
    local_shape, mesh_shape, *, cluster_axis=None, compute_grid=(8, 8), **kw
) -> configs.NormPlan:
    """The configs `distributed_rms_norm` would use for a per-device shape, without a device."""
    _, n = resolve_cluster_axis(mesh_shape, cluster_axis)
    return configs.plan(local_shape, n, compute_grid=compute_grid, **kw)


def distributed_rms_norm(
    x,
    w,
    mesh_device,
    *,
    epsilon: float,
    cluster_axis=None,
    residual=None,
    memory_config=None,
    compute_kernel_config=None,
    program_config=None,
    dtype=None,
    sharded=None,
):
    """RMSNorm of a hidden dim sharded over the mesh, equal to single-device `ttnn.rms_norm` of the full activation.

    x: mesh tensor [B, 1, S, H/n] per device (`shard_activation`); w: `prepare_weight(...)` or None.
    Interleaved path for prefill; sharded (L1, one tile row) for decode when the padded height is 32 (`sharded`
    overrides). With `residual`, x + residual is normalized and `(output, x + residual)` is returned; on the sharded
    path that sum is written into x's shard by the pre (as tt-metal's fused decode does), so x itself is updated.
    The output has x's memory config unless `memory_config` says otherwise.
    """
    if not isinstance(x, ttnn.Tensor):
        raise rules.RuleError(
            "input.ttnn_tensor",
            "x must be a ttnn mesh tensor",
            type(x).__name__,
            "tt_rmsnorm.shard_activation(torch_x, mesh_device)",
        )
    if w is not None and not isinstance(w, ttnn.Tensor):
        raise rules.RuleError(
            "weight.ttnn_tensor",
            "w must be a prepared ttnn weight or None",
            type(w).__name__,
            "w = tt_rmsnorm.prepare_weight(torch_weight, mesh_device)",
        )
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    xd = describe(x)
    if xd.is_sharded and sharded is False:
        raise rules.RuleError(
            "mesh.sharded_override",
            "x is already sharded; the interleaved path needs an interleaved input",
            "sharded=False",
            "ttnn.to_memory_config(x, ttnn.DRAM_MEMORY_CONFIG) first",
        )
    grid = mesh_device.compute_with_storage_grid_size()
    plan = configs.plan(
        xd.shape,
        n,
        compute_grid=(grid.x, grid.y),
        dtype=xd.dtype,
        sharded=True if xd.is_sharded else sharded,
        program_config=program_config,
        compute_kernel_config=compute_kernel_config,
    )
    if plan.path == "sharded" and xd.is_sharded and program_config is None:
        plan = configs.NormPlan(
            **{
                **plan.__dict__,
                "program_config": configs.program_config_from_shard_spec(xd.shard_spec, plan.compute_kernel_config),
                "input_memory_config": None,
            }
        )
    logger.debug(f"distributed_rms_norm: mesh {tuple(mesh_device.shape)} axis {axis} n={n}; {plan.describe()}")

    pre_residual = None
    if residual is not None:
        rules._check_residual(xd, describe(residual))
        if plan.path == "interleaved":
            x = ttnn.add(x, residual)  # the interleaved post normalizes its input: it must be given the sum itself
        else:
            pre_residual = residual
    h = x
    if plan.path == "sharded" and plan.input_memory_config is not None:
        h = ttnn.to_memory_config(x, plan.input_memory_config)
        if pre_residual is not None:
            pre_residual = ttnn.to_memory_config(pre_residual, plan.input_memory_config)
    sharded_pc = plan.program_config if plan.path == "sharded" else None
    stats = ops.rms_norm_pre_all_gather(
        h,
        dtype=ttnn.bfloat16,
        residual_input_tensor=pre_residual,
        compute_kernel_config=plan.compute_kernel_config,
        program_config=sharded_pc or plan.program_config,
    )
    if n > 1:
        stats = ops.all_gather(stats, 3, cluster_axis=axis, memory_config=plan.stats_memory_config)
    out = ops.rms_norm_post_all_gather(
        h,
        stats,
        epsilon=epsilon,
        weight=w,
        compute_kernel_config=plan.compute_kernel_config,
        program_config=sharded_pc or plan.program_config,
        dtype=dtype,
        memory_config=None if plan.path == "sharded" else memory_config,
    )
    target = memory_config or (xd.memory_config if plan.path == "sharded" else None)
    if target is not None and out.memory_config() != target:
        out = ttnn.to_memory_config(out, target)
    if residual is None:
        return out
    if plan.path == "sharded" and h is not x:
        x = ttnn.to_memory_config(h, xd.memory_config)  # the pre wrote x + residual into h's shards
    return out, x
