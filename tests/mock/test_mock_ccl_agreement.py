"""The CCL agreement battery: tt_rmsnorm.rules.ccl_checks and real ttnn (mock T3000, Galaxy, P300 and Blackhole
Galaxy) judge the same all_gather_async, fused_rms_minimal and pre -> all_gather_async -> post calls, and must agree;
where they accept, the package's prediction of the output (shape, dtype, memory config) must be what ttnn returned. The
exceptions are the package-only guards (tt_rmsnorm.rules.table.PACKAGE_ONLY_RULES), where ttnn accepts and the package
rejects on purpose."""

import pytest

from tests.mock import mock_cases_ccl, mock_worker
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES, RULES
from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

OPS = ("fused", "all_gather_async", "compose")
CCL_PREFIXES = ("fused.", "all_gather_async.")


def ttnn_side(case: dict) -> dict:
    """The worker's answer. A case that cannot be built, or any error outside the ttnn calls, raises IsolatedError
    here: it fails the test instead of counting as a rejection. A crash of ttnn itself is its rejection: an interleaved
    stats buffer is refused with std::bad_alloc or, after other calls in the same process, a segfault."""
    try:
        return workers.run_isolated(case["system"], mock_worker.run_ccl_case, case, timeout=120)
    except workers.WorkerCrashed as e:
        return {"verdict": "reject", "message": f"crash: {str(e).splitlines()[0]}", "package_on_real": None}


def _both(pkg: dict, got: dict) -> str:
    return f"\n  package: {pkg['verdict']} {pkg['message']}\n  ttnn:    {got['verdict']} {got['message'][:600]}"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c["id"], marks=() if mock_cases_ccl.in_make_test(c) else pytest.mark.full_battery)
        for c in mock_cases_ccl.CASES
    ],
)
def test_package_and_ttnn_agree(case, request):
    if case["id"] in mock_cases_ccl.KNOWN_DISAGREEMENTS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=mock_cases_ccl.KNOWN_DISAGREEMENTS[case["id"]]))
    pkg = mock_cases_ccl.package_side(case)
    got = ttnn_side(case)
    expect = case["expect"]
    if expect.startswith("pkg:"):
        rule = expect[len("pkg:") :]
        assert rule in PACKAGE_ONLY_RULES, f"{rule} is not a documented package-only guard"
        assert got["verdict"] == "accept", f"ttnn rejects a case listed as package-only ({rule}):" + _both(pkg, got)
        assert (pkg["verdict"], pkg["rule"]) == ("reject", rule), f"the guard {rule} did not fire:" + _both(pkg, got)
    else:
        assert pkg["verdict"] == got["verdict"], "package and ttnn disagree:" + _both(pkg, got)
        assert got["verdict"] == expect, f"ttnn no longer behaves as the table says ({expect}):" + _both(pkg, got)
    if pkg["verdict"] == "accept":  # what the package predicts (persistent buffers are sized from it) is what ttnn made
        assert pkg["predicted"] == got["output"], f"predicted {pkg['predicted']}, ttnn returned {got['output']}"
    real = got["package_on_real"]  # the same rules fed the real tensors and semaphore handles must say the same
    if real is not None:
        assert (real["verdict"], real["rule"]) == (pkg["verdict"], pkg["rule"]), f"TensorDesc vs real: {real} vs {pkg}"


def test_battery_covers_every_op_system_and_guard():
    by = {
        (op, s): sum(c["op"] == op and c["system"] == s for c in mock_cases_ccl.CASES)
        for op in OPS
        for s in mock_cases_ccl.SYSTEMS
    }
    assert len(mock_cases_ccl.CASES) >= 80 and all(n >= 10 for n in by.values()), by
    expects = {c["expect"] if not c["expect"].startswith("pkg:") else "pkg" for c in mock_cases_ccl.CASES}
    assert expects == {"accept", "reject", "pkg"}
    ccl_guards = {r for r in PACKAGE_ONLY_RULES if r.startswith(CCL_PREFIXES)}
    exercised = {c["expect"][4:] for c in mock_cases_ccl.CASES if c["expect"].startswith("pkg:")}
    assert ccl_guards <= exercised, f"guards without a case: {ccl_guards - exercised}"
    assert exercised <= set(RULES) | set(PACKAGE_ONLY_RULES)


def test_a_broken_case_fails_instead_of_agreeing():
    """A case the worker cannot even build (here an unknown dtype spec) must not come back as a 'reject' verdict."""
    case = dict(mock_cases_ccl.CASES[0])
    case["x"] = {**case["x"], "dtype": "no-such-dtype"}
    with pytest.raises(workers.IsolatedError, match="no-such-dtype"):
        ttnn_side(case)
