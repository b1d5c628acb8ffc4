"""The agreement battery: the package's rules and real ttnn (on a mock device) see the same inputs and must give the
same verdict, accept or reject, in both directions. The only exceptions are the package-only guards
(tt_rmsnorm.rules.PACKAGE_ONLY_RULES): there ttnn accepts (or crashes) and the package rejects on purpose."""

import mock_cases
import mock_worker
import pytest

from tt_rmsnorm import mock_cluster
from tt_rmsnorm.rules import PACKAGE_ONLY_RULES

pytestmark = pytest.mark.mock_cluster

OPS = ("pre", "post", "rms_norm", "all_gather")


def ttnn_side(case: dict) -> dict:
    try:
        return mock_cluster.run_isolated(case["system"], mock_worker.run_case, case, timeout=120)
    except mock_cluster.WorkerCrashed as e:
        return {"verdict": "crash", "message": str(e).splitlines()[0], "package_on_real": None}


def _both(pkg: dict, got: dict) -> str:
    return f"\n  package: {pkg['verdict']} {pkg['message']}\n  ttnn:    {got['verdict']} {got['message'][:600]}"


@pytest.mark.parametrize("case", mock_cases.CASES, ids=[c["id"] for c in mock_cases.CASES])
def test_package_and_ttnn_agree(case, request):
    if case["id"] in mock_cases.KNOWN_DISAGREEMENTS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=mock_cases.KNOWN_DISAGREEMENTS[case["id"]]))
    pkg = mock_cases.package_side(case)
    got = ttnn_side(case)
    expect = case["expect"]
    if expect.startswith("pkg:"):
        rule = expect[len("pkg:") :]
        assert rule in PACKAGE_ONLY_RULES, f"{rule} is not a documented package-only guard"
        assert got["verdict"] in ("accept", "crash"), f"ttnn rejects a case listed as package-only ({rule}):" + _both(
            pkg, got
        )
        assert pkg["verdict"] == "reject" and pkg["rule"] == rule, (
            f"the package-only guard {rule} did not fire:" + _both(pkg, got)
        )
    else:
        ttnn_verdict = "reject" if got["verdict"] == "crash" else got["verdict"]
        assert pkg["verdict"] == ttnn_verdict, "package and ttnn disagree:" + _both(pkg, got)
        assert got["verdict"] == expect, f"ttnn no longer behaves as the table says ({expect}):" + _both(pkg, got)
    if case["kw"].get("use_2d_core_grid") and pkg["verdict"] == "accept":  # accepted, but with the #35435 warning
        assert "AccuracyWarning" in pkg["warnings"], pkg
    real = got.get("package_on_real")
    if real is not None:  # the same rules fed real tensors (TensorDesc.from_tensor) must say the same
        assert (real["verdict"], real["rule"]) == (pkg["verdict"], pkg["rule"]), (
            f"TensorDesc vs real tensor: {real} vs {pkg}"
        )


def test_battery_covers_every_op_and_guard():
    by_op = {op: sum(c["op"] == op for c in mock_cases.CASES) for op in OPS}
    assert len(mock_cases.CASES) >= 200 and all(n >= 20 for n in by_op.values()), by_op
    exercised = {c["expect"][4:] for c in mock_cases.CASES if c["expect"].startswith("pkg:")}
    guards = {r for r in PACKAGE_ONLY_RULES if not r.startswith(("fused.", "all_gather_async."))}  # CCL: own battery
    assert exercised == guards, f"guards without a case: {guards - exercised}"
