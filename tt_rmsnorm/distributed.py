"""Distributed RMSNorm over a mesh as one call.

`distributed_rms_norm` checks and plans once per call signature (`tt_rmsnorm.signature`: the mesh, every keyword, the
CCL object, x's and the residual's specs, the weight): a new signature is planned and checked in full
(`tt_rmsnorm.planning.planner`) before any device work and cached (`tt_rmsnorm.plan_cache`), a known one goes straight
to the plan's ttnn calls. `plan_distributed_rms_norm` answers the same question for a shape, without a device.
"""

from __future__ import annotations

import ttnn
from loguru import logger

from tt_rmsnorm.ccl import resources_for
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planning import paths, planner
from tt_rmsnorm.signature import Held, Signature, signature
from tt_rmsnorm.tensors import TensorDesc, describe
from tt_rmsnorm.tiles import TILE
from tt_rmsnorm.topology import resolve_cluster_axis


def plan_distributed_rms_norm(
    local_shape,
    mesh_shape,
    *,
    cluster_axis=None,
    compute_grid=None,
    arch=None,
    dtype=ttnn.bfloat16,
    path: str = "auto",
    ccl=None,
    with_weight: bool = True,
    epsilon: float = 1e-5,
    input_memory_config=None,
    **kw,
) -> paths.PathPlan:
    """The checked plan `distributed_rms_norm` would run for a per-device activation shape, without a device.

    local_shape: one device's activation shape, [B, 1, S, H/n].
    mesh_shape: the mesh's (rows, columns).
    cluster_axis: the gather axis, as `distributed_rms_norm` takes it.
    compute_grid: a device's worker grid (None: the architecture's).
    arch: the architecture planned for (a `ttnn.device.Arch`, its name or a `tt_rmsnorm.architecture` row; None:
        the default).
    dtype: the activation's dtype.
    path: as `distributed_rms_norm` takes it.
    ccl: True plans as for a call given CCL resources (the async and fused paths need them).
    with_weight: whether the call passes a weight.
    epsilon: as `distributed_rms_norm` takes it.
    input_memory_config: x's memory config as the caller holds it (None: DRAM interleaved).
    kw: the call's `sharded`, `program_config`, `compute_kernel_config`, `memory_config` and `out_dtype` (its dtype).
    Returns the plan (`tt_rmsnorm.planning.paths.PathPlan`: its `describe()` says what runs and why).
    """
    axis, n = resolve_cluster_axis(mesh_shape, cluster_axis)
    x = TensorDesc(
        tuple(local_shape), dtype=dtype, memory_config=input_memory_config or ttnn.DRAM_MEMORY_CONFIG, arch=arch
    )
    w = (
        TensorDesc((1, 1, x.padded_width // TILE, TILE), layout=ttnn.ROW_MAJOR_LAYOUT, arch=x.arch)
        if with_weight
        else None
    )
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
        compute_grid=compute_grid or x.arch.default_compute_grid,
        num_devices=n,
        call=call,
        path=path,
        ccl=ccl,
        **kw,
    )


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

    x: the activation, [B, 1, S, H/n] (or [B, S, H/n]) on every device of the gather axis (`shard_activation`).
    w: the weight, each device's slice (`prepare_weight`), or None.
    mesh_device: the mesh.
    epsilon: added to the mean of squares.
    cluster_axis: the mesh axis the hidden dim is sharded over (None on a 1-D mesh: its long axis).
    residual: the residual stream, like x; x + residual is written into it in place on every path (as tt-metal's
        decode updates the stream), and the norm is of that sum. x is never written.
    memory_config: where the output goes (None: x's memory config).
    compute_kernel_config: the ops' (None: fp32 accumulation where it fits, ttnn's default where it does not).
    program_config: the ops' (None: the planner's for the layout; a sharded input's own shard spec where it is
        sharded).
    dtype: the output dtype (None: x's).
    sharded: True asks for the width-sharded L1 layout of a one-tile-row decode input, False for the interleaved one
        (None: sharded where x is sharded).
    path: "auto" (default), "classic", "async", "fused" or "local" (`tt_rmsnorm.planning.paths`): auto takes local
        with one device on the gather axis, classic without `ccl`, and with `ccl` fused for a decode input in L1 with
        a weight and async otherwise.
    ccl: a `CCLResources` of this mesh and axis, or the model's own CCL object (tt-metal's TT_CCL: its cycled
        semaphores and links are used), for the trace-safe paths (async, fused); None: none.
    Returns the output, or `(output, residual)` with a residual.
    """
    return planned_call(
        x,
        w,
        mesh_device,
        epsilon=epsilon,
        cluster_axis=cluster_axis,
        residual=residual,
        memory_config=memory_config,
        compute_kernel_config=compute_kernel_config,
        program_config=program_config,
        dtype=dtype,
        sharded=sharded,
        path=path,
        ccl=ccl,
    ).run(x, w, residual)


def planned_call(
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
) -> paths.PathPlan:
    """The checked plan `distributed_rms_norm` runs for these arguments: the cached plan of their signature
    (`tt_rmsnorm.signature`), else planned and checked in full before any device work, then cached."""
    called, held = signature(
        mesh_device=mesh_device,
        x=x,
        weight=w,
        residual=residual,
        epsilon=epsilon,
        cluster_axis=cluster_axis,
        memory_config=memory_config,
        compute_kernel_config=compute_kernel_config,
        program_config=program_config,
        dtype=dtype,
        sharded=sharded,
        path=path,
        ccl=ccl,
    )
    return PLANS.planned(called, held, plan_signature, x, residual)


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


def check_tensors(x, weight=None, residual=None) -> None:
    """x a ttnn tensor, the weight and the residual ttnn tensors or None."""
    tensors = (x, weight, residual)
    for t, required, (rule, message, fix) in zip(tensors, (True, False, False), _TENSOR_ARGS, strict=True):
        if (required or t is not None) and not isinstance(t, ttnn.Tensor):
            raise RuleError(rule, message, type(t).__name__, fix)


def plan_signature(signature: Signature, held: Held, x, residual) -> paths.PathPlan:
    """The checked plan of a call of `distributed_rms_norm` with this signature, the objects it names and these
    tensors, made before any device work."""
    w = held.weight
    check_tensors(x, w, residual)
    return plan_described(
        held.mesh_device,
        describe(x),
        describe(w),
        describe(residual),
        epsilon=signature.epsilon,
        cluster_axis=signature.cluster_axis,
        memory_config=signature.memory_config,
        compute_kernel_config=held.compute_kernel_config,
        program_config=held.program_config,
        dtype=signature.dtype,
        sharded=signature.sharded,
        path=signature.path,
        ccl=held.ccl,
    )


def plan_described(
    mesh_device,
    x: TensorDesc,
    weight: TensorDesc | None,
    residual: TensorDesc | None,
    *,
    epsilon,
    cluster_axis=None,
    memory_config=None,
    compute_kernel_config=None,
    program_config=None,
    dtype=None,
    sharded=None,
    path="auto",
    ccl=None,
    stats_memory_config=None,
) -> paths.PathPlan:
    """The checked plan of the distributed norm of tensors as described, on `mesh_device`: what a module plans for a
    tensor it will make (a gathered or moved input) before it makes it. `stats_memory_config`: where the stats are
    gathered, where the caller says (None: the layout's)."""
    mesh_shape = tuple(mesh_device.shape)
    axis, n = resolve_cluster_axis(mesh_shape, cluster_axis)
    ccl = resources_for(ccl, mesh_device, cluster_axis)
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
        x,
        weight,
        residual,
        mesh_device=mesh_device,
        compute_grid=(grid.x, grid.y),
        num_devices=n,
        call=call,
        path=path,
        sharded=sharded,
        program_config=planner.copy_config(program_config),
        compute_kernel_config=planner.copy_config(compute_kernel_config),
        ccl=ccl,
        stats_memory_config=stats_memory_config,
    )
    logger.debug(f"distributed_rms_norm: mesh {mesh_shape} axis {axis} n={n}; {plan.describe()}")
    return plan


def plan_replicated(
    mesh_device,
    x: TensorDesc,
    weight: TensorDesc | None,
    residual: TensorDesc | None = None,
    *,
    epsilon,
    memory_config=None,
    program_config=None,
    compute_kernel_config=None,
) -> paths.PathPlan:
    """The checked plan of rms_norm of full-width (replicated) activations on every device of the mesh: a module's
    mode that is not distributed."""
    grid = mesh_device.compute_with_storage_grid_size()
    call = paths.Call(epsilon=epsilon, memory_config=memory_config, mesh_shape=tuple(mesh_device.shape))
    return planner.plan_call(
        x,
        weight,
        residual,
        mesh_device=mesh_device,
        compute_grid=(grid.x, grid.y),
        num_devices=1,
        call=call,
        path="local",
        program_config=planner.copy_config(program_config),
        compute_kernel_config=planner.copy_config(compute_kernel_config),
    )
