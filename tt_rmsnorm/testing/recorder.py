"""A record of the ttnn calls a block of code makes: which ops run, in order, with the semaphore handles and persistent
buffers each is handed (by identity), and every allocation (global semaphores, device tensors, host->device uploads).

Trace capture replays a recorded command sequence, so a traced call must hand each collective the semaphores and
buffers created before capture, cycle its semaphore sets call by call, and create nothing itself. Capture does not
run on a mock cluster; a recording of the calls shows the same contract:

    with recording() as rec:
        tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=ccl)
    rec.ops          # ["rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"]
    rec.allocations  # [] for a planned call
    rec.calls_of("all_gather_async")[0].semaphores["barrier_semaphore"]  # (id of the handle,)

The recording wraps the entry points named in `OPS` and `ALLOCATIONS` on the `ttnn` module (and `ttnn.experimental`)
for the duration of the block, so it sees every call made through `ttnn.<name>`. A call made while another recorded
call runs (ttnn's own Python ops calling each other) is part of the outer one and not recorded separately. Identities
are `id()`s of objects the recording holds on to, so none is reused while the recording lives; the records themselves
are plain data and pickle (a mock-cluster worker can return them).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

# The ops a norm module issues: the package's paths and tt-metal's norm modules (the norms, the stats and output
# gathers, the residual add, and the moves between memory configs around them).
OPS = (
    "rms_norm",
    "rms_norm_pre_all_gather",
    "rms_norm_post_all_gather",
    "fused_rms_minimal",
    "all_gather",
    "experimental.all_gather_async",
    "add",
    "copy",
    "to_memory_config",
    "sharded_to_interleaved",
    "interleaved_to_sharded",
    "reshard",
    "typecast",
    "clone",
    "deallocate",
)

# Everything that creates a semaphore or puts a tensor on a device: none of it may run inside trace capture.
ALLOCATIONS = (
    "create_global_semaphore",
    "allocate_tensor_on_device",
    "from_torch",
    "as_tensor",
    "to_device",
    "empty",
    "zeros",
    "ones",
    "full",
)

# Arguments that hand an op a buffer it writes in place of allocating one: the persistent buffers of the traced gathers,
# by op (the post's `stats` is an input it reads, the fused op's a buffer it gathers into).
PERSISTENT_ARGUMENTS = {
    "all_gather_async": ("persistent_output_tensor", "persistent_output_buffer"),
    "fused_rms_minimal": ("persistent_output_tensor", "stats"),
}

# Positional parameters of the norm ops, by ttnn's own names (any other op's positional arguments are `arg0`, ...).
POSITIONAL_NAMES = {
    "fused_rms_minimal": ("input_tensor", "program_config", "cluster_axis", "mesh_device", "global_semaphore"),
    "rms_norm": ("input_tensor",),
    "rms_norm_pre_all_gather": ("input_tensor",),
    "rms_norm_post_all_gather": ("input_tensor", "stats"),
}


@dataclass(frozen=True)
class Call:
    """One recorded ttnn call. `semaphores`: the global semaphore handles by argument name (a list argument gives
    several); `buffers`: the persistent buffers by argument name; `tensors`: every ttnn tensor argument by name
    (`weight`, `residual_input_tensor`, ...; positional ones `arg0`, `arg1`, ... unless ttnn's name is known);
    `made`: the identity of what an allocation returned (None for an op)."""

    name: str  # as called on ttnn: "rms_norm", "experimental.all_gather_async"
    semaphores: dict[str, tuple[int, ...]] = field(default_factory=dict)
    buffers: dict[str, int] = field(default_factory=dict)
    made: int | None = None
    tensors: dict[str, int] = field(default_factory=dict)

    @property
    def op(self) -> str:
        """The op's own name, without the namespace: "all_gather_async"."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def is_allocation(self) -> bool:
        return self.name in ALLOCATIONS

    @property
    def semaphore_ids(self) -> frozenset[int]:
        """Every semaphore handle the call was given."""
        return frozenset(i for ids in self.semaphores.values() for i in ids)


class Recording:
    """The calls made inside one `recording()` block, in order."""

    def __init__(self):
        self.calls: list[Call] = []
        self._held: list = []  # the recorded objects, so that their ids stay unique while the recording lives
        self._depth = 0

    @property
    def ops(self) -> list[str]:
        """The ops issued, in order, by their own names."""
        return [c.op for c in self.calls if not c.is_allocation]

    @property
    def allocations(self) -> list[Call]:
        return [c for c in self.calls if c.is_allocation]

    def calls_of(self, op: str) -> list[Call]:
        """The recorded calls of `op` (its own name, or as called: "all_gather_async" or
        "experimental.all_gather_async")."""
        return [c for c in self.calls if op in (c.op, c.name)]

    def identity(self, obj) -> int:
        """The identity the recording gives `obj` (a semaphore handle, a tensor): held, so that it stays unique."""
        self._held.append(obj)
        return id(obj)

    def _record(self, name: str, args, kwargs) -> int:
        """Records a call as it starts (a call that raises is still seen); returns its index."""
        import ttnn

        semaphore_type = _semaphore_type()
        positional = POSITIONAL_NAMES.get(name.rsplit(".", 1)[-1], ())
        named = {(positional[i] if i < len(positional) else f"arg{i}"): a for i, a in enumerate(args)}
        named.update(kwargs)
        persistent = PERSISTENT_ARGUMENTS.get(name.rsplit(".", 1)[-1], ())
        semaphores, buffers, tensors = {}, {}, {}
        for arg, value in named.items():
            handles = value if isinstance(value, list | tuple) else [value]
            if handles and all(isinstance(h, semaphore_type) for h in handles):
                semaphores[arg] = tuple(self.identity(h) for h in handles)
                continue
            if isinstance(value, ttnn.Tensor):
                tensors[arg] = self.identity(value)
            if arg in persistent and value is not None:
                buffers[arg] = self.identity(value)
        self.calls.append(Call(name, semaphores, buffers, tensors=tensors))
        return len(self.calls) - 1

    def _wrap(self, name: str, fn):
        def recorded(*args, **kwargs):
            index = self._record(name, args, kwargs) if self._depth == 0 else None
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self._depth -= 1
            if index is not None and name in ALLOCATIONS and result is not None:
                self.calls[index] = replace(self.calls[index], made=self.identity(result))
            return result

        return recorded


def _semaphore_type():
    import ttnn

    return ttnn._ttnn.global_semaphore.global_semaphore


def _owner(ttnn, name: str):
    """(the module that holds the entry point, its attribute name)."""
    *path, attr = name.split(".")
    owner = ttnn
    for part in path:
        owner = getattr(owner, part)
    return owner, attr


@contextlib.contextmanager
def recording(ops=OPS, allocations=ALLOCATIONS):
    """Record the ttnn calls made inside the block: `with recording() as rec: ...`, then `rec.ops`, `rec.calls`,
    `rec.allocations`. `ops` and `allocations` name the entry points watched (as called on ttnn)."""
    import ttnn

    rec = Recording()
    saved = []
    try:
        for name in (*ops, *allocations):
            owner, attr = _owner(ttnn, name)
            fn = getattr(owner, attr, None)
            if fn is None:
                continue
            saved.append((owner, attr, fn))
            setattr(owner, attr, rec._wrap(name, fn))
        yield rec
    finally:
        for owner, attr, fn in reversed(saved):
            setattr(owner, attr, fn)
