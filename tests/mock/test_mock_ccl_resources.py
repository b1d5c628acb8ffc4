"""`tt_rmsnorm.ccl.CCLResources` and `resources_for` on a mock T3000, by what they hand out: the semaphores created
at construction (and only there) on every worker core, the cycle over `num_sets` sets, the link and topology choices
as given or from a model's CCL object, persistent buffers made once per key and refused inside trace capture, and the
adoption of a model's CCL object (once per object, axis and topology; refused by name when the object lacks the
methods or belongs to another mesh)."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster


def _rule(fn):
    from tt_rmsnorm.errors import RuleError

    try:
        fn()
    except RuleError as e:
        return e.rule, str(e)
    return None, ""


def _cycle(resources, calls):
    """The handle identities of `calls` consecutive next_gather / next_fused calls."""
    gathers = [resources.next_gather() for _ in range(calls)]
    return (
        [(tuple(id(s) for s in g), id(b)) for g, b in gathers],
        [id(resources.next_fused()) for _ in range(calls)],
    )


def _resources(mesh):
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import ccl
    from tt_rmsnorm.testing.recorder import recording

    facts = {}
    with recording() as rec:
        three = tt_rmsnorm.CCLResources(mesh, num_sets=3)
    made = [c.made for c in rec.allocations]
    facts["created"] = [c.name for c in rec.allocations]
    gathers, fused = _cycle(three, 7)
    facts["gather_cycle"] = [made.index(g[0]) for g, _ in gathers]
    facts["gather_pairs_distinct"] = all(g[0] != g[1] for g, _ in gathers)
    facts["barrier_cycle"] = [made.index(b) for _, b in gathers]
    facts["fused_cycle"] = [made.index(f) for f in fused]
    facts["cores"] = three.cores == ccl.full_grid(mesh)
    gather, barrier, fused_desc = ccl.semaphore_descs(three, None)
    facts["descs"] = [
        (d.count, d.grid == three.cores, [made.index(i) for i in d.ids]) for d in (gather, barrier, fused_desc)
    ]
    facts["describe"] = three.describe()
    facts["num_sets_1"] = _rule(lambda: tt_rmsnorm.CCLResources(mesh, num_sets=1))
    facts["topology_mesh"] = _rule(lambda: tt_rmsnorm.CCLResources(mesh, topology=ttnn.Topology.Mesh))
    ring = tt_rmsnorm.CCLResources(mesh, topology=ttnn.Topology.Ring, num_links=2)
    facts["ring"] = (ring.links.topology == ttnn.Topology.Ring, ring.links.num_links, ring.links.reason)
    facts["default"] = (three.links.topology == ttnn.Topology.Linear, three.links.num_links, three.cluster_axis)

    # persistent buffers: made once per key, refused inside trace capture for a key not yet made
    made_buffers = []

    def make():
        made_buffers.append(object())
        return made_buffers[-1]

    first = three.buffer(("a",), make)
    again = three.buffer(("a",), make)
    other = three.buffer(("b",), make)
    facts["buffers"] = (first is again, first is not other, len(made_buffers))
    saved = ttnn.is_trace_capture_active
    ttnn.is_trace_capture_active = lambda device: True
    try:
        facts["in_trace_known"] = three.buffer(("a",), make) is first
        facts["in_trace_new"] = _rule(lambda: three.buffer(("c",), make))
    finally:
        ttnn.is_trace_capture_active = saved
    facts["describe_buffers"] = three.describe()
    return facts


def test_resources_create_cycle_and_refuse_by_rule():
    got = workers.run_isolated("t3k", _resources)
    # three sets of (two gather semaphores, a barrier) and then the three fused semaphores, nothing else
    assert got["created"] == ["create_global_semaphore"] * 12
    assert got["gather_cycle"] == [0, 2, 4, 0, 2, 4, 0] and got["gather_pairs_distinct"]
    assert got["barrier_cycle"] == [6, 7, 8, 6, 7, 8, 6]
    assert got["fused_cycle"] == [9, 10, 11, 9, 10, 11, 9]
    # the rules see the first set: its two gather semaphores, its barrier and its fused semaphore, on every core
    assert got["cores"] and got["descs"] == [(2, True, [0, 1]), (1, True, [6]), (1, True, [9])]
    assert got["num_sets_1"][0] == "ccl.num_sets"
    assert got["topology_mesh"][0] == "ccl.topology"
    assert got["ring"] == (
        True,
        2,
        "0/2 links between neighbours (axis 0/1); the stats are one tile a device: one link carries them; topology as "
        "given; links as given",
    )
    assert got["default"] == (True, 1, 1)
    assert got["buffers"] == (True, True, 2)
    assert got["in_trace_known"] is True
    rule, message = got["in_trace_new"]
    assert rule == "ccl.allocation_during_trace" and "('c',)" in message
    assert got["describe"].startswith("T3000: axis 1 (8 devices), 3 cycled semaphore sets")
    assert "1 link(s) Linear" in got["describe"] and got["describe"].endswith("0 persistent buffer(s)")
    assert got["describe_buffers"].endswith("2 persistent buffer(s)")


def _adoption(mesh):
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import ccl
    from tt_rmsnorm.testing.recorder import recording
    from tt_rmsnorm.testing.tt_metal_stand_ins import ModelCCL

    facts = {}
    own = tt_rmsnorm.CCLResources(mesh)
    facts["none"] = ccl.resources_for(None, mesh, None) is None
    facts["own"] = ccl.resources_for(own, mesh, None) is own
    model = ModelCCL(mesh)
    with recording() as rec:
        adopted = ccl.resources_for(model, mesh, None)
    facts["adoption_creates"] = [c.name for c in rec.allocations]
    facts["same"] = ccl.resources_for(model, mesh, None) is adopted
    facts["other_axis"] = ccl.resources_for(model, mesh, 1) is not adopted
    ring = ccl.resources_for(model, mesh, None, topology=ttnn.Topology.Ring)
    facts["other_topology"] = ring is not adopted and ring.links.topology == ttnn.Topology.Ring
    # the adopted resources hand out the model's own handles, from its slot for the axis as given (None: slot 2)
    model.calls = {"ag": [], "barrier": []}
    semaphores, barrier = adopted.next_gather()
    facts["from_model"] = (
        semaphores is model.ag[2][-1] and barrier is model.barrier[2][-1],
        {k: list(v) for k, v in model.calls.items()},
        adopted.links.num_links,
    )
    ccl.forget_adopted(mesh)
    facts["forgotten"] = ccl.resources_for(model, mesh, None) is not adopted
    ccl.forget_adopted()

    class NoLinks(ModelCCL):
        def get_num_links(self, cluster_axis=None):
            return 0

    class ThreeLinks(ModelCCL):
        def get_num_links(self, cluster_axis=None):
            return 3

    facts["links"] = (
        ccl.resources_for(NoLinks(mesh), mesh, None).links.num_links,
        ccl.resources_for(ThreeLinks(mesh), mesh, None).links.num_links,
    )

    class Elsewhere(ModelCCL):
        pass

    elsewhere = Elsewhere(mesh)
    elsewhere.mesh_device = object()
    facts["other_mesh"] = _rule(lambda: ccl.resources_for(elsewhere, mesh, None))

    class Partial:
        mesh_device = mesh

        def get_and_cycle_ag_semaphore_handles(self, cluster_axis=None):
            return []

    facts["partial"] = _rule(lambda: ccl.resources_for(Partial(), mesh, None))
    return facts


def test_a_model_ccl_object_is_adopted_once_and_refused_by_name():
    got = workers.run_isolated("t3k", _adoption)
    assert got["none"] and got["own"] and got["same"] and got["other_axis"] and got["other_topology"]
    # adoption creates the fused op's two semaphores only: the gathers use the model's
    assert got["adoption_creates"] == ["create_global_semaphore"] * 2
    assert got["from_model"] == (True, {"ag": [2], "barrier": [2]}, 1)
    assert got["forgotten"]
    assert got["links"] == (1, 3)  # the model's own count, at least one
    assert got["other_mesh"][0] == "ccl.mesh_axis"
    rule, message = got["partial"]
    assert rule == "ccl.interface"
    assert "get_and_cycle_barrier_semaphore_handle, get_num_links" in message
    assert "get_and_cycle_ag_semaphore_handles," not in message.split("without")[-1]
