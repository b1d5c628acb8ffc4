"""The whole call is its signature, held on a mock T3000 with recorded ttnn calls: a call that changes the CCL object it
is given (none, the package's resources, a model's own, another of either) runs that object's gather, never a cached
plan of another, and a malformed or other-axis CCL object after a cached call is refused as on a fresh call."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192
GATHER_ARGS = ("multi_device_global_semaphore", "barrier_semaphore")


def _inputs(mesh, mode):
    import torch

    import tt_rmsnorm

    mc = None
    if mode == "decode":
        grid = mesh.compute_with_storage_grid_size()
        plan = tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, 32, DIM // 8), (1, 8), compute_grid=(grid.x, grid.y), sharded=True
        )
        mc = plan.norm.input_memory_config
    tokens = 32 if mode == "decode" else 128
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, DIM), mesh, memory_config=mc)
    w = tt_rmsnorm.prepare_weight(torch.randn(DIM), mesh)
    return x, w


def _ccl_after_warm_up(mesh, mode, kind):
    """A warm-up without CCL resources, then the same call with `kind` resources, recorded twice: the ops, the
    semaphores they were handed, whether those are the resources' own, and the second call's allocations."""
    import tt_rmsnorm
    from tt_rmsnorm.testing.recorder import recording
    from tt_rmsnorm.testing.tt_metal_stand_ins import ModelCCL

    x, w = _inputs(mesh, mode)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5)  # classic: an eager call without resources
    ccl = ModelCCL(mesh) if kind == "model" else tt_rmsnorm.CCLResources(mesh)
    ccl_2 = ModelCCL(mesh) if kind == "model" else tt_rmsnorm.CCLResources(mesh)
    runs = []
    for resources in (ccl, ccl, ccl_2, ccl_2):
        with recording() as rec:
            tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=resources)
        op = "fused_rms_minimal" if mode == "decode" else "all_gather_async"
        handed = set()
        for call in rec.calls_of(op):
            handed |= {h for h in call.semaphores.values() for h in h}
        # the recording names a handle by its id and holds it, so these ids are the objects the op was given
        objects = {id(h) for h in _handles(resources, mode)}
        runs.append(
            {
                "ops": rec.ops,
                "own_semaphores": bool(handed) and handed <= objects,
                "allocations": len(rec.allocations),
            }
        )
    return runs


def _handles(resources, mode):
    """Every semaphore handle a CCL object can hand out for this call."""
    import tt_rmsnorm

    if isinstance(resources, tt_rmsnorm.CCLResources):
        if mode == "decode":
            return list(resources._fused)
        return [h for pair in resources._gather for h in pair] + list(resources._barrier)
    if mode == "decode":
        return list(tt_rmsnorm.ccl.resources_for(resources, resources.mesh_device, None)._fused)
    return [h for axis in resources.ag for pair in axis for h in pair] + [h for axis in resources.barrier for h in axis]


@pytest.mark.parametrize("kind", ["package", "model"], ids=["CCLResources", "tt_metal_ccl"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_a_call_with_ccl_after_a_warm_up_without_runs_that_ccl_s_gather(mode, kind):
    runs = workers.run_isolated("t3k", _ccl_after_warm_up, mode, kind)
    gather = "fused_rms_minimal" if mode == "decode" else "all_gather_async"
    for i, run in enumerate(runs):
        assert gather in run["ops"] and "all_gather" not in run["ops"], (i, run)
        assert run["own_semaphores"], (i, run)  # the object of this call, not the first one's
    assert runs[1]["allocations"] == 0 and runs[3]["allocations"] == 0, runs  # planned calls allocate nothing


def _bad_ccl_after_a_cached_call(mesh, variant):
    """The same refusal of a bad CCL argument on a fresh call and after a cached call of the same signature."""
    import tt_rmsnorm
    from tt_rmsnorm.plan_cache import forget_plans
    from tt_rmsnorm.testing.recorder import recording

    x, w = _inputs(mesh, "prefill")
    bad = "a string" if variant == "malformed" else tt_rmsnorm.CCLResources(mesh, cluster_axis=0)

    def refusal():
        with recording() as rec:
            try:
                tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=bad)
            except tt_rmsnorm.RuleError as e:
                return e.rule, str(e), rec.ops
        return None, None, rec.ops

    fresh = refusal()
    forget_plans()
    good = tt_rmsnorm.CCLResources(mesh)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=good)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=good)
    return fresh, refusal()


@pytest.mark.parametrize(
    "variant, rule", [("malformed", "ccl.interface"), ("other_axis", "ccl.mesh_axis")], ids=["malformed", "other_axis"]
)
def test_a_bad_ccl_after_a_cached_call_is_refused_as_on_a_fresh_call(variant, rule):
    fresh, cached = workers.run_isolated("t3k", _bad_ccl_after_a_cached_call, variant)
    assert fresh == cached and fresh[0] == rule and fresh[2] == [], (fresh, cached)
