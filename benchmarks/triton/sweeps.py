"""Launch-shape sweeps of the Triton kernels on CUDA, the measurements the launch rules (forward_config.py,
backward_config.py) come from: each candidate shape timed beside the default launch and the copy of the same bytes,
by the benchmark's method (benchmarks/triton/timing.py).

    python3 -m benchmarks.triton.rmsnorm --sweep         # decode and long-row forwards, rows backward
    python3 -m benchmarks.triton.rmsnorm --sweep-long    # split against looped forward, split against cols backward
    python3 -m benchmarks.triton.rmsnorm --sweep-rows    # rows-kernel forwards at mid sizes, beside Liger / QuACK
    python3 -m benchmarks.triton.rmsnorm --sweep-split   # split-kernel shapes, and the decode backward in one step
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
import triton

from benchmarks.triton.peers import load_peers
from benchmarks.triton.timing import DT, EPS, graph_time, log, n_sets, rotating
from programs.triton.backward import rmsnorm_bwd
from programs.triton.backward_config import STREAM_ROWS_N, BwdConfig, bwd_config, stream_config
from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import WIDE_CHUNK_N, FwdConfig, fwd_config
from programs.triton.kernels import forward_async, forward_cluster


def fwd_calls(xs, w, sets: int, calls: int, residuals=None, **kw) -> list[Callable[[], object]]:
    """Rotated forward calls over the input sets xs (with residuals[i] beside x_i if given), rmsnorm_fwd's kw."""

    def make(i):
        extra = {"residual": residuals[i]} if residuals is not None else {}
        return lambda: rmsnorm_fwd(xs[i], w, epsilon=EPS, **extra, **kw)

    return rotating(make, sets, calls)


def fwd_calls_with(xs, w, sets: int, calls: int, cfg) -> list[Callable[[], object]]:
    return fwd_calls(xs, w, sets, calls, config=cfg)


def bwd_calls(dys, xs, w, rss, sets: int, calls: int, **kw) -> list[Callable[[], object]]:
    return rotating(lambda i: lambda: rmsnorm_bwd(dys[i], xs[i], w, rss[i], **kw), sets, calls)


def bwd_calls_with(dys, xs, w, rss, sets: int, calls: int, cfg) -> list[Callable[[], object]]:
    return bwd_calls(dys, xs, w, rss, sets, calls, config=cfg)


def peer_calls(norm, xs, w, sets: int, calls: int) -> list[Callable[[], object]]:
    return rotating(lambda i: lambda: norm(xs[i], w), sets, calls)


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
        m, n, dev, words_ok=True, cluster_ok=forward_cluster.supported(dev), async_ok=forward_async.supported(dev)
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
    dev = torch.device("cuda:0")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    g = torch.Generator(device=dev).manual_seed(0)

    def report(kind, m, n, base, default_cfg, t_default, res):
        res.sort(key=lambda r: r[0])
        print(
            f"SWEEP {kind} {m}x{n}: copy-equiv {base * 1e6:.2f}us; default {default_cfg} {t_default * 1e6:.2f}us "
            f"({100 * base / t_default:.0f}%)"
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
        mk = functools.partial(fwd_calls_with, xs, w, sets, calls)
        td = graph_time(fwd_calls(xs, w, sets, calls), reps)
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
        mk = functools.partial(bwd_calls_with, dys, xs, w, rss, sets, calls)
        td = graph_time(bwd_calls(dys, xs, w, rss, sets, calls), reps)
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
        kw = {"plain": {}, "residual": {"residuals": rs_}, "fp8_row": {"dtype": torch.float8_e4m3fn}}
        for kind, cfg in cands:
            calls_of = functools.partial(fwd_calls, xs, w, sets, calls, config=cfg, **kw[kind])
            config_line(f"LONG fwd {m}x{n} {kind}", copy, calls_of, cfg, reps)
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
            calls_of = functools.partial(bwd_calls, dys, xs, w, rss, sets, calls, config=cfg)
            config_line(f"LONG bwd {m}x{n}", copy, calls_of, cfg, reps)
        del xs, dys, rss
        torch.cuda.empty_cache()


def sweep_rows(reps: int) -> None:
    """Forward launch shapes of the register-resident rows kernel at the mid-size shapes, beside the copy of the same
    bytes and Liger / QuACK when importable, in one run (the GPU kinds differ)."""
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
            calls_of = functools.partial(fwd_calls, xs, w, sets, calls, config=cfg)
            config_line(f"ROWS fwd {m}x{n}", copy, calls_of, cfg or f"default {default_fwd(m, n, dev)}", reps)
        for name, norm in peers.items():
            config_line(f"ROWS fwd {m}x{n}", copy, functools.partial(peer_calls, norm, xs, w, sets, calls), name, reps)
        del xs
        torch.cuda.empty_cache()


def sweep_split(reps: int) -> None:
    """Split-kernel launch shapes (rows cut over co-resident programs): long rows forward and backward, and the
    decode backward with every row in one step (columns over programs, dweight final without a second kernel), each
    beside the default config and the copy of the same bytes, in one run."""
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
            calls_of = functools.partial(fwd_calls, xs, w, sets, calls, config=cfg)
            config_line(f"SPLIT fwd {m}x{n}", copy, calls_of, cfg or f"default {default_fwd(m, n, dev)}", reps)
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
            calls_of = functools.partial(bwd_calls, dys, xs, w, rss, sets, calls, config=cfg)
            config_line(f"SPLIT bwd {m}x{n}", copy, calls_of, cfg or f"default {bwd_config(m, n, dev)}", reps)
        del xs, dys, rss
        torch.cuda.empty_cache()
