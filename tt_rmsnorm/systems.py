"""The Tenstorrent systems the rules and the planner know: for each, its architecture, the mesh it opens as, the
Ethernet links between neighbouring chips along each mesh axis, which axes close into rings and how many hosts hold it.

Links and rings belong to a system, not to an architecture (a Galaxy and a T3000 are both Wormhole): a system is found
by its architecture and mesh shape (`system_of`), so a device-free check names both. A mesh that spans hosts is one
system here, links and rings across the host boundary included: the rules see the whole mesh.

| system | arch | mesh | links between neighbours (axis 0, axis 1) | compute grid | rings | hosts |
|---|---|---|---|---|---|---|
| N300 | wormhole_b0 | 1x2 | -, 2 | 8x7 | - | 1 |
| T3000 | wormhole_b0 | 1x8 | -, 2 | 8x7 | axis 1 (its eight chips form a ring) | 1 |
| Galaxy | wormhole_b0 | 8x4 | 4, 4 | 8x9 | - | 1 |
| 2 x T3000 | wormhole_b0 | 1x16 | -, 2 | 8x7 | - | 2 |
| 2 x Galaxy | wormhole_b0 | 8x8 | 4, 4 | 8x9 | - | 2 |
| 4 x Galaxy | wormhole_b0 | 8x16 | 4, 4 | 8x9 | - | 4 |
| P300 | blackhole | 1x2 | -, 2 | 11x10 | - | 1 |
| Blackhole Galaxy | blackhole | 8x4 | 2, 2 | 12x10 | - (a 4 x 8 grid without wraparound) | 1 |

The compute grids are those the meshes open with (Wormhole N300 boards under Tensix dispatch, which keeps the reported
grid and ttnn's program validator consistent on the mocks; a Blackhole chip dispatches from its last Tensix column).

The links are the Ethernet channels between neighbours in each system's cluster descriptor (num_links beyond them
fails in the fabric); the mock meshes report the same (`tests/mock/test_mock_systems.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tt_rmsnorm.architecture import BLACKHOLE, WORMHOLE_B0, Architecture, architecture


@dataclass(frozen=True)
class System:
    name: str
    arch: Architecture
    mesh_shape: tuple[int, int]
    links: tuple[int | None, int | None]  # Ethernet links between neighbours along axis 0 / axis 1 (None: no such axis)
    compute_grid: tuple[int, int]  # the compute grid its mesh opens with: one L1 bank per core
    rings: tuple[bool, bool] = (False, False)  # whether axis 0 / axis 1 closes into a ring
    hosts: int = 1

    def links_on(self, axis: int | None) -> int | None:
        """The links between neighbours along `axis` (the fewer of both when None)."""
        if axis is None:
            known = [n for n in self.links if n is not None]
            return min(known) if known else None
        return self.links[axis]


SYSTEMS: tuple[System, ...] = (
    System("N300", WORMHOLE_B0, (1, 2), (None, 2), (8, 7)),
    System("T3000", WORMHOLE_B0, (1, 8), (None, 2), (8, 7), rings=(False, True)),
    System("Galaxy", WORMHOLE_B0, (8, 4), (4, 4), (8, 9)),
    System("2 x T3000", WORMHOLE_B0, (1, 16), (None, 2), (8, 7), hosts=2),
    System("2 x Galaxy", WORMHOLE_B0, (8, 8), (4, 4), (8, 9), hosts=2),
    System("4 x Galaxy", WORMHOLE_B0, (8, 16), (4, 4), (8, 9), hosts=4),
    System("P300", BLACKHOLE, (1, 2), (None, 2), (11, 10)),
    System("Blackhole Galaxy", BLACKHOLE, (8, 4), (2, 2), (12, 10)),
)


def system_of(arch, mesh_shape) -> System | None:
    """The known system of architecture `arch` whose mesh has `mesh_shape`, or None (the rules then bound nothing
    by links or rings)."""
    arch, shape = architecture(arch), tuple(int(d) for d in mesh_shape)
    return next((s for s in SYSTEMS if s.arch == arch and s.mesh_shape == shape), None)


def l1_banks(arch, mesh_shape) -> int:
    """L1 banks of the system's mesh: one per core of the compute grid it opens with. A mesh not listed gets the
    fewest of its architecture's systems, so that an L1 verdict on it errs towards refusing."""
    system = system_of(arch, mesh_shape)
    if system is not None:
        return system.compute_grid[0] * system.compute_grid[1]
    arch = architecture(arch)
    return min(s.compute_grid[0] * s.compute_grid[1] for s in SYSTEMS if s.arch == arch)
