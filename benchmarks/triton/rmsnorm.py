"""RMSNorm benchmark on CUDA: forward/backward GB/s, % of the copy bandwidth measured in the same run, ratios to peers.

    python3 -m benchmarks.triton.rmsnorm                 # single-GPU tables (cuda:0)
    python3 -m benchmarks.triton.rmsnorm --tables fwd,residual --peers quack,flashinfer   # forward tables only
    python3 -m benchmarks.triton.rmsnorm --distributed   # two-phase distributed section on 2 GPUs (NCCL)
    python3 -m benchmarks.triton.rmsnorm --sweep         # launch-config sweep that fwd_config / bwd_config come from
    python3 -m benchmarks.triton.rmsnorm --sweep-long    # long-row launch shapes (split, looped, cols) side by side
    python3 -m benchmarks.triton.rmsnorm --sweep-rows    # forward rows-kernel launch shapes at mid sizes, beside peers
    python3 -m benchmarks.triton.rmsnorm --shapes 2048x65536,8192x8192 --peers none   # some shapes, no peers

Method (benchmarks/triton/timing.py): every timed call is captured in a CUDA graph of many calls over rotating input
sets whose total footprint is at least 3x the L2 (so neither launch overhead nor the cache is measured), replayed 15
times; time per call = median replay time / calls per graph. The single-GPU tables run every contender once, untimed
(all compiles done before any timing: a torch.compile run makes every later contender faster), then time each once a
round, in 3 interleaved rounds (the later ones shuffled), and report each one's median round. Where ours launches
with PDL (Hopper: back-to-back calls overlap) a second forward and a second backward table give ours launched
plainly, as the peers are, and every timing starts in one launch state: graph replays take 0.3 us a kernel less
(H100, 1 x 8192 copy 1.34 against 1.70 us, same bits) when the last eager launches on the stream included a PDL
launch than after several plain ones, so a tiny eager PDL launch right before the timed replays (`pin_launch_state`)
gives every contender the faster state. GB/s counts the fewest bytes: forward reads x and writes y; backward reads x
and dy and writes dx. `copy` is the faster of dst.copy_(x) (same shape) and a flat copy of the same bytes per call,
timed the same way. Peers: torch eager F.rms_norm, torch.compile of it (dynamic=False), Liger-Kernel, QuACK and
FlashInfer when importable (benchmarks/triton/peers.py; FlashInfer launches as its default, with PDL where the device
has it, and has no backward). The residual table times ours with residual= (read x and r, write y and x + r) beside
QuACK's residual forward and FlashInfer's in-place fused_add_rmsnorm (the same bytes); its copy moves those bytes.
Before any timing every contender's output on the first input set is held to the float64 reference by the project's
tolerance policy (benchmarks/triton/reference.py): a failed check prints FAIL beside its time or ratio. Progress goes
to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmarks.triton import sweeps
from benchmarks.triton.peers import FORWARD_ONLY, NORMALIZES_FP32_SUM, describe, load_peers, load_residual_peers
from benchmarks.triton.reference import SAMPLE_ROWS, check_forward, check_residual
from benchmarks.triton.timing import (
    DT,
    EPS,
    autograd_calls,
    graph_time,
    log,
    n_sets,
    pin_launch_state,
    rotating,
    timed_rounds,
)
from programs.triton.backward import rmsnorm_bwd
from programs.triton.forward import rmsnorm_fwd
from programs.triton.launch import pdl_supported
from tt_rmsnorm.accuracy import Report

# 1024 x 262144 first: measured last, even a plain copy of its bytes ran slower (2.7 TB/s)
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


TABLES = ("fwd", "residual", "bwd")
# peers that overwrite their inputs: timed on copies of them, so no other contender sees the changed values
IN_PLACE = frozenset({"flashinfer"})


def fmt_ratio(ours: float, other: float | None) -> str:
    return "n/a" if other is None else f"{other / ours:.2f}x"


def _failed(checks: dict[str, Report | None], name: str) -> bool:
    return checks.get(name) is not None and not checks[name].passed


def _check(name: str, run: Callable[[], Report]) -> Report | None:
    """A contender's float64 check, or None (logged) where it cannot run the shape: it is n/a in the tables too."""
    try:
        report = run()
    except Exception as e:
        log(f"  check {name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
        torch.cuda.synchronize()
        return None
    log(f"  check {name}: {report.summary()}")
    return report


@dataclass
class _Session:
    """What every shape of the single-GPU tables shares: the device, the peers and how to time."""

    dev: torch.device
    l2: int
    wanted: set[str]
    peers: dict[str, Callable]
    res_peers: dict[str, Callable]
    compiled_fwd: Callable
    compiled_fb: Callable
    pdl: bool
    pin: Callable[[], None] | None
    reps: int
    rounds: int

    @property
    def optional(self) -> set[str]:
        return {"eager", "compile", *self.peers}


def _inputs(s: _Session, m: int, n: int, g) -> tuple[list, torch.Tensor]:
    """(the input sets, the weight) at m x n: as many sets as the forward rotates over, which every table shares."""
    sets, _ = n_sets(2 * m * n * (torch.finfo(DT).bits // 8), s.l2)
    xs = [torch.randn(m, n, device=s.dev, generator=g).to(DT) for _ in range(sets)]
    return xs, torch.randn(n, device=s.dev, generator=g).to(DT)


def _time_forward(s: _Session, m: int, n: int, xs: list, w: torch.Tensor) -> tuple[int, dict, dict]:
    """(bytes a call, times by contender, float64 checks by contender) of the forward at m x n."""
    elt = torch.finfo(DT).bits // 8
    fbytes = 2 * m * n * elt
    sets, calls = n_sets(fbytes, s.l2)
    dst = [torch.empty_like(x) for x in xs]
    flat = [torch.empty(2 * m * n, dtype=DT, device=s.dev) for _ in range(sets)]
    runs = {
        "copy2d": lambda i: lambda: dst[i].copy_(xs[i]),
        "copyflat": lambda i: lambda: flat[i][m * n :].copy_(flat[i][: m * n]),
        "ours": lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS),
    }
    if "eager" in s.wanted:
        runs["eager"] = lambda i: lambda: F.rms_norm(xs[i], (n,), w, EPS)
    if "compile" in s.wanted:
        runs["compile"] = lambda i: lambda: s.compiled_fwd(xs[i], w)
    for name, norm in s.peers.items():
        runs[name] = lambda i, norm=norm: lambda: norm(xs[i], w)
    # FP8 row-scaled output (3 bytes/elem moved): reported for the record
    runs["ours_fp8"] = lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, dtype=torch.float8_e4m3fn)
    if s.pdl:  # ours launched as the peers that have no PDL are: the kernels alone, no overlap between calls
        runs["ours_nopdl"] = lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, enable_pdl=False)
    checks = {"ours": _check("ours", lambda: check_forward(rmsnorm_fwd(xs[0], w, epsilon=EPS).y, xs[0], w))}
    for name, norm in s.peers.items():
        checks[name] = _check(name, lambda norm=norm: check_forward(norm(xs[0], w), xs[0], w))
    t = timed_rounds(runs, sets, calls, s.reps, s.rounds, optional=s.optional, before=s.pin)
    t["copy"] = min(t["copy2d"], t["copyflat"])  # the faster copy of the same bytes is the ceiling
    log("  fwd " + " ".join(f"{k}={v * 1e6:.1f}us" for k, v in t.items() if v))
    return fbytes, t, checks


def _time_residual(s: _Session, m: int, n: int, g, xs: list, w: torch.Tensor) -> tuple[int, dict, dict]:
    """(bytes a call, times by contender, float64 checks by contender) of the forward with a residual at m x n:
    read x and r, write y and x + r."""
    elt = torch.finfo(DT).bits // 8
    rbytes = 4 * m * n * elt
    rsets, _ = n_sets(rbytes, s.l2)
    rsets = min(rsets, len(xs))
    rcalls = max(rsets, 8)
    rs = [torch.randn(m, n, device=s.dev, generator=g).to(DT) for _ in range(rsets)]
    # a copy of the same bytes: read 2*M*N elements, write 2*M*N elements
    k = 2 * m * n
    srcs = [torch.randn(k, device=s.dev, generator=g).to(DT) for _ in range(rsets)]
    dsts = [torch.empty(k, dtype=DT, device=s.dev) for _ in range(rsets)]
    runs = {
        "copy": lambda i: lambda: dsts[i].copy_(srcs[i]),
        "ours": lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, residual=rs[i]),
    }
    if s.pdl:
        runs["ours_nopdl"] = lambda i: lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, residual=rs[i], enable_pdl=False)
    for name, norm in s.res_peers.items():
        if name in IN_PLACE:
            own = [(xs[i].clone(), rs[i].clone()) for i in range(rsets)]
            runs[name] = lambda i, norm=norm, own=own: lambda: norm(own[i][0], own[i][1], w)
        else:
            runs[name] = lambda i, norm=norm: lambda: norm(xs[i], rs[i], w)

    def ours_check() -> Report:
        out = rmsnorm_fwd(xs[0], w, epsilon=EPS, residual=rs[0])
        return check_residual(out.y, out.residual_out, xs[0], rs[0], w, rounded=True)

    checks = {"ours": _check("ours residual", ours_check)}
    for name, norm in s.res_peers.items():
        rounded = name not in NORMALIZES_FP32_SUM

        def peer_check(norm=norm, rounded=rounded) -> Report:
            y, h_out = norm(xs[0].clone(), rs[0].clone(), w)
            return check_residual(y, h_out, xs[0], rs[0], w, rounded=rounded)

        checks[name] = _check(f"{name} residual", peer_check)
    t = timed_rounds(runs, rsets, rcalls, s.reps, s.rounds, optional=set(s.res_peers), before=s.pin)
    log("  residual " + " ".join(f"{k}={v * 1e6:.1f}us" for k, v in t.items() if v))
    return rbytes, t, checks


def _time_backward(s: _Session, m: int, n: int, g, xs: list, w: torch.Tensor) -> tuple[int, dict]:
    """(bytes a call, times by contender) of the backward at m x n: read x, dy; write dx."""
    elt = torch.finfo(DT).bits // 8
    bbytes = 3 * m * n * elt
    bsets, _ = n_sets(bbytes, s.l2)
    bsets = min(bsets, len(xs))
    bcalls = max(bsets, 8)
    dys = [torch.randn(m, n, device=s.dev, generator=g).to(DT) for _ in range(bsets)]
    rss = [rmsnorm_fwd(xs[i], w, epsilon=EPS, return_rsigma=True).rsigma for i in range(bsets)]
    # a copy of the same bytes: read 1.5*M*N elements, write 1.5*M*N elements
    k = 3 * m * n // 2
    srcs = [torch.randn(k, device=s.dev, generator=g).to(DT) for _ in range(bsets)]
    dsts = [torch.empty(k, dtype=DT, device=s.dev) for _ in range(bsets)]
    runs = {
        "copy": lambda i: lambda: dsts[i].copy_(srcs[i]),
        "ours": lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i]),
    }
    if s.pdl:
        runs["ours_nopdl"] = lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], enable_pdl=False)
    if "eager" in s.wanted:
        runs["eager"] = autograd_calls(lambda a, b: F.rms_norm(a, (n,), b, EPS), xs, w, dys)
    if "compile" in s.wanted:
        runs["compile"] = autograd_calls(s.compiled_fb, xs, w, dys)
    for name, norm in s.peers.items():
        if name not in FORWARD_ONLY:
            runs[name] = autograd_calls(norm, xs, w, dys)
    tb = timed_rounds(runs, bsets, bcalls, s.reps, s.rounds, optional=s.optional, before=s.pin)
    log("  bwd " + " ".join(f"{k}={v * 1e6:.1f}us" for k, v in tb.items() if v))
    return bbytes, tb


def _print_table(title: str, rows: list, ours: str, names: list[str], fp8_col: bool) -> None:
    print(f"\n## {title}")
    head = ["M x N", "copy GB/s", "ours us", "ours GB/s", "% of copy"] + [f"vs {p}" for p in names]
    if fp8_col:
        head.append("fp8-row us")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for m, n, nbytes, t, checks in rows:
        cells = [
            f"{m} x {n}",
            f"{nbytes / t['copy'] / 1e9:.0f}",
            f"{t[ours] * 1e6:.1f}" + (" FAIL" if _failed(checks, "ours") else ""),
            f"{nbytes / t[ours] / 1e9:.0f}",
            f"{100 * t['copy'] / t[ours]:.0f}%",
        ]
        cells += [fmt_ratio(t[ours], t.get(p)) + (" FAIL" if _failed(checks, p) else "") for p in names]
        if fp8_col:
            cells.append(f"{t['ours_fp8'] * 1e6:.1f}")
        print("| " + " | ".join(cells) + " |")


def _print_single(s: _Session, fwd_rows: list, res_rows: list, bwd_rows: list) -> None:
    import triton

    props = torch.cuda.get_device_properties(s.dev)
    peers = [p for p in ("liger", "quack", "flashinfer") if p in s.peers or p in s.res_peers]
    names = [p for p in ("eager", "compile") if p in s.wanted] + [p for p in peers if p in s.peers]
    print(
        f"\n# {props.name}, {props.multi_processor_count} SMs, L2 {s.l2 >> 20} MiB; torch {torch.__version__}, "
        f"Triton {triton.__version__}; bf16; CUDA-graph replay, rotated inputs"
    )
    if peers:
        print(f"# peers: {describe(peers, s.dev)}")
    if s.pdl:
        print(
            "# ours launched with PDL (its default here): back-to-back calls overlap one's launch with the other's "
            "tail; copy, torch, Liger and QuACK launch plainly, FlashInfer with PDL (its default here)"
        )
        print(
            "# every timing starts right after one eager PDL launch (pin_launch_state): graph replays then run in the "
            "faster of two launch states seen on H100"
        )
    tables = []
    if fwd_rows:
        tables.append(("FORWARD (read x + write y)", fwd_rows, "ours", names, True))
        if s.pdl:
            tables.append(("FORWARD, ours without PDL (enable_pdl=False)", fwd_rows, "ours_nopdl", names, False))
    res_names = [p for p in peers if p in s.res_peers]
    if res_rows:
        title = "FORWARD WITH RESIDUAL (read x, r + write y, x + r; FlashInfer's fused_add_rmsnorm in place)"
        tables.append((title, res_rows, "ours", res_names, False))
        if s.pdl:
            tables.append(("FORWARD WITH RESIDUAL, ours without PDL", res_rows, "ours_nopdl", res_names, False))
    bwd_names = [p for p in names if p not in FORWARD_ONLY]
    if bwd_rows:
        tables.append(("BACKWARD (read x, dy + write dx; dgamma included in time)", bwd_rows, "ours", bwd_names, False))
        if s.pdl:
            tables.append(("BACKWARD, ours without PDL (enable_pdl=False)", bwd_rows, "ours_nopdl", bwd_names, False))
    for title, rows, ours, table_names, fp8_col in tables:
        _print_table(title, rows, ours, table_names, fp8_col)
    print(
        "\n(vs X = X's time / ours: > 1 means ours is faster; n/a = the peer cannot run the shape; FAIL = the output "
        "failed its float64 check)"
    )
    print("\n## times in us (same run)")
    for title, rows in (("fwd", fwd_rows), ("residual", res_rows), ("bwd", bwd_rows)):
        for m, n, _, t, _ in rows:
            print(f"{title} {m}x{n}: " + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in t.items() if v is not None))
    print(
        f"\n## float64 checks (tt_rmsnorm.accuracy, bf16 policy; at most {SAMPLE_ROWS} rows a shape; residual: "
        f"ours against x + r rounded to bf16, {', '.join(sorted(NORMALIZES_FP32_SUM))} against the exact sum, as each "
        "kernel normalizes)"
    )
    for title, rows in (("fwd", fwd_rows), ("residual", res_rows)):
        for m, n, _, _, checks in rows:
            cells = [
                f"{k} " + ("n/a" if r is None else f"{r.headline()} {'PASS' if r.passed else 'FAIL'}")
                for k, r in checks.items()
            ]
            print(f"{title} {m}x{n}: " + ", ".join(cells))


def bench_single(
    reps: int, shapes: list[tuple[int, int]], wanted: set[str], rounds: int = 3, tables: tuple[str, ...] = TABLES
) -> None:
    dev = torch.device("cuda:0")
    peers = load_peers(wanted) if "fwd" in tables or "bwd" in tables else {}
    res_peers = load_residual_peers(wanted) if "residual" in tables else {}
    for knob in ("cache_size_limit", "recompile_limit"):  # one compiled graph per shape, 9 shapes
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled_fwd = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False)
    compiled_fb = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS), dynamic=False)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    pdl = pdl_supported(dev)
    s = _Session(dev, l2, wanted, peers, res_peers, compiled_fwd, compiled_fb, pdl, pin_launch_state(dev), reps, rounds)
    fwd_rows, res_rows, bwd_rows = [], [], []
    for m, n in shapes:
        log(f"shape {m}x{n}")
        g = torch.Generator(device=dev).manual_seed(0)
        xs, w = _inputs(s, m, n, g)
        if "fwd" in tables:
            fbytes, t, checks = _time_forward(s, m, n, xs, w)
            fwd_rows.append((m, n, fbytes, t, checks))
        if "residual" in tables:
            rbytes, tr, rchecks = _time_residual(s, m, n, g, xs, w)
            res_rows.append((m, n, rbytes, tr, rchecks))
        if "bwd" in tables:
            bbytes, tb = _time_backward(s, m, n, g, xs, w)
            bwd_rows.append((m, n, bbytes, tb, {}))
        del xs
        torch.cuda.empty_cache()
    _print_single(s, fwd_rows, res_rows, bwd_rows)


# ---------------------------------------------------------------------------------------------------------------------
# distributed section


def _time_distributed(rank: int, world: int, t_rows: int, hidden: int, reps: int, pin) -> dict[str, float]:
    """Seconds a call of each method at t_rows rows of hidden columns sharded `world` ways, the slowest rank's."""
    import torch.distributed as dist

    from programs.triton.distributed import distributed_rms_norm, gather_stats, post, pre_stats

    dev = torch.device(f"cuda:{rank}")
    hl = hidden // world
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
    return dict(zip(methods, tt.tolist(), strict=True))


def _dist_worker(rank: int, world: int, port: int, reps: int) -> None:
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=dev)
    hidden = 8192
    pin = pin_launch_state(dev)  # as the single-GPU tables: every timing starts in one launch state
    rows = [(t_rows, _time_distributed(rank, world, t_rows, hidden, reps, pin)) for t_rows in (32, 2048, 32768)]
    if rank == 0:
        names = list(rows[0][1])
        print(
            f"\n## DISTRIBUTED on {world} x {torch.cuda.get_device_name(0)}, H = {hidden} sharded {world} ways, bf16, "
            "NCCL, CUDA-graph replay (us, max over ranks)"
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
    ap.add_argument(
        "--peers", default="eager,compile,liger,quack,flashinfer", help="comma-separated peers to time, or 'none'"
    )
    ap.add_argument(
        "--tables", default=",".join(TABLES), help=f"single-GPU tables to print, comma-separated among {TABLES}"
    )
    a = ap.parse_args()
    shapes = SHAPES if a.shapes is None else [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")]
    wanted = set() if a.peers == "none" else set(a.peers.split(","))
    tables = tuple(a.tables.split(","))
    if not set(tables) <= set(TABLES):
        raise SystemExit(f"--tables takes {TABLES}, got {a.tables}")
    if not torch.cuda.is_available():
        raise SystemExit("the benchmark needs a CUDA GPU")
    if a.sweep:
        sweeps.sweep(a.reps, None if a.shapes is None else shapes)
    if a.sweep_long:
        sweeps.sweep_long(a.reps)
    if a.sweep_split:
        sweeps.sweep_split(a.reps)
    if a.sweep_rows:
        sweeps.sweep_rows(a.reps)
    if a.single or not (a.sweep or a.sweep_long or a.sweep_split or a.sweep_rows or a.distributed):
        bench_single(a.reps, shapes, wanted, a.rounds, tables)
    if a.distributed:
        bench_distributed(a.reps, a.world)


if __name__ == "__main__":
    main()
