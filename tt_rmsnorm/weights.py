"""The norm's weight as model code keeps it: read from a state_dict by tt-metal's key convention, and loaded onto the
mesh as tt-metal's norm modules load it (replicated or each device's slice, ROW_MAJOR or TILE), tilized once into a
cache file where a cache path is given.
"""

from __future__ import annotations

from pathlib import Path

import torch
import ttnn

from tt_rmsnorm import topology
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.rules import op_checks
from tt_rmsnorm.rules.common import GAMMA_DTYPES, enum_name
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.tiles import TILE


def weight_name(weight_key: str, layer_num=None, state_dict_prefix=None) -> str:
    """The state_dict key of the norm's weight, by tt-metal's convention: `{prefix}{key}.weight` with a prefix,
    `layers.{n}.{key}.weight` with a layer number, else `{key}.weight`."""
    if state_dict_prefix:
        return f"{state_dict_prefix}{weight_key}.weight"
    if layer_num is not None:
        return f"layers.{layer_num}.{weight_key}.weight"
    return f"{weight_key}.weight"


def state_dict_weight(state_dict, name: str, dim: int) -> torch.Tensor:
    """The norm's weight from the checkpoint, as float: `dim` elements under `name`."""
    if name not in state_dict:
        raise RuleError(
            "module.weight_key",
            "the norm's weight is not in the state_dict",
            name,
            "check weight_key / layer_num / state_dict_prefix against the checkpoint's keys",
        )
    torch_weight = torch.as_tensor(state_dict[name]).reshape(-1).float()
    if torch_weight.numel() != dim:
        raise RuleError("module.weight_size", "the weight must have `dim` elements", torch_weight.numel(), f"dim={dim}")
    return torch_weight


# Block-float dtypes hold a shared exponent per tile face: ttnn stores them in TILE layout only.
BLOCK_DTYPES = (ttnn.bfloat8_b, ttnn.bfloat4_b)


def row_major_fits(dim: int, dtype, compute_kernel_config, arch=None) -> bool:
    """Whether ttnn's interleaved rms_norm over a full `dim`-wide row holds a ROW_MAJOR weight in one core's L1 of
    `arch` (None: the default architecture)."""
    weight = TensorDesc((1, 1, dim // TILE, TILE), dtype=dtype, layout=ttnn.ROW_MAJOR_LAYOUT, arch=arch)
    try:
        op_checks.check_rms_norm(
            TensorDesc((1, 1, TILE, dim), arch=arch),
            epsilon=1e-5,
            weight=weight,
            compute_kernel_config=compute_kernel_config,
        )
    except RuleError as e:
        if e.rule == "rms_norm.l1_budget":
            return False
        raise
    return True


class WeightLoader:
    """Puts a norm weight on the mesh as tt-metal's norm modules do, tilized once into `cache / name` when a cache
    path is given: ROW_MAJOR [1, 1, dim/32, 32] or TILE [1, 1, 1, dim], replicated, or split over `axis` into each
    device's slice."""

    def __init__(self, mesh_device, dim: int, dtype, memory_config, cache: Path | None):
        self.mesh_device, self.dim, self.dtype, self.cache = mesh_device, dim, dtype, cache
        self.memory_config = memory_config or ttnn.DRAM_MEMORY_CONFIG

    def replicated(self, torch_weight, name: str, compute_kernel_config):
        """(the replicated weight, the weight an interleaved input takes, a callable): ROW_MAJOR as tt-metal loads
        it, and the same tensor for interleaved inputs; a block-float dtype TILE for both (it cannot be ROW_MAJOR);
        where ttnn's interleaved rms_norm cannot hold a full ROW_MAJOR row beside its buffers (8192 on one device),
        a TILE copy, loaded the first time an interleaved input asks for it (the warm-up call). A width that is not
        a multiple of 32 is TILE too: ttnn pads it to tiles with zeros, which the norm never reads."""
        if self.dtype in BLOCK_DTYPES or self.dim % TILE:  # neither can be ROW_MAJOR [dim/32, 32]
            weight = self(torch_weight, name, None, ttnn.TILE_LAYOUT)
            return weight, lambda: weight
        weight = self(torch_weight, name, None)
        if row_major_fits(self.dim, self.dtype, compute_kernel_config, self.mesh_device.arch()):
            return weight, lambda: weight
        made = []

        def tile_copy():
            if not made:
                made.append(self(torch_weight, name, None, ttnn.TILE_LAYOUT))
            return made[0]

        return weight, tile_copy

    def distributed(self, torch_weight, name: str, axis):
        """Each device's slice of the weight, ROW_MAJOR, as the distributed post and the fused op take it."""
        if self.dtype not in GAMMA_DTYPES:
            raise RuleError(
                "weight.dtype",
                "the distributed post and fused_rms_minimal take a bfloat16 or float32 weight",
                enum_name(self.dtype),
                "weight_dtype=ttnn.bfloat16 (a distributed norm's weight is dim/n wide: bfloat8_b saves nothing)",
            )
        return self(torch_weight, f"{name}_distributed", axis)

    def __call__(self, torch_weight, name: str, axis, layout=ttnn.ROW_MAJOR_LAYOUT):
        if axis is not None:  # a slice a device: the distributed norm's per-device widths are whole tiles
            topology.check_local_width(self.dim, tuple(self.mesh_device.shape)[axis], "weight")
        if layout == ttnn.ROW_MAJOR_LAYOUT:
            shaped, dim = torch_weight.reshape(1, 1, self.dim // TILE, TILE), 2
        else:
            shaped, dim = torch_weight.reshape(1, 1, 1, self.dim), 3
        return ttnn.as_tensor(
            shaped,
            dtype=self.dtype,
            layout=layout,
            device=self.mesh_device,
            memory_config=self.memory_config,
            mesh_mapper=topology.mapper(self.mesh_device, axis, dim),
            cache_file_name=None if self.cache is None else self.cache / name,
        )
