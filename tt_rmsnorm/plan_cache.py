"""Planned calls by signature: what a call was checked for, so that the next call with the same signature goes
straight to its ttnn calls.

A signature is a hashable key (the call's arguments that hash: mesh, axis, path, mode, ...) and the tensors: x's
spec and storage, the weight, the residual's spec and storage. ttnn's specs compare by content but hash by identity,
so the key picks a bucket and the specs are compared within it. A weight is matched by identity first (a module
passes the same weight every call) and by spec and storage otherwise; the cache holds the weight it was planned with,
so its identity cannot be reused by another tensor while the entry lives. Reading a tensor's spec and comparing it
costs a fraction of a microsecond; its shape, several (ttnn builds a Shape per read), so no shape is read here.
"""

from __future__ import annotations


def _signature(t):
    return None if t is None else (t.spec, t.storage_type())


class PlanCache:
    """Values (plans, or a module's bound calls) by call signature, `max_keys` keys of at most `max_per_key` tensor
    signatures each; the oldest goes first."""

    def __init__(self, max_keys: int = 256, max_per_key: int = 64):
        self.max_keys, self.max_per_key = max_keys, max_per_key
        self._buckets: dict = {}

    def find(self, key, x, w=None, residual=None):
        """The value planned for this signature, or None. Raises AttributeError or TypeError when x, w or the
        residual is not a ttnn tensor, or the key does not hash: the caller then checks the call in full."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        spec = x.spec
        for x_spec, storage, w_seen, w_signature, r_signature, value in bucket:
            if (
                x_spec == spec
                and storage == x.storage_type()
                and (w is w_seen or w_signature == _signature(w))
                and r_signature == _signature(residual)
            ):
                return value
        return None

    def remember(self, key, x, w, residual, value) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                del self._buckets[next(iter(self._buckets))]
            bucket = self._buckets[key] = []
        if len(bucket) >= self.max_per_key:
            bucket.pop(0)
        bucket.append((x.spec, x.storage_type(), w, _signature(w), _signature(residual), value))

    def forget(self, keep=None) -> None:
        """Drop every entry whose key `keep(key)` does not keep (all of them when `keep` is None)."""
        for key in [k for k in self._buckets if keep is None or not keep(k)]:
            del self._buckets[key]

    def values(self) -> list:
        """Every cached value, oldest key first."""
        return [entry[-1] for bucket in self._buckets.values() for entry in bucket]

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())
