"""UMD cluster descriptors of the Blackhole systems (P150, P300, Blackhole Galaxy), written from each board's public
facts, so that ttnn opens them as mock clusters (`tt_rmsnorm.testing.mock_cluster`).

    python -m tt_rmsnorm.testing.blackhole_boards   # rewrites cluster_descriptors/{p150,p300,bh_galaxy}.yaml

The facts each descriptor encodes:

- UMD reads a board's product from its board id: bits 36 and up (the UPI) are 0x41 for a P150, 0x45 for a P300 and
  0x47 for the Blackhole UBB (Galaxy) board; the low bits are a serial number.
- A Blackhole chip has 14 Tensix columns of 10 cores; `harvest_mask` names the disabled columns (one bit a column)
  and ttnn keeps the last remaining column for dispatch: a P150 (140 Tensix) opens with a 13x10 compute grid, a P300
  chip (120 Tensix, two columns off) with 11x10, a Galaxy chip (one column off) with 12x10. Every chip has two of
  its Ethernet cores and one PCIe core disabled (`eth_harvesting_mask` 288, `pcie_harvesting_mask`).
- P300: two chips on one board, each with its own PCIe link, joined by two Ethernet links (ports 2 and 3 of chip 0 to
  ports 9 and 8 of chip 1).
- Blackhole Galaxy: 32 chips on four trays of eight (one UBB board), every chip on PCIe. tt-metal places a UBB chip
  by its PCIe bus id: the high nibble names the tray (0xC0, 0x80, 0x00, 0x40 for trays 1-4), the low nibble the ASIC
  location (1-8). A tray's ASICs sit in two rows of four: ASIC n joins n + 1 along a row through ports 4, 5 (to ports
  2, 3), and n + 4 across the rows through ports 6, 7 (to ports 0, 1). Trays 1-2 and 3-4 join at ASICs 4 and 8
  (ports 4, 5 on both sides), trays 1-3 and 2-4 at ASICs 5-8 (ports 6, 7 on both sides). The chips form a 4 x 8 grid
  with two links between neighbours and no wraparound: no axis closes into a ring.
"""

from __future__ import annotations

import sys
from pathlib import Path

DESCRIPTOR_DIR = Path(__file__).resolve().parent / "cluster_descriptors"

UPI = {"p150": 0x41, "p300": 0x45, "ubb_blackhole": 0x47}
ETH_HARVESTED = 288  # Ethernet cores 5 and 8
TRAY_BUS_NIBBLE = {1: 0xC0, 2: 0x80, 3: 0x00, 4: 0x40}
GALAXY_TRAYS, GALAXY_ASICS = 4, 8


def board_id(board_type: str, serial: int) -> int:
    return (UPI[board_type] << 36) | serial


def _harvesting(mask: int, pcie_mask: int) -> str:
    return (
        f"{{noc_translation: true, harvest_mask: {mask}, dram_harvesting_mask: 0, eth_harvesting_mask: "
        f"{ETH_HARVESTED}, pcie_harvesting_mask: {pcie_mask}, l2cpu_harvesting_mask: 0}}"
    )


def _descriptor(
    chips: list[int],
    links: list[tuple[int, int, int, int]],
    harvest: dict[int, tuple[int, int]],
    board_type: str,
    boards: list[list[int]],
    locations: dict[int, int],
    bus_ids: dict[int, int] | None = None,
) -> str:
    lines = ["arch:", *(f"  {c}: blackhole" for c in chips), "chips: {}"]
    lines.append("ethernet_connections:" if links else "ethernet_connections: []")
    lines += [f"  - [{{chip: {a}, chan: {ca}}}, {{chip: {b}, chan: {cb}}}]" for a, ca, b, cb in links]
    lines.append("ethernet_connections_to_remote_devices: []")
    lines += ["chips_with_mmio:", *(f"  - {c}: {c}" for c in chips), "io_device_type: PCIe", "harvesting:"]
    lines += [f"  {c}: {_harvesting(*harvest[c])}" for c in chips]
    lines += ["chip_to_boardtype:", *(f"  {c}: {board_type}" for c in chips)]
    if bus_ids:
        lines += ["chip_to_bus_id:", *(f"  {c}: 0x{bus_ids[c]:04x}" for c in chips)]
    lines.append("boards:")
    for serial, members in enumerate(boards, start=1):
        lines += [
            f"  - - board_id: {board_id(board_type, serial)}",
            f"    - board_type: {board_type}",
            f"    - chips: [{', '.join(str(c) for c in members)}]",
        ]
    lines += ["asic_locations:", *(f"  {c}: {locations[c]}" for c in chips)]
    return "\n".join(lines) + "\n"


def p150() -> str:
    return _descriptor([0], [], {0: (0, 2)}, "p150", [[0]], {0: 0})


def p300() -> str:
    links = [(0, 2, 1, 9), (0, 3, 1, 8)]
    harvest = {0: (0b101, 2), 1: (0b100000100, 1)}  # two Tensix columns off on each chip
    return _descriptor([0, 1], links, harvest, "p300", [[0, 1]], {0: 0, 1: 1})


def galaxy_chip(tray: int, asic: int) -> int:
    """The chip id of ASIC `asic` (1-8) on tray `tray` (1-4)."""
    return (tray - 1) * GALAXY_ASICS + asic - 1


def galaxy_links() -> list[tuple[int, int, int, int]]:
    """(chip, port, chip, port) of every Ethernet link of the Blackhole Galaxy (see the module's docstring)."""
    links = []
    for tray in range(1, GALAXY_TRAYS + 1):
        for asic in range(1, GALAXY_ASICS + 1):
            here = galaxy_chip(tray, asic)
            if asic % 4:  # along a row of four
                links += [(here, 4, galaxy_chip(tray, asic + 1), 2), (here, 5, galaxy_chip(tray, asic + 1), 3)]
            if asic <= 4:  # across the tray's two rows
                links += [(here, 6, galaxy_chip(tray, asic + 4), 0), (here, 7, galaxy_chip(tray, asic + 4), 1)]
    for left, right in ((1, 2), (3, 4)):
        for asic in (4, 8):
            links += [(galaxy_chip(left, asic), p, galaxy_chip(right, asic), p) for p in (4, 5)]
    for upper, lower in ((1, 3), (2, 4)):
        for asic in range(5, 9):
            links += [(galaxy_chip(upper, asic), p, galaxy_chip(lower, asic), p) for p in (6, 7)]
    return links


def bh_galaxy() -> str:
    chips = list(range(GALAXY_TRAYS * GALAXY_ASICS))
    tray_of = {c: c // GALAXY_ASICS + 1 for c in chips}
    asic_of = {c: c % GALAXY_ASICS + 1 for c in chips}
    harvest = {c: (1 << (c % 13), 1) for c in chips}  # one Tensix column off on each chip
    bus = {c: TRAY_BUS_NIBBLE[tray_of[c]] | asic_of[c] for c in chips}
    return _descriptor(chips, galaxy_links(), harvest, "ubb_blackhole", [chips], asic_of, bus)


HEADERS = {
    "p150": "# Blackhole P150: one chip, 140 Tensix",
    "p300": "# Blackhole P300: two chips on one board, two Ethernet links between them",
    "bh_galaxy": "# Blackhole Galaxy: 32 chips on four trays of one UBB board, a 4 x 8 grid without wraparound",
}
BUILDERS = {"p150": p150, "p300": p300, "bh_galaxy": bh_galaxy}


def descriptor_text(system: str) -> str:
    """The descriptor file of `system` as this module writes it."""
    return (
        f"{HEADERS[system]}.\n# Written by tt_rmsnorm.testing.blackhole_boards from the board's public facts.\n"
        + BUILDERS[system]()
    )


def write_all(directory: Path = DESCRIPTOR_DIR) -> list[Path]:
    paths = []
    for system in BUILDERS:
        path = directory / f"{system}.yaml"
        path.write_text(descriptor_text(system))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else DESCRIPTOR_DIR):
        print(p)
