"""The mesh a model runs on and the tensors it holds: open and close a mesh, place a weight and an activation on it
as tt-metal model code lays them out, and gather a result back to the host.
"""

from __future__ import annotations

import math

import torch
import ttnn

from tt_rmsnorm.ccl import forget_adopted
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import forget_plans
from tt_rmsnorm.rules.common import GAMMA_DTYPES
from tt_rmsnorm.tiles import TILE
from tt_rmsnorm.topology import check_local_width, mapper, resolve_cluster_axis
from tt_rmsnorm.weights import row_major_fits


def open_mesh(shape: tuple[int, int], **kwargs):
    """Open a mesh of `shape` (rows, cols) with the fabric configured for the stats all_gather. Extra kwargs go to
    ttnn.open_mesh_device."""
    if math.prod(shape) > 1:
        ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    return ttnn.open_mesh_device(ttnn.MeshShape(*(int(v) for v in shape)), **kwargs)


def close_mesh(mesh_device) -> None:
    """Close a mesh opened by `open_mesh`, and turn the fabric off again so the next mesh can configure it."""
    forget_plans(mesh_device)
    forget_adopted(mesh_device)
    multi = mesh_device.get_num_devices() > 1
    ttnn.close_mesh_device(mesh_device)
    if multi:
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def prepare_weight(
    torch_weight,
    mesh_device,
    *,
    cluster_axis=None,
    dtype=ttnn.bfloat16,
    layout=None,
    memory_config=None,
):
    """The weight as the norm op takes it, each device's contiguous slice over the tensor-parallel axis, as tt-metal's
    models/common/rmsnorm.py lays it out: ROW_MAJOR [1, 1, H/32, 32] sharded on dim 2, or TILE [1, 1, 1, H] sharded
    on dim 3. `layout=None` takes the one the call can hold: ROW_MAJOR, except with one device on the axis where the
    width is not a multiple of 32 (ttnn pads a TILE weight with zeros) or ttnn's interleaved rms_norm cannot hold a
    ROW_MAJOR row beside its buffers in a core's L1 (8192 wide on Wormhole): TILE."""
    if dtype not in GAMMA_DTYPES:
        raise RuleError(
            "weight.dtype",
            "weight dtype must be bfloat16 or float32 for the distributed post",
            dtype,
            "dtype=ttnn.bfloat16",
        )
    axis, n = resolve_cluster_axis(tuple(mesh_device.shape), cluster_axis)
    w = torch.as_tensor(torch_weight).reshape(-1)
    width = w.numel()
    if n > 1:  # the distributed norm's per-device widths are whole tiles
        check_local_width(width, n, "weight")
    if layout is None:
        one_device_tile = n == 1 and (width % TILE or not row_major_fits(width, dtype, None, mesh_device.arch()))
        layout = ttnn.TILE_LAYOUT if one_device_tile else ttnn.ROW_MAJOR_LAYOUT
    if layout == ttnn.ROW_MAJOR_LAYOUT:
        if width % TILE:
            raise RuleError(
                "weight.row_major_shape",
                "a ROW_MAJOR weight is [1, 1, W/32, 32]: its width must be a multiple of 32",
                f"width {width}",
                "layout=ttnn.TILE_LAYOUT (or layout=None: ttnn pads a TILE weight with zeros)",
            )
        w, dim = w.reshape(1, 1, width // TILE, TILE), 2
    elif layout == ttnn.TILE_LAYOUT:
        w, dim = w.reshape(1, 1, 1, width), 3
    else:
        raise RuleError("weight.layout", "weight layout must be ROW_MAJOR or TILE", layout, "layout=None")
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
