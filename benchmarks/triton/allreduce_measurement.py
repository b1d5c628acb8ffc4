"""How the all-reduce strategies are measured on GPUs (benchmarks/triton/allreduce.py runs it; the rows of
programs/triton/allreduce/dispatch.py's DISPATCH come from its tables): CUDA-graph timing on one rank, the launch shapes
a strategy is tried at, the table of every method against NCCL all_reduce + the fused norm, and a watchdog that names a
step making no progress.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading

import torch

from benchmarks.triton.timing import on_capture_stream
from programs.triton.allreduce.dispatch import PUSHED, Strategy


def graph_time_us(fn, reset, calls, reps, pin=None) -> float:
    """Median µs per call of `calls` back-to-back calls captured in one CUDA graph; this rank's number.
    reset (None: none): run untimed before each replay, as a graph of its own. On H100 graph replays ran ~0.3 µs a
    kernel slower after plain eager launches than after a PDL one, and graph replays did not move that state: with no
    eager launch between them, one pin (timing.pin_launch_state) holds for every replay."""
    with on_capture_stream():
        for _ in range(3):
            if reset is not None:
                reset()
            fn()
    torch.cuda.synchronize()
    reset_graph = None
    if reset is not None:
        reset_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(reset_graph):
            reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    if pin is not None:
        pin()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        if reset_graph is not None:
            reset_graph.replay()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    del graph, reset_graph
    return statistics.median(times)


class Watchdog:
    """Prints `label` to stderr, every `seconds`, while one step runs longer than that (rank-prefixed)."""

    def __init__(self, rank: int, seconds: float):
        self.rank, self.seconds = rank, seconds
        self.lock = threading.Lock()
        self.label, self.timer = None, None

    def arm(self, label: str) -> None:
        with self.lock:
            self._start(label)

    def disarm(self) -> None:
        with self.lock:
            self._start(None)

    def _start(self, label: str | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.label, self.timer = label, None
        if label is not None:
            self.timer = threading.Timer(self.seconds, self._bark, args=(label,))
            self.timer.daemon = True
            self.timer.start()

    def _bark(self, label: str) -> None:
        with self.lock:
            if self.label != label:  # re-armed or disarmed meanwhile
                return
            print(f"rank {self.rank}: {label} still running after {self.seconds:.0f} s", file=sys.stderr, flush=True)
            self._start(label)


def shape_str(shape) -> str:
    """A launch shape as the tables print it."""
    return "default" if shape is None else f"{shape[0]}x{shape[1]}"


def render(rows, title: str, hidden: int, torch_baseline: bool) -> list[str]:
    """One table: a row a T, every method's time, the best strategy and the dispatched call against NCCL + fused norm
    and against the best strategy. A row holds "times": {Strategy: (us, shape)} for the strategies timed at its T,
    "auto": the dispatched Strategy and "fused": its us."""
    head = ["T", "KiB/rank", "NCCL AR", "AR + fused norm/FP8"]
    head += ["AR + torch norm/FP8"] if torch_baseline else []
    head += [f"{s.value} (best shape)" for s in Strategy]
    head += ["best", "dispatched, default shape", "vs AR+fused", "vs best", "algbw GB/s"]
    out = [title, "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        cells = [str(r["T"]), f"{r['per_rank_kib']:.0f}", f"{r['nccl']:.1f}", f"{r['nccl+fused']:.1f}"]
        cells += [f"{r['nccl+torch']:.1f}"] if torch_baseline else []
        times = r["times"]
        cells += [f"{times[s][0]:.1f} ({times[s][1]})" if s in times else "-" for s in Strategy]
        best = min(times, key=lambda s: times[s][0])
        cells += [f"{best.value} ({r['nccl+fused'] / times[best][0]:.2f}x)"]
        cells += [f"{r['fused']:.1f} ({r['auto'].value})", f"{r['nccl+fused'] / r['fused']:.2f}x"]
        cells += [f"{times[best][0] / r['fused']:.2f}x", f"{r['T'] * hidden * 2 / r['fused'] / 1e3:.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def sweep_shapes(sweep, world: int, t: int, strategy: Strategy) -> list:
    """The launch shapes a strategy is timed at for T = t: the default only for nccl, one row a program for the pushed
    strategies, and block_m > 1 only where every SM gets a block."""
    if strategy == Strategy.NCCL:
        return [None]
    if strategy in PUSHED:  # one row per program
        return [s for s in sweep if s[0] == 1]
    rows = math.ceil(t / world)  # two-shot pulled: the rows a rank owns
    return [s for s in sweep if s[0] == 1 or rows >= s[0] * 132]
