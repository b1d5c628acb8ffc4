"""Launch one process per rank of a torch.distributed test worker (`python SCRIPT RANK WORLD PORT BACKEND`) and fail
with every failing rank's log. Logs go to files, not pipes: a full pipe would stall a rank."""

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, world: int, backend: str, timeout: float) -> str:
    """Run `world` ranks of `script`; returns their concatenated logs, asserts every rank exited 0."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    if backend == "gloo":
        env["OMP_NUM_THREADS"] = "1"  # many ranks share two cores
    with tempfile.TemporaryDirectory(prefix="ranks-") as tmp:
        logs = [Path(tmp) / f"rank{r}.log" for r in range(world)]
        procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(port), backend], env=env,
                                  stdout=open(logs[r], "w"), stderr=subprocess.STDOUT) for r in range(world)]
        try:
            for p in procs:
                p.wait(timeout=timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        outs = [log.read_text() for log in logs]
    failed = [(r, p.returncode, out) for r, (p, out) in enumerate(zip(procs, outs)) if p.returncode != 0]
    assert not failed, "\n".join(f"rank {r} exited {rc}:\n{out[-4000:]}" for r, rc, out in failed)
    return "".join(outs)
