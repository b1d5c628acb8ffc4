"""The plans of every call by signature (`tt_rmsnorm.signature`): one cache for `distributed_rms_norm`, the modules and
the compat classes, so a call with a known signature goes straight to its ttnn calls.

The cache is bounded (the least recently used signature goes first) and compares the last signature it answered
before any lookup: a loop over one call repeats one signature. Each plan is kept with the objects its signature names
by identity (`Held`): `close_mesh` drops a mesh's plans, and setting an attribute of a module drops the plans that bind
it (`tt_rmsnorm.planned_module.PlannedModule`).
"""

from __future__ import annotations

from typing import NamedTuple

from tt_rmsnorm.signature import Held, Signature

# A decoder holds two norms a layer, each planned once per mode and input spec: 80 layers take 320 signatures.
MAX_SIGNATURES = 1024


class Entry(NamedTuple):
    plan: object
    held: Held


class PlanCache:
    """Plans (or a module's bound calls) by `Signature`, `max_signatures` of them, least recently used first out."""

    def __init__(self, max_signatures: int = MAX_SIGNATURES):
        self.max_signatures = max_signatures
        self._entries: dict[Signature, Entry] = {}
        self._last: Signature | None = None
        self._last_plan = None

    def get(self, signature: Signature):
        """The plan of `signature`, or None (also for a signature that does not hash: it is never cached)."""
        if signature == self._last:
            return self._last_plan
        try:
            entry = self._entries.pop(signature, None)
        except TypeError:
            return None
        if entry is None:
            return None
        self._entries[signature] = entry  # most recently used last
        self._last, self._last_plan = signature, entry.plan
        return entry.plan

    def put(self, signature: Signature, held: Held, plan) -> None:
        """Cache `plan` for `signature` with the objects it names (not where a value of the signature does not
        hash)."""
        try:
            hash(signature)
        except TypeError:
            return
        self._entries.pop(signature, None)
        while len(self._entries) >= self.max_signatures:
            del self._entries[next(iter(self._entries))]
        self._entries[signature] = Entry(plan, held)
        self._last, self._last_plan = signature, plan

    def planned(self, signature: Signature, held: Held, plan, x, residual):
        """The plan of `signature`; for a new one `plan(signature, held, x, residual)` makes and checks it (the call's
        tensors: the signature holds only their specs), and it is cached."""
        if signature == self._last:  # the check a repeated call makes, without a lookup
            return self._last_plan
        found = self.get(signature)
        if found is None:
            found = plan(signature, held, x, residual)
            self.put(signature, held, found)
        return found

    def forget(self, obj=None) -> None:
        """Drop every plan whose signature names `obj` (a mesh, a module, a CCL object, a weight); all when None."""
        for signature in [s for s, e in self._entries.items() if obj is None or obj in e.held]:
            del self._entries[signature]
        if obj is None or self._last not in self._entries:
            self._last = self._last_plan = None

    def plans(self) -> list:
        """Every cached plan, least recently used first."""
        return [e.plan for e in self._entries.values()]

    def items(self) -> list[tuple[Signature, Held, object]]:
        """(signature, held objects, plan) triples, least recently used first."""
        return [(s, e.held, e.plan) for s, e in self._entries.items()]

    def __len__(self) -> int:
        return len(self._entries)


PLANS = PlanCache()


def forget_plans(obj=None) -> None:
    """Drop the cached plans that name `obj` (a mesh: `close_mesh` calls it), or every plan when None."""
    PLANS.forget(obj)
