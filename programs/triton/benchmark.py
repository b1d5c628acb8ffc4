"""RMSNorm benchmark on CUDA: forward/backward GB/s, % of the copy bandwidth measured in the same run, ratios to peers.

    python3 -m programs.triton.benchmark                 # single-GPU tables (cuda:0)
    python3 -m programs.triton.benchmark --distributed   # two-phase distributed section on 2 GPUs (NCCL)
    python3 -m programs.triton.benchmark --sweep         # launch-config sweep that fwd_config / bwd_config come from
    python3 -m programs.triton.benchmark --sweep-long    # long-row launch shapes (split / looped / cols) against each other
    python3 -m programs.triton.benchmark --sweep-rows    # forward rows-kernel launch shapes at mid sizes, beside Liger / QuACK
    python3 -m programs.triton.benchmark --shapes 2048x65536,8192x8192 --peers none   # some shapes, no peers

Method (device/METHOD.md): every timed call is captured in a CUDA graph of many calls over rotating input sets whose
total footprint is at least 3x the L2 (so neither launch overhead nor the cache is measured), replayed 15 times;
time per call = median replay time / calls per graph. The single-GPU tables run every contender once, untimed (all
compiles done before any timing: a torch.compile run made every later contender faster, NOTES.md v24), then time
each once a round, in 3 interleaved rounds (the later ones shuffled), and report each one's median round. Where ours
launches with PDL (Hopper: back-to-back calls overlap) a second forward and a second backward table give ours
launched plainly, as the peers are, and every timing starts in one launch state: on H100, graph replays ran 0.3 us
a kernel faster (1 x 8192 copy 1.34 against 1.70 us, same bits) when the last eager launches on the stream had
included a PDL launch than after several plain ones, so each contender's number hung on its predecessor's
launches (NOTES.md v22-v23); a tiny eager PDL launch right before the timed replays (`pin_launch_state`) gives every
contender the faster state.
GB/s counts the fewest bytes: forward reads x and writes y; backward reads x and dy and writes dx. `copy` is the
faster of dst.copy_(x) (same shape) and a flat copy of the same bytes per call, timed the same way.
Peers: torch eager F.rms_norm, torch.compile of it (dynamic=False), Liger-Kernel and QuACK when importable.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import random
import statistics
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from programs.triton import rmsnorm_async, rmsnorm_cluster
from programs.triton.rmsnorm_bwd import STREAM_ROWS_N, BwdConfig, bwd_config, rmsnorm_bwd, stream_config
from programs.triton.rmsnorm_fwd import WIDE_CHUNK_N, FwdConfig, fwd_config, pdl_supported, rmsnorm_fwd

# 1024 x 262144 first: in earlier runs, measured last, even a plain copy of its bytes ran at 2.7 TB/s (NOTES.md)
SHAPES = [
    (1024, 262144),
    (1, 8192),
    (32, 8192),
    (4096, 4096),
    (8192, 8192),
    (16384, 8192),
    (32768, 4096),
    (4096, 16384),
    (2048, 65536),
]
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
    H100, NOTES.md v21)."""
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
    that follow run in the state a PDL launch leaves (NOTES.md v23: after one, every plain graph timed ran 1 x 8192 at
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
    moved by up to 3% between runs, more than the gaps measured, and with what ran before it (H100, NOTES.md v20):
    so the first round keeps the order given and each later one is shuffled (a fixed seed a round: the same orders
    every run), which moves every contender's place and predecessor. before: graph_time's hook, for every timing.
    Every contender first runs once, untimed, so that all compiles happen before any timing: a torch.compile run
    made every later contender ~1 us faster at 4096 x 4096 on H100 (NOTES.md v24), and compiled during the first
    round it split that round into contenders timed before and after it."""
    times: dict[str, list[float] | None] = {k: [] for k in runs}

    def first_call(make) -> bool:
        make(0)()
        return True  # try_time's None means it failed

    for name, make in runs.items():
        if name not in optional:
            first_call(make)
        elif try_time(name, lambda: first_call(make)) is None:
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
            time = lambda: graph_time(rotating(make, sets, calls), reps, before=before)  # noqa: E731
            v = try_time(name, time) if name in optional else time()
            if v is None:
                times[name] = None
            else:
                times[name].append(v)
    return {k: statistics.median(v) if v else None for k, v in times.items()}


def load_peers(wanted: set[str]) -> dict[str, Callable]:
    """The importable peer kernels among Liger and QuACK, each as norm(x, w) with eps EPS."""
    peers = {}
    if "liger" not in wanted and "quack" not in wanted:
        return peers
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        peers["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)
    except Exception as e:
        log(f"liger not importable: {e}")
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm

        peers["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
    except Exception as e:
        log(f"quack not importable: {type(e).__name__}: {e}")
    return peers


def fmt_ratio(ours: float, other: float | None) -> str:
    return "n/a" if other is None else f"{other / ours:.2f}x"


def bench_single(reps: int, shapes: list[tuple[int, int]], wanted: set[str], rounds: int = 3) -> None:
    dev = torch.device("cuda:0")
    props = torch.cuda.get_device_properties(dev)
    l2 = props.L2_cache_size
    peers = {k: v for k, v in load_peers(wanted).items() if k in wanted}
    for knob in ("cache_size_limit", "recompile_limit"):  # one compiled graph per shape, 9 shapes
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled_fwd = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False)
    compiled_fb = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False)
    fwd_rows, bwd_rows = [], []
    pdl = pdl_supported(dev)
    pin = pin_launch_state(dev)
    for m, n in shapes:
        log(f"shape {m}x{n}")
        elt = torch.finfo(DT).bits // 8
        fbytes = 2 * m * n * elt
        sets, calls = n_sets(fbytes, l2)
        g = torch.Generator(device=dev).manual_seed(0)
        xs = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(sets)]
        w = torch.randn(n, device=dev, generator=g).to(DT)
        dst = [torch.empty_like(x) for x in xs]
        flat = [torch.empty(2 * m * n, dtype=DT, device=dev) for _ in range(sets)]
        runs = {
            "copy2d": lambda i: lambda: dst[i].copy_(xs[i]),
            "copyflat": lambda i: lambda: flat[i][m * n :].copy_(flat[i][: m * n]),
            "ours": lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS),
        }
        if "eager" in wanted:
            runs["eager"] = lambda i: lambda: F.rms_norm(xs[i], (n,), w, EPS)
        if "compile" in wanted:
            runs["compile"] = lambda i: lambda: compiled_fwd(xs[i], w)
        for name, norm in peers.items():
            runs[name] = lambda i, norm=norm: lambda: norm(xs[i], w)
        # FP8 row-scaled output (3 bytes/elem moved): reported for the record
        runs["ours_fp8"] = lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, dtype=torch.float8_e4m3fn)
        if pdl:  # ours launched as every peer is: the kernels alone, no overlap between calls
            runs["ours_nopdl"] = lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, enable_pdl=False)
        t = timed_rounds(runs, sets, calls, reps, rounds, optional={"eager", "compile", *peers}, before=pin)
        del dst, flat
        t["copy"] = min(t["copy2d"], t["copyflat"])  # the faster copy of the same bytes is the ceiling
        fwd_rows.append((m, n, fbytes, t))
        log("  fwd " + " ".join(f"{k}={v * 1e6:.1f}us" for k, v in t.items() if v))

        # backward: read x, dy; write dx
        bbytes = 3 * m * n * elt
        bsets, bcalls = n_sets(bbytes, l2)
        bsets = min(bsets, sets)
        bcalls = max(bsets, 8)
        dys = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(bsets)]
        rss = [rmsnorm_fwd(xs[i], w, epsilon=EPS, return_rsigma=True).rsigma for i in range(bsets)]
        # a copy of the same bytes: read 1.5*M*N elements, write 1.5*M*N elements
        k = 3 * m * n // 2
        srcs = [torch.randn(k, device=dev, generator=g).to(DT) for _ in range(bsets)]
        dsts = [torch.empty(k, dtype=DT, device=dev) for _ in range(bsets)]

        runs = {
            "copy": lambda i: lambda: dsts[i].copy_(srcs[i]),
            "ours": lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i]),
        }
        if pdl:
            runs["ours_nopdl"] = lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], enable_pdl=False)
        if "eager" in wanted:
            runs["eager"] = autograd_calls(lambda a, b: F.rms_norm(a, (n,), b, EPS), xs, w, dys)
        if "compile" in wanted:
            runs["compile"] = autograd_calls(compiled_fb, xs, w, dys)
        for name, norm in peers.items():
            runs[name] = autograd_calls(norm, xs, w, dys)
        tb = timed_rounds(runs, bsets, bcalls, reps, rounds, optional={"eager", "compile", *peers}, before=pin)
        del dsts, srcs
        bwd_rows.append((m, n, bbytes, tb))
        log("  bwd " + " ".join(f"{k}={v * 1e6:.1f}us" for k, v in tb.items() if v))
        del xs, dys, rss
        torch.cuda.empty_cache()

    names = [p for p in ("eager", "compile") if p in wanted] + [p for p in ("liger", "quack") if p in peers]
    print(
        f"\n# {props.name}, {props.multi_processor_count} SMs, L2 {l2 >> 20} MiB; torch {torch.__version__}; bf16; CUDA-graph replay, rotated inputs"
    )
    if pdl:
        print(
            "# ours launched with PDL (its default here, forward and backward): back-to-back calls overlap one's launch with the other's tail; copy and peers launch plainly"
        )
        print(
            "# every timing starts right after one eager PDL launch (pin_launch_state): graph replays then run in the faster of two launch states seen on H100"
        )
    tables = [("FORWARD (read x + write y)", fwd_rows, "ours", True)]
    if pdl:
        tables.append(
            ("FORWARD, ours without PDL (enable_pdl=False: launched as the peers are)", fwd_rows, "ours_nopdl", False)
        )
    tables.append(("BACKWARD (read x, dy + write dx; dgamma included in time)", bwd_rows, "ours", False))
    if pdl:
        tables.append(("BACKWARD, ours without PDL (enable_pdl=False)", bwd_rows, "ours_nopdl", False))
    for title, rows, ours, fp8_col in tables:
        print(f"\n## {title}")
        head = ["M x N", "copy GB/s", "ours us", "ours GB/s", "% of copy"] + [f"vs {p}" for p in names]
        if fp8_col:
            head.append("fp8-row us")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for m, n, nbytes, t in rows:
            cells = [
                f"{m} x {n}",
                f"{nbytes / t['copy'] / 1e9:.0f}",
                f"{t[ours] * 1e6:.1f}",
                f"{nbytes / t[ours] / 1e9:.0f}",
                f"{100 * t['copy'] / t[ours]:.0f}%",
            ]
            cells += [fmt_ratio(t[ours], t.get(p)) for p in names]
            if fp8_col:
                cells.append(f"{t['ours_fp8'] * 1e6:.1f}")
            print("| " + " | ".join(cells) + " |")
    print("\n(vs X = X's time / ours: > 1 means ours is faster; n/a = the peer cannot run the shape)")
    print("\n## times in us (same run)")
    for title, rows in (("fwd", fwd_rows), ("bwd", bwd_rows)):
        for m, n, _, t in rows:
            print(f"{title} {m}x{n}: " + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in t.items() if v is not None))


# ---------------------------------------------------------------------------------------------------------------------
# config sweep


def fwd_inputs(m: int, n: int, dev, g, l2: int, reps: int):
    """(sets, calls, xs, w, copy seconds) for forward timing: rotated bf16 inputs and a copy of the same bytes."""
    sets, calls = n_sets(4 * m * n, l2)
    xs = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(sets)]
    w = torch.randn(n, device=dev, generator=g).to(DT)
    flat = [torch.empty(2 * m * n, dtype=DT, device=dev) for _ in range(sets)]
    copy = graph_time(rotating(lambda i: lambda: flat[i][m * n :].copy_(flat[i][: m * n]), sets, calls), reps)
    return sets, calls, xs, w, copy


def default_fwd(m: int, n: int, dev) -> FwdConfig:
    """The launch rmsnorm_fwd picks for the benchmark's inputs: plain contiguous bf16 rows, readable as 32-bit words."""
    return fwd_config(
        m, n, dev, words_ok=True, cluster_ok=rmsnorm_cluster.supported(dev), async_ok=rmsnorm_async.supported(dev)
    )


def bwd_inputs(m: int, n: int, dev, g, l2: int, reps: int):
    """(sets, calls, xs, dys, w, rsigmas, copy seconds) for backward timing; the copy moves the same 6*M*N bytes."""
    sets, calls = n_sets(6 * m * n, l2)
    xs = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(sets)]
    dys = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(sets)]
    w = torch.randn(n, device=dev, generator=g).to(DT)
    rss = [rmsnorm_fwd(xs[i], w, return_rsigma=True).rsigma for i in range(sets)]
    k = 3 * m * n // 2
    flat = [torch.empty(2 * k, dtype=DT, device=dev) for _ in range(sets)]
    copy = graph_time(rotating(lambda i: lambda: flat[i][k:].copy_(flat[i][:k]), sets, calls), reps)
    return sets, calls, xs, dys, w, rss, copy


SWEEP_FWD = [(1, 4096), (32, 4096), (1, 8192), (32, 8192), (128, 8192), (2048, 65536), (1024, 262144)]
SWEEP_BWD = [(32, 8192), (65536, 1024), (16384, 2048), (8192, 8192), (16384, 8192), (32768, 4096), (4096, 16384)]


def sweep(reps: int, shapes: list[tuple[int, int]] | None = None) -> None:
    """Forward configs for decode and long rows, backward configs for the register-resident kernel; `shapes` picks
    some of SWEEP_FWD / SWEEP_BWD (default: all)."""
    import triton

    dev = torch.device("cuda:0")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    g = torch.Generator(device=dev).manual_seed(0)

    def report(kind, m, n, base, default_cfg, t_default, res):
        res.sort(key=lambda r: r[0])
        print(
            f"SWEEP {kind} {m}x{n}: copy-equiv {base * 1e6:.2f}us; default {default_cfg} {t_default * 1e6:.2f}us ({100 * base / t_default:.0f}%)"
        )
        for tt, cfg in res[:6]:
            print(f"   {tt * 1e6:8.2f}us {100 * base / tt:5.1f}%  {cfg}")
        sys.stdout.flush()

    def run_all(cands, make):
        res = []
        for cfg in cands:
            try:
                res.append((graph_time(make(cfg), reps), cfg))
            except Exception as e:
                log(f"  {cfg}: failed {type(e).__name__}: {str(e)[:200]}")
        return res

    for m, n in [s_ for s_ in SWEEP_FWD if shapes is None or s_ in shapes]:
        sets, calls, xs, w, copy = fwd_inputs(m, n, dev, g, l2, reps)
        cands = []
        if n <= 8192:
            # whole rows per program, or `chunk` columns of a row per program (each summing the whole row)
            cands = [
                FwdConfig("rows", nw, block_m=1, chunk=ch)
                for nw in (4, 8, 16, 32)
                for ch in (0, n // 2, n // 4, n // 8)
                if 4 <= (ch or n) // (nw * 32) <= 32
            ]
        else:
            for ch, nw in ((8192, 32), (8192, 16), (4096, 16)):
                for head in (0, 16384, 32768):
                    for progs in (sms, 2 * sms):
                        if head // (nw * 32) <= 32:
                            cands.append(FwdConfig("looped", nw, chunk=ch, programs=progs, head=head))
        mk = lambda cfg: rotating(lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, config=cfg), sets, calls)
        td = graph_time(rotating(lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS), sets, calls), reps)
        report("fwd", m, n, copy, default_fwd(m, n, dev), td, run_all(cands, mk))
        del xs
        torch.cuda.empty_cache()

    for m, n in [s_ for s_ in SWEEP_BWD if shapes is None or s_ in shapes]:
        sets, calls, xs, dys, w, rss, copy = bwd_inputs(m, n, dev, g, l2, reps)
        bn = triton.next_power_of_2(n)
        cands = []
        for bm in (1, 2, 4):
            for nw in (8, 16, 32):
                if 4 <= bm * bn / (nw * 32) <= 32:
                    for progs in (sms, 2 * sms):
                        cands.append(BwdConfig("rows", nw, block_m=bm, programs=min(triton.cdiv(m, bm), progs)))
        # one row at a time, no register look-ahead, the next rows asked of the L2 (the default past 8192 columns)
        cands += [stream_config(m, dev, l2_ahead=a) for a in (0, 1, 2)]
        mk = lambda cfg: rotating(lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], config=cfg), sets, calls)
        td = graph_time(rotating(lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i]), sets, calls), reps)
        report("bwd", m, n, copy, bwd_config(m, n, dev), td, run_all(cands, mk))
        del xs, dys, rss
        torch.cuda.empty_cache()


def config_line(label: str, copy: float, calls: Callable[[], list], shown, reps: int) -> None:
    """Time one launch config (calls() builds its rotated calls) and print it beside the copy of the same bytes; a
    config that cannot run (too many blocks for a cooperative launch, a compile failure) is logged and skipped."""
    try:
        t = graph_time(calls(), reps)
    except Exception as e:
        log(f"  {label} {shown}: failed {type(e).__name__}: {str(e)[:200]}")
        return
    print(f"{label}: copy {copy * 1e6:.2f}us  {t * 1e6:8.2f}us {100 * copy / t:5.1f}%  {shown}", flush=True)


def sweep_long(reps: int) -> None:
    """Long-row launch shapes against each other and against the copy of the same bytes, in one run: the split kernels
    (rows cut over programs that exchange partials) in several shapes against the looped forward and the two-kernel
    (cols) backward they replace, the forward also with a residual and with FP8 row-scaled output."""
    dev = torch.device("cuda:0")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    g = torch.Generator(device=dev).manual_seed(0)

    for m, n in ((2048, 65536), (1024, 262144)):
        sets, calls, xs, w, copy = fwd_inputs(m, n, dev, g, l2, reps)
        rs_ = [torch.randn(m, n, device=dev, generator=g).to(DT) for _ in range(sets)]
        looped = FwdConfig(
            "looped", 32, chunk=32768 if n <= 65536 else 8192, programs=2 * sms, head=0 if n <= 65536 else 16384
        )
        fused_looped = FwdConfig("looped", 32, chunk=8192, programs=2 * sms, head=16384)
        splits = [
            FwdConfig("split", nw, block_m=bm, chunk=ch, programs=p, maxnreg=r)
            for ch, nw, bm, p, r in (
                (8192, 16, 1, sms, 0),
                (8192, 16, 2, sms, 0),
                (16384, 16, 2, sms, 0),
                (16384, 32, 2, sms, 0),
                (16384, 16, 1, sms, 0),
                (4096, 8, 2, 2 * sms, 0),
                (8192, 8, 1, 2 * sms, 128),
                (4096, 8, 2, 2 * sms, 128),
                (4096, 4, 1, 4 * sms, 128),
                (8192, 16, 1, 2 * sms, 64),
            )
            if n // ch <= p
        ]
        cands = [("plain", looped)] + [("plain", c) for c in splits]
        if n <= WIDE_CHUNK_N:  # the words stats pass (one load of the whole row) against the chunked one
            cands.insert(0, ("plain", default_fwd(m, n, dev)))
        cands += [(kind, cfg) for kind in ("residual", "fp8_row") for cfg in [fused_looped] + splits[:3]]
        kw = {
            "plain": lambda i: {},
            "residual": lambda i: {"residual": rs_[i]},
            "fp8_row": lambda i: {"dtype": torch.float8_e4m3fn},
        }
        for kind, cfg in cands:
            config_line(
                f"LONG fwd {m}x{n} {kind}",
                copy,
                lambda: rotating(
                    lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, config=cfg, **kw[kind](i)), sets, calls
                ),
                cfg,
                reps,
            )
        del xs, rs_
        torch.cuda.empty_cache()

    for m, n in ((4096, 16384), (2048, 65536), (1024, 262144)):
        sets, calls, xs, dys, w, rss, copy = bwd_inputs(m, n, dev, g, l2, reps)
        cands = [
            BwdConfig("cols", 4, block_m=8, programs=max(1, min(-(-m // 8), 2 * sms // -(-n // 2048))), block_n=2048)
        ]
        cands += [
            BwdConfig("split", nw, block_m=bm, programs=p, block_n=ch, maxnreg=r)
            for ch, nw, bm, p, r in (
                (4096, 16, 1, sms, 0),
                (4096, 16, 2, sms, 0),
                (8192, 16, 1, sms, 0),
                (4096, 8, 1, 2 * sms, 128),
                (2048, 8, 2, 2 * sms, 128),
                (4096, 16, 1, 2 * sms, 64),
                (2048, 4, 1, 4 * sms, 128),
                (8192, 16, 1, 2 * sms, 64),
            )
            if n // ch <= p
        ]
        if n > STREAM_ROWS_N:  # the words split kernel (the default where it fits) at both stage counts
            cands += [
                BwdConfig("split", 16, block_m=1, programs=sms, block_n=8192, words=True, stages=s) for s in (3, 4)
            ]
        if n <= STREAM_ROWS_N:
            cands += [stream_config(m, dev, l2_ahead=a) for a in (0, 1)]
        for cfg in cands:
            config_line(
                f"LONG bwd {m}x{n}",
                copy,
                lambda: rotating(lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], config=cfg), sets, calls),
                cfg,
                reps,
            )
        del xs, dys, rss
        torch.cuda.empty_cache()


def sweep_rows(reps: int) -> None:
    """Forward launch shapes of the register-resident rows kernel at the mid-size shapes, beside the copy of the same
    bytes and Liger / QuACK when importable, in one run (the GPU kinds differ: NOTES.md v10)."""
    import triton

    dev = torch.device("cuda:0")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    g = torch.Generator(device=dev).manual_seed(0)
    peers = load_peers({"liger", "quack"})
    for m, n in ((4096, 4096), (32768, 4096), (8192, 8192), (4096, 16384)):
        sets, calls, xs, w, copy = fwd_inputs(m, n, dev, g, l2, reps)
        bn = triton.next_power_of_2(n)
        cands = [None] + [
            FwdConfig("rows", nw, block_m=bm)
            for bm in (1, 2, 4)
            for nw in (4, 8, 16, 32)
            if 8 <= bm * bn // (nw * 32) <= 32
        ]
        for cfg in cands:
            config_line(
                f"ROWS fwd {m}x{n}",
                copy,
                lambda: rotating(lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, config=cfg), sets, calls),
                cfg or f"default {default_fwd(m, n, dev)}",
                reps,
            )
        for name, norm in peers.items():
            config_line(
                f"ROWS fwd {m}x{n}", copy, lambda: rotating(lambda i: lambda: norm(xs[i], w), sets, calls), name, reps
            )
        del xs
        torch.cuda.empty_cache()


def sweep_split(reps: int) -> None:
    """Split-kernel launch shapes (rows cut over co-resident programs): long rows forward and backward, and the
    decode backward with every row in one step (columns over programs, dweight final without a second kernel), each
    beside the default config and the copy of the same bytes, in one run."""
    import triton

    dev = torch.device("cuda:0")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    g = torch.Generator(device=dev).manual_seed(0)

    def shapes(m, n, per_thread):
        """(block_m, chunk, warps) whose rows x chunk give each thread per_thread elements of a block."""
        for bm in (1, 2, 4, 8, 16, 32):
            for ch in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768):
                for nw in (4, 8, 16, 32):
                    if (
                        bm * ch // (nw * 32) in per_thread
                        and n // ch <= sms
                        and bm <= triton.next_power_of_2(m)
                        and ch <= triton.next_power_of_2(n)
                    ):
                        yield bm, ch, nw

    for m, n in ((2048, 65536), (1024, 262144)):
        sets, calls, xs, w, copy = fwd_inputs(m, n, dev, g, l2, reps)
        cands = [None] + [
            FwdConfig("split", nw, block_m=bm, chunk=ch, programs=sms)
            for bm, ch, nw in shapes(m, n, (16, 32))
            if ch >= 4096
        ]
        for cfg in cands:
            config_line(
                f"SPLIT fwd {m}x{n}",
                copy,
                lambda: rotating(lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, config=cfg), sets, calls),
                cfg or f"default {default_fwd(m, n, dev)}",
                reps,
            )
        del xs
        torch.cuda.empty_cache()

    for m, n in ((1, 8192), (32, 8192), (4096, 16384), (2048, 65536), (1024, 262144)):
        sets, calls, xs, dys, w, rss, copy = bwd_inputs(m, n, dev, g, l2, reps)
        per_thread = (1, 2, 4, 8, 16) if m <= 32 else (8, 16)
        cands = [None] + [
            BwdConfig("split", nw, block_m=bm, programs=sms, block_n=ch)
            for bm, ch, nw in shapes(m, n, per_thread)
            if (bm >= m if m <= 32 else bm <= 4 and ch >= max(2048, n // 32))
        ]
        for cfg in cands:
            config_line(
                f"SPLIT bwd {m}x{n}",
                copy,
                lambda: rotating(lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], config=cfg), sets, calls),
                cfg or f"default {bwd_config(m, n, dev)}",
                reps,
            )
        del xs, dys, rss
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------------
# distributed section


def _dist_worker(rank: int, world: int, port: int, reps: int) -> None:
    import torch.distributed as dist

    from programs.triton.distributed import distributed_rms_norm, gather_stats, post, pre_stats

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=dev)
    hidden = 8192
    hl = hidden // world
    pin = pin_launch_state(dev)  # as the single-GPU tables: every timing starts in one launch state
    rows = []
    for t_rows in (32, 2048, 32768):
        g = torch.Generator(device=dev).manual_seed(rank)
        per_call = 2 * t_rows * hl * 2
        sets = 2 if per_call * 2 > 3 * (60 << 20) else max(2, min(64, math.ceil(3 * (60 << 20) / per_call)))
        calls = max(sets, 8)
        xs = [torch.randn(t_rows, hl, device=dev, generator=g).to(DT) for _ in range(sets)]
        w = torch.randn(hl, device=dev, generator=g).to(DT)
        w_full = torch.randn(hidden, device=dev, generator=g).to(DT)
        stats_fixed = torch.rand(world, t_rows, device=dev) * hidden
        st = [torch.rand(t_rows, device=dev) for _ in range(sets)]

        def gather_then_norm(x):
            buf = torch.empty(world, t_rows, hl, dtype=DT, device=dev)
            dist.all_gather_into_tensor(buf, x)
            full = buf.permute(1, 0, 2).reshape(t_rows, hidden)
            return rmsnorm_fwd(full, w_full, epsilon=EPS).y[:, rank * hl : (rank + 1) * hl]

        def torch_two_phase(x):
            s = x.float().pow(2).sum(-1)
            allst = torch.empty(world, t_rows, device=dev)
            dist.all_gather_into_tensor(allst, s)
            rs = torch.rsqrt(allst.sum(0) / hidden + EPS)
            return (x.float() * rs[:, None] * w.float()).to(DT)

        methods = {
            "local fused (pre_stats + post, no comm)": lambda i: (
                lambda: (pre_stats(xs[i]), post(xs[i], stats_fixed, w, epsilon=EPS, hidden_size=hidden))
            ),
            "stats all_gather alone": lambda i: lambda: gather_stats(st[i]),
            "fused two-phase (ours)": lambda i: lambda: distributed_rms_norm(xs[i], w, epsilon=EPS, hidden_size=hidden),
            "all_gather x then norm": lambda i: lambda: gather_then_norm(xs[i]),
            "unfused torch two-phase": lambda i: lambda: torch_two_phase(xs[i]),
        }
        res = {}
        for name, make in methods.items():
            dist.barrier()
            torch.cuda.synchronize()
            res[name] = graph_time(rotating(make, sets, calls), reps, before=pin)
        # the slowest rank decides
        tt = torch.tensor([res[k] for k in methods], device=dev)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        rows.append((t_rows, dict(zip(methods, tt.tolist()))))
        del xs
    if rank == 0:
        names = list(rows[0][1])
        print(
            f"\n## DISTRIBUTED on {world} x {torch.cuda.get_device_name(0)}, H = {hidden} sharded {world} ways, bf16, NCCL, CUDA-graph replay (us, max over ranks)"
        )
        print("| T | " + " | ".join(names) + " | fused / (local + gather) | gather-then-norm / fused |")
        print("|" + "---|" * (len(names) + 3))
        for t_rows, r in rows:
            fused = r["fused two-phase (ours)"]
            bound = r["local fused (pre_stats + post, no comm)"] + r["stats all_gather alone"]
            print(
                f"| {t_rows} | "
                + " | ".join(f"{r[k] * 1e6:.1f}" for k in names)
                + f" | {fused / bound:.2f} | {r['all_gather x then norm'] / fused:.2f}x |"
            )
    dist.destroy_process_group()


def bench_distributed(reps: int, world: int = 0) -> None:
    import socket

    import torch.multiprocessing as mp

    world = min(world or torch.cuda.device_count(), torch.cuda.device_count())
    if world < 2:
        raise SystemExit("the distributed section needs 2 GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_dist_worker, args=(world, port, reps), nprocs=world, join=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--distributed", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--single", action="store_true", help="the single-GPU tables (default when no section is named)")
    ap.add_argument("--world", type=int, default=0, help="distributed: GPUs to use (default: every GPU)")
    ap.add_argument(
        "--sweep-split",
        action="store_true",
        help="split-kernel launch shapes: long rows, and the decode backward in one step",
    )
    ap.add_argument(
        "--sweep-rows",
        action="store_true",
        help="forward rows-kernel launch shapes at the mid-size shapes, beside Liger and QuACK",
    )
    ap.add_argument(
        "--sweep-long",
        action="store_true",
        help="long-row launch shapes against each other (split vs looped forward, split vs cols backward)",
    )
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="single-GPU tables: interleaved rounds, the median reported")
    ap.add_argument(
        "--shapes",
        default=None,
        help="comma-separated MxN for the single-GPU tables (default: all of SHAPES) or the --sweep",
    )
    ap.add_argument("--peers", default="eager,compile,liger,quack", help="comma-separated peers to time, or 'none'")
    a = ap.parse_args()
    shapes = SHAPES if a.shapes is None else [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")]
    wanted = set() if a.peers == "none" else set(a.peers.split(","))
    if not torch.cuda.is_available():
        raise SystemExit("the benchmark needs a CUDA GPU")
    if a.sweep:
        sweep(a.reps, None if a.shapes is None else shapes)
    if a.sweep_long:
        sweep_long(a.reps)
    if a.sweep_split:
        sweep_split(a.reps)
    if a.sweep_rows:
        sweep_rows(a.reps)
    if a.single or not (a.sweep or a.sweep_long or a.sweep_split or a.sweep_rows or a.distributed):
        bench_single(a.reps, shapes, wanted, a.rounds)
    if a.distributed:
        bench_distributed(a.reps, a.world)


if __name__ == "__main__":
    main()
