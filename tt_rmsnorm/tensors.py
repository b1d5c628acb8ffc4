"""A device-free description of a ttnn tensor, so the rules run with no device, and the provenance of stats tensors.

`TensorDesc` carries what ttnn's validation reads: logical and padded shape, dtype, layout, memory config, storage, and
the architecture of the device it lives on (`tt_rmsnorm.architecture`: where its L1 ends, its NOC burst, ...). Real
tensors are described with `describe(t)`, which reads the architecture from the tensor's device. Stats tensors carry one
more fact ttnn does not record: whether they hold per-device *sums* of x^2 (interleaved pre) or *means* (sharded pre).
ttnn tensors take no attributes and no weak references, so the ops record it by `tensor_id`, which ttnn never reuses
within a process.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import ttnn

from tt_rmsnorm.architecture import Architecture, architecture
from tt_rmsnorm.tiles import TILE, tile_padded

STATS_SUMS = "sums"  # interleaved pre: sum(x^2) over the local width, column 0 of each 32-wide tile
STATS_MEANS = "means"  # sharded pre: E[x^2] over the local width

DTYPE_BYTES = {ttnn.bfloat16: 2, ttnn.float32: 4, ttnn.uint32: 4, ttnn.int32: 4, ttnn.uint16: 2, ttnn.uint8: 1}
# Bytes of one 32x32 tile of every dtype ttnn can describe (ttnn.Tile((32,32)).get_tile_size(dtype) on a mock device;
# bf8_b: 1024 mantissas + 64 shared exponents).
TILE_BYTES = {
    ttnn.bfloat16: 2048,
    ttnn.float32: 4096,
    ttnn.bfloat8_b: 1088,
    ttnn.bfloat4_b: 576,
    ttnn.uint32: 4096,
    ttnn.int32: 4096,
    ttnn.uint16: 2048,
    ttnn.uint8: 1024,
}


@dataclass(frozen=True)
class TensorDesc:
    shape: tuple[int, ...]
    dtype: ttnn.DataType = ttnn.bfloat16
    layout: ttnn.Layout = ttnn.TILE_LAYOUT
    memory_config: ttnn.MemoryConfig = field(default_factory=lambda: ttnn.DRAM_MEMORY_CONFIG)
    padded_shape: tuple[int, ...] | None = None
    on_device: bool = True
    stats_kind: str | None = None
    # the architecture's table row; given as a row, a ttnn.device.Arch or its name, None for the default
    arch: Architecture | str | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "arch", architecture(self.arch))
        if self.padded_shape is None:
            padded = tile_padded(self.shape) if self.layout == ttnn.TILE_LAYOUT else self.shape
            if self.layout == ttnn.TILE_LAYOUT and len(padded) == 1:  # ttnn tiles a rank-1 [W] as one tile row
                padded = (TILE, *padded)
            object.__setattr__(self, "padded_shape", padded)
        else:
            object.__setattr__(self, "padded_shape", tuple(int(d) for d in self.padded_shape))

    @classmethod
    def from_tensor(cls, t) -> TensorDesc:
        on_device = t.storage_type() == ttnn.StorageType.DEVICE
        return cls(
            shape=tuple(t.shape),
            dtype=t.dtype,
            layout=t.layout,
            memory_config=t.memory_config() if on_device else ttnn.DRAM_MEMORY_CONFIG,
            padded_shape=tuple(t.padded_shape),
            on_device=on_device,
            stats_kind=stats_kind_of(t),
            arch=t.device().arch() if on_device else None,
        )

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_sharded(self) -> bool:
        return self.memory_config.is_sharded()

    @property
    def memory_layout(self):
        return self.memory_config.memory_layout

    @property
    def shard_spec(self):
        return self.memory_config.shard_spec

    @property
    def physical_rows(self) -> int:
        """Rows of the 2-D view ttnn's sharded op uses: physical volume / padded width."""
        rows = 1
        for d in self.padded_shape[:-1]:
            rows *= d
        return rows

    @property
    def width(self) -> int:
        return self.shape[-1]

    @property
    def padded_width(self) -> int:
        return self.padded_shape[-1]

    def tile_bytes(self) -> int:
        return TILE_BYTES[self.dtype]


def describe(t) -> TensorDesc | None:
    """A TensorDesc for a TensorDesc, a real ttnn tensor, or None."""
    if t is None or isinstance(t, TensorDesc):
        return t
    if isinstance(t, ttnn.Tensor):
        return TensorDesc.from_tensor(t)
    raise TypeError(f"expected a ttnn.Tensor or tt_rmsnorm.TensorDesc, got {type(t).__name__}")


_STATS_KIND: OrderedDict[int, str] = OrderedDict()
_STATS_KIND_CAP = 65536


STATS_KINDS = (STATS_SUMS, STATS_MEANS)


def mark_stats(t, kind: str):
    """Record that stats tensor `t` holds per-device `kind` ("sums" or "means") and return it, so that
    `rms_norm_post_all_gather` refuses the wrong kind (rule stats.kind_mismatch). The package's own ops mark what they
    produce; mark raw ttnn tensors yourself, e.g. stats built on the host:

        stats = tt_rmsnorm.mark_stats(ttnn.from_torch(sum_x2, ...), "sums")

    The kind cannot be inferred from the layout: a host-built tensor moved to one core's L1 looks exactly like the
    gathered output of the sharded pre, and either kind can sit in DRAM. A TensorDesc is returned as a marked copy."""
    if kind not in STATS_KINDS:
        raise ValueError(f"stats kind must be one of {STATS_KINDS}, got {kind!r}")
    if isinstance(t, TensorDesc):
        return replace(t, stats_kind=kind)
    if not isinstance(t, ttnn.Tensor):
        raise TypeError(f"expected a ttnn.Tensor or tt_rmsnorm.TensorDesc, got {type(t).__name__}")
    _STATS_KIND[t.tensor_id] = kind
    while len(_STATS_KIND) > _STATS_KIND_CAP:
        _STATS_KIND.popitem(last=False)
    return t


def stats_kind_of(t) -> str | None:
    if isinstance(t, TensorDesc):
        return t.stats_kind
    if isinstance(t, ttnn.Tensor):
        return _STATS_KIND.get(t.tensor_id)
    return None
