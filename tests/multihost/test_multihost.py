"""Meshes that span hosts: one mesh over MPI ranks that ttnn's tt-run launches, each rank a process opening its host's
part from a mock cluster descriptor of its own (tt_rmsnorm.testing.multi_host), each running distributed_rms_norm by
every path, DistributedRMSNorm and tt-metal's decoder norm through tt_rmsnorm.compat (tt_rmsnorm.testing.rank_program)
with the hidden dim sharded over an axis that crosses the hosts.

`make test` runs two T3000 hosts (1x16), their one-host comparison and the hang guard; `make multihost` adds the dual
(8x8) and quad (8x16) Wormhole Galaxies (marker multihost_galaxy). Each launch is bounded: mpirun ends the job after
LAUNCH_TIMEOUT_S, and the launcher's process group is killed shortly after."""

from pathlib import Path

import pytest

from tt_rmsnorm.systems import system_of
from tt_rmsnorm.testing import multi_host

MISSING = multi_host.tt_run_missing()
pytestmark = [pytest.mark.multihost, pytest.mark.skipif(MISSING is not None, reason=f"tt-run cannot run: {MISSING}")]

LAUNCH_TIMEOUT_S = 300
HIDDEN = 8192
SYSTEMS = [
    pytest.param("2xt3k", id="2xt3k"),
    pytest.param("2xgalaxy", id="2xgalaxy", marks=pytest.mark.multihost_galaxy),
    pytest.param("4xgalaxy", id="4xgalaxy", marks=pytest.mark.multihost_galaxy),
]
_RUNS: dict[str, multi_host.MultiHostRun] = {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("multihost")


def launched(name: str, workdir: Path) -> multi_host.MultiHostRun:
    """The system's tt-run job, launched once per test session."""
    if name not in _RUNS:
        directory = multi_host.write_files(name, workdir / name)
        _RUNS[name] = multi_host.launch(name, directory, timeout_s=LAUNCH_TIMEOUT_S)
        print(f"\n{name}: tt-run job of {multi_host.SYSTEMS[name].hosts} ranks in {_RUNS[name].wall_s:.1f} s")
    run = _RUNS[name]
    assert run.ok, (
        f"{name}: tt-run rc {run.returncode}; ranks: {[r.get('error', 'ok') for r in run.ranks]}\n"
        + (run.log_tail[-3000:])
    )
    return run


def _merged(run, key: str) -> dict:
    """Every rank's entries of `key` (by mode or path), each a map of mesh coordinate -> facts, merged."""
    out: dict = {}
    for rank in run.ranks:
        for name, value in rank["facts"][key].items():
            merged = out.setdefault(name, {})
            for field, facts in value.items() if key == "outputs" else [("y", value)]:
                if isinstance(facts, dict):
                    merged.setdefault(field, {}).update(facts)
                else:
                    merged[field] = facts
    return out


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_mesh_spans_hosts_and_the_rules_see_all_of_it(name, workdir):
    """Each rank opens the whole mesh's shape with its own devices local; ttnn counts the links between neighbours
    across the hosts as the systems table has them, and the package's stats gather picks one Linear link of the system
    the whole mesh is."""
    spec = multi_host.SYSTEMS[name]
    run = launched(name, workdir)
    table = system_of("wormhole_b0", spec.mesh_shape)
    rows, cols = spec.mesh_shape
    seen = []
    for rank in run.ranks:
        f = rank["facts"]
        assert f["mesh"] == [rows, cols] and f["devices"] == rows * cols and f["arch"] == "WORMHOLE_B0"
        assert len(f["local"]) == rows * cols // spec.hosts
        seen += f["local"]
        for axis, links in f["ttnn_links"].items():
            assert links <= table.links[int(axis)], (axis, links, table.links)
        assert f["links"] == [table.name, [n or 0 for n in table.links], 1, "Topology.Linear"]
        assert table.hosts == spec.hosts
    assert sorted(seen) == sorted(f"{r},{c}" for r in range(rows) for c in range(cols))


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_stats_gather_crosses_the_hosts(name, workdir):
    """The hidden dim is sharded over the mesh columns, which the hosts split: each rank's devices hold a part of every
    row, and the classic path's stats gather returns one 32-wide tile of each of the row's devices, on every rank."""
    spec = multi_host.SYSTEMS[name]
    run = launched(name, workdir)
    cols = spec.mesh_shape[1]
    columns = [{int(c.split(",")[1]) for c in r["facts"]["local"]} for r in run.ranks]
    assert all(len(c) == cols // spec.hosts for c in columns) and len(set().union(*columns)) == cols
    for rank in run.ranks:
        assert rank["facts"]["stats_gathered"] == [[1, 1, 32, 32 * cols], [1, 1, 128, 32 * cols]]


@pytest.mark.parametrize("name", SYSTEMS)
def test_every_path_module_and_compat_class_runs_across_hosts(name, workdir):
    """Decode and prefill by the classic, async and auto paths (auto decodes async: the fused op runs on one host's
    devices, and asking for it by name is a RuleError before device work), DistributedRMSNorm and the decoder norm of
    tt-metal's models: every device returns its slice, the same on every rank."""
    spec = multi_host.SYSTEMS[name]
    run = launched(name, workdir)
    width = HIDDEN // spec.mesh_shape[1]
    outputs = _merged(run, "outputs")
    for mode, tokens in (("decode", 32), ("prefill", 128)):
        for path in ("classic", "async", "auto"):
            entry = outputs[f"{mode}-{path}"]
            assert entry["path"] == ("async" if path == "auto" else path)
            for field in ("y", "residual"):
                facts = entry[field]
                assert len(facts) == spec.mesh_shape[0] * spec.mesh_shape[1]
                assert {tuple(v[0]) for v in facts.values()} == {(1, 1, tokens, width)}
                assert len({(v[1], v[2]) for v in facts.values()}) == 1, facts  # one dtype and memory config
        assert outputs[f"{mode}-fused"] == {"refused": "fused.one_host"}
    for key in ("module", "compat"):
        for mode, tokens in (("decode", 32), ("prefill", 128)):
            facts = _merged(run, key)[mode]["y"]
            assert len(facts) == spec.mesh_shape[0] * spec.mesh_shape[1]
            assert len({str(v) for v in facts.values()}) == 1, facts  # every device returns the same kind of slice
            assert next(iter(facts.values()))[0][2] == tokens


def test_two_t3000_hosts_give_what_one_host_gives(workdir):
    """The same 16 chips and links opened by one process (multi_host.joined_descriptor): every path, the module and the
    decoder norm return, device by device, what the two ranks returned together; only the decode's automatic path
    differs (fused on one host, async across two)."""
    run = launched("2xt3k", workdir)
    one = multi_host.run_one_host("2xt3k", workdir / "2xt3k", timeout_s=LAUNCH_TIMEOUT_S)
    assert one["ok"], one.get("error")
    assert one["facts"]["outputs"]["decode-auto"]["path"] == "fused"
    ranks = _merged(run, "outputs")
    for key, value in one["facts"]["outputs"].items():
        if key.endswith("-fused"):
            continue
        assert {k: v for k, v in value.items() if k != "path"} == {k: v for k, v in ranks[key].items() if k != "path"}
    for key in ("module", "compat"):
        merged = {mode: v["y"] for mode, v in _merged(run, key).items()}
        assert merged == one["facts"][key]


def test_a_failing_rank_ends_the_job_instead_of_hanging_it(workdir):
    """Rank 1 fails once its mesh is open, before the first collective rank 0 waits in: mpirun ends the job at once and
    the launch comes back within the bound, the failure reported by the rank that failed."""
    directory = multi_host.write_files("2xt3k", workdir / "2xt3k-fail")
    run = multi_host.launch("2xt3k", directory, timeout_s=120, program_args=("--fail-rank", "1"))
    assert not run.ok and run.returncode != 0
    assert "fails on purpose" in run.ranks[1].get("error", ""), run.ranks[1]
    assert run.wall_s < 120, run.wall_s
