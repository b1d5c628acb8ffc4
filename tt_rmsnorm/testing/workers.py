"""Worker processes that run real ttnn on a mock cluster, one persistent process per system.

ttnn keeps process-wide state (one cluster, program caches, fabric config) and segfaults on some bad inputs:
`run_isolated(system, fn, ...)` calls `fn(mesh, ...)` in a persistent worker for that system (one mesh opened once,
many calls), restarts the worker after a crash, and kills it on a timeout.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tt_rmsnorm.hardware import MOCK_ENV, MockClusterError
from tt_rmsnorm.testing import mock_cluster
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES, PRIVATE_CACHE_ENV, configure

STARTUP_TIMEOUT_S = 180.0


CALL_TIMEOUT_S = 120.0


IN_WORKER_ENV = "TT_RMSNORM_MOCK_WORKER"  # set inside workers: they never start workers of their own


# Past this many workers a test process stops the least recently used one. Eight keep every mock system's worker
# open, so that tests which take turns over the systems never start one twice (restarts took half of the mock tests'
# time at two); each holds ~0.5-1 GiB (ttnn + a mock cluster): two test processes peaked at 7.4 GB of used memory.
MAX_WORKERS = int(os.environ.get("TT_RMSNORM_MOCK_WORKERS", "8"))


class IsolatedError(RuntimeError):
    """A call in a worker process raised: `kind` is the remote exception type name, `remote_traceback` its traceback."""

    def __init__(self, kind: str, message: str, remote_traceback: str = ""):
        self.kind, self.message, self.remote_traceback = kind, message, remote_traceback
        where = f"\n--- in the worker ---\n{remote_traceback[-3000:]}" if remote_traceback else ""
        super().__init__(f"{kind}: {message}{where}")


class WorkerCrashed(RuntimeError):
    """The worker process died during a call (ttnn segfaults on some inputs); it is restarted on the next call."""

    def __init__(self, system: str, returncode, log_tail: str):
        self.system, self.returncode, self.log_tail = system, returncode, log_tail
        how = (
            f"signal {-returncode} ({signal.Signals(-returncode).name})"
            if returncode and returncode < 0
            else f"exit {returncode}"
        )
        super().__init__(f"mock {system} worker died with {how}; last output:\n{log_tail}")


class WorkerTimeout(TimeoutError):
    pass


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerTimeout()
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(fd: int, deadline: float | None = None):
    head = _read_exact(fd, 8, deadline)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack("<Q", head)[0], deadline)
    return None if body is None else pickle.loads(body)


def _load_function(module_name: str | None, file: str, qualname: str):
    """The function `qualname` of the caller's module: imported by name where the worker can (a module of a package
    under the repository root, or a script run with -m), else executed from its file (a script run by path, or a
    module the caller imported from elsewhere)."""
    module = None
    if module_name is not None:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not module_name.startswith(e.name):
                raise
    if module is None:
        module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file), None)
    if module is None:
        module_name = "_tt_rmsnorm_isolated_" + Path(file).stem
        spec = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _exit_with_parent(parent: int) -> None:
    """A worker busy in a long call cannot see its pipe close: leave as soon as the process that started it is gone."""
    while os.getppid() == parent:
        time.sleep(1.0)
    _remove_worker_files()
    os._exit(3)


def _remove_worker_files() -> None:
    """JIT cache and log of a worker whose parent is gone or has closed the pipe (the parent removes them otherwise)."""
    if mock_cluster.private_cache is not None:
        shutil.rmtree(mock_cluster.private_cache, ignore_errors=True)
    log = os.path.realpath("/proc/self/fd/1")
    if os.path.basename(log).startswith("tt_rmsnorm-worker-"):
        try:
            os.unlink(log)
        except OSError:
            pass


def _serve(system: str, rfd: int, wfd: int) -> None:
    """Worker main loop: configure, open the system's mesh on first use, answer calls until the pipe closes."""
    import threading

    os.environ[IN_WORKER_ENV] = "1"
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    configure(system)
    from tt_rmsnorm.ccl import forget_adopted  # imports ttnn: only after configure()
    from tt_rmsnorm.devices import close_mesh
    from tt_rmsnorm.plan_cache import forget_plans

    # The collection after every call looks only at what calls create: the modules imported here (torch, ttnn) stay
    # out of it, which makes it about a tenth of a second cheaper a call.
    gc.collect()
    gc.freeze()
    mesh, mesh_shape = None, None
    _send(wfd, {"ready": True, "pid": os.getpid()})
    while True:
        msg = _recv(rfd)
        if msg is None:  # the parent went away without saying goodbye
            _remove_worker_files()
            break
        if msg.get("op") == "exit":
            break
        try:
            fn = _load_function(msg["module"], msg["file"], msg["qualname"])
            shape = tuple(msg.get("mesh_shape") or MESH_SHAPES[system])
            if mesh is None or shape != mesh_shape:
                if mesh is not None:
                    close_mesh(mesh)
                    mesh = None
                mesh, mesh_shape = mock_cluster.open_mesh(shape), shape
            reply = {"ok": True, "result": fn(mesh, *msg["args"], **msg["kwargs"])}
        except BaseException as e:  # ttnn's TT_FATALs are RuntimeErrors; anything else is reported the same way
            reply = {"ok": False, "kind": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}
        # Cached plans and the resources adopted from model CCL objects keep persistent buffers alive, and ttnn's
        # program cache keeps the semaphores of the CCL programs it made: all dropped after every call, so that one
        # call's L1 buffers never narrow the L1 the next call's ops see (a worker serves every test of its system).
        forget_plans()
        forget_adopted()
        gc.collect()
        if mesh is not None and _holds_l1(mesh):
            mesh.clear_program_cache()
        try:
            _send(wfd, reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            _send(wfd, {"ok": False, "kind": "PicklingError", "message": f"result not picklable: {e}", "traceback": ""})
    if mesh is not None:
        close_mesh(mesh)


def _holds_l1(mesh) -> bool:
    import ttnn

    return any(b.buffer_type == ttnn.BufferType.L1 for b in ttnn._ttnn.reports.get_buffers([mesh]))


_WORKER_MAIN = (
    "import sys; from tt_rmsnorm.testing.workers import _serve; _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))"
)


class _Worker:
    def __init__(self, system: str):
        self.system = system
        fd, log_path = tempfile.mkstemp(prefix=f"tt_rmsnorm-worker-{system}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_path)
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        self.cache_dir = tempfile.mkdtemp(prefix=f"tt_rmsnorm-jit-{system}-")
        env = dict(os.environ)
        env.pop(MOCK_ENV, None)  # the worker configures itself
        env[PRIVATE_CACHE_ENV] = self.cache_dir
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, system, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
                start_new_session=True,  # ttnn's signal handlers and children stay in the worker's group
            )
        os.close(to_child_r)
        os.close(from_child_w)
        hello = self._receive(STARTUP_TIMEOUT_S)
        if not hello or not hello.get("ready"):
            self.kill()
            raise MockClusterError(f"mock {system} worker did not start: {hello}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _receive(self, timeout: float):
        try:
            reply = _recv(self.from_child, time.monotonic() + timeout)
        except WorkerTimeout as e:
            tail = self.log_tail()
            self.kill()
            raise WorkerTimeout(
                f"mock {self.system} worker gave no answer in {timeout:.0f} s; killed. Log tail:\n{tail}"
            ) from e
        if reply is None:
            rc = self.proc.wait(timeout=30)
            tail = self.log_tail()
            self.kill()
            raise WorkerCrashed(self.system, rc, tail)
        return reply

    def call(self, fn, args, kwargs, timeout: float, mesh_shape=None):
        module = sys.modules[fn.__module__]
        spec = getattr(module, "__spec__", None)
        file = os.path.abspath(module.__file__)
        _send(
            self.to_child,
            {
                "op": "call",
                "module": None if spec is None else spec.name,
                "file": file,
                "qualname": fn.__qualname__,
                "args": args,
                "kwargs": kwargs,
                "mesh_shape": mesh_shape,
            },
        )
        return self._receive(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            try:
                _send(self.to_child, {"op": "exit"})
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own process group (start_new_session)
            self.proc.wait()
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_child = self.from_child = -1
        try:
            self.log_path.unlink()
        except OSError:
            pass
        shutil.rmtree(self.cache_dir, ignore_errors=True)


_workers: dict[str, _Worker] = {}


def run_isolated(system: str, fn, *args, timeout: float = CALL_TIMEOUT_S, mesh_shape=None, **kwargs):
    """Call `fn(mesh, *args, **kwargs)` in the persistent worker process of mock `system` and return its result.

    `fn` must be a module-level function (the worker imports its module, or runs its file); arguments and result must
    pickle. The worker opens the system's mesh (`MESH_SHAPES[system]`, or `mesh_shape`) once and keeps it for later
    calls. Raises IsolatedError when fn raised (ttnn's TT_FATAL arrives as kind 'RuntimeError'), WorkerCrashed when
    the process died (the next call starts a fresh one), WorkerTimeout after `timeout` seconds (the worker is killed).
    """
    if os.environ.get(IN_WORKER_ENV):
        raise MockClusterError(
            "run_isolated called inside a mock-cluster worker (e.g. at import time of the module "
            "whose function runs there); call it from the test process only"
        )
    worker = _workers.pop(system, None)
    if worker is None or not worker.alive():
        if worker is not None:
            worker.kill()
        while len(_workers) >= MAX_WORKERS:
            _workers.pop(next(iter(_workers))).close()
        worker = _Worker(system)
    _workers[system] = worker  # most recently used last
    try:
        reply = worker.call(fn, args, kwargs, timeout, mesh_shape)
    except (WorkerCrashed, WorkerTimeout):
        _workers.pop(system, None)
        raise
    if not reply["ok"]:
        raise IsolatedError(reply["kind"], reply["message"], reply["traceback"])
    return reply["result"]


def shutdown_workers() -> None:
    while _workers:
        _workers.popitem()[1].close()


atexit.register(shutdown_workers)
