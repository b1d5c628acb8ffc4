"""Distributed RMSNorm over a mesh as one call, and the mesh helpers around it (open, shard, prepare, gather).

The hidden dim is sharded over one mesh axis (the tensor-parallel axis): all devices of a 1xN mesh (N300 1x2,
T3000 1x8), the columns of a Galaxy 8x4 (`cluster_axis=1`, replicated over rows), as tt-metal model code lays it out.

`distributed_rms_norm` checks and plans once per call signature: everything a rule reads (tensor specs and storage,
mesh, axis, path, configs, output dtype and memory config, epsilon, CCL resources) forms a key; a new key is planned
and checked in full (`tt_rmsnorm.planning.planner`) before any device work, a known key goes straight to the plan's ttnn
calls.
"""

from __future__ import annotations

import math

import torch
import ttnn
from loguru import logger

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.hardware import mock_cluster_active
from tt_rmsnorm.planning import paths, planner
from tt_rmsnorm.rules.common import GAMMA_DTYPES
from tt_rmsnorm.tensors import TensorDesc, describe
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
    forget_plans(mesh_device)
    multi = mesh_device.get_num_devices() > 1
    ttnn.close_mesh_device(mesh_device)
    if multi:
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def resolve_cluster_axis(mesh_shape, cluster_axis=None) -> tuple[int | None, int]:
    """(axis, devices on it). A 1-D mesh gathers along its long axis; a 2-D mesh must name the axis."""
    mesh_shape = tuple(mesh_shape)
    if cluster_axis is not None:
        if cluster_axis not in (0, 1) or len(mesh_shape) != 2:
            raise RuleError(
                "mesh.cluster_axis",
                f"cluster_axis must be 0 or 1 on a 2-D mesh {mesh_shape}",
                cluster_axis,
                "cluster_axis=1: the hidden dim sharded over mesh columns",
            )
        return cluster_axis, mesh_shape[cluster_axis]
    rows, cols = mesh_shape
    if rows > 1 and cols > 1:
        raise RuleError(
            "mesh.cluster_axis_required",
            "a 2-D mesh needs cluster_axis: the axis the hidden dim is sharded over",
            f"mesh {mesh_shape}, cluster_axis=None",
            "cluster_axis=1 (Galaxy 8x4: hidden over the 4 columns, as tt-metal model code)",
        )
    if rows == 1 and cols == 1:
        return None, 1
    return (1, cols) if rows == 1 else (0, rows)


def mapper(mesh_device, axis, dim):
    mesh_shape = tuple(mesh_device.shape)
    if axis is None:
        return ttnn.ReplicateTensorToMesh(mesh_device)
    dims = [None, None]
    dims[axis] = dim
    return ttnn.ShardTensor2dMesh(mesh_device, mesh_shape=mesh_shape, dims=tuple(dims))


def check_local_width(hidden: int, n: int, what: str):
    if hidden % (TILE * n):
        raise RuleError(
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
    if dtype not in GAMMA_DTYPES:
        raise RuleError(
            "weight.dtype",
            "weight dtype must be bfloat16 or float32 for the distributed post",
            dtype,
            "dtype=ttnn.bfloat16",
        )
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    w = torch.as_tensor(torch_weight).reshape(-1)
    check_local_width(w.numel(), n, "weight")
    if layout == ttnn.ROW_MAJOR_LAYOUT:
        w, dim = w.reshape(1, 1, w.numel() // TILE, TILE), 2
    elif layout == ttnn.TILE_LAYOUT:
        w, dim = w.reshape(1, 1, 1, w.numel()), 3
    else:
        raise RuleError(
            "weight.layout", "weight layout must be ROW_MAJOR or TILE", layout, "layout=ttnn.ROW_MAJOR_LAYOUT"
        )
    return ttnn.from_torch(
        w,
        dtype=dtype,
        layout=layout,
        device=mesh_device,
        memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG,
        mesh_mapper=mapper(mesh_device, axis, dim),
    )


def shard_activation(torch_x, mesh_device, *, cluster_axis=None, dtype=ttnn.bfloat16, memory_config=None):
    """Put [.., S, H] on the mesh with H sharded over the tensor-parallel axis (replicated over the other)."""
    x = torch.as_tensor(torch_x)
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    check_local_width(x.shape[-1], n, "activation")
    return ttnn.from_torch(
        x,
        dtype=dtype,
        layout=ttnn.TILE_LAYOUT,
        device=mesh_device,
        memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG,
        mesh_mapper=mapper(mesh_device, axis, x.dim() - 1),
    )


def gather_output(tt_tensor, mesh_device, *, cluster_axis=None) -> torch.Tensor:
    """The full [.., S, H] result on the host: the slices of one line of devices along the tensor-parallel axis."""
    rows, cols = tuple(mesh_device.shape)
    axis, n = resolve_cluster_axis((rows, cols), cluster_axis)
    shards = ttnn.get_device_tensors(tt_tensor)
    index = list(range(cols)) if axis in (1, None) else [r * cols for r in range(rows)]
    return torch.cat([ttnn.to_torch(shards[i]) for i in index[:n]], dim=-1)


def plan_distributed_rms_norm(
    local_shape,
    mesh_shape,
    *,
    cluster_axis=None,
    compute_grid=(8, 8),
    dtype=ttnn.bfloat16,
    path: str = "auto",
    ccl=None,
    with_weight: bool = True,
    epsilon: float = 1e-5,
    **kw,
) -> paths.PathPlan:
    """The checked plan `distributed_rms_norm` would run for a per-device activation shape, without a device.

    `ccl=True` plans as for a call given `CCLResources` (the async and fused paths need them); `kw` takes the call's
    sharded / program_config / compute_kernel_config / memory_config / out_dtype."""
    axis, n = resolve_cluster_axis(mesh_shape, cluster_axis)
    x = TensorDesc(tuple(local_shape), dtype=dtype)
    w = TensorDesc((1, 1, x.padded_width // TILE, TILE), layout=ttnn.ROW_MAJOR_LAYOUT) if with_weight else None
    call = paths.Call(
        epsilon=epsilon,
        dtype=kw.pop("out_dtype", None),
        memory_config=kw.pop("memory_config", None),
        cluster_axis=axis,
        num_devices=n,
        mesh_shape=tuple(mesh_shape),
    )
    return planner.plan_call(
        x,
        w,
        None,
        mesh_device=None,
        compute_grid=compute_grid,
        num_devices=n,
        call=call,
        path=path,
        ccl=ccl,
        **kw,
    )


# Plans by call signature. ttnn's specs and shapes compare by content but hash by identity, so the hashable part of a
# signature (mesh, x's memory config, the call's arguments, the CCL resources) picks a bucket and the tensor specs are
# compared within it. The key holds the mesh and the CCL resources themselves, so neither can be collected and its id
# reused while a plan refers to it; `close_mesh` drops the mesh's plans.
_PLANS: dict[tuple, list] = {}
MAX_KEYS = 256
MAX_PLANS_PER_KEY = 64


def forget_plans(mesh_device=None) -> None:
    """Drop the cached plans of `mesh_device` (of every mesh when None)."""
    for key in [k for k in _PLANS if mesh_device is None or k[0] is mesh_device]:
        del _PLANS[key]


def _remember(key, specs, plan) -> None:
    bucket = _PLANS.get(key)
    if bucket is None:
        if len(_PLANS) >= MAX_KEYS:
            del _PLANS[next(iter(_PLANS))]
        bucket = _PLANS[key] = []
    if len(bucket) >= MAX_PLANS_PER_KEY:
        bucket.pop(0)
    bucket.append((specs, plan))


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
    path: str = "auto",
    ccl=None,
):
    """RMSNorm of a hidden dim sharded over the mesh, equal to single-device `ttnn.rms_norm` of the full activation.

    x: mesh tensor [B, 1, S, H/n] per device (`shard_activation`); w: `prepare_weight(...)` or None.
    path: "auto" (default), "classic", "async", "fused" or "local" (`tt_rmsnorm.planning.paths`); auto takes local
    with one device on the gather axis, classic without `ccl`, and with `ccl` (a `CCLResources` of this mesh and axis)
    fused for decode with a weight and async otherwise. Interleaved layout for prefill; sharded (L1, one tile row) for
    decode when the padded height is 32 (`sharded` overrides). With `residual`, x + residual is normalized and
    `(output, x + residual)` is returned; on the sharded layouts that sum is written over x's shard by the pre (over the
    residual's by the fused op), as tt-metal's decode does. The output has x's memory config unless `memory_config`
    says otherwise.
    """
    try:
        specs = (
            x.spec,
            x.storage_type(),
            None if w is None else (w.spec, w.storage_type()),
            None if residual is None else (residual.spec, residual.storage_type()),
        )
        key = (
            mesh_device,
            x.memory_config(),
            epsilon,
            cluster_axis,
            path,
            sharded,
            dtype,
            memory_config,
            None if compute_kernel_config is None else planner.config_key(compute_kernel_config),
            None if program_config is None else planner.config_key(program_config),
            ccl,
        )
        for seen, plan in _PLANS.get(key, ()):
            if seen == specs:
                return plan.run(x, w, residual)
    except (AttributeError, TypeError):  # not ttnn tensors, or an unhashable argument: check (and fail) in full
        key = None
    plan = _plan(
        x,
        w,
        residual,
        mesh_device,
        epsilon,
        cluster_axis,
        memory_config,
        compute_kernel_config,
        program_config,
        dtype,
        sharded,
        path,
        ccl,
    )
    if key is not None:
        _remember(key, specs, plan)
    return plan.run(x, w, residual)


# (rule, message, fix) for x, w and residual when they are not ttnn tensors.
_TENSOR_ARGS = (
    ("input.ttnn_tensor", "x must be a ttnn mesh tensor", "tt_rmsnorm.shard_activation(torch_x, mesh_device)"),
    (
        "weight.ttnn_tensor",
        "w must be a prepared ttnn weight or None",
        "w = tt_rmsnorm.prepare_weight(torch_weight, mesh_device)",
    ),
    (
        "residual.ttnn_tensor",
        "residual must be a ttnn mesh tensor like x",
        "tt_rmsnorm.shard_activation(torch_residual, mesh_device)",
    ),
)


def _plan(
    x,
    w,
    residual,
    mesh_device,
    epsilon,
    cluster_axis,
    memory_config,
    compute_kernel_config,
    program_config,
    dtype,
    sharded,
    path,
    ccl,
) -> paths.PathPlan:
    for t, required, (rule, message, fix) in zip((x, w, residual), (True, False, False), _TENSOR_ARGS, strict=True):
        if (required or t is not None) and not isinstance(t, ttnn.Tensor):
            raise RuleError(rule, message, type(t).__name__, fix)
    mesh_shape = tuple(mesh_device.shape)
    axis, n = resolve_cluster_axis(mesh_shape, cluster_axis)
    if ccl is not None and (ccl.mesh_device is not mesh_device or ccl.cluster_axis != axis):
        raise RuleError(
            "ccl.mesh_axis",
            "the CCL resources belong to another mesh or cluster axis",
            f"resources for axis {ccl.cluster_axis}, call on axis {axis}",
            "create one CCLResources per mesh and cluster axis and pass the matching one",
        )
    grid = mesh_device.compute_with_storage_grid_size()
    call = paths.Call(
        epsilon=epsilon,
        dtype=dtype,
        memory_config=memory_config,
        cluster_axis=axis,
        num_devices=n,
        mesh_shape=mesh_shape,
    )
    plan = planner.plan_call(
        describe(x),
        describe(w),
        describe(residual),
        mesh_device=mesh_device,
        compute_grid=(grid.x, grid.y),
        num_devices=n,
        call=call,
        path=path,
        sharded=sharded,
        program_config=planner.copy_config(program_config),
        compute_kernel_config=planner.copy_config(compute_kernel_config),
        ccl=ccl,
    )
    logger.debug(f"distributed_rms_norm: mesh {mesh_shape} axis {axis} n={n}; {plan.describe()}")
    return plan
