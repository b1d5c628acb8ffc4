"""How a kernel's time is measured on the GPU: the method every benchmark table and sweep of this package and the GPU
tests share.

Every timed call is captured in a CUDA graph of many calls over rotating input sets whose total footprint is at least
3x the L2 (so neither launch overhead nor the cache is measured), replayed `reps` times; time per call = median
replay time / calls per graph (graph_time). timed_rounds runs every contender once untimed, then times each once a
round in interleaved rounds, the later ones shuffled, and reports each one's median. pin_launch_state gives every
timing the same launch state where PDL runs. rotated, tree_names and render order and report the
runs of compare_trees.py, which times source trees against each other.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from programs.triton.forward import rmsnorm_fwd
from programs.triton.launch import pdl_supported

EPS = 1e-6
DT = torch.bfloat16
MAX_SET_BYTES = 6 << 30


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@functools.cache
def _stream(index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(index)


def capture_stream() -> torch.cuda.Stream:
    """The side stream every graph is warmed up and captured on. Backward contenders run their forward on it too:
    autograd runs a node on its forward's stream, and a node left on the default stream made the eager backward's
    capture fail in some orders of the shuffled rounds ("operation failed due to a previous error during capture",
    H100)."""
    return _stream(torch.cuda.current_device())


@contextlib.contextmanager
def on_capture_stream():
    """Run the block on the capture stream, ordered after and before the current stream's work."""
    s = capture_stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        yield
    torch.cuda.current_stream().wait_stream(s)


def graph_time(calls: list[Callable[[], object]], reps: int = 15, before: Callable[[], None] | None = None) -> float:
    """Seconds per call: the calls captured in one CUDA graph, replayed `reps` times; median replay / len(calls).
    before: run after the capture and the untimed replay, right before the timed replays (pin_launch_state)."""
    for c in calls[: min(len(calls), 3)]:
        c()  # compile / autotune / allocate outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with on_capture_stream():
        for c in calls[:2]:
            c()
    with torch.cuda.graph(g, stream=capture_stream()):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    if before is not None:
        before()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del g
    return statistics.median(times) / len(calls)


def pin_launch_state(device) -> Callable[[], None] | None:
    """Where PDL runs: one eager PDL launch of a 1 x 256 forward on the current stream, then a sync. The graph replays
    that follow run in the state a PDL launch leaves (H100: after one, every plain graph timed ran 1 x 8192 at
    the same per-call time whatever ran before; after several plain eager launches, 0.3 us a kernel slower)."""
    if not pdl_supported(device):
        return None
    x = torch.ones(1, 256, dtype=DT, device=device)

    def pin() -> None:
        rmsnorm_fwd(x, epsilon=EPS, enable_pdl=True)
        torch.cuda.synchronize()

    return pin


def n_sets(bytes_per_call: int, l2: int) -> tuple[int, int]:
    """(input sets, calls per graph): sets cover >= 3x L2 unless one set already does; at least 8 calls per graph."""
    sets = max(2, math.ceil(3 * l2 / bytes_per_call))
    sets = min(sets, 4000, max(2, MAX_SET_BYTES // bytes_per_call))
    return sets, max(sets, 8)


def rotating(make: Callable[[int], Callable[[], object]], sets: int, calls: int) -> list[Callable[[], object]]:
    fns = [make(i) for i in range(sets)]
    return [fns[i % sets] for i in range(calls)]


def autograd_calls(forward: Callable, xs: list[torch.Tensor], w: torch.Tensor, dys: list[torch.Tensor]):
    """make(i) for a backward contender: forward(x_i, w) run once (on the capture stream) and a call that computes
    dx and dw of its output for dy_i, the forward's graph kept for the next call."""

    def make(i):
        xr = xs[i].detach().requires_grad_()
        wr = w.detach().clone().requires_grad_()
        with on_capture_stream():
            y = forward(xr, wr)
        return lambda: torch.autograd.grad(y, (xr, wr), dys[i], retain_graph=True)

    return make


def try_time(name, fn_builder) -> float | None:
    try:
        return fn_builder()
    except Exception as e:  # a peer that cannot run a shape (e.g. Liger past N = 65536) is reported as n/a
        log(f"  {name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
        torch.cuda.synchronize()
        return None


def timed_rounds(
    runs: dict[str, Callable[[int], Callable[[], object]]],
    sets: int,
    calls: int,
    reps: int,
    rounds: int,
    optional: set[str],
    before: Callable[[], None] | None = None,
) -> dict[str, float | None]:
    """Each contender's median over `rounds` interleaved rounds (every contender once a round); the `optional` ones
    (peers) are None where they cannot run. Timed once each in a fixed order, a contender's number at 4096 x 4096
    moved by up to 3% between runs, more than the gaps measured, and with what ran before it (H100):
    so the first round keeps the order given and each later one is shuffled (a fixed seed a round: the same orders
    every run), which moves every contender's place and predecessor. before: graph_time's hook, for every timing.
    Every contender first runs once, untimed, so that all compiles happen before any timing: a torch.compile run
    made every later contender ~1 us faster at 4096 x 4096 on H100, and compiled during the first
    round it split that round into contenders timed before and after it."""
    times: dict[str, list[float] | None] = {k: [] for k in runs}

    def first_call(make) -> bool:
        make(0)()
        return True  # try_time's None means it failed

    for name, make in runs.items():
        if name not in optional:
            first_call(make)
        elif try_time(name, functools.partial(first_call, make)) is None:
            times[name] = None
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    for r in range(rounds):
        names = list(runs)
        if r:
            random.Random(r).shuffle(names)
        for name in names:
            make = runs[name]
            if times[name] is None:
                continue

            def time(make=make) -> float:
                return graph_time(rotating(make, sets, calls), reps, before=before)

            v = try_time(name, time) if name in optional else time()
            if v is None:
                times[name] = None
            else:
                times[name].append(v)
    return {k: statistics.median(v) if v else None for k, v in times.items()}


def tree_names(trees: list[Path]) -> list[str]:
    """The trees' directory names, or before / after where they clash (the two-tree call's names)."""
    names = [t.name for t in trees]
    if len(set(names)) == len(names):
        return names
    return ["before", "after"] if len(trees) == 2 else [f"tree{i}" for i in range(len(trees))]


def rotated(items: list, r: int) -> list:
    """Round r's order: two trees alternate; more rotate by one a round, so each tree takes every place in turn."""
    if len(items) == 2:
        return items if r % 2 == 0 else items[::-1]
    k = r % len(items)
    return items[k:] + items[:k]


def render(runs: dict[str, list[dict]], names: list[str]) -> list[str]:
    """A line a call: each tree's median, each later tree's median / the first's, each tree's spread (max / min - 1)."""
    base, later = names[0], names[1:]
    head = f"{'call':<18} {base + ' us':>12}" + "".join(f" {n + ' us':>12} {n + '/' + base:>16}" for n in later)
    lines = [head + f" {'spread':>8}" * len(names)]
    for key in runs[base][0]:
        meds = {n: statistics.median(t[key] for t in runs[n]) for n in names}
        spreads = [max(t[key] for t in runs[n]) / min(t[key] for t in runs[n]) - 1 for n in names]
        line = f"{key:<18} {meds[base]:>12.2f}" + "".join(
            f" {meds[n]:>12.2f} {meds[n] / meds[base]:>16.4f}" for n in later
        )
        lines.append(line + "".join(f" {s:>8.1%}" for s in spreads))
    return lines
