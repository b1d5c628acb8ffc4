"""CCL resources of one mesh axis: global semaphores and persistent gather buffers, created once, before any trace.

Traced decode replays the commands captured once, so everything a traced collective touches must already exist when
capture starts: semaphores created inside a captured call hang the mesh on replay (tt-metal #40276, #31558), and the
barrier that plain `ttnn.all_gather` sets up at capture does nothing on replay (tt-metal #48469, corrupted batch-32
decode on T3000). Model code therefore creates the semaphores once per mesh (tt-metal `TT_CCL`), keeps two sets and
cycles them call by call, so that one call's semaphores are never reset while the previous call may still signal them.

`CCLResources` is that object for the stats gather of the distributed RMSNorm: `num_sets` cycled sets of
all_gather_async semaphores with their barrier semaphores and the fused decode op's semaphore, all on every worker
core (as `TT_CCL` creates them), and the persistent buffers of the gather, one per gathered-stats shape. Semaphores
are created in the constructor only. A buffer is allocated the first time a plan needs it (the warm-up call); asked
for during trace capture it raises instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import ttnn

from tt_rmsnorm.architecture import of_device
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.rules.ccl_checks import SemaphoreDesc, check_all_gather_async
from tt_rmsnorm.systems import system_of
from tt_rmsnorm.topology import resolve_cluster_axis


@dataclass(frozen=True)
class LinkChoice:
    """Ethernet links and topology for the stats gather on one system, and why."""

    system: str
    available: tuple[int, int]  # links between neighbours per cluster axis (0: down mesh columns, 1: along mesh rows)
    num_links: int
    topology: object
    reason: str


# The stats of one row block are one 32x32 tile per device, so the gather is latency-bound: a second link halves a
# transfer that is already a single packet and adds a worker and a handshake per link. Linear matches the fabric that
# `tt_rmsnorm.devices.open_mesh` configures (FABRIC_1D; a Ring needs FABRIC_1D_RING), and the cluster-axis overload of
# all_gather_async takes Linear on every system.
_STATS_TOPOLOGY = ttnn.Topology.Linear


def link_choice(mesh_shape, arch=None) -> LinkChoice:
    """The links and topology the stats gather uses on a mesh of `mesh_shape` (rows, cols) of architecture `arch`
    (None: the default), from the system's links between neighbours (`tt_rmsnorm.systems`)."""
    shape = tuple(int(d) for d in mesh_shape)
    system = system_of(arch, shape)
    if system is None:
        return LinkChoice(f"{shape[0]}x{shape[1]} mesh", (1, 1), 1, _STATS_TOPOLOGY, "unknown system: one link, Linear")
    available = tuple(n or 0 for n in system.links)
    across = f" across {system.hosts} hosts" if system.hosts > 1 else ""
    reason = (
        f"{'/'.join(str(n) for n in available)} links between neighbours (axis 0/1){across}; the stats are one tile a "
        "device: one link carries them"
    )
    return LinkChoice(system.name, available, 1, _STATS_TOPOLOGY, reason)


# A gather of one stats tile a device runs along a line or around a ring; the other topologies are for 2-D collectives.
STATS_TOPOLOGIES = (ttnn.Topology.Linear, ttnn.Topology.Ring)


# Systems whose mesh axes do not close into rings: a Ring gather needs the wraparound link. The 4U Galaxy (TG) is a
# grid without wraparound links: tt-metal's Galaxy decoder gathers with Ring on the 6U Galaxy and Linear on TG. T3000's
# eight chips form a ring (tt-metal's models gather on it with Ring); two chips are their own ring. Systems not known
# to lack the link are not refused.
LINE_CLUSTERS = ("TG",)


def cluster_type() -> str:
    """The name of the system ttnn runs on ("T3K", "GALAXY", "TG", ...)."""
    return str(ttnn.cluster.get_cluster_type()).rsplit(".", 1)[-1]


def check_topology(topology, mesh_device=None) -> None:
    """Linear or Ring, and no Ring on a system whose axes do not close into rings (`LINE_CLUSTERS`)."""
    if topology not in STATS_TOPOLOGIES:
        raise RuleError(
            "ccl.topology",
            "the stats gather runs along one mesh axis: its topology is Linear or Ring",
            topology,
            "ccl_topology=ttnn.Topology.Linear (or ttnn.Topology.Ring where the axis closes into a ring)",
        )
    if topology == ttnn.Topology.Ring and mesh_device is not None and mesh_device.get_num_devices() > 2:
        system = cluster_type()
        if system in LINE_CLUSTERS:
            raise RuleError(
                "ccl.ring",
                f"a Ring gather needs the axis to close into a ring; the {system} system's axes are lines",
                f"Topology.Ring on {system}",
                "ccl_topology=ttnn.Topology.Linear",
            )


# What the package calls on a model's own CCL object (tt-metal's TT_CCL and its kin): its cycled gather and barrier
# semaphores, and its link count per axis.
MODEL_CCL_METHODS = (
    "get_and_cycle_ag_semaphore_handles",
    "get_and_cycle_barrier_semaphore_handle",
    "get_num_links",
)


def full_grid(mesh_device) -> ttnn.CoreRangeSet:
    """Every worker core of the device: where model code creates its CCL semaphores."""
    g = mesh_device.compute_with_storage_grid_size()
    return _grid((g.x, g.y))


def _grid(compute_grid) -> ttnn.CoreRangeSet:
    gx, gy = compute_grid
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(gx - 1, gy - 1))})


def semaphore_descs(resources, compute_grid) -> tuple[SemaphoreDesc, SemaphoreDesc, SemaphoreDesc]:
    """(gather, barrier, fused) semaphores as the rules see them: those of `resources`, or, when planning without a
    device, those `CCLResources` would create on a device with `compute_grid`."""
    if isinstance(resources, CCLResources):
        gather, barrier = resources.described_gather
        return (
            SemaphoreDesc.of(gather, resources.cores),
            SemaphoreDesc.of(barrier, resources.cores),
            SemaphoreDesc.of(resources._fused[0], resources.cores),
        )
    cores = _grid(compute_grid)
    return SemaphoreDesc(cores, 2, (0, 1)), SemaphoreDesc(cores, 1, (2,)), SemaphoreDesc(cores, 1, (3,))


class CCLResources:
    """Semaphores and persistent buffers of the stats gather along one mesh axis. Create once per mesh and cluster axis,
    before any trace capture; pass the same object to every call (`distributed_rms_norm(..., ccl=...)`,
    `DistributedRMSNorm(..., ccl=...)`).

    mesh_device: the mesh whose devices the semaphores and buffers are created on.
    cluster_axis: the mesh axis the stats are gathered along; None on a 1-D mesh (a 2-D mesh must name it).
    num_sets: how many semaphore sets are cycled, at least 2 (a call must not reset the set the previous call can
        still signal).
    topology: the gather's topology (`ttnn.Topology.Ring` or `Linear`); None, the system's (`tt_rmsnorm.systems`).
        A Ring is refused where the axis closes no ring.
    num_links: the links each gather uses; None, the system's, or the model CCL object's `get_num_links`.
    model_ccl: the model's own CCL object (tt-metal's TT_CCL): its cycled semaphores and persistent buffers are used
        instead of new ones.
    """

    def __init__(
        self,
        mesh_device,
        *,
        cluster_axis=None,
        num_sets: int = 2,
        topology=None,
        num_links=None,
        model_ccl=None,
    ):
        if num_sets < 2:
            raise RuleError(
                "ccl.num_sets",
                "semaphores are cycled: one call's set must not be reset while the previous call can still signal it",
                num_sets,
                "num_sets=2 (or more)",
            )
        self.mesh_device = mesh_device
        self.mesh_shape = tuple(mesh_device.shape)
        self.cluster_axis, self.num_devices = resolve_cluster_axis(self.mesh_shape, cluster_axis)
        self.links = link_choice(self.mesh_shape, of_device(mesh_device))
        if topology is not None:
            check_topology(topology, mesh_device)
            self.links = replace(self.links, topology=topology, reason=f"{self.links.reason}; topology as given")
        self.model_ccl = model_ccl
        # the axis as given is the one the model's own calls name (its semaphore slot: tt-metal's norms name none on a
        # 1-D mesh, 1 on Galaxy)
        self.model_axis = cluster_axis
        if num_links is None and model_ccl is not None:
            # the model's own table (tt-metal's get_num_links); it says 0 where a system has no link to give
            num_links = max(1, int(model_ccl.get_num_links(cluster_axis)))
        if num_links is not None:
            self.links = replace(self.links, num_links=int(num_links), reason=f"{self.links.reason}; links as given")
        self.num_sets = num_sets
        # fused_rms_minimal needs its input sharded inside its semaphore's grid: on every core, any decode grid fits
        self.cores = full_grid(mesh_device)
        if model_ccl is None:
            self._gather = [[self._semaphore(self.cores) for _ in range(2)] for _ in range(num_sets)]
            self._barrier = [self._semaphore(self.cores) for _ in range(num_sets)]
            self.described_gather = (self._gather[0], self._barrier[0])
        else:
            # One set of the model's handles, for the rules to see (count, grid, distinct handles); taking it advances
            # the model's cycle by one call, which keeps it alternating.
            self.described_gather = self.next_gather()
        self._fused = [self._semaphore(self.cores) for _ in range(num_sets)]
        self._next_gather = 0
        self._next_fused = 0
        self._buffers: dict[tuple, object] = {}

    def _semaphore(self, cores):
        return ttnn.create_global_semaphore(self.mesh_device, cores, 0)

    def next_gather(self) -> tuple[list, object]:
        """(the two all_gather_async semaphores, the barrier semaphore) of the next set, cycling: the model CCL's own
        cycle where one was adopted."""
        if self.model_ccl is not None:
            return (
                self.model_ccl.get_and_cycle_ag_semaphore_handles(self.model_axis),
                self.model_ccl.get_and_cycle_barrier_semaphore_handle(self.model_axis),
            )
        i = self._next_gather
        self._next_gather = (i + 1) % self.num_sets
        return self._gather[i], self._barrier[i]

    def next_fused(self):
        """The fused decode op's semaphore of the next set, cycling."""
        i = self._next_fused
        self._next_fused = (i + 1) % self.num_sets
        return self._fused[i]

    def buffer(self, key: tuple, make):
        """The persistent buffer named `key`, allocated by `make()` on first request. Allocation during trace capture is
        refused: the captured call would keep an address that the replay must not rely on."""
        found = self._buffers.get(key)
        if found is not None:
            return found
        if ttnn.is_trace_capture_active(self.mesh_device):
            raise RuleError(
                "ccl.allocation_during_trace",
                "a persistent gather buffer would be allocated inside trace capture",
                f"buffer {key}",
                "run the call once eagerly (warm-up) before begin_trace_capture, with the same shapes",
            )
        self._buffers[key] = made = make()
        return made

    def check_gather(self, x, memory_config, *, num_links, cluster_axis=None) -> None:
        """The all_gather_async rules for gathering `x` (a tensor or its description) on dim 3 into `memory_config`
        with this object's semaphores."""
        gather, barrier, _ = semaphore_descs(self, None)
        check_all_gather_async(
            x,
            3,
            multi_device_global_semaphore=gather,
            barrier_semaphore=barrier,
            cluster_axis=cluster_axis,
            mesh_shape=self.mesh_shape,
            memory_config=memory_config,
            num_links=num_links,
        )

    def describe(self) -> str:
        topology = str(self.links.topology).rsplit(".", 1)[-1]
        return (
            f"{self.links.system}: axis {self.cluster_axis} ({self.num_devices} devices), {self.num_sets} cycled "
            f"semaphore sets (2 gather + barrier + fused each), {self.links.num_links} link(s) {topology} "
            f"({self.links.reason}); {len(self._buffers)} persistent buffer(s)"
        )


# Resources adopted from model CCL objects, by (id of the object, axis, topology); the value holds the object, so its id
# is never reused while its resources live. `forget_adopted` drops a mesh's (close_mesh calls it).
_ADOPTED: dict[tuple, tuple[object, CCLResources]] = {}


def forget_adopted(mesh_device=None) -> None:
    for key in [k for k, (_, r) in _ADOPTED.items() if mesh_device is None or r.mesh_device is mesh_device]:
        del _ADOPTED[key]


def resources_for(ccl, mesh_device, cluster_axis, *, topology=None, num_links=None) -> CCLResources | None:
    """The CCLResources a call runs with: `ccl` itself, or resources adopted once from a model's CCL object (anything
    with MODEL_CCL_METHODS and `mesh_device`: tt-metal's TT_CCL), whose cycled gather and barrier semaphores and link
    count (or `num_links` where given) the stats gather then uses, named by `cluster_axis` as given (None on a 1-D
    mesh, as tt-metal's own calls). Anything else is a RuleError naming what it lacks."""
    if ccl is None:
        return None
    if isinstance(ccl, CCLResources):
        if num_links is not None and num_links != ccl.links.num_links:
            raise RuleError(
                "ccl.num_links",
                "the CCLResources' gathers run on the links they were created with",
                f"num_links={num_links} for resources of {ccl.links.num_links}",
                f"create CCLResources(mesh_device, ..., num_links={num_links}), or drop num_links",
            )
        return ccl
    missing = [m for m in (*MODEL_CCL_METHODS, "mesh_device") if not hasattr(ccl, m)]
    if missing:
        raise RuleError(
            "ccl.interface",
            "ccl must be a tt_rmsnorm.CCLResources or a model CCL object (tt-metal's TT_CCL) with "
            + ", ".join(MODEL_CCL_METHODS)
            + " and mesh_device",
            f"{type(ccl).__name__} without {', '.join(missing)}",
            "pass tt_rmsnorm.CCLResources(mesh_device, cluster_axis=...) or the model's TT_CCL",
        )
    if ccl.mesh_device is not mesh_device:
        raise RuleError(
            "ccl.mesh_axis",
            "the model CCL object belongs to another mesh",
            f"{type(ccl).__name__} of another mesh_device",
            "pass the CCL object created for this mesh_device",
        )
    key = (id(ccl), cluster_axis, topology, num_links)
    found = _ADOPTED.get(key)
    if found is None:
        resources = CCLResources(
            mesh_device, cluster_axis=cluster_axis, topology=topology, num_links=num_links, model_ccl=ccl
        )
        found = _ADOPTED[key] = (ccl, resources)
    return found[1]
