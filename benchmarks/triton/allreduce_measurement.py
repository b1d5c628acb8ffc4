"""How the all-reduce strategies are measured on GPUs (benchmarks/triton/allreduce.py runs it; the rows of
programs/triton/allreduce/dispatch.py's DISPATCH come from its tables): CUDA-graph timing on one rank, the launch shapes
a strategy is tried at, the table of every method against NCCL all_reduce + the fused norm, the table against
FlashInfer's all-reduce fusion (benchmarks/triton/allreduce_peers.py), and a watchdog that names a step making no
progress.
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


def flashinfer_best(cells: dict) -> tuple[float, bool] | None:
    """The fastest of a pattern's FlashInfer timings whose output passed its float64 check, as (us, use_oneshot);
    None where none did. cells: {use_oneshot: (us or None where it could not run, passed: bool or None)}."""
    ok = [(us, one) for one, (us, passed) in cells.items() if us is not None and passed]
    return min(ok, key=lambda c: c[0]) if ok else None


def peer_ratio(ours_us: float, ours_passed: bool | None, best: tuple[float, bool] | None) -> str:
    """FlashInfer's best time over ours (> 1: ours is faster); n/a where no FlashInfer timing passed its check,
    FAIL where ours did not."""
    if ours_passed is False:
        return "FAIL (ours)"
    if best is None:
        return "n/a"
    return f"{best[0] / ours_us:.2f}x ({'1' if best[1] else '2'}-shot)"


def _fi_cell(cell) -> str:
    if cell is None:
        return "-"
    us, passed = cell
    if us is None:
        return "n/a"
    return f"{us:.1f}" + ("" if passed else " FAIL")


def render_flashinfer(rows, patterns, version: str) -> list[str]:
    """The comparison with FlashInfer's all-reduce fusion: a row a (residual, T), our dispatched call beside each
    pattern's one-shot and two-shot times and FlashInfer's best over ours. A row holds "T", "residual", "fused" (our
    us), "auto" (its Strategy), "ours_passed" and "fi": {pattern key: {use_oneshot: (us or None, passed)}}; a shot
    absent from a pattern's cells was not run at that T ("-"), None us could not run (n/a)."""
    out = [
        f"\n## FlashInfer {version} all-reduce fusion against ours (us per call; FI best / ours: > 1 means ours is "
        "faster; FAIL: the output failed its float64 check and gets no ratio)",
        "# ours: the dispatched call, FP8 e4m3 with a scale per row (max|v| / 448); h = bf16(fp32 sum + residual), "
        "the fp32 sum itself without one",
        "# FlashInfer (TensorRT-LLM workspace, fp32 accumulation, a zeroed residual where there is none): "
        "h = bf16(bf16(fp32 sum) + residual); norm = kARResidualRMSNorm, the bf16 norm, no FP8; "
        "fp8 = kARResidualRMSNormFP8Quant, one static per-tensor scale (max|v| of the tensor / 448); "
        "fp8_row = kARResidualRMSNormDynamicFP8Quant, a scale per row as ours",
    ]
    head = ["T", "residual", "ours (dispatched)"]
    for key in patterns:
        head += [f"{key} 1-shot", f"{key} 2-shot", f"{key}: FI best / ours"]
    out += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        ours = f"{r['fused']:.1f} ({r['auto'].value})" + ("" if r["ours_passed"] is not False else " FAIL")
        cells = [str(r["T"]), "yes" if r["residual"] else "no", ours]
        for key in patterns:
            fi = r["fi"].get(key, {})
            cells += [_fi_cell(fi.get(True)), _fi_cell(fi.get(False))]
            cells.append(peer_ratio(r["fused"], r["ours_passed"], flashinfer_best(fi)))
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
