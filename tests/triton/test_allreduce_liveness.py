"""Liveness of the fused all-reduce on GPUs (requires_multi_gpu): a stall must end as an error that names the call, not
as a process that never returns.

- A rank that makes a call its peers never make gives up polling after the communicator's stall_timeout_s, and the
  next call (or check_stall) raises CollectiveStall naming the strategy (every fused strategy).
- The benchmark's call sequence (benchmarks/triton/allreduce.py: every fused strategy at every swept shape at T =
  1, 8, 32, warm-up calls on the capture side stream, a CUDA graph of 10 calls replayed, the PDL pin before the
  replays), repeated; then a random sequence of calls (strategy, T, residual, launch shape, eager / side stream / graph,
  host delays). Every checked output is held bitwise to an eager call of the same strategy and shape on the same inputs
  (a call that took a stale or foreign word differs) and across ranks. Strategies differ in their reduction order, so
  they are not held to each other here (tests/triton/test_allreduce_rmsnorm.py holds every strategy to float64).
Each rank runs under a watchdog that prints the call it is in and exits the process when a call makes no progress.
LIVENESS_ROUNDS and LIVENESS_CALLS (environment) lengthen the sequences.
"""

import os
import random
import sys
import threading
import time

import pytest
import torch

from tests.triton.ranks import run_ranks, serve_rank

FP8 = torch.float8_e4m3fn
H = 8192
MODES = ("stall", "sequence")


class Watchdog:
    """Names the step in progress and ends the process (exit 3) when one step takes longer than `seconds`."""

    def __init__(self, rank: int, seconds: float):
        self.rank, self.seconds, self.step, self.since = rank, seconds, "start", time.monotonic()
        threading.Thread(target=self._watch, daemon=True).start()

    def at(self, step: str) -> None:
        self.step, self.since = step, time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            if time.monotonic() - self.since > self.seconds:
                print(f"rank {self.rank}: LIVENESS STALL in {self.step} after {self.seconds:.0f} s", flush=True)
                os._exit(3)


@pytest.mark.requires_multi_gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world", [2, 4], ids=["2_ranks", "4_ranks"])
def test_fused_liveness(world, mode, monkeypatch):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs, {torch.cuda.device_count()} present")
    monkeypatch.setenv("LIVENESS_MODE", mode)
    print(run_ranks(__name__, world, "nccl", timeout=600.0))


def stall_worker(rank, world, dist, dog):
    """Rank 0 makes one call alone, per strategy: it must give up within the bound and the next call must raise."""
    import programs.triton.allreduce.api as ar

    dev = torch.device("cuda", rank)
    x = torch.randn(4, H, device=dev).to(torch.bfloat16)
    for strategy in (s for s in ar.Strategy if s != ar.Strategy.NCCL):
        comm = ar.AllReduceRMSNormFP8(hidden_size=H, max_tokens=64, device=dev, stall_timeout_s=3.0)
        dog.at(f"{strategy.value}: a call on every rank")
        comm(x, strategy=strategy)
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            dog.at(f"{strategy.value}: a call on rank 0 alone, which must give up")
            start = time.monotonic()
            comm(x, strategy=strategy)
            torch.cuda.synchronize()
            waited = time.monotonic() - start
            with pytest.raises(ar.CollectiveStall, match=f"strategy {strategy.value} gave up"):
                comm(x, strategy=strategy)
            assert 2.0 < waited < 30.0, waited
            print(f"{strategy.value}: rank 0 gave up after {waited:.1f} s", flush=True)
        dog.at(f"{strategy.value}: barrier after the stall")
        dist.barrier()


def sequence_worker(rank, world, dist, dog):
    import programs.triton.allreduce.api as ar
    from programs.triton.allreduce.measurement import graph_time_us, sweep_shapes
    from programs.triton.timing import pin_launch_state

    dev = torch.device("cuda", rank)
    comm = ar.AllReduceRMSNormFP8(hidden_size=H, max_tokens=512, device=dev, stall_timeout_s=20.0)
    pin = pin_launch_state(dev)
    w = (1 + 0.1 * torch.randn(H, generator=torch.Generator().manual_seed(5))).to(dev, torch.bfloat16)
    sweep = [(1, 8), (1, 16), (2, 16)]
    checked = 0

    def agree(out, ref, what):
        """out bitwise equal to ref (an eager call of the same strategy and shape) and to every rank's out."""
        mine = torch.cat([out.y.view(torch.uint8).flatten(), out.scale.view(torch.uint8)])
        assert torch.equal(out.y.view(torch.uint8), ref.y.view(torch.uint8)), f"{what}: codes differ from an eager call"
        assert torch.equal(out.scale.view(torch.int32), ref.scale.view(torch.int32)), f"{what}: scales differ"
        every = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        assert all(torch.equal(e, every[0]) for e in every), f"{what}: ranks disagree"

    rounds = int(os.environ.get("LIVENESS_ROUNDS", "2"))
    for rnd in range(rounds):  # the benchmark's sequence (no residual), its warm-up, capture, pin and replays
        for t in (1, 8, 32):
            x = torch.randn(t, H, generator=torch.Generator().manual_seed(t + 7 * rank)).to(dev, torch.bfloat16)
            for strategy in (s for s in ar.Strategy if s != ar.Strategy.NCCL):
                for shape in sweep_shapes(sweep, world, t, strategy):
                    what = f"round {rnd} T={t} {strategy.value} shape {shape}"
                    dog.at(what)
                    dist.barrier()
                    outs = []

                    def call(s=strategy, shape=shape, x=x, outs=outs):
                        outs.append(comm(x, w, epsilon=1e-6, dtype=FP8, strategy=s, config=shape))

                    graph_time_us(call, None, 10, 3, pin)
                    torch.cuda.synchronize()
                    comm.check_stall()
                    ref = comm(x, w, epsilon=1e-6, dtype=FP8, strategy=strategy, config=shape)
                    agree(outs[-1], ref, what)
                    checked += 1
    rng = random.Random(11)  # the same sequence on every rank; host delays from a per-rank generator
    delay = random.Random(100 + rank)
    calls = int(os.environ.get("LIVENESS_CALLS", "200"))
    side = torch.cuda.Stream(dev)
    for k in range(calls):
        strategy = rng.choice([None, *(s for s in ar.Strategy if s != ar.Strategy.NCCL)])
        t = rng.choice([1, 2, 7, 8, 32, 33, 64, 128, 300, 512])
        if strategy == ar.Strategy.ONE_SHOT_FLAGS:
            t = min(t, ar.PUSH_MAX_TOKENS)
        warps = rng.choice([8, 16])
        res_on = rng.random() < 0.3
        how = rng.choice(["eager", "side", "graph"])
        what = f"random call {k}: {strategy} T={t} residual={res_on} warps {warps} {how}"
        dog.at(what)
        g = torch.Generator().manual_seed(1000 + k)
        x = torch.randn(t, H, generator=torch.Generator().manual_seed(k + 7 * rank)).to(dev, torch.bfloat16)
        res = torch.randn(t, H, generator=g).to(dev, torch.bfloat16) if res_on else None
        config = None if strategy is None else (1, warps)

        def one(x=x, res=res, s=strategy, config=config):
            return comm(x, w, epsilon=1e-6, residual=res, dtype=FP8, strategy=s, config=config)

        if delay.random() < 0.25:
            time.sleep(delay.random() * 0.01)
        if how == "eager":
            out = one()
        elif how == "side":
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = one()
            torch.cuda.current_stream().wait_stream(side)
        else:
            with torch.cuda.stream(side):
                side.wait_stream(torch.cuda.current_stream())
                one()  # warm-up outside the capture (a first call compiles)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = one()
            for _ in range(3):
                graph.replay()
        if k % 10 == 9 or how == "graph":
            torch.cuda.synchronize()
            comm.check_stall()
            ref = one()
            agree(out, ref, what)
            checked += 1
    torch.cuda.synchronize()
    comm.check_stall()
    print(f"rank {rank}: {checked} checked, {rounds} rounds of the benchmark's sequence, {calls} random calls")


def work(rank, world, backend):
    import torch.distributed as dist

    mode = os.environ.get("LIVENESS_MODE", "sequence")
    dog = Watchdog(rank, float(os.environ.get("LIVENESS_STALL_S", "60")))
    {"stall": stall_worker, "sequence": sequence_worker}[mode](rank, world, dist, dog)


if __name__ == "__main__":
    sys.exit(serve_rank(work, timeout_s=120))
