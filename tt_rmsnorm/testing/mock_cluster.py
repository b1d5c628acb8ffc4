"""Real ttnn without Tenstorrent hardware: configure a process for a mock cluster and open its meshes.

With `TT_METAL_MOCK_CLUSTER_DESC_PATH` pointing at a UMD cluster descriptor, ttnn 0.81.1 opens mock devices on which
ops run their real validation and program factories; no kernel runs and every value read back is zero. Opening a
device needs the SFPI RISC-V compiler, which cannot be had here, so `configure` installs a stand-in for it
(`tt_rmsnorm.testing.sfpi_stand_in`).

    from tt_rmsnorm.testing import mock_cluster
    mock_cluster.configure("t3k")               # before ttnn opens anything (one system per process)
    mesh = mock_cluster.open_mesh((1, 8))       # tt_rmsnorm.open_mesh with the mock's dispatch config

ttnn keeps process-wide state (one cluster, program caches, fabric config) and segfaults on some bad inputs, so tests
run ttnn in worker processes (`tt_rmsnorm.testing.workers`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tt_rmsnorm.hardware import MOCK_ENV, MockClusterError, tt_hardware_present
from tt_rmsnorm.testing.sfpi_stand_in import install_compiler_stand_in

DESCRIPTOR_DIR = Path(__file__).resolve().parent / "cluster_descriptors"


DESCRIPTORS: dict[str, Path] = {
    "n150": DESCRIPTOR_DIR / "n150.yaml",
    "n300": DESCRIPTOR_DIR / "n300.yaml",
    "t3k": DESCRIPTOR_DIR / "t3k.yaml",
    # tt-metal's public 6U (32-chip Wormhole Galaxy) mock descriptor plus the `chip_to_bus_id` map its copy lacks: UBB
    # tray and ASIC positions come from the PCIe bus id, and without it all 32 chips collide at (tray 3, loc 0).
    "galaxy": DESCRIPTOR_DIR / "galaxy_6u.yaml",
    # Blackhole: written from each board's public facts by tt_rmsnorm.testing.blackhole_boards
    "p150": DESCRIPTOR_DIR / "p150.yaml",
    "p300": DESCRIPTOR_DIR / "p300.yaml",
    "bh-galaxy": DESCRIPTOR_DIR / "bh_galaxy.yaml",
}


MESH_SHAPES: dict[str, tuple[int, int]] = {
    "n150": (1, 1),
    "n300": (1, 2),
    "t3k": (1, 8),
    "galaxy": (8, 4),
    "p150": (1, 1),
    "p300": (1, 2),
    "bh-galaxy": (8, 4),
}

# The architecture of each mock system (a row of tt_rmsnorm.architecture).
ARCHES: dict[str, str] = {
    "n150": "wormhole_b0",
    "n300": "wormhole_b0",
    "t3k": "wormhole_b0",
    "galaxy": "wormhole_b0",
    "p150": "blackhole",
    "p300": "blackhole",
    "bh-galaxy": "blackhole",
}


# The n300-board mocks report an 8x8 grid under the default (ETH) dispatch while the program validator assumes 8x7;
# Tensix (WORKER) dispatch makes both 8x7 (ttnn-findings #6).
WORKER_DISPATCH_SYSTEMS = ("n300", "t3k")


CACHE_ENV = "TT_METAL_CACHE"


PRIVATE_CACHE_ENV = "TT_RMSNORM_WORKER_JIT_DIR"


private_cache: Path | None = None


def configured_system() -> str | None:
    """The mock system this process was configured for (from the environment), or None."""
    path = os.environ.get(MOCK_ENV)
    if not path:
        return None
    for name, desc in DESCRIPTORS.items():
        if Path(path).resolve() == desc.resolve():
            return name
    return "custom"


def configure(system: str) -> None:
    """Make this process use the mock `system` (a key of DESCRIPTORS: "n150", "n300", "t3k", "galaxy", "p150",
    "p300", "bh-galaxy"): descriptor, private JIT cache and the compiler stand-in. Call before ttnn opens a device; a
    process can use one mock system only. Idempotent."""
    global private_cache
    if system not in DESCRIPTORS:
        raise MockClusterError(f"unknown mock system {system!r}; known: {sorted(DESCRIPTORS)}")
    if not DESCRIPTORS[system].exists():
        raise MockClusterError(f"descriptor for {system} missing: {DESCRIPTORS[system]}")
    current = configured_system()
    if current not in (None, system) and "ttnn" in sys.modules:
        raise MockClusterError(
            f"this process already uses the mock {current} (ttnn keeps one cluster per process); "
            f"use run_isolated({system!r}, ...) for another system"
        )
    os.environ[MOCK_ENV] = str(DESCRIPTORS[system])
    if private_cache is None:
        # A fresh JIT cache per process: stale artefacts in ~/.cache/tt-metal-cache (real or stand-in builds) are never
        # reused, and concurrent workers never share half-written files. The stand-in makes rebuilding cost ~ms.
        # A worker's cache is made (and removed, even after a crash) by the process that started it.
        given = os.environ.get(PRIVATE_CACHE_ENV)
        if given:
            private_cache = Path(given)
        else:
            private_cache = Path(tempfile.mkdtemp(prefix=f"tt_rmsnorm-jit-{system}-"))
            atexit.register(shutil.rmtree, private_cache, True)
    os.environ[CACHE_ENV] = f"{private_cache}/"
    install_compiler_stand_in()


def dispatch_core_config():
    """On a mock n300/T3K, Tensix (WORKER) dispatch keeps the reported compute grid and the Metal-2 validator's grid
    consistent (ttnn-findings #6); elsewhere, and on real hardware, ttnn's default (None)."""
    import ttnn

    if configured_system() in WORKER_DISPATCH_SYSTEMS and not tt_hardware_present():
        return ttnn.DispatchCoreConfig(ttnn.DispatchCoreType.WORKER)
    return None


def open_mesh(shape: tuple[int, int], **kwargs):
    """`tt_rmsnorm.open_mesh`, with the dispatch config that keeps a mock n300/T3000's grids consistent."""
    from tt_rmsnorm.devices import open_mesh as open_device_mesh  # imports ttnn: only after configure()

    dispatch = dispatch_core_config()
    if dispatch is not None:
        kwargs.setdefault("dispatch_core_config", dispatch)
    return open_device_mesh(shape, **kwargs)
