"""Liveness of the fused all-reduce's strategies on W GPUs: each (strategy, T, residual, warps) case runs as the
benchmark runs it (eager calls on the default stream, then on the capture side stream, then a CUDA graph of `--calls`
calls replayed `--reps` times), under a watchdog that names the case and ends the process (exit 3) when it makes no
progress; every case's last output is held bitwise to two_shot_pulled's at the same warps (the warps set the order of
the row's reductions, so other shapes may round a row's last bit differently).

    torchrun --nproc-per-node 2 -m benchmarks.triton.allreduce_liveness --strategies two_shot_lamport --tokens 1

Prints one line a case (rank 0): the median us a call of the replays (this rank's).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import torch
import torch.distributed as dist

from benchmarks.triton.allreduce_measurement import graph_time_us
from benchmarks.triton.timing import on_capture_stream
from programs.triton.allreduce.api import AllReduceRMSNormFP8, Strategy

FP8 = torch.float8_e4m3fn


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="one_shot_lamport,two_shot_lamport", help="names, comma-separated")
    ap.add_argument("--tokens", default="1,8,32")
    ap.add_argument("--residual", default="0", help="0, 1 or 0,1: without and/or with a residual")
    ap.add_argument("--warps", default="8,16")
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--max-tokens", type=int, default=0, help="workspace rows (0: the largest T)")
    ap.add_argument("--eager", type=int, default=6)
    ap.add_argument("--side", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=1, help="the whole list of cases, this many times")
    ap.add_argument("--stall-s", type=float, default=20.0)
    ap.add_argument("--stall-timeout-s", type=float, default=None, help="the API's bounded polling (None: default)")
    return ap.parse_args(argv)


def stall_exit(rank: int, label: str, seconds: float) -> threading.Timer:
    def fire():
        print(f"rank {rank}: STALL {label}: no progress after {seconds:.0f} s", file=sys.stderr, flush=True)
        os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


def main():
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    args = parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank()
    tokens = [int(t) for t in args.tokens.split(",")]
    h = args.hidden
    kw = {} if args.stall_timeout_s is None else {"stall_timeout_s": args.stall_timeout_s}
    comm = AllReduceRMSNormFP8(
        hidden_size=h, max_tokens=args.max_tokens or max(tokens), dtype=torch.bfloat16, device=dev, **kw
    )
    w = (1 + 0.1 * torch.randn(h, device=dev)).to(torch.bfloat16)
    lines = []
    for rnd in range(args.rounds):
        for strategy in (Strategy(s) for s in args.strategies.split(",")):
            for t in tokens:
                for res_on in (int(r) for r in args.residual.split(",")):
                    for warps in (int(v) for v in args.warps.split(",")):
                        label = f"round {rnd} {strategy.value} T={t} residual={bool(res_on)} 1x{warps}"
                        g = torch.Generator(device=dev).manual_seed(1000 + t + 7 * rank)
                        x = torch.randn(t, h, generator=g, device=dev).to(torch.bfloat16)
                        gr = torch.Generator(device=dev).manual_seed(6)
                        res = torch.randn(t, h, generator=gr, device=dev).to(torch.bfloat16) if res_on else None

                        def call(s=strategy, warps=warps, x=x, res=res):
                            return comm(x, w, epsilon=1e-6, residual=res, dtype=FP8, strategy=s, config=(1, warps))

                        dist.barrier()
                        timer = stall_exit(rank, label, args.stall_s)
                        for _ in range(args.eager):
                            out = call()
                        with on_capture_stream():
                            for _ in range(args.side):
                                out = call()
                        torch.cuda.synchronize()
                        us = graph_time_us(call, None, args.calls, args.reps) if args.reps else float("nan")
                        pulled = Strategy.TWO_SHOT_PULLED
                        ref = comm(x, w, epsilon=1e-6, residual=res, dtype=FP8, strategy=pulled, config=(1, warps))
                        torch.cuda.synchronize()
                        timer.cancel()
                        same = torch.equal(out.y.view(torch.uint8), ref.y.view(torch.uint8)) and torch.equal(
                            out.scale.view(torch.int32), ref.scale.view(torch.int32)
                        )
                        lines.append(f"{label}: {us:.2f} us{'' if same else '  MISMATCH against two_shot_pulled'}")
                        if rank == 0:
                            print(lines[-1], flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
