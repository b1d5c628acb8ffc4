"""Two-phase distributed RMSNorm with 2 and 4 gloo processes on CPU (NCCL over GPUs in test_gpu.py)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("dist_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, backend: str, timeout: float = 150.0) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(r), str(world), str(port), backend], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    failed = [(r, p.returncode, out) for r, (p, out) in enumerate(zip(procs, outs)) if p.returncode != 0]
    assert not failed, "\n".join(f"rank {r} exited {rc}:\n{out[-3000:]}" for r, rc, out in failed)


@pytest.mark.parametrize("world", [2, 4, 8], ids=["2_ranks", "4_ranks", "8_ranks_t3k_world"])
def test_distributed_gloo(world):
    run_ranks(world, "gloo")
