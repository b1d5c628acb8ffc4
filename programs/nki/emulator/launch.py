"""One kernel launch of the emulator: its SPMD grid and program id, the HBM tensors all programs share, and each
program's on-chip memory (live SBUF/PSUM bytes per partition, peaks, spills, instruction counts).

NKI calls reach the running launch through `current_launch()` / `current_memory()`; `nki.simulate_kernel` and the jit
entry points push and pop it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from programs.nki.emulator import limits
from programs.nki.emulator.constraints import NkiSpillWarning, fail


@dataclass
class Memory:
    """Live SBUF/PSUM bytes per partition. Allocations are released when their tensor is garbage collected, which
    CPython does as soon as the kernel drops its last reference: Python liveness stands in for the compiler's.

    Live data over a memory's capacity is a spill (NkiSpillWarning, counted in `spill_bytes`), not an error: the
    compiler inserts spills and refills. One tensor larger than a whole partition cannot be placed and is an error."""

    live: dict = field(default_factory=lambda: {"sbuf": {}, "psum": {}})
    peak: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    spill_bytes: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    counts: dict = field(default_factory=lambda: {"dma": 0, "compute": 0})
    _next: int = 0

    def used(self, buffer: str) -> int:
        return sum(a.bytes_per_partition for a in self.live[buffer].values())

    def count(self, kind: str) -> None:
        self.counts[kind] += 1

    def allocate(self, buffer: str, bytes_per_partition: int, what: str):
        capacity = limits.SBUF_BYTES_PER_PARTITION if buffer == "sbuf" else limits.PSUM_BYTES_PER_PARTITION
        source = limits.ARCH_GUIDE
        if bytes_per_partition > capacity:
            fail(
                f"{buffer.upper()} tile larger than one partition",
                f"{what} needs {bytes_per_partition} bytes per partition, a partition holds {capacity}",
                "tile the free axis",
                source,
            )
        used = self.used(buffer)
        if used + bytes_per_partition > capacity:
            over = used + bytes_per_partition - capacity
            if over > self.spill_bytes[buffer]:
                largest = sorted(self.live[buffer].values(), key=lambda a: -a.bytes_per_partition)[:4]
                live = ", ".join(f"{a.what}={a.bytes_per_partition}B" for a in largest)
                warnings.warn(
                    NkiSpillWarning(
                        f"{buffer.upper()} live data exceeds the {capacity} bytes per partition by {over}: {what} "
                        f"needs {bytes_per_partition} with {used} live (largest: {live}); the compiler spills "
                        f"[source: {limits.PROGRAMMING_MODEL}#memory-hierarchy]"
                    ),
                    stacklevel=4,
                )
            self.spill_bytes[buffer] = max(self.spill_bytes[buffer], over)
        key = self._next
        self._next += 1
        self.live[buffer][key] = _Allocation(buffer, bytes_per_partition, what)
        self.peak[buffer] = max(self.peak[buffer], used + bytes_per_partition)
        return key

    def release(self, buffer: str, key: int) -> None:
        self.live[buffer].pop(key, None)


@dataclass
class _Allocation:
    buffer: str
    bytes_per_partition: int
    what: str


@dataclass
class Launch:
    """One kernel launch: its SPMD grid, the current program's id, the HBM tensors all programs share (the k-th
    `nl.ndarray(buffer=nl.shared_hbm)` of every program is the same tensor) and each program's on-chip memory."""

    grid: tuple = ()
    program_id: tuple = ()
    memory: Memory = field(default_factory=Memory)
    shared_hbm: list = field(default_factory=list)
    hbm_cursor: int = 0
    peak: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    spill_bytes: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    counts: dict = field(default_factory=lambda: {"dma": 0, "compute": 0})

    def start_program(self, program_id) -> None:
        self.fold_memory()
        self.program_id = tuple(program_id)
        self.memory = Memory()
        self.hbm_cursor = 0

    def fold_memory(self) -> None:
        m = self.memory
        for b in ("sbuf", "psum"):
            self.peak[b] = max(self.peak[b], m.peak[b])
            self.spill_bytes[b] = max(self.spill_bytes[b], m.spill_bytes[b])
        for k, v in m.counts.items():
            self.counts[k] += v
        m.counts = {k: 0 for k in m.counts}


ACTIVE_LAUNCHES: list[Launch] = []


def current_launch() -> Launch:
    if not ACTIVE_LAUNCHES:
        raise RuntimeError(
            "NKI language calls are only valid inside a kernel launched by nki.simulate_kernel / a jit call"
        )
    return ACTIVE_LAUNCHES[-1]


def current_memory() -> Memory:
    return current_launch().memory
