"""The mock-cluster harness itself: the SFPI compiler stand-in, the mock meshes, and worker isolation."""

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.mock import mock_worker
from tt_rmsnorm import hardware
from tt_rmsnorm.hardware import MOCK_ENV
from tt_rmsnorm.testing import mock_cluster, sfpi_stand_in, workers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.mock_cluster

EXPECTED_MESHES = {  # system: (mesh shape, devices, compute_with_storage_grid_size)
    "n150": ((1, 1), 1, (8, 8)),
    "n300": ((1, 2), 2, (8, 7)),
    "t3k": ((1, 8), 8, (8, 7)),
    "galaxy": ((8, 4), 32, (8, 9)),
}


def test_stub_kernel_elf_is_what_the_xip_loader_needs():
    elf = sfpi_stand_in.stub_kernel_elf()
    assert elf[:4] == b"\x7fELF" and elf[4] == 1 and elf[5] == 1  # 32-bit, little endian
    e_type, e_machine = struct.unpack_from("<HH", elf, 16)
    phoff, shoff = struct.unpack_from("<II", elf, 28)
    phnum, shentsize, shnum = struct.unpack_from("<H", elf, 44)[0], *struct.unpack_from("<HH", elf, 46)
    assert e_machine == 243 and phnum == 1 and len(elf) < 512
    p_type, p_offset, p_vaddr, _, p_filesz, _, p_flags, _ = struct.unpack_from("<IIIIIIII", elf, phoff)
    assert (p_type, p_vaddr, p_filesz, p_flags) == (1, 0, 8, 5)  # PT_LOAD at 0, two instructions, R+X
    assert struct.unpack_from("<II", elf, p_offset) == (0x0040006F, 0x00008067)  # jal x0,+4 ; ret
    sections = [struct.unpack_from("<IIIIIIIIII", elf, shoff + i * shentsize) for i in range(shnum)]
    rela = [s for s in sections if s[1] == 4]  # SHT_RELA
    assert len(rela) == 1 and sections[rela[0][6]][1] == 2 and sections[rela[0][7]][2] & 0x4  # -> .symtab, .text
    r_offset, r_info, r_addend = struct.unpack_from("<IIi", elf, rela[0][4])
    assert (r_offset, r_info & 0xFF, r_addend) == (0, 17, 4)  # R_RISCV_JAL, addend 4


def test_compiler_stand_in(tmp_path):
    if sfpi_stand_in.real_compiler() is not None:
        pytest.skip(
            f"a real SFPI compiler is installed ({sfpi_stand_in.real_compiler()}); the stand-in is never written"
        )
    exe = sfpi_stand_in.install_compiler_stand_in()
    before = exe.read_bytes()
    assert sfpi_stand_in.install_compiler_stand_in() == exe and exe.read_bytes() == before  # idempotent
    assert sfpi_stand_in.real_compiler() is None  # it never mistakes itself for a real toolchain
    assert os.access(exe, os.X_OK) and exe.is_relative_to(os.path.realpath(sys.prefix))

    def run(*args):
        return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=tmp_path)

    version = run("--version").stdout.strip()
    sfpi = (sfpi_stand_in._ttnn_dir() / "tt_metal" / "sfpi-version").read_text()
    assert version.startswith("riscv-tt-elf-g++ (tenstorrent/sfpi:7.89.0[1050])") and "7.89.0" in sfpi
    assert run("-x", "c++-header", "pch.h", "-o", "pch.gch").returncode != 0
    assert run("-O2", "-c", "-o", "k.o", "k.cc", "-MF", "k.d").returncode == 0
    assert (tmp_path / "k.o").read_bytes() == b"" and (tmp_path / "k.d").read_text().startswith("k.o:")
    (tmp_path / "kernels" / "k").mkdir(parents=True)
    assert run("k.o", "-o", "kernels/k/trisc0.123.elf").returncode == 0
    assert (tmp_path / "kernels" / "k" / "trisc0.123.elf").read_bytes() == sfpi_stand_in.stub_kernel_elf()
    assert run("fw.o", "-o", "firmware/nokey/brisc.elf").returncode != 0  # no firmware under an unknown key


@pytest.mark.parametrize("system", ["galaxy", "t3k", "n300", "n150"])
def test_mock_mesh_opens(system):
    shape, devices, grid = EXPECTED_MESHES[system]
    facts = workers.run_isolated(system, mock_worker.mesh_facts)
    assert facts == {"shape": shape, "num_devices": devices, "grid": grid, "arch": "WORMHOLE_B0"}


def _process_facts(mesh):
    import ttnn

    return {
        "pid": os.getpid(),
        "cache": os.environ[mock_cluster.CACHE_ENV],
        "mock": os.environ[MOCK_ENV],
        "ttnn": ttnn.__file__,
    }


def _raise_ttnn_error(mesh):
    import torch
    import ttnn

    x = ttnn.from_torch(torch.zeros(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=mesh)
    return ttnn.rms_norm_pre_all_gather(x)


def _segfault(mesh):
    import torch
    import ttnn

    host = ttnn.from_torch(torch.zeros(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    return ttnn.rms_norm_pre_all_gather(host)  # ttnn-findings #2: SIGSEGV, not an exception


def _hang(mesh):
    import time

    time.sleep(60)


def _configure_other_system(mesh):
    mock_cluster.configure("n150")  # idempotent for the process's own system
    try:
        mock_cluster.configure("t3k")
    except hardware.MockClusterError as e:
        return str(e)
    return "no error"


def test_worker_survives_errors_crashes_and_timeouts():
    first = workers.run_isolated("n150", _process_facts)
    assert first["pid"] != os.getpid()
    assert first["mock"] == str(mock_cluster.DESCRIPTORS["n150"])
    assert "tt_rmsnorm-jit-n150-" in first["cache"] and ".cache/tt-metal-cache" not in first["cache"]
    assert MOCK_ENV not in os.environ  # the pytest process itself never becomes a mock

    with pytest.raises(workers.IsolatedError) as err:
        workers.run_isolated("n150", _raise_ttnn_error)
    assert err.value.kind == "RuntimeError" and "Only tilized inputs supported" in err.value.message
    assert workers.run_isolated("n150", _process_facts)["pid"] == first["pid"]  # same worker, still usable

    assert "already uses the mock n150" in workers.run_isolated("n150", _configure_other_system)

    with pytest.raises(workers.WorkerCrashed) as crash:
        workers.run_isolated("n150", _segfault)
    assert crash.value.returncode == -11
    after_crash = workers.run_isolated("n150", _process_facts)
    assert after_crash["pid"] != first["pid"] and after_crash["cache"] != first["cache"]  # fresh process, fresh cache

    with pytest.raises(workers.WorkerTimeout):
        workers.run_isolated("n150", _hang, timeout=2)
    assert workers.run_isolated("n150", _process_facts)["pid"] not in (first["pid"], after_crash["pid"])


def _nested_run_isolated(mesh):
    try:
        workers.run_isolated("n150", _process_facts)
    except hardware.MockClusterError as e:
        return str(e)
    return "no error"


def test_workers_never_start_workers():
    assert "inside a mock-cluster worker" in workers.run_isolated("n150", _nested_run_isolated)


ORPHAN_SCRIPT = """
import time
from tests.mock import mock_worker
from tt_rmsnorm.testing import workers
print(workers.run_isolated("n150", mock_worker.worker_identity), flush=True)
time.sleep(600)
"""


def test_worker_exits_when_its_parent_dies(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        pid, cache = parent.stdout.readline().split()
        worker = int(pid)
        assert os.path.exists(f"/proc/{worker}") and os.path.isdir(cache)
    finally:
        parent.kill()  # SIGKILL: no atexit, no graceful worker shutdown
        parent.wait()
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{worker}"), "orphaned worker still running"
    assert not os.path.exists(cache), "the orphaned worker left its JIT cache behind"


def test_unknown_system_is_refused():
    with pytest.raises(hardware.MockClusterError, match="unknown mock system"):
        mock_cluster.configure("wormhole_galaxy_2")


@pytest.mark.parametrize(
    "error, verdict",
    [
        (RuntimeError("TT_FATAL @ op.cpp:1: x info: Only tilized inputs supported."), "reject"),
        (KeyError("stats"), None),
    ],
    ids=["ttnn_runtime_error_is_a_reject", "harness_key_error_propagates"],
)
def test_only_ttnns_runtime_errors_count_as_its_reject(monkeypatch, error, verdict):
    """run_case's verdict: ttnn refuses with a RuntimeError (the reject, with its message); any other exception is a
    fault of the case or the harness and propagates, so the battery fails instead of counting a reject."""
    from tests.mock import mock_cases

    case = {"id": "harness", "op": "pre", "system": "n150", "x": mock_cases.T((1, 1, 32, 64)), "kw": {}}

    def call(*args):
        raise error

    described = lambda mesh, spec: mock_cases.tensor_desc(spec, "n150")  # noqa: E731 (no device: descriptions)
    monkeypatch.setattr(mock_worker, "build_tensor", described)
    monkeypatch.setattr(mock_worker, "free_l1", lambda mesh: None)
    monkeypatch.setattr(mock_worker, "call_ttnn", call)
    if verdict is None:
        with pytest.raises(KeyError):
            mock_worker.run_case(None, case)
    else:
        got = mock_worker.run_case(None, case)
        assert got["verdict"] == "reject" and got["message"].endswith("Only tilized inputs supported.")
        assert got["package_on_real"]["verdict"] == "accept"


def test_a_function_from_a_module_outside_the_repository_runs_in_a_worker(tmp_path, monkeypatch):
    """The worker imports the caller's module by name where it can, and runs its file where it cannot (a module the
    caller imported from a folder of its own)."""
    (tmp_path / "outside_module.py").write_text("def mesh_size(mesh):\n    return mesh.get_num_devices()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import outside_module

    assert workers.run_isolated("n150", outside_module.mesh_size) == 1


def _gather_an_l1_input(mesh):
    """An all_gather of an L1 input (its program's semaphores stay in L1 while ttnn's program cache holds it); the L1
    buffers alive after the input is freed."""
    import torch
    import ttnn

    x = ttnn.from_torch(
        torch.randn(1, 1, 32, 256),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=mesh,
        memory_config=ttnn.L1_MEMORY_CONFIG,
        mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=3),
    )
    ttnn.deallocate(ttnn.all_gather(x, dim=3))
    ttnn.deallocate(x)
    return _l1_buffers(mesh)


def _l1_buffers(mesh):
    import ttnn

    return sum(b.buffer_type == ttnn.BufferType.L1 for b in ttnn._ttnn.reports.get_buffers([mesh]))


def test_every_call_starts_from_an_empty_l1():
    """A worker serves every test of its system: what one call leaves in L1 (here the semaphores of a cached CCL
    program) is gone before the next call, whose ops must see the whole L1 the rules assume."""
    left = workers.run_isolated("t3k", _gather_an_l1_input)
    assert left > 0, "the all_gather left nothing in L1: this test no longer shows what a worker clears"
    assert workers.run_isolated("t3k", _l1_buffers) == 0
