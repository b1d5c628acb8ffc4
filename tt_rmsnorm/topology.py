"""Mesh topology: which mesh axis the hidden dim is sharded over, how many devices it holds, and how a torch tensor
is split onto it.

The hidden dim is sharded over one mesh axis (the tensor-parallel axis): all devices of a 1xN mesh (N300 1x2, T3000
1x8), the columns of a Galaxy 8x4 (`cluster_axis=1`, replicated over rows), as tt-metal model code lays it out.
"""

from __future__ import annotations

import ttnn

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.tiles import TILE


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
