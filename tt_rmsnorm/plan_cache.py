"""The plans of every call by signature (`tt_rmsnorm.signature`): one cache for `distributed_rms_norm`, the modules and
the compat classes, so a call with a known signature goes straight to its ttnn calls.

The cache is bounded (the least recently used signature goes first) and compares the last signature it answered
before any lookup: a loop over one call repeats one signature. `close_mesh` drops a mesh's plans; setting an attribute
of a module drops the plans that bind it (`tt_rmsnorm.module.PlannedModule`).
"""

from __future__ import annotations

from tt_rmsnorm.signature import Signature

# A decoder holds two norms a layer, each planned once per mode and input spec: 80 layers take 320 signatures.
MAX_SIGNATURES = 1024


class PlanCache:
    """Plans (or a module's bound calls) by `Signature`, `max_signatures` of them, least recently used first out."""

    def __init__(self, max_signatures: int = MAX_SIGNATURES):
        self.max_signatures = max_signatures
        self._plans: dict[Signature, object] = {}
        self._last: Signature | None = None
        self._last_plan = None

    def get(self, signature: Signature):
        """The plan of `signature`, or None (also for a signature that does not hash: it is never cached)."""
        if signature == self._last:
            return self._last_plan
        try:
            plan = self._plans.pop(signature, None)
        except TypeError:
            return None
        if plan is None:
            return None
        self._plans[signature] = plan  # most recently used last
        self._last, self._last_plan = signature, plan
        return plan

    def put(self, signature: Signature, plan) -> None:
        """Cache `plan` for `signature` (not where a value of the signature does not hash)."""
        try:
            hash(signature)
        except TypeError:
            return
        self._plans.pop(signature, None)
        while len(self._plans) >= self.max_signatures:
            del self._plans[next(iter(self._plans))]
        self._plans[signature] = plan
        self._last, self._last_plan = signature, plan

    def planned(self, signature: Signature, plan, *tensors):
        """The plan of `signature`; for a new one `plan(signature, *tensors)` makes and checks it (the call's tensors:
        the signature holds only their specs), and it is cached."""
        found = self.get(signature)
        if found is None:
            found = plan(signature, *tensors)
            self.put(signature, found)
        return found

    def forget(self, obj=None) -> None:
        """Drop every plan whose signature holds `obj` (a mesh, a module, a CCL object, a weight); all when None."""
        for signature in [s for s in self._plans if obj is None or s.holds(obj)]:
            del self._plans[signature]
        if self._last is not None and (obj is None or self._last.holds(obj)):
            self._last = self._last_plan = None

    def plans(self) -> list:
        """Every cached plan, least recently used first."""
        return list(self._plans.values())

    def signatures(self) -> list[Signature]:
        return list(self._plans)

    def items(self) -> list[tuple[Signature, object]]:
        """(signature, plan) pairs, least recently used first."""
        return list(self._plans.items())

    def __len__(self) -> int:
        return len(self._plans)


PLANS = PlanCache()


def forget_plans(obj=None) -> None:
    """Drop the cached plans that hold `obj` (a mesh: `close_mesh` calls it), or every plan when None."""
    PLANS.forget(obj)
