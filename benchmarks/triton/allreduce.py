"""Fused all-reduce + RMSNorm + FP8 against NCCL all_reduce + our fused RMSNorm/FP8 kernel and NCCL + torch, on W GPUs.

    torchrun --nproc-per-node 2 -m benchmarks.triton.allreduce [--tokens 1,8,32,128,512,2048,8192] [--hidden 8192]

World size comes from the launcher. Every method is timed as CUDA-graph replays of `--calls` back-to-back calls
(median over `--reps` replays, the slowest rank's median); NCCL inputs are re-copied between replays, untimed, since
all_reduce works in place. bf16 partials, FP8 e4m3 output with per-row scales. Every strategy of
allreduce/api.py (the fused ones, and nccl: NCCL reduce-scatter/all-gather around the fused norm) is timed at every T
its buffers hold, the fused ones with the best launch shape of a small sweep; "best" is the fastest of them and its
ratio against NCCL all_reduce + our fused norm/FP8 (the rows of allreduce.dispatch.DISPATCH come from it); then the
call as users make it (the dispatched strategy, default shape, reuse_x=True: x is dead after the call, as the
baseline's is, and nccl with a residual all-reduces in place on the baseline's copy), against NCCL + fused norm and
against the best strategy of the same row. KiB/rank is the payload T * H * 2 of every rank.
Where flashinfer imports, a last table times FlashInfer's all-reduce fusion on the same inputs (its patterns with a
bf16 norm, a static per-tensor FP8 scale and per-row FP8 scales, one-shot and two-shot; benchmarks/triton/
allreduce_peers.py), against our dispatched call; every output there, ours included, is first held to float64
(benchmarks/triton/reference.py's check_allreduce), and one that fails gets no ratio. Where it does not import, one
line says so and the rest is timed.
Where PDL runs, every timed replay starts in one launch state (benchmarks/triton/timing.py's pin_launch_state).
The timing, the launch shapes tried, the tables and the watchdog are benchmarks/triton/allreduce_measurement.py.
A rank that makes no progress for --stall-s seconds prints where it is (a start-up step, or the timed method: T,
strategy, launch shape) and keeps printing it, so a hang names its step instead of leaving a silent table. One timed
method takes seconds at most, its first compiles included.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from programs.log import STDLIB, logger

if STDLIB:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

from benchmarks.triton.allreduce_measurement import (  # noqa: E402
    Watchdog,
    graph_time_us,
    render,
    render_flashinfer,
    shape_str,
    sweep_shapes,
)
from benchmarks.triton.reference import check_allreduce, sample_rows  # noqa: E402
from benchmarks.triton.timing import pin_launch_state  # noqa: E402
from programs.triton.allreduce.api import AllReduceRMSNormFP8, Strategy, choose_strategy  # noqa: E402
from programs.triton.allreduce.workspace import (  # noqa: E402
    LAMPORT2_MAX_TOKENS,
    LAMPORT_MAX_TOKENS,
    PUSH_MAX_TOKENS,
    PUSH_PROGRAMS,
)
from programs.triton.forward import rmsnorm_fwd  # noqa: E402

FP8 = torch.float8_e4m3fn
EPS = 1e-6


def torch_norm_quant(x, weight, residual):
    """What users run without fused kernels: torch RMSNorm in fp32, then torch per-row FP8 quantization."""
    h = x.float()
    ro = None
    if residual is not None:
        ro = (h + residual.float()).to(x.dtype)
        h = ro.float()
    v = torch.nn.functional.rms_norm(h, (h.shape[-1],), weight.float(), EPS)
    scale = v.abs().amax(-1, keepdim=True) / 448.0
    recip = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    return (v * recip).clamp(-448.0, 448.0).to(FP8), scale, ro


def slowest(us: float) -> float:
    t = torch.tensor([us], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def copy_bandwidth(comm, world, rank, pin) -> tuple[float, float]:
    """GB/s (bytes read + written) of a local HBM copy and of a pull from the next rank's buffer over NVLink."""
    src_local = comm.bufs[rank].inp
    src_peer = comm.bufs[(rank + 1) % world].inp
    dst = torch.empty_like(src_local)
    out = []
    for src in (src_local, src_peer):
        dist.barrier()
        us = slowest(graph_time_us(lambda src=src: dst.copy_(src), None, calls=5, reps=10, pin=pin))
        nbytes = src.numel() * src.element_size()
        out.append((2 * nbytes if src is src_local else nbytes) / us / 1e3)
    return out[0], out[1]


def parse_args(argv=None):
    """The command line (the module docstring says what each table holds)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1,8,32,64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--residual-tokens", default="1,128,2048,8192", help="T of the second table (with a residual); '' skips it"
    )
    ap.add_argument("--sweep", default="1x8,1x16,2x16,4x32", help="fused launch shapes tried: BLOCK_Mxnum_warps")
    ap.add_argument(
        "--push-programs",
        default=str(PUSH_PROGRAMS),
        help="one_shot_flags grids tried (each on its own workspace: a workspace keeps one such grid)",
    )
    ap.add_argument("--torch-baseline", action="store_true", help="also time NCCL + torch norm/FP8 (unfused)")
    ap.add_argument("--no-flashinfer", action="store_true", help="leave FlashInfer's all-reduce fusion out")
    ap.add_argument("--table-file", default=None, help="also write the tables to this file (rank 0)")
    ap.add_argument("--stall-s", type=float, default=20.0, help="name a step still running after this long")
    return ap.parse_args(argv)


@dataclass
class Bench:
    """One rank's run: the options, its device, the workspaces (one a one_shot_flags grid), the pinned launch state and
    the watchdog that names a step making no progress."""

    args: argparse.Namespace
    dev: torch.device
    rank: int
    world: int
    sweep: list
    comm: AllReduceRMSNormFP8
    push_comms: dict
    pin: object
    watchdog: Watchdog
    fi: object = None  # allreduce_peers.FlashInferFusion, or None: FlashInfer is not timed

    def timed(self, fn, rst=None, label=""):
        """Microseconds a call, the slowest rank's median over CUDA-graph replays."""
        self.watchdog.arm(label)
        dist.barrier()
        us = slowest(graph_time_us(fn, rst, self.args.calls, self.args.reps, self.pin))
        self.watchdog.disarm()
        return us

    def table(self, token_list, with_res: bool) -> list[dict]:
        """The rows of one table; with a residual only the default launch shape is timed."""
        return [self.measure(t, with_res) for t in token_list]

    def measure(self, t: int, with_res: bool) -> dict:
        """One row of a table: every method at T = t."""
        dev, h, at = self.dev, self.args.hidden, f"T={t} residual={with_res}"
        g = torch.Generator(device=dev).manual_seed(1000 + t + 7 * self.rank)
        x = torch.randn(t, h, generator=g, device=dev).to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(h, generator=torch.Generator(device=dev).manual_seed(5), device=dev)).to(
            torch.bfloat16
        )
        res = (
            torch.randn(t, h, generator=torch.Generator(device=dev).manual_seed(6), device=dev).to(torch.bfloat16)
            if with_res
            else None
        )
        a = x.clone()

        def reset():
            a.copy_(x)

        r = {"T": t, "residual": with_res, "per_rank_kib": t * h * 2 / 1024}
        r["nccl"] = self.timed(lambda: dist.all_reduce(a), reset, f"{at} NCCL all_reduce")
        r["nccl+fused"] = self.timed(
            lambda: (dist.all_reduce(a), rmsnorm_fwd(a, w, epsilon=EPS, residual=res, dtype=FP8)),
            reset,
            f"{at} NCCL all_reduce + fused norm",
        )
        r["nccl+torch"] = (
            self.timed(lambda: (dist.all_reduce(a), torch_norm_quant(a, w, res)), reset, f"{at} NCCL + torch norm")
            if self.args.torch_baseline
            else None
        )
        r["times"] = {}
        flags = Strategy.ONE_SHOT_FLAGS
        caps = {flags: PUSH_MAX_TOKENS, Strategy.ONE_SHOT_LAMPORT: LAMPORT_MAX_TOKENS}
        caps[Strategy.TWO_SHOT_LAMPORT] = LAMPORT2_MAX_TOKENS
        for strategy in Strategy:
            if t > caps.get(strategy, t):
                continue
            best = None
            shapes = [None] if with_res else sweep_shapes(self.sweep, self.world, t, strategy)
            # nccl with a residual all-reduces in place (reuse_x), on the baseline's copy of x, re-copied untimed
            inplace = strategy == Strategy.NCCL and with_res
            for grid, c in self.push_comms.items() if strategy == flags else [(None, self.comm)]:
                for shape in shapes:
                    us = self.timed(
                        lambda c=c, s=strategy, shape=shape, src=a if inplace else x, ip=inplace: c(
                            src, w, epsilon=EPS, residual=res, dtype=FP8, strategy=s, config=shape, reuse_x=ip
                        ),
                        reset if inplace else None,
                        label=f"{at} {strategy.value} shape {shape_str(shape)} grid {grid or 'default'}",
                    )
                    if best is None or us < best[0]:
                        best = (us, shape_str(shape) + ("" if grid is None else f", {grid} programs"))
            r["times"][strategy] = best
        # dispatched, default shape, x reusable as the baseline's is (re-copied untimed where the strategy writes it)
        r["auto"] = choose_strategy(t, h, 2, self.world, residual=with_res, reuse_x=True)
        inplace = r["auto"] == Strategy.NCCL and with_res
        r["fused"] = self.timed(
            lambda: self.comm(a if inplace else x, w, epsilon=EPS, residual=res, dtype=FP8, reuse_x=True),
            reset if inplace else None,
            label=f"{at} dispatched {r['auto'].value}",
        )
        r["ours_passed"] = self.check_ours(r["auto"], a, x, w, res, inplace)
        if self.fi is not None:
            r["fi"] = self.measure_flashinfer(x, w, res, at)
        if self.rank == 0:
            logger.info(
                f"T={t} res={with_res}: "
                + ", ".join(
                    f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in r.items()
                    if k not in ("times", "fi")
                )
                + "; "
                + ", ".join(f"{s.value}={us:.1f} ({shape})" for s, (us, shape) in r["times"].items())
            )
        return r

    def exact_sums(self, x, rows):
        """The float64 sum of every rank's partial on `rows` (float64 all_reduce: exact for a few bf16 terms)."""
        sums = x[rows].double()
        dist.all_reduce(sums)
        return sums

    def nccl_sums(self, x, rows):
        """The bf16 sums the nccl strategy normalizes without a residual, made by the same NCCL calls on the same
        partial (reduce-scatter + all-gather, or all_reduce where T is not a multiple of the world size): from 3 ranks
        on NCCL rounds at every step of its reduction, so they are not the exact sum rounded once."""
        t = x.shape[0]
        if t % self.world:
            total = x.clone()
            dist.all_reduce(total)
        else:
            part = torch.empty(t // self.world, x.shape[1], dtype=x.dtype, device=x.device)
            dist.reduce_scatter_tensor(part, x)
            total = torch.empty_like(x)
            dist.all_gather_into_tensor(total, part)
        return total[rows].double()

    def check_ours(self, auto, a, x, w, res, inplace) -> bool:
        """Our dispatched call, as timed, held to float64; the nccl strategy to the bf16 sums NCCL delivered (in place:
        those its all_reduce left in `a`)."""
        rows = sample_rows(x.shape[0], x.device)
        if inplace:
            a.copy_(x)
        out = self.comm(a if inplace else x, w, epsilon=EPS, residual=res, dtype=FP8, reuse_x=True)
        if inplace:
            sums = a[rows].double()
        elif auto == Strategy.NCCL:
            sums = self.nccl_sums(x, rows)
        else:
            sums = self.exact_sums(x, rows)
        report = check_allreduce(
            out.y[rows],
            out.scale[rows],
            None if out.residual_out is None else out.residual_out[rows],
            sums,
            None if res is None else res[rows],
            w,
        )
        if self.rank == 0:
            logger.info(f"  check ours ({auto.value}): {report.summary()}")
        return report.passed

    def measure_flashinfer(self, x, w, res, at) -> dict:
        """FlashInfer's patterns on this row's inputs: {pattern key: {use_oneshot: (us or None, passed or None)}},
        each call checked against float64 before it is timed; one that raises is n/a (None, None)."""
        from benchmarks.triton import allreduce_peers as fip

        t = x.shape[0]
        rows = sample_rows(t, x.device)
        exact = self.exact_sums(x, rows)
        sums32 = x.float()
        dist.all_reduce(sums32)
        out = {}
        for key, p in fip.PATTERNS.items():
            bufs = fip.buffers(p, x, res is not None)
            if p.quant == "tensor":
                bufs["scale_factor"].copy_(fip.tensor_scale(sums32, res, w, EPS))
            out[key] = {}
            for one in fip.shots(t, self.world):
                label = f"{at} flashinfer {key} {fip.SHOTS[one]}"
                try:
                    self.watchdog.arm(label)
                    self.fi.call(p, x, w, res, EPS, bufs, one)
                    torch.cuda.synchronize(self.dev)
                    y, scale, ro = fip.outputs(p, bufs)
                    report = check_allreduce(
                        y[rows],
                        scale if scale is None or scale.numel() == 1 else scale[rows],
                        ro[rows],
                        exact,
                        None if res is None else res[rows],
                        w,
                        sum_dtype=torch.bfloat16,
                        norm_dtype=torch.bfloat16,
                    )
                    us = self.timed(
                        lambda p=p, bufs=bufs, one=one: self.fi.call(p, x, w, res, EPS, bufs, one), None, label
                    )
                except Exception as e:
                    self.watchdog.disarm()
                    torch.cuda.synchronize(self.dev)
                    if self.rank == 0:
                        logger.info(f"  {label}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
                    out[key][one] = (None, None)
                    continue
                if self.rank == 0:
                    logger.info(f"  {label}: {us:.1f} us, check {report.summary()}")
                out[key][one] = (us, report.passed)
        return out


def load_flashinfer(args, world, rank, max_tokens, hidden, dev):
    """(FlashInfer's fusion on a workspace for this run, its version) (collective), or (None, one line saying why it
    is not timed), or (None, None) with --no-flashinfer."""
    if args.no_flashinfer:
        return None, None
    try:
        import flashinfer
        import flashinfer.comm as fi_comm
    except Exception as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}" if str(e) else type(e).__name__
        return None, f"# FlashInfer's all-reduce fusion not timed: flashinfer does not import ({why})"
    from benchmarks.triton import allreduce_peers as fip

    why = fip.unusable(fi_comm, world)
    if why is not None:
        return None, f"# FlashInfer's all-reduce fusion not timed: {why}"
    fusion = fip.workspace(fi_comm, world, rank, max_tokens, hidden, torch.bfloat16, dev)
    return fusion, getattr(flashinfer, "__version__", "?")


def main():
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before any communicator or symmetric memory exists
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    args = parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    watchdog = Watchdog(int(os.environ.get("RANK", "0")), args.stall_s)
    watchdog.arm("start: process group")
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    world, rank = dist.get_world_size(), dist.get_rank()
    tokens = [int(t) for t in args.tokens.split(",")]
    res_tokens = [int(t) for t in args.residual_tokens.split(",")] if args.residual_tokens else []
    h = args.hidden
    sweep = [tuple(int(v) for v in s.split("x")) for s in args.sweep.split(",")]
    watchdog.arm("start: symmetric workspace")
    comm = AllReduceRMSNormFP8(hidden_size=h, max_tokens=max(tokens + res_tokens), dtype=torch.bfloat16, device=dev)
    push_comms = {
        g: comm
        if g == comm.push_programs
        else AllReduceRMSNormFP8(
            hidden_size=h, max_tokens=PUSH_MAX_TOKENS, dtype=torch.bfloat16, device=dev, push_programs=g
        )
        for g in (int(v) for v in args.push_programs.split(","))
    }
    pin = pin_launch_state(dev)
    watchdog.arm("start: copy bandwidth")
    hbm_gbs, nvl_gbs = copy_bandwidth(comm, world, rank, pin)
    nccl_version = ".".join(map(str, torch.cuda.nccl.version()))
    lines = [
        f"# {world}x {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, NCCL {nccl_version}, "
        f"H={h}, bf16 -> fp8 e4m3 + per-row scales, CUDA graphs ({args.calls} calls/graph, "
        f"median of {args.reps}, slowest rank)",
        f"# measured: local HBM copy {hbm_gbs:.0f} GB/s (read+write), pull from a peer over NVLink {nvl_gbs:.0f} GB/s",
    ]

    watchdog.arm("start: FlashInfer workspace")
    fi, fi_note = load_flashinfer(args, world, rank, max(tokens + res_tokens), h, dev)
    if fi is None and fi_note is not None and rank == 0:
        print(fi_note, flush=True)

    bench = Bench(args, dev, rank, world, sweep, comm, push_comms, pin, watchdog, fi)
    no_res = bench.table(tokens, False)
    lines += render(no_res, "\n## no residual (times in µs per call)", h, args.torch_baseline)
    with_res = bench.table(res_tokens, True) if res_tokens else []
    if res_tokens:
        lines += render(
            with_res, "\n## with residual (residual_out returned; default launch shape)", h, args.torch_baseline
        )
    if fi is not None:
        from benchmarks.triton import allreduce_peers as fip

        lines += render_flashinfer(no_res + with_res, list(fip.PATTERNS), fi_note)
        fip.close_all()
    elif fi_note is not None:
        lines.append(fi_note)
    if rank == 0:
        text = "\n".join(lines)
        print(text, flush=True)
        if args.table_file:
            Path(args.table_file).write_text(text + "\n")
    watchdog.disarm()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
