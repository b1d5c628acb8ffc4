"""The differential fuzzer (differential.py) as tests: its generator and judge on their own, then a fresh seeded sample
of generated calls through ttnn on mock clusters and through the rules. The sample's seed is printed;
TT_RMSNORM_FUZZ_SEED repeats a run and TT_RMSNORM_FUZZ_N sizes it (300 calls by default)."""

import os

import differential
import fuzz_cases
import mock_cases
import pytest

from tt_rmsnorm.rules import PACKAGE_ONLY_RULES

N_ENV = "TT_RMSNORM_FUZZ_N"


def test_generator_is_seeded_and_balanced():
    """The same seed gives the same calls; about half are one mutation from a valid call, every op and system is
    drawn, and every call can be built on the mock."""
    a, b = fuzz_cases.generate(7, 400), fuzz_cases.generate(7, 400)
    assert a == b and a != fuzz_cases.generate(8, 400)
    near = sum(len(c["mutations"]) == 1 for c in a) / len(a)
    assert 0.35 <= near <= 0.65, near
    assert {c["op"] for c in a} == set(fuzz_cases.OPS)
    assert {c["system"] for c in a} == set(fuzz_cases.SYSTEMS)
    assert all(fuzz_cases.buildable(c) for c in a)
    for seed in range(20):  # every draw path, on many seeds
        assert all(fuzz_cases.buildable(c) for c in fuzz_cases.generate(seed, 300))


def _as_battery_case(id, op, x, expect, system="n150", **slots_and_kw):
    slots = {k: slots_and_kw.pop(k) for k in mock_cases.TENSOR_SLOTS if k in slots_and_kw}
    return {"op": op, "system": system, "x": x, **slots, "kw": slots_and_kw, "expect": expect}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_failing_call_prints_as_a_battery_case(seed):
    """The line printed for a failing call, evaluated with the battery's constructors, is that same call."""
    names = {n: getattr(mock_cases, n) for n in ("T", "S", "PC", "DPC", "CK")}
    for c in fuzz_cases.generate(seed, 60):
        if c["op"] == "chain":
            continue
        line = differential.battery_line(c, "reject", c["id"])
        back = eval(line, {**names, "case": _as_battery_case})
        assert {k: v for k, v in back.items() if k != "expect"} == {
            k: c[k] for k in back if k in c and k != "expect"
        }, line


def _got(verdict, pkg_on_real=None):
    return {"verdict": verdict, "message": "", "package_on_real": pkg_on_real}


def test_judge_classifies_each_outcome():
    """Agreement both ways, package-only guards (ttnn accepts or crashes), and every kind of disagreement."""
    ok = {"op": "pre", "system": "n150", "x": mock_cases.T((1, 1, 32, 1024)), "kw": {}}
    host = {**ok, "x": mock_cases.T((1, 1, 32, 1024), host=True)}
    wide = {**ok, "x": mock_cases.T((1, 1, 32, 8192))}
    assert "input.on_device" in PACKAGE_ONLY_RULES
    assert differential.judge_step(ok, _got("accept"))[0] == "agree"
    assert differential.judge_step(wide, _got("reject"))[0] == "agree"
    assert differential.judge_step(host, _got("crash"))[0] == "package-only"
    assert differential.judge_step(host, _got("accept"))[0] == "package-only"
    assert differential.judge_step(ok, _got("reject"))[0] == "disagree"
    assert differential.judge_step(wide, _got("accept"))[0] == "disagree"
    real = {"verdict": "reject", "rule": "pre.l1_budget", "message": "", "warnings": []}
    assert differential.judge_step(ok, _got("accept", real))[0] == "disagree"  # TensorDesc vs real tensor
    crash = differential.judge(ok, {"crash": "mock n150 worker died"})
    assert crash.category == "disagree" and crash.crashed
    assert differential.judge(ok, {"harness": "building the tensors: ..."}).category == "harness"


@pytest.mark.mock_cluster
def test_fuzz_sample_agrees(capsys):
    """A fresh sample: no call on which the rules and ttnn disagree (outside the package-only guards), no call the
    harness could not build, and a sample that ttnn neither mostly accepts nor mostly rejects."""
    seed = differential.seed_from_env()
    n = int(os.environ.get(N_ENV, "300"))
    with capsys.disabled():
        print(f"\nfuzz seed {seed} ({differential.SEED_ENV}={seed} repeats it), {n} calls")
    outcomes = differential.run(fuzz_cases.generate(seed, n))
    with capsys.disabled():
        print(differential.table(outcomes))
    failures = [o for o in outcomes if o.category in ("disagree", "harness")]
    assert not failures, f"seed {seed}:\n" + "\n\n".join(differential.failure_report(o) for o in failures)
    accepted = sum(o.ttnn_accepted for o in outcomes) / n
    assert 0.25 <= accepted <= 0.75, f"seed {seed}: ttnn accepted {accepted:.0%} of the sample"


def test_an_open_class_is_counted_apart_and_nothing_else_is():
    """A disagreement of a documented open class is 'open'; the same accept-vs-reject with another message is not."""
    gather = {"op": "all_gather", "system": "t3k", "x": mock_cases.T((1, 1, 32, 32)), "kw": {"dim": 3}}
    clash = "RuntimeError: Statically allocated dataflow buffers in program 1 clash with L1 buffers on core range"

    def rejected(message):
        return {"verdict": "reject", "message": message, "package_on_real": None}

    assert differential.judge_step(gather, rejected(clash))[0] == "open"
    assert differential.judge_step(gather, rejected("RuntimeError: something else"))[0] == "disagree"
    pre = {"op": "pre", "system": "t3k", "x": mock_cases.T((1, 1, 32, 1024)), "kw": {}}
    assert differential.judge_step(pre, rejected(clash))[0] == "disagree"
