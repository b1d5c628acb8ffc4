"""Launch one process per rank of a torch.distributed test worker (`python -m MODULE RANK WORLD PORT BACKEND` from the
repository root) and fail with every failing rank's log (`run_ranks`); the worker's side of that contract
(`serve_rank`). Logs go to files, not pipes: a full pipe would stall a rank."""

import os
import socket
import subprocess
import sys
import tempfile
import traceback
from datetime import timedelta
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = Path(__file__).resolve().parents[2]


def run_ranks(module: str, world: int, backend: str, timeout: float) -> str:
    """Run `world` ranks of the worker `module` (e.g. tests.triton.dist_worker); returns their concatenated logs,
    asserts every rank exited 0."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    if backend == "gloo":
        env["OMP_NUM_THREADS"] = "1"  # many ranks share two cores
    with tempfile.TemporaryDirectory(prefix="ranks-") as tmp:
        logs = [Path(tmp) / f"rank{r}.log" for r in range(world)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", module, str(r), str(world), str(port), backend],
                cwd=ROOT,
                env=env,
                stdout=open(logs[r], "w"),
                stderr=subprocess.STDOUT,
            )
            for r in range(world)
        ]
        try:
            for p in procs:
                p.wait(timeout=timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        outs = [log.read_text() for log in logs]
    failed = [(r, p.returncode, out) for r, (p, out) in enumerate(zip(procs, outs, strict=True)) if p.returncode != 0]
    assert not failed, "\n".join(f"rank {r} exited {rc}:\n{out[-4000:]}" for r, rc, out in failed)
    return "".join(outs)


def serve_rank(work, timeout_s: float) -> None:
    """The rank side of run_ranks: join the process group named by argv (NCCL: GPU `rank`), run
    work(rank, world, backend), print "rank R/W BACKEND: OK" and exit 0; on any exception print it and exit 1."""
    import torch
    import torch.distributed as dist

    rank, world, port, backend = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
        device_id=torch.device("cuda", rank) if backend == "nccl" else None,
    )
    try:
        work(rank, world, backend)
        print(f"rank {rank}/{world} {backend}: OK", flush=True)
        code = 0
    except Exception:
        traceback.print_exc()
        code = 1
    dist.destroy_process_group()
    sys.exit(code)
