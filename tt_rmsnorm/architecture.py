"""The Tenstorrent architectures the rules know, as data: every number a rule or the planner reads that differs between
Wormhole and Blackhole lives in one `Architecture` row here.

A device says which row applies (`of_device(mesh_device)`: `mesh_device.arch()`); a device-free check reads the row
of its `TensorDesc` (`TensorDesc.arch`). Where a number is the same on both, the row still carries it, so a rule never
reaches past this table for an architecture's fact.

Each row, Wormhole B0 / Blackhole, and where the number comes from:

- L1 a Tensix core has: 1,499,136 / 1,572,864 B (`worker_l1_size` of the soc descriptors in the ttnn wheel);
- allocator base, the first byte a circular buffer may use: 105,824 / 111,744 B (calibrated: the end addresses ttnn
  reports for the norm factories, byte-exact on mock N150 and P150);
- L1 / DRAM alignment: 16 / 32 B and 16 / 64 B (each architecture's `noc_parameters.h` and `core_config.h`);
- one NOC burst: 8 / 16 KiB (`NOC_MAX_BURST_WORDS` x `NOC_WORD_BYTES`: 256 x 32 B, 256 x 64 B);
- compute grid of one unharvested card: 8 x 8 (N150) / 13 x 10 (P150) (core descriptors; a device reports its own);
- Tensix columns x rows: 8 x 10 / 14 x 10 (soc descriptors; a Blackhole chip dispatches from its last column);
- fabric packet payload and header: 4,352 and 48 B on both (`ttnn.get_tt_fabric_max_payload_size_bytes()`,
  `ttnn.get_tt_fabric_packet_header_size_bytes()` on the mocks);
- a global semaphore's buffer: 32 B on every core on both (the gathers' L1 at the edge of a bank, byte-exact on mock
  T3000, Galaxy and P300);
- HiFi4 with fp32 accumulation: less accurate than HiFi3 on Wormhole (a hardware bug ttnn 0.81.1 warns about, naming
  Wormhole only) / no such bug.

Tile bytes and the circular-buffer sizes of the norm factories are the same on both (`ttnn.Tile((32, 32))` and the
end addresses ttnn reports on mock N150 and P150), so `tt_rmsnorm.tensors.TILE_BYTES` and the L1 models serve both.

Links and topology belong to a system, not to an architecture: `tt_rmsnorm.systems`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ttnn

from tt_rmsnorm.errors import RuleError


@dataclass(frozen=True)
class Architecture:
    name: str  # as ttnn.device.Arch names it, lower case
    l1_size: int
    l1_base: int
    l1_alignment: int
    dram_alignment: int
    noc_max_burst_bytes: int
    default_compute_grid: tuple[int, int]
    tensix_grid: tuple[int, int]
    fabric_packet_bytes: int
    fabric_packet_header_bytes: int
    global_semaphore_bytes: int  # one global semaphore's buffer on every core
    hifi4_fp32_accuracy_bug: bool

    @property
    def l1_span(self) -> int:
        """Bytes of one core's L1 above the allocator base: what a circular buffer region can use at most."""
        return self.l1_size - self.l1_base

    @property
    def ttnn_arch(self):
        return getattr(ttnn.device.Arch, self.name.upper())

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"architecture({self.name!r})"


WORMHOLE_B0 = Architecture(
    name="wormhole_b0",
    l1_size=1_499_136,
    l1_base=105_824,
    l1_alignment=16,
    dram_alignment=32,
    noc_max_burst_bytes=8192,
    default_compute_grid=(8, 8),
    tensix_grid=(8, 10),
    fabric_packet_bytes=4352,
    fabric_packet_header_bytes=48,
    global_semaphore_bytes=32,
    hifi4_fp32_accuracy_bug=True,
)
BLACKHOLE = Architecture(
    name="blackhole",
    l1_size=1_572_864,
    l1_base=111_744,
    l1_alignment=16,
    dram_alignment=64,
    noc_max_burst_bytes=16384,
    default_compute_grid=(13, 10),
    tensix_grid=(14, 10),
    fabric_packet_bytes=4352,
    fabric_packet_header_bytes=48,
    global_semaphore_bytes=32,
    hifi4_fp32_accuracy_bug=False,
)

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (WORMHOLE_B0, BLACKHOLE)}

# What a description without an architecture describes: the architecture the package was first written for.
DEFAULT = WORMHOLE_B0


def architecture(arch=None) -> Architecture:
    """The table row of `arch`: an `Architecture`, a `ttnn.device.Arch`, its name ("blackhole", "wormhole_b0"), or
    None for `DEFAULT`. An architecture the table lacks raises RuleError before any device work."""
    if arch is None:
        return DEFAULT
    if isinstance(arch, Architecture):
        return arch
    name = str(getattr(arch, "name", arch)).rsplit(".", 1)[-1].lower()
    known = ARCHITECTURES.get(name)
    if known is None:
        raise RuleError(
            "arch.known",
            "the rules know the architectures of their table (tt_rmsnorm.architecture.ARCHITECTURES) only",
            arch,
            f"one of {sorted(ARCHITECTURES)}, or a ttnn.device.Arch of them",
        )
    return known


def of_device(mesh_device) -> Architecture:
    """The architecture `mesh_device.arch()` reports."""
    return architecture(mesh_device.arch())
