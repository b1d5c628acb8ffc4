"""Meshes that span hosts, on mock clusters: one mesh split over MPI ranks that ttnn's `tt-run` launches, each rank
opening its host's part from a cluster descriptor of its own.

    directory = multi_host.write_files("2xt3k", Path("/tmp/run"))   # descriptors, mock mapping, mesh graph, bindings
    run = multi_host.launch("2xt3k", directory, timeout_s=240)       # every rank runs tt_rmsnorm.testing.rank_program
    run.ranks                                                        # what each rank reports

The systems (`SYSTEMS`), each built from this package's single-host descriptor of one host, every host a copy with
chip ids of its own, joined by the Ethernet links that cable the hosts:

- 2 x T3000 (a 1x16 mesh, hosts side by side along it): each T3000's four PCIe chips (0-3) keep two Ethernet ports
  free, which cable them to the same chip of the other host;
- 2 x and 4 x Galaxy (8x8 and 8x16 meshes, hosts side by side along the columns): a Galaxy's chips form a 4 x 8 grid
  whose two long sides (8 chips each) keep ports 0-3 free; one host's second long side is cabled to the next host's
  first, chip by chip, four ports each.

`joined_descriptor` writes the two T3000s' chips and links as one host, so that a single process opens the same mesh
and the ranks' outputs can be compared with it. Galaxies have no such form: tt-metal places a UBB chip by (host, tray,
ASIC location) from its PCIe bus id, four trays a host, so two Galaxies in one host collide ("Two ASICs in the physical
system descriptor share the address (..., tray 3, loc 7)"), and a bus id outside the four trays reads as tray 0.

Hang guard: a rank whose program fails ends its own process (`os._exit(1)`), mpirun ends the job after `timeout_s`
(`--timeout`), and `launch` kills the whole process group of tt-run if that does not end it in time either.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tt_rmsnorm.testing.mock_cluster import DESCRIPTORS

RANK_PROGRAM = "tt_rmsnorm.testing.rank_program"
TT_RUN_OVERHEAD_S = 60.0  # tt-run's own start and mpirun's teardown beyond the job's timeout
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class MultiHostSystem:
    name: str
    base: str  # the single-host mock system each host is a copy of
    hosts: int
    mesh_shape: tuple[int, int]
    channels: int  # Ethernet channels between neighbouring chips the mesh graph asks for
    arch: str = "WORMHOLE_B0"

    @property
    def host_topology(self) -> tuple[int, int]:
        return (1, self.hosts)


SYSTEMS: dict[str, MultiHostSystem] = {
    "2xt3k": MultiHostSystem("2xt3k", "t3k", 2, (1, 16), 2),
    "2xgalaxy": MultiHostSystem("2xgalaxy", "galaxy", 2, (8, 8), 4),
    "4xgalaxy": MultiHostSystem("4xgalaxy", "galaxy", 4, (8, 16), 4),
}

# A T3000's PCIe chips and their free Ethernet ports (t3k.yaml); a Galaxy's long sides, chip by chip along the side,
# and their free ports (galaxy_6u.yaml: 4 rows of 8 chips, rows 0 and 3 the long sides).
T3K_CABLED = {0: (0, 1), 1: (6, 7), 2: (0, 1), 3: (6, 7)}
GALAXY_FIRST_SIDE = (0, 4, 8, 12, 13, 9, 5, 1)
GALAXY_SECOND_SIDE = (2, 6, 10, 14, 15, 11, 7, 3)
GALAXY_PORTS = (0, 1, 2, 3)


def host_links(system: MultiHostSystem) -> list[tuple[int, int, int, int, int, int]]:
    """(host, chip, port, host, chip, port) of every link between hosts."""
    links = []
    for host in range(system.hosts - 1):
        if system.base == "t3k":
            links += [(host, c, p, host + 1, c, p) for c, ports in T3K_CABLED.items() for p in ports]
        else:
            for a, b in zip(GALAXY_SECOND_SIDE, GALAXY_FIRST_SIDE, strict=True):
                links += [(host, a, p, host + 1, b, p) for p in GALAXY_PORTS]
    return links


def _base_descriptor(system: MultiHostSystem) -> dict:
    d = yaml.safe_load(DESCRIPTORS[system.base].read_text())
    if "chip_to_bus_id" in d:  # YAML reads 0x0041 as a number; UMD wants the hex string
        d["chip_to_bus_id"] = {chip: f"0x{bus:04x}" for chip, bus in d["chip_to_bus_id"].items()}
    return d


def _unique_id(host: int, chip: int) -> int:
    return (host + 1) << 32 | chip


def host_descriptor(system: MultiHostSystem, host: int) -> dict:
    """Host `host`'s cluster descriptor: the base system's chips with ids of their own, and its links to other hosts
    as `ethernet_connections_to_remote_devices`."""
    d = copy.deepcopy(_base_descriptor(system))
    d["chip_unique_ids"] = {chip: _unique_id(host, chip) for chip in d["arch"]}
    remote = []
    for h0, c0, p0, h1, c1, p1 in host_links(system):
        if h0 == host:
            remote.append([{"chip": c0, "chan": p0}, {"remote_chip_id": _unique_id(h1, c1), "chan": p1}])
        if h1 == host:
            remote.append([{"chip": c1, "chan": p1}, {"remote_chip_id": _unique_id(h0, c0), "chan": p0}])
    d["ethernet_connections_to_remote_devices"] = remote
    return d


def joined_descriptor(system: MultiHostSystem) -> dict | None:
    """Every host's chips in one cluster descriptor (host h's chip c is chip h * chips + c), the links between hosts
    made local: the same mesh as one host opens it. None for Galaxies (see the module's docstring)."""
    if system.base != "t3k":
        return None
    base = _base_descriptor(system)
    n = len(base["arch"])
    d = {"arch": {h * n + c: a for h in range(system.hosts) for c, a in base["arch"].items()}}
    chip_fields = ("chips", "chip_unique_ids", "harvesting", "chip_to_boardtype", "chip_to_bus_id")
    for key in chip_fields:
        if key in base:
            d[key] = {h * n + c: v for h in range(system.hosts) for c, v in base[key].items()}
    if "chip_unique_ids" in d:
        d["chip_unique_ids"] = {chip: _unique_id(chip // n, chip % n) for chip in d["arch"]}
    if "chips" in base and system.base == "t3k":  # ethernet coordinates: the second host's boards further along x
        d["chips"] = {chip: [v[0] + 4 * (chip // n), *v[1:]] for chip, v in d["chips"].items()}
    d["ethernet_connections"] = [
        [{"chip": h * n + a["chip"], "chan": a["chan"]}, {"chip": h * n + b["chip"], "chan": b["chan"]}]
        for h in range(system.hosts)
        for a, b in base["ethernet_connections"]
    ] + [
        [{"chip": h0 * n + c0, "chan": p0}, {"chip": h1 * n + c1, "chan": p1}]
        for h0, c0, p0, h1, c1, p1 in host_links(system)
    ]
    d["ethernet_connections_to_remote_devices"] = []
    d["chips_with_mmio"] = [
        {h * n + chip: h * len(base["chips_with_mmio"]) + index}
        for h in range(system.hosts)
        for entry in base["chips_with_mmio"]
        for chip, index in entry.items()
    ]
    boards = []
    for h in range(system.hosts):
        for board in base["boards"]:
            fields = {k: v for item in board for k, v in item.items()}
            boards.append(
                [
                    {"board_id": fields["board_id"] + h},
                    {"board_type": fields["board_type"]},
                    {"chips": [h * n + c for c in fields["chips"]]},
                ]
            )
    d["boards"] = boards
    return d


def mesh_graph_descriptor(system: MultiHostSystem) -> str:
    rows, cols = system.mesh_shape
    return (
        "mesh_descriptors {\n"
        '  name: "M0"\n'
        f"  arch: {system.arch}\n"
        f"  device_topology {{ dims: [ {rows}, {cols} ] }}\n"
        f"  host_topology {{ dims: [ {system.host_topology[0]}, {system.host_topology[1]} ] }}\n"
        f"  channels {{ count: {system.channels} policy: RELAXED }}\n"
        "}\n"
        'top_level_instance { mesh { mesh_descriptor: "M0" mesh_id: 0 } }\n'
    )


def write_files(name: str, directory: Path) -> Path:
    """Everything tt-run needs for system `name` in `directory`: a descriptor per host, the mock mapping
    (rank -> descriptor), the mesh graph descriptor, the rank bindings, and the joined one-host descriptor."""
    system = SYSTEMS[name]
    directory.mkdir(parents=True, exist_ok=True)
    mapping = {}
    for host in range(system.hosts):
        path = directory / f"host{host}.yaml"
        path.write_text(yaml.safe_dump(host_descriptor(system, host), sort_keys=False))
        mapping[host] = str(path)
    (directory / "mock_mapping.yaml").write_text(
        yaml.safe_dump({"rank_to_cluster_mock_cluster_desc": mapping}, sort_keys=False)
    )
    (directory / "mesh_graph.textproto").write_text(mesh_graph_descriptor(system))
    bindings = {
        "rank_bindings": [{"rank": h, "mesh_id": 0, "mesh_host_rank": h} for h in range(system.hosts)],
        "mesh_graph_desc_path": str(directory / "mesh_graph.textproto"),
    }
    (directory / "rank_bindings.yaml").write_text(yaml.safe_dump(bindings, sort_keys=False))
    joined = joined_descriptor(system)
    if joined is not None:
        (directory / "joined.yaml").write_text(yaml.safe_dump(joined, sort_keys=False))
    return directory


def tt_run_missing() -> str | None:
    """Why tt-run cannot launch mock ranks here, or None: its MPI launcher, its `pydantic`, the launcher itself."""
    if shutil.which("mpirun-ulfm") is None and shutil.which("mpirun") is None:
        return "no mpirun on PATH (Debian: apt-get install openmpi-bin)"
    try:
        import pydantic  # noqa: F401 (tt-run imports it; ttnn does not install it)
    except ImportError:
        return "tt-run needs pydantic (pip install pydantic)"
    if _tt_run() is None:
        return "ttnn's tt-run launcher is not installed beside this Python"
    return None


def _tt_run() -> str | None:
    here = Path(sys.executable).parent / "tt-run"
    return str(here) if here.exists() else shutil.which("tt-run")


@dataclass
class MultiHostRun:
    system: str
    returncode: int
    wall_s: float
    ranks: list[dict] = field(default_factory=list)  # rank program results, by rank
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return (
            self.returncode == 0
            and len(self.ranks) == SYSTEMS[self.system].hosts
            and all(r.get("ok") for r in self.ranks)
        )


def launch(name: str, directory: Path, *, timeout_s: float = 240.0, program_args: tuple[str, ...] = ()) -> MultiHostRun:
    """Run the rank program on every rank of system `name` (files from `write_files` in `directory`) under tt-run.
    Each rank writes `rank<N>.json` into `directory`; a rank that fails writes its error there and ends its process.
    mpirun ends the job after `timeout_s`; the launcher's process group is killed `TT_RUN_OVERHEAD_S` later."""
    system = SYSTEMS[name]
    for stale in directory.glob("rank*.json"):
        stale.unlink()
    mpi_args = f"--oversubscribe --timeout {int(timeout_s)}"
    if os.geteuid() == 0:
        mpi_args = "--allow-run-as-root " + mpi_args
    import ttnn  # the runtime root tt-run and every rank need

    env = dict(os.environ)
    env["TT_METAL_RUNTIME_ROOT"] = str(Path(ttnn.__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("TT_METAL_MOCK_CLUSTER_DESC_PATH", None)  # tt-run sets each rank's own
    command = [
        _tt_run(),
        "--rank-binding",
        str(directory / "rank_bindings.yaml"),
        "--mock-cluster-rank-binding",
        str(directory / "mock_mapping.yaml"),
        "--mpi-args",
        mpi_args,
        "--",  # the program's own options are not tt-run's
        sys.executable,
        "-m",
        RANK_PROGRAM,
        name,
        str(directory),
        *program_args,
    ]
    log_path = directory / "tt-run.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout_s + TT_RUN_OVERHEAD_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # tt-run, mpirun and every rank: their own process group
            proc.wait()
            rc = -signal.SIGKILL
    wall = time.monotonic() - t0
    ranks = []
    for host in range(system.hosts):
        path = directory / f"rank{host}.json"
        ranks.append(json.loads(path.read_text()) if path.exists() else {"ok": False, "error": "no result"})
    tail = log_path.read_text(errors="replace")[-6000:]
    return MultiHostRun(name, rc, wall, ranks, tail)


def run_one_host(name: str, directory: Path, *, timeout_s: float = 240.0) -> dict:
    """The rank program on the whole mesh of system `name` opened by one process from the joined descriptor (files
    from `write_files`): what the ranks' outputs are compared with. Killed after `timeout_s`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    out = directory / "one_host.json"
    out.unlink(missing_ok=True)
    t0 = time.monotonic()
    with open(directory / "one-host.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", RANK_PROGRAM, name, str(directory), "--one-host"],
            cwd=directory,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = json.loads(out.read_text()) if out.exists() else {"ok": False, "error": "no result"}
    result["wall_s"] = time.monotonic() - t0
    return result
