"""Source trees' forward and backward timed against each other in one run: did a change cost anything?

    python3 -m benchmarks.triton.compare_trees BEFORE AFTER [AFTER ...] [--shapes 4096x4096,8192x8192,2048x65536]
                                               [--rounds 7] [--fp8]

BEFORE and each AFTER are directories that each hold a `programs` package (a checkout, or `git archive REV programs
tt_rmsnorm` unpacked). Every round runs one fresh process a tree, the trees' order rotating round by round (with two
trees: alternating); each process imports programs.triton from its own tree (its directory put first on PYTHONPATH, so a
Triton placed on PYTHONPATH stays visible) and times rmsnorm_fwd and rmsnorm_bwd (default launches, bf16, a weight,
rsigma from the forward; --fp8: also the forward into e4m3 with row scales) at every shape with this checkout's
benchmarks/triton/timing.py graph_time, the same method for every tree (CUDA graphs over rotating input sets of at least
3x the L2). The table gives each tree's median over the rounds, each AFTER's ratio to BEFORE, and the spread of each
tree's rounds (max / min - 1), beside a device-to-device copy's bandwidth measured at the start and the end of the run
(bytes read plus written), which says whether the card's memory speed held through it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",")]


def copy_gbps(n_bytes: int = 1 << 30, reps: int = 20) -> float:
    """A device-to-device copy of n_bytes: (read + written bytes) / median time, in GB/s."""
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return 2 * n_bytes / statistics.median(times) / 1e9


def worker(shapes: list[tuple[int, int]], reps: int, fp8: bool = False) -> dict:
    """Times of this process's tree (the `programs` package first on sys.path) by this checkout's method:
    {"fwd MxN": us, "bwd MxN": us}."""
    from programs.triton.backward import rmsnorm_bwd
    from programs.triton.forward import rmsnorm_fwd

    # benchmarks from this checkout, whatever the tree holds; programs stays the tree's, imported above
    sys.path.insert(0, str(REPO))
    from benchmarks.triton.timing import graph_time, n_sets, rotating

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    g = torch.Generator(device="cuda").manual_seed(0)
    out = {}
    for m, n in shapes:
        sets, calls = n_sets(4 * m * n, l2)  # the forward's bytes: x read, y written
        out.update(_time_shape(m, n, sets, calls, reps, g, rmsnorm_fwd, rmsnorm_bwd, graph_time, rotating, fp8))
        torch.cuda.empty_cache()
    return out


def _time_shape(m, n, sets, calls, reps, g, fwd, bwd, graph_time, rotating, fp8: bool = False) -> dict:
    xs = [torch.randn(m, n, generator=g, device="cuda").to(torch.bfloat16) for _ in range(sets)]
    dys = [torch.randn(m, n, generator=g, device="cuda").to(torch.bfloat16) for _ in range(sets)]
    w = torch.randn(n, generator=g, device="cuda").to(torch.bfloat16)
    rss = [fwd(x, w, epsilon=1e-6, return_rsigma=True).rsigma for x in xs]
    out = {
        f"fwd {m}x{n}": 1e6 * graph_time(rotating(lambda i: lambda: fwd(xs[i], w, epsilon=1e-6), sets, calls), reps),
        f"bwd {m}x{n}": 1e6 * graph_time(rotating(lambda i: lambda: bwd(dys[i], xs[i], w, rss[i]), sets, calls), reps),
    }
    if fp8:
        e4m3 = dict(epsilon=1e-6, dtype=torch.float8_e4m3fn, scale_mode="row")
        out[f"fp8 {m}x{n}"] = 1e6 * graph_time(rotating(lambda i: lambda: fwd(xs[i], w, **e4m3), sets, calls), reps)
    return out


def run_tree(tree: Path, shapes: str, reps: int, fp8: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, __file__, "--worker", "--shapes", shapes, "--reps", str(reps)] + (["--fp8"] if fp8 else [])
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", type=Path, help="BEFORE AFTER [AFTER ...]")
    ap.add_argument("--shapes", default="4096x4096,8192x8192,2048x65536")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--fp8", action="store_true", help="also the forward into e4m3 with a scale a row")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(parse_shapes(a.shapes), a.reps, a.fp8)), flush=True)
        return
    if len(a.trees) < 2:
        ap.error("give BEFORE and at least one AFTER tree")
    from benchmarks.triton.timing import render, rotated, tree_names

    trees = [t.resolve() for t in a.trees]
    names = tree_names(trees)
    bw_start = copy_gbps()
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(a.rounds):
        for name, tree in rotated(list(zip(names, trees, strict=True)), r):
            runs[name].append(run_tree(tree, a.shapes, a.reps, a.fp8))
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in runs[name][-1].items()), flush=True)
    bw_end = copy_gbps()
    dev = torch.cuda.get_device_name(0)
    print(f"\n{dev}; copy {bw_start:.0f} GB/s at the start, {bw_end:.0f} GB/s at the end; {a.rounds} rounds, medians")
    print("\n".join(render(runs, names)))


if __name__ == "__main__":
    main()
