"""tt_rmsnorm.plan_cache without a device: one plan per signature, the last signature answered first, bounded, and
forgetting what holds a mesh, a module or a CCL object."""

from tests.support import TensorStandIn
from tt_rmsnorm.plan_cache import MAX_SIGNATURES, PlanCache
from tt_rmsnorm.signature import signature

MESH, OTHER_MESH = object(), object()


def _call(content="x", mesh=MESH, **fields):
    """(signature, held objects) of a call."""
    return signature(mesh_device=mesh, x=TensorStandIn(content), **fields)


def _sig(content="x", mesh=MESH, **fields):
    return _call(content, mesh, **fields)[0]


def test_a_plan_is_found_by_its_signature_first_as_the_last_call_then_by_lookup():
    cache = PlanCache()
    cache.put(*_call("a"), "plan a")
    cache.put(*_call("b"), "plan b")
    assert cache.get(_sig("b")) == "plan b"  # the last call
    assert cache.get(_sig("a")) == "plan a"  # a lookup, which makes it the last call
    assert cache.get(_sig("c")) is None and cache.get(_sig("a", mesh=OTHER_MESH)) is None
    assert len(cache) == 2


def test_the_least_recently_used_signature_goes_first():
    cache = PlanCache(max_signatures=2)
    cache.put(*_call("a"), "a")
    cache.put(*_call("b"), "b")
    assert cache.get(_sig("a")) == "a"  # a is now the most recently used
    cache.put(*_call("c"), "c")
    assert cache.get(_sig("b")) is None and cache.get(_sig("a")) == "a" and cache.get(_sig("c")) == "c"
    assert len(cache) == 2 and cache.plans() == ["a", "c"]


def test_forget_drops_what_holds_the_object_and_the_last_call_with_it():
    module, ccl, weight = object(), object(), object()
    cache = PlanCache()
    cache.put(*_call("a", modules=(module,)), "module's")
    cache.put(*_call("b", ccl=ccl), "with ccl")
    cache.put(*_call("c", weight=weight), "with weight")
    cache.put(*_call("d", mesh=OTHER_MESH), "other mesh")
    cache.forget(module)
    assert cache.get(_sig("a", modules=(module,))) is None and len(cache) == 3
    cache.forget(ccl)
    cache.forget(weight)
    assert cache.plans() == ["other mesh"]
    cache.forget(OTHER_MESH)  # the last call's plan goes with it
    assert cache.get(_sig("d", mesh=OTHER_MESH)) is None and len(cache) == 0
    cache.put(*_call("e"), "e")
    cache.forget()
    assert len(cache) == 0 and cache.get(_sig("e")) is None


def test_planned_plans_a_new_signature_once_and_hands_the_plan_the_call_s_tensors():
    cache, made = PlanCache(), []

    def plan(signature, held, x, residual):
        made.append((signature.epsilon, held.mesh_device, x, residual))
        return f"plan {len(made)}"

    x = TensorStandIn("x")
    assert cache.planned(*_call("x", epsilon=1e-5), plan, x, None) == "plan 1"
    assert cache.planned(*_call("x", epsilon=1e-5), plan, TensorStandIn("x"), None) == "plan 1"
    assert cache.planned(*_call("x", epsilon=1e-6), plan, x, None) == "plan 2"
    assert made == [(1e-5, MESH, x, None), (1e-6, MESH, x, None)]


def test_a_call_whose_signature_does_not_hash_is_planned_every_time_and_never_cached():
    cache, made = PlanCache(), []

    def plan(signature, held, x, residual):
        made.append(signature)
        return "plan"

    for _ in range(2):
        cache.planned(*_call("x", epsilon=[1e-5]), plan, None, None)  # a value that does not hash
    assert len(made) == 2 and len(cache) == 0
    cache.put(*_call("y"), "y")  # a dict with entries hashes the key it is asked for (an empty one does not)
    cache.planned(*_call("x", epsilon=[1e-5]), plan, None, None)
    assert len(made) == 3 and cache.plans() == ["y"]


def test_the_default_cache_holds_max_signatures_and_drops_the_oldest_beyond():
    cache = PlanCache()
    for n in range(MAX_SIGNATURES + 1):
        cache.put(*_call(str(n)), n)
    assert len(cache) == MAX_SIGNATURES and cache.get(_sig("0")) is None and cache.get(_sig("1")) == 1


def test_what_is_not_a_ttnn_tensor_has_no_spec_in_its_signature_and_is_told_apart_from_a_tensor():
    listed, _ = signature(mesh_device=MESH, x=[1.0])
    assert listed.x == (None, None) and listed != _sig("x")
