"""tt_rmsnorm.plan_cache without a device: what a signature is made of and what the cache keeps."""

import pytest

from tt_rmsnorm.plan_cache import PlanCache


class _T:
    """What the cache reads of a ttnn tensor: its spec and its storage."""

    def __init__(self, spec, storage="DEVICE"):
        self.spec, self._storage = spec, storage

    def storage_type(self):
        return self._storage


def test_a_value_is_found_by_key_spec_storage_weight_and_residual():
    cache, w = PlanCache(), _T("w")
    cache.remember("k", _T("x"), w, None, "plan")
    assert cache.find("k", _T("x"), w, None) == "plan"
    assert cache.find("k", _T("x"), _T("w"), None) == "plan"  # another weight of the same spec
    assert cache.find("other", _T("x"), w, None) is None
    assert cache.find("k", _T("y"), w, None) is None
    assert cache.find("k", _T("x", "HOST"), w, None) is None
    assert cache.find("k", _T("x"), _T("w2"), None) is None
    assert cache.find("k", _T("x"), None, None) is None
    assert cache.find("k", _T("x"), w, _T("r")) is None


def test_the_oldest_goes_first_per_key_and_per_cache():
    cache = PlanCache(max_keys=2, max_per_key=2)
    for spec in ("a", "b", "c"):
        cache.remember("k", _T(spec), None, None, spec)
    assert [cache.find("k", _T(s)) for s in ("a", "b", "c")] == [None, "b", "c"]
    cache.remember("k2", _T("a"), None, None, "k2a")
    cache.remember("k3", _T("a"), None, None, "k3a")  # a third key pushes the first out
    assert cache.find("k", _T("b")) is None and cache.values() == ["k2a", "k3a"] and len(cache) == 2


def test_forget_keeps_what_it_is_told_to_keep():
    cache = PlanCache()
    cache.remember(("mesh1", 1), _T("a"), None, None, 1)
    cache.remember(("mesh2", 1), _T("a"), None, None, 2)
    cache.forget(lambda key: key[0] != "mesh1")
    assert cache.values() == [2]
    cache.forget()
    assert len(cache) == 0


def test_a_key_that_does_not_hash_is_a_type_error_for_the_caller():
    with pytest.raises(TypeError):
        PlanCache().find(["unhashable"], _T("a"))
