"""Liveness of the fused all-reduce on GPUs (requires_multi_gpu): a stall must end as an error that names the call, not
as a process that never returns, and no sequence of calls may stall or take a stale or foreign word.

- A rank that makes a call its peers never make gives up polling after the communicator's stall_timeout_s, and the
  next call (or check_stall) raises CollectiveStall naming the strategy (every fused strategy).
- The benchmark's call sequence (benchmarks/triton/allreduce.py at T = 1, 8, 32: NCCL all_reduce + the fused norm,
  every strategy at every swept shape, then the dispatched call; each as warm-up calls on the capture side stream, a
  CUDA graph of 10 calls, the PDL pin and replays), LIVENESS_ROUNDS times.
- A random sequence of LIVENESS_CALLS calls: every strategy and the dispatched one, T from 1 to the workspace's
  maximum (log-uniform, within the strategy's buffers), launch shapes, a residual or not, eager, on a side stream or a
  captured graph replayed, in bursts enqueued without a host sync, with random host delays and GPU-side delays on each
  rank; now and then the communicator is closed and a new one (another maximum) created.
Every result is held to float64 (tests/triton/ref64.py, tt_rmsnorm.accuracy's policy; the nccl strategy to float64 of
the sums the same NCCL calls give) by one rank (call i by rank i % W) and to every other rank's bits (FP8 codes, scales,
residual_out); the benchmark's fused calls also to an eager call of the same strategy and shape, bit for bit.
Each rank runs under a watchdog that prints the step it is in and exits the process when a step makes no progress.
LIVENESS_ROUNDS and LIVENESS_CALLS (environment) set the lengths.
"""

import math
import os
import random
import sys
import threading
import time

import pytest
import torch

from tests.triton.allreduce_checks import check, expected, nccl_sums, partials, same_bits_on_every_rank, takes_nccl
from tests.triton.ranks import run_ranks, serve_rank

FP8 = torch.float8_e4m3fn
H = 8192
MODES = ("stall", "sequence")
# rows whose FP8 codes a check compares in a call of more rows (scales and residual_out: every row)
CODE_ROWS = 64


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
    rounds, calls = int(os.environ.get("LIVENESS_ROUNDS", "2")), int(os.environ.get("LIVENESS_CALLS", "200"))
    print(run_ranks(__name__, world, "nccl", timeout=300.0 + 20.0 * rounds + 0.25 * calls))


def fused(ar):
    return [s for s in ar.Strategy if s != ar.Strategy.NCCL]


def stall_worker(rank, world, dist, dog):
    """Rank 0 makes one call alone, per strategy: it must give up within the bound and the next call must raise."""
    import programs.triton.allreduce.api as ar

    dev = torch.device("cuda", rank)
    x = torch.randn(4, H, device=dev).to(torch.bfloat16)
    for strategy in fused(ar):
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


class Verifier:
    """Holds a call's result to float64 (one rank a call, in turn) and to every rank's bits; every rank verifies the
    same calls in the same order (the checks make collective calls)."""

    def __init__(self, rank, world, dist):
        self.rank, self.world, self.dist, self.count = rank, world, dist, 0
        self.rows = random.Random(7)  # the same rows on every rank

    def __call__(self, comm, strategy, out, xs, w, res, eps, what, sums=None):
        """sums: the sums an NCCL call gave, where the call was not the communicator's (the benchmark's baseline)."""
        t = xs[0].shape[0]
        bf16_sums = sums is not None or takes_nccl(comm, strategy, xs, res)
        if sums is None and bf16_sums:
            sums = nccl_sums(xs[self.rank], self.dist, self.world, res is not None)
        code_rows = None
        if t > CODE_ROWS:
            code_rows = torch.tensor(sorted({0, t - 1, *self.rows.sample(range(t), CODE_ROWS - 2)}))
        if self.count % self.world == self.rank:
            exp = expected(xs, w, res, epsilon=eps, weight_offset=0.0, scale_ub=math.inf, sums=sums)
            check(out, exp, context=what, bf16_sums=bf16_sums, code_rows=code_rows)
        same_bits_on_every_rank(out, self.dist, self.world, what)
        self.count += 1


def benchmark_sequence(rank, world, dist, dog, verify, rounds):
    """The benchmark's calls at T = 1, 8, 32 (benchmarks/triton/allreduce.py: Bench.measure), each timed method as
    graph_time_us runs it; every fused call's last output also held to an eager call of the same strategy and shape."""
    import programs.triton.allreduce.api as ar
    from benchmarks.triton.allreduce_measurement import graph_time_us, sweep_shapes
    from benchmarks.triton.timing import pin_launch_state
    from programs.triton.forward import rmsnorm_fwd

    dev = torch.device("cuda", rank)
    comm = ar.AllReduceRMSNormFP8(hidden_size=H, max_tokens=32, device=dev, stall_timeout_s=20.0)
    pin = pin_launch_state(dev)
    sweep = [(1, 8), (1, 16), (2, 16)]
    for rnd in range(rounds):
        for t in (1, 8, 32):
            xs, w, _ = partials(world, t, H, seed=100 * rnd + t, device=dev)
            a = xs[rank].clone()
            methods = [("NCCL all_reduce + fused norm", None, None)]
            methods += [(s.value, s, shape) for s in ar.Strategy for shape in sweep_shapes(sweep, world, t, s)]
            methods += [("dispatched", None, "dispatched")]
            for label, strategy, shape in methods:
                what = f"round {rnd} T={t} {label} shape {shape}"
                dog.at(what)
                dist.barrier()
                outs = []

                if shape is None and strategy is None:  # the baseline, in place on its own copy of x
                    b = xs[rank].clone()

                    def reset(b=b, x=xs[rank]):
                        b.copy_(x)

                    def call(b=b, w=w):
                        dist.all_reduce(b)
                        rmsnorm_fwd(b, w, epsilon=1e-6, dtype=FP8)

                    graph_time_us(call, reset, 10, 3, pin)  # a replay all-reduces b 10 times: one call checked
                    torch.cuda.synchronize()
                    reset()
                    dist.all_reduce(b)
                    out = rmsnorm_fwd(b, w, epsilon=1e-6, dtype=FP8)
                    verify(comm, None, out, xs, w, None, 1e-6, what, sums=b)
                    continue
                s_, shape_ = (None, None) if shape == "dispatched" else (strategy, shape)

                def call(a=a, w=w, s=s_, shape=shape_, outs=outs):
                    outs.append(comm(a, w, epsilon=1e-6, dtype=FP8, strategy=s, config=shape, reuse_x=True))

                graph_time_us(call, None, 10, 3, pin)  # no residual: no strategy writes a
                torch.cuda.synchronize()
                comm.check_stall()
                verify(comm, s_, outs[-1], xs, w, None, 1e-6, what)
                if s_ in fused(ar):
                    ref = comm(a, w, epsilon=1e-6, dtype=FP8, strategy=s_, config=shape_)
                    torch.cuda.synchronize()
                    assert torch.equal(outs[-1].y.view(torch.uint8), ref.y.view(torch.uint8)), f"{what}: codes differ"
                    assert torch.equal(outs[-1].scale.view(torch.int32), ref.scale.view(torch.int32)), what
    comm.close()


def log_uniform(rng, hi):
    """An integer in [1, hi], its logarithm uniform."""
    return min(hi, int(math.exp(rng.uniform(0.0, math.log(hi + 1)))))


def random_sequence(rank, world, dist, dog, verify, calls):
    """Bursts of random calls enqueued without a host sync, then every call of the burst verified."""
    import programs.triton.allreduce.api as ar
    from programs.triton.allreduce.dispatch import PUSHED
    from programs.triton.allreduce.workspace import LAMPORT2_MAX_TOKENS, LAMPORT_MAX_TOKENS, PUSH_MAX_TOKENS

    dev = torch.device("cuda", rank)
    rng = random.Random(11)  # the same sequence on every rank; delays from a per-rank generator
    delay = random.Random(100 + rank)
    side = torch.cuda.Stream(dev)
    caps = {ar.Strategy.ONE_SHOT_FLAGS: PUSH_MAX_TOKENS, ar.Strategy.ONE_SHOT_LAMPORT: LAMPORT_MAX_TOKENS}
    caps[ar.Strategy.TWO_SHOT_LAMPORT] = LAMPORT2_MAX_TOKENS
    shapes = {s: [None, (1, 8), (1, 16)] for s in PUSHED}
    shapes[ar.Strategy.TWO_SHOT_PULLED] = [None, (1, 8), (1, 16), (2, 16)]

    def new_comm(max_tokens):
        dog.at(f"a communicator of {max_tokens} rows")
        return ar.AllReduceRMSNormFP8(hidden_size=H, max_tokens=max_tokens, device=dev, stall_timeout_s=20.0)

    comm, made, k = new_comm(2048), 1, 0
    while k < calls:
        if rng.random() < 0.03:
            dog.at(f"closing a communicator before call {k}")
            comm.close()
            comm = new_comm(rng.choice([2048, 2048, 1030, 300, 64]))
            made += 1
        issued, graphs, k0 = [], [], k
        for _ in range(rng.randint(1, 6)):
            strategy = rng.choice([None, *ar.Strategy])
            t = log_uniform(rng, min(comm.max_tokens, caps.get(strategy, comm.max_tokens)))
            res_on, eps = rng.random() < 0.4, rng.choice([1e-6, 1e-5])
            shape = rng.choice(shapes.get(strategy, [None]))
            how = rng.choice(["eager", "side", "graph"])
            what = f"random call {k}: {strategy} T={t} residual={res_on} shape {shape} {how}"
            dog.at(what)
            xs, w, res = partials(world, t, H, seed=1000 + k, device=dev)
            res = res if res_on else None
            x0 = xs[rank]
            if delay.random() < 0.2:
                time.sleep(delay.random() * 0.005)
            if delay.random() < 0.1:
                torch.cuda._sleep(delay.randint(1000, 200000))  # this rank's stream reaches the call later

            def one(x, comm=comm, w=w, res=res, s=strategy, shape=shape, eps=eps):  # x dead after the call (reuse_x)
                return comm(x, w, epsilon=eps, residual=res, dtype=FP8, strategy=s, config=shape, reuse_x=True)

            if how == "eager":
                issued.append((strategy, one(x0.clone()), xs, w, res, eps, what))
            elif how == "side":
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    out = one(x0.clone())
                torch.cuda.current_stream().wait_stream(side)
                issued.append((strategy, out, xs, w, res, eps, what))
            else:
                side.wait_stream(torch.cuda.current_stream())  # x0 was drawn on the current stream
                with torch.cuda.stream(side):
                    warm = one(x0.clone())  # outside the capture (a first call compiles)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                issued.append((strategy, warm, xs, w, res, eps, what + " (warm-up)"))
                x = x0.clone()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    x.copy_(x0)  # the nccl strategy may all-reduce x in place: every replay starts from the partial
                    out = one(x)
                for _ in range(3):
                    graph.replay()
                graphs.append(graph)  # alive until its replays ended: its pool holds the call's temporaries
                issued.append((strategy, out, xs, w, res, eps, what))
            k += 1
        torch.cuda.synchronize()
        comm.check_stall()
        if k // 500 != k0 // 500:
            print(f"rank {rank}: {k} random calls", flush=True)
        for strategy, out, xs, w, res, eps, what in issued:
            dog.at(f"verifying {what}")
            verify(comm, strategy, out, xs, w, res, eps, what)
    comm.close()
    return made


def sequence_worker(rank, world, dist, dog):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # the ranks share the host's cores
    verify = Verifier(rank, world, dist)
    rounds, calls = int(os.environ.get("LIVENESS_ROUNDS", "2")), int(os.environ.get("LIVENESS_CALLS", "200"))
    start = time.monotonic()
    benchmark_sequence(rank, world, dist, dog, verify, rounds)
    mid, checked = time.monotonic(), verify.count
    made = random_sequence(rank, world, dist, dog, verify, calls)
    print(
        f"rank {rank}: {rounds} rounds of the benchmark's sequence, {checked} results ({mid - start:.0f} s); "
        f"{calls} random calls on {made} communicators, {verify.count - checked} results "
        f"({time.monotonic() - mid:.0f} s); every one held to float64 by one rank and to every rank's bits",
        flush=True,
    )


def work(rank, world, backend):
    import torch.distributed as dist

    mode = os.environ.get("LIVENESS_MODE", "sequence")
    dog = Watchdog(rank, float(os.environ.get("LIVENESS_STALL_S", "60")))
    {"stall": stall_worker, "sequence": sequence_worker}[mode](rank, world, dist, dog)


if __name__ == "__main__":
    sys.exit(serve_rank(work, timeout_s=120))
