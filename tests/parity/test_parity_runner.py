"""The parity runner: every available backend on a tiny case set, the files it writes, the exit status, skip reasons,
and a machine without ttnn (the GPU hosts) simulated by blocking the import."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from programs.parity import report, runner, summary
from programs.parity.backends import Backend, Golden, Torch, Triton, TTReference
from programs.parity.cases import Case, tiny_cases

ROOT = Path(__file__).resolve().parents[2]
ALWAYS = ("golden-f64", "torch-fp32", "torch-bf16", "tt-ref-bf16")  # need only torch


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _cli(out: Path, *extra: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nimport sys\nfrom programs.parity.runner import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "--cases", "tiny", "--out", str(out), "--no-progress", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("parity")
    return _cli(out), out


def test_tiny_set_runs_every_available_backend_and_writes_the_files(tiny_run):
    proc, out = tiny_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(out / "parity.csv")
    cases = [c.name for c in tiny_cases()]
    by_backend: dict[str, list[dict]] = {}
    for r in rows:
        by_backend.setdefault(r["backend"], []).append(r)
    assert set(by_backend) >= set(ALWAYS)
    assert all(sorted(r["case"] for r in rs) == sorted(cases) for rs in by_backend.values())
    for name in ALWAYS:
        assert [r["status"] for r in by_backend[name]] == ["pass"] * len(cases), by_backend[name]
        assert all(float(r["pcc"]) > 0.99 and r["label"] for r in by_backend[name])
    # the backends that need optional packages run wherever those are installed (here: all of them)
    expect_ran = {
        "tt-ref-bf8b": importlib.util.find_spec("ttnn") is not None,
        "ttnn": importlib.util.find_spec("ttnn") is not None,
        "triton-bf16": importlib.util.find_spec("triton") is not None,
        "nki-bf16": importlib.util.find_spec("ml_dtypes") is not None,
    }
    for name, ran in expect_ran.items():
        statuses = {r["status"] for r in by_backend[name]}
        if ran:
            assert statuses <= {"pass", "accepted"} and statuses, (name, by_backend[name])
        else:
            assert statuses == {"skip"} and all(r["reason"] for r in by_backend[name])
    if expect_ran["ttnn"]:
        assert all(r["label"].startswith(runner_label()) for r in by_backend["ttnn"])
        assert all(r["pcc"] == "" for r in by_backend["ttnn"])  # mock values are never compared
    md = (out / "parity.md").read_text()
    assert "| case |" in md and all(c in md for c in cases) and "parity.png" in md
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "PASS: all" in proc.stdout and "wall" in proc.stdout


def runner_label() -> str:
    from programs.parity.backends import MOCK_LABEL

    return MOCK_LABEL


class Scaled(Torch):
    """torch-fp32 with its output scaled: a deliberately broken backend."""

    def __init__(self, factor):
        super().__init__("float32")
        self.factor, self.name = factor, f"scaled-{factor}"

    def run(self, case):
        y, label = super().run(case)
        return y * self.factor, label


class Unavailable(Backend):
    name = "absent-hw"

    def available(self):
        return False, "no such accelerator on this machine"


class Raises(Torch):
    def __init__(self, exc):
        super().__init__("float32")
        self.exc, self.name = exc, f"raises-{type(exc).__name__}"

    def run(self, case):
        raise self.exc


def _main_with(monkeypatch, tmp_path, backends) -> tuple[int, list[dict]]:
    monkeypatch.setattr(runner, "all_backends", lambda tt_arch: backends)
    monkeypatch.setitem(runner.CASE_SETS, "tiny", lambda seed: tiny_cases(seed)[:2])
    rc = runner.main(["--cases", "tiny", "--out", str(tmp_path), "--no-progress"])
    return rc, _rows(tmp_path / "parity.csv")


@pytest.mark.parametrize("factor, rc", [(1.0, 0), (1.01, 1)], ids=["exact", "scaled_1.01"])
def test_exit_status_reflects_a_backend_outside_its_tolerance(monkeypatch, tmp_path, capsys, factor, rc):
    got, rows = _main_with(monkeypatch, tmp_path, [Golden(), Scaled(factor)])
    assert got == rc
    scaled = [r for r in rows if r["backend"] == f"scaled-{factor}"]
    assert [r["status"] for r in scaled] == (["pass"] * 2 if rc == 0 else ["FAIL"] * 2)
    if rc:
        assert all("max bf16 ULP" in r["reason"] for r in scaled)
        assert "FAIL: 2 backend run(s)" in capsys.readouterr().out


def test_skipped_backends_carry_their_reason(monkeypatch, tmp_path, capsys):
    rc, rows = _main_with(monkeypatch, tmp_path, [Golden(), Unavailable()])
    assert rc == 0
    skipped = [r for r in rows if r["backend"] == "absent-hw"]
    assert len(skipped) == 2 and all(r["status"] == "skip" for r in skipped)
    assert all(r["reason"] == "no such accelerator on this machine" for r in skipped)
    assert "absent-hw not run: no such accelerator on this machine" in capsys.readouterr().out


def test_rule_refusal_is_reported_but_an_exception_fails_the_run(monkeypatch, tmp_path):
    rc, rows = _main_with(monkeypatch, tmp_path, [Raises(ValueError("rule x.y: width 3 not allowed; use 32"))])
    assert rc == 0 and {r["status"] for r in rows} == {"unsupported"}
    assert "rule x.y" in rows[0]["reason"]
    rc, rows = _main_with(monkeypatch, tmp_path, [Raises(RuntimeError("device fell over"))])
    assert rc == 1 and {r["status"] for r in rows} == {"error"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter size limit applies only without CUDA")
def test_triton_interpreter_skips_large_cases_with_the_reason():
    big = Case("prefill", 2048, 2048, 1, 1e-5, "ones")
    ok, why = Triton().supports(big)
    assert not ok and "M*N <=" in why and str(big.elements) in why
    assert Triton().supports(tiny_cases()[0]) == (True, "")


def test_without_ttnn_the_ttnn_backends_skip_and_the_rest_runs(tmp_path):
    """The GPU hosts have torch and triton but no ttnn (and no loguru): bfloat8_b and the ttnn backend skip with a
    reason, the rest runs."""
    block = (
        "import sys, importlib.abc\n"
        "class _NoTTNN(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('ttnn', 'loguru'):\n"
        '            raise ModuleNotFoundError(f"No module named {name!r}", name=name)\n'
        "sys.meta_path.insert(0, _NoTTNN())\n"
    )
    proc = _cli(tmp_path, "--backends", "golden-f64,torch-bf16,tt-ref-bf16,tt-ref-bf8b,ttnn", prelude=block)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(tmp_path / "parity.csv")
    status = {(r["backend"], r["status"]) for r in rows}
    assert status == {
        ("golden-f64", "pass"),
        ("torch-bf16", "pass"),
        ("tt-ref-bf16", "pass"),
        ("tt-ref-bf8b", "skip"),
        ("ttnn", "skip"),
    }
    assert all("ttnn" in r["reason"] for r in rows if r["status"] == "skip")
    # the TT path still follows the package's rule: sharded for one tile row, interleaved for the 64-row prefill
    labels = {r["case"]: r["label"] for r in rows if r["backend"] == "tt-ref-bf16"}
    assert "(sharded" in labels[tiny_cases()[0].name] and "(interleaved" in labels[tiny_cases()[1].name]


def test_demo_summary_prints_the_matrix_from_the_same_run(monkeypatch, capsys):
    monkeypatch.setattr(summary, "demo_cases", lambda seed: tiny_cases(seed)[:1])
    monkeypatch.setattr(summary, "all_backends", lambda: [Golden(), Torch("bfloat16"), Scaled(1.01)])
    run = summary.print_demo_summary()
    out = capsys.readouterr().out
    case = tiny_cases()[0].name
    assert "Cross-backend parity" in out and case in out
    assert f"{case}: outside tolerance: scaled-1.01" in out
    assert [r.status for r in run.results] == ["pass", "pass", "FAIL"]
    assert report.cell(run.results[2]).endswith("!")


HUGE = Case("decode", 32, 2048, 2, 1e-5, "random", hard="huge")


class WrongOnOverflowRows(Torch):
    """torch-fp32 that returns 1.0 instead of 0 on the rows whose sum of squares overflows: not the documented limit."""

    def __init__(self):
        super().__init__("float32")
        self.name = "wrong-on-overflow"

    def run(self, case):
        y, label = super().run(case)
        y = y.clone()
        y[..., ::2, :] = 1.0  # the huge rows are the even ones
        return y, label


def test_fp32_overflow_rows_are_a_documented_limit_not_a_failure():
    """The huge rows (x near the bf16 maximum) overflow the fp32 sum of squares in ttnn's kernels and in torch: the
    row comes out as 0. The runner reports that as `limit` (the other rows within tolerance), and the run passes; a
    backend that returns anything else on those rows still fails."""
    backends = [Golden(), Torch("float32"), TTReference("bfloat16"), WrongOnOverflowRows()]
    run = runner.run_parity([HUGE], backends, progress=False)
    status = {r.backend: r.status for r in run.results}
    assert status == {"golden-f64": "pass", "torch-fp32": "limit", "tt-ref-bf16": "limit", "wrong-on-overflow": "FAIL"}
    tt = run.result(HUGE.name, "tt-ref-bf16")
    assert tt.reason.startswith("16 of 32 rows: TT hardware limit") and tt.max_ulp < 1.0
    assert report.cell(tt).endswith("L") and report.cell(run.result(HUGE.name, "wrong-on-overflow")).endswith("!")
    assert [r.backend for r in run.failures] == ["wrong-on-overflow"]
    passing = report.ParityRun(run.cases, run.backends[:3], run.results[:3], run.seed, run.wall_s)
    assert report.verdict(passing) == (
        "PASS: all 3 compared runs within tolerance; 2 of them within it on every row but those of a documented limit"
    )
    assert "L: torch-fp32 on" in report.short_report(passing)


def test_limit_rows_are_the_models_overflow_rows():
    lim = TTReference("bfloat16").limit(HUGE)
    assert lim.rows.tolist() == [i % 2 == 0 for i in range(32)]
    assert bool((lim.predicted == 0).all()) and lim.predicted.shape == (16, 2048)
    assert TTReference("bfloat16").limit(tiny_cases()[0]) is None
    assert Torch("bfloat16").limit(tiny_cases()[0]) is None


def test_the_mock_judge_runs_on_blackhole(tmp_path):
    """`--tt-arch blackhole`: ttnn's mock judge takes the Blackhole system of each case's device count (the tiny set's
    two devices: a P300) and accepts the per-device shapes there, labeled with the mock it ran on."""
    if importlib.util.find_spec("ttnn") is None:
        pytest.skip("ttnn is not installed: the mock judge needs its wheel")
    proc = _cli(tmp_path, "--tt-arch", "blackhole", "--backends", "golden-f64,ttnn-blackhole")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [r for r in _rows(tmp_path / "parity.csv") if r["backend"] == "ttnn-blackhole"]
    assert len(rows) == len(tiny_cases()) and {r["status"] for r in rows} == {"accepted"}, rows
    assert all(r["label"].startswith(runner_label()) and "mock p300 1x2" in r["label"] for r in rows), rows
