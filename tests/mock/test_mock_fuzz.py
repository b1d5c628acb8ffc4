"""The differential fuzzer (tools/differential.py) as tests: its generator and judge on their own, then a seeded sample
of generated calls through ttnn on mock clusters and through the rules. The sample's seed is fixed (SAMPLE_SEED), so
that the suite's verdict does not change from run to run; TT_RMSNORM_FUZZ_SEED picks another and TT_RMSNORM_FUZZ_N
sizes it (150 calls by default). `make fuzz` draws a fresh seed."""

import os

import pytest

from tests.mock import fuzz_cases, fuzz_mutations, mock_cases, mock_cases_ccl
from tools import differential
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES

N_ENV = "TT_RMSNORM_FUZZ_N"
SAMPLE_SEED = 12


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


def test_l1_edge_mutation_lands_where_the_package_verdict_flips():
    """A call the l1-edge mutation placed is, one tile across its width (per core when sharded), on the other side of
    the package's L1 verdict: accepted at one width, rejected by an `*.l1_budget` rule at the other."""
    placed = [c for c in fuzz_cases.generate(5, 600) if c["mutations"] == ["x.l1_edge_width"]]
    assert len(placed) >= 5 and any(fuzz_mutations.is_sharded(c) for c in placed), len(placed)
    for c in placed:
        tiles = fuzz_mutations.l1_edge_tiles(c)
        here = fuzz_mutations.l1_side(c)
        across = fuzz_mutations.l1_side(fuzz_mutations.at_l1_edge_tiles(c, tiles + (1 if here == "accept" else -1)))
        assert {here, across} == {"accept", "l1"}, (c, here, across)


def _as_battery_case(id, op, x, expect, system="n150", **slots_and_kw):
    slots = {k: slots_and_kw.pop(k) for k in mock_cases.TENSOR_SLOTS if k in slots_and_kw}
    return {"op": op, "system": system, "x": x, **slots, "kw": slots_and_kw, "expect": expect}


def _as_ccl_battery_case(id, op, system, x, expect, **slots_and_kw):
    names = (*mock_cases_ccl.TENSOR_SLOTS, "sems", "barrier")
    slots = {k: slots_and_kw.pop(k) for k in names if k in slots_and_kw}
    return {"op": op, "system": system, "x": x, **slots, "kw": slots_and_kw, "expect": expect}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_failing_call_prints_as_a_battery_case(seed):
    """The line printed for a failing call, evaluated with its battery's constructors, is that same call: the CCL
    ops print as lines for mock_cases_ccl's table, the others for mock_cases'."""
    names = {n: getattr(mock_cases, n) for n in ("T", "S", "PC", "DPC", "CK")} | {"SEM": mock_cases_ccl.SEM}
    seen = set()
    for c in fuzz_cases.generate(seed, 120):
        if c["op"] == "chain":
            continue
        ccl = c["op"] in mock_cases_ccl.OPS
        seen.add(ccl)
        line = differential.battery_line(c, "reject", c["id"])
        back = eval(line, {**names, "case": _as_ccl_battery_case if ccl else _as_battery_case})
        assert {k: v for k, v in back.items() if k != "expect"} == {
            k: c[k] for k in back if k in c and k != "expect"
        }, line
    assert seen == {True, False}


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
    assert crash.category == "disagree" and crash.crashed and crash.missed  # the package accepted it
    assert not differential.judge(wide, _got("accept")).missed  # a disagreement the other way round
    assert differential.agreement([differential.judge(ok, _got("accept")), crash]) == 0.5
    assert differential.judge(ok, {"harness": "building the tensors: ..."}).category == "harness"


@pytest.mark.mock_cluster
def test_fuzz_sample_agrees(capsys):
    """The seeded sample: no call on which the rules and ttnn disagree (outside the package-only guards), no call the
    harness could not build, and a sample that ttnn neither mostly accepts nor mostly rejects."""
    seed = int(os.environ.get(differential.SEED_ENV) or SAMPLE_SEED)
    n = int(os.environ.get(N_ENV, "150"))
    with capsys.disabled():
        print(f"\nfuzz seed {seed} ({differential.SEED_ENV}={seed} repeats it), {n} calls")
    outcomes = differential.run(fuzz_cases.generate(seed, n))
    with capsys.disabled():
        print(differential.table(outcomes))
    failures = [o for o in outcomes if o.category in ("disagree", "harness")]
    assert not failures, f"seed {seed}:\n" + "\n\n".join(differential.failure_report(o) for o in failures)
    accepted = sum(o.ttnn_accepted for o in outcomes) / n
    assert 0.25 <= accepted <= 0.75, f"seed {seed}: ttnn accepted {accepted:.0%} of the sample"


def test_an_all_gather_l1_clash_is_a_disagreement():
    """No class of disagreement is set apart any more: the gather into L1 whose output pushes ttnn's static circular
    buffers into a clash is a rule (all_gather.l1_budget), so a clash the rule misses fails the run, and the package's
    rejection at the edge agrees with ttnn's."""
    clash = "RuntimeError: Statically allocated circular buffers in program 1 clash with L1 buffers on core range"
    ok = {"op": "all_gather", "system": "t3k", "x": mock_cases.T((1, 1, 32, 32)), "kw": {"dim": 3, "cluster_axis": 1}}
    assert (
        differential.judge_step(ok, {"verdict": "reject", "message": clash, "package_on_real": None})[0] == "disagree"
    )
    edge = {**ok, "x": mock_cases.T((1, 1, 675 * 7 * 32, 32)), "kw": {**ok["kw"], "memory_config": "L1"}}
    assert differential.judge_step(edge, {"verdict": "reject", "message": clash, "package_on_real": None})[0] == "agree"
    assert "open" not in differential.COLUMNS
