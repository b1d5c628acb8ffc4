"""The differential judge: generated calls (fuzz_cases) run through real ttnn on mock clusters and through the package's
rules, then each call is classified.

- agree: both accept, or both reject (a ttnn crash counts as a reject);
- package-only: the package rejects with a rule of `PACKAGE_ONLY_RULES` and ttnn accepts or crashes;
- disagree: anything else, including a package fault (an exception other than `RuleError`) and the rules giving a
  different verdict or rule on the real tensors than on the `TensorDesc`s;
- harness: the call's tensors could not be built (a generator fault, counted apart and failing the run).

A composition (`chain`) agrees when each of its steps does; a CCL call (fused, all_gather_async, compose) runs as the
CCL battery's cases do, and an accepted one agrees only when ttnn returns the output the package predicts. A failing
call is printed as a line for its battery's table (`case(...)` of mock_cases' or mock_cases_ccl's format), ttnn's
verdict as its `expect`.

    python -m tools.differential 2000        # a fresh seed, printed; TT_RMSNORM_FUZZ_SEED fixes it
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass, field

from loguru import logger

from tests.mock import fuzz_cases, fuzz_worker, mock_cases, mock_cases_ccl
from tt_rmsnorm.architecture import ARCHITECTURES
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES
from tt_rmsnorm.testing import workers
from tt_rmsnorm.testing.mock_cluster import ARCHES

SEED_ENV = "TT_RMSNORM_FUZZ_SEED"
BATCH = 40
BATCH_TIMEOUT_S = 300.0


def seed_from_env() -> int:
    """TT_RMSNORM_FUZZ_SEED when set, else a fresh one."""
    given = os.environ.get(SEED_ENV)
    return int(given) if given else random.SystemRandom().randrange(1 << 31)


@dataclass
class Outcome:
    case: dict
    category: str  # agree | package-only | disagree | harness
    crashed: bool = False
    ttnn_accepted: bool = False
    detail: str = ""
    failing_step: dict | None = field(default=None, repr=False)
    failing_verdict: str = ""  # ttnn's verdict on the failing step: the battery line's `expect`
    missed: bool = False  # a disagreement where the package accepts and ttnn rejects or crashes


def _host_input(case: dict) -> bool:
    return bool(case["x"].get("host"))


def _ttnn_side(system: str, cases: list[dict]) -> list[dict]:
    """ttnn's results for one system's calls, a batch per worker message. A host-resident input crashes ttnn, so such a
    call runs alone; a batch that crashes the worker anyway is replayed call by call."""
    results: dict[int, dict] = {}
    singles = [i for i, c in enumerate(cases) if _host_input(c)]
    batched = [i for i, c in enumerate(cases) if not _host_input(c)]
    for start in range(0, len(batched), BATCH):
        idx = batched[start : start + BATCH]
        try:
            got = workers.run_isolated(system, fuzz_worker.run_batch, [cases[i] for i in idx], timeout=BATCH_TIMEOUT_S)
            results.update(zip(idx, got, strict=True))
        except (workers.WorkerCrashed, workers.WorkerTimeout, workers.IsolatedError):
            singles += idx
    for i in singles:
        try:
            results[i] = workers.run_isolated(system, fuzz_worker.run_one, cases[i], timeout=120)
        except workers.WorkerCrashed as e:
            results[i] = {"crash": str(e).splitlines()[0]}
        except (workers.WorkerTimeout, workers.IsolatedError) as e:
            results[i] = {"harness": f"{type(e).__name__}: {str(e)[:600]}"}
    return [results[i] for i in range(len(cases))]


def _package_side(case: dict) -> dict:
    try:
        if case["op"] in mock_cases_ccl.OPS:
            return mock_cases_ccl.package_side(case)
        return mock_cases.package_side(case)
    except Exception as e:  # a package fault is a verdict of its own, and never agrees with ttnn
        return {"verdict": "error", "rule": None, "message": f"{type(e).__name__}: {e}", "warnings": []}


def judge_step(case: dict, got: dict) -> tuple[str, str, bool]:
    """(category, detail, missed) of one op call: the package on TensorDescs and on real tensors against ttnn's
    verdict; `missed` when the package accepts a call ttnn rejects or crashes on."""
    pkg = _package_side(case)
    both = f"package: {pkg['verdict']} {pkg['message'][:400]}\n  ttnn: {got['verdict']} {got['message'][:600]}"
    real = got.get("package_on_real")
    if real is not None and (real["verdict"], real["rule"]) != (pkg["verdict"], pkg["rule"]):
        return "disagree", f"rules on TensorDescs vs on real tensors: {pkg['rule']} vs {real['rule']}\n  {both}", False
    if pkg["verdict"] == "error":
        return "disagree", f"package fault\n  {both}", False
    if pkg["verdict"] == "reject" and pkg["rule"] in PACKAGE_ONLY_RULES and got["verdict"] in ("accept", "crash"):
        return "package-only", both, False
    ttnn_verdict = "reject" if got["verdict"] == "crash" else got["verdict"]
    if pkg["verdict"] == ttnn_verdict == "accept" and pkg.get("predicted") not in (None, got.get("output")):
        return "disagree", f"predicted output {pkg['predicted']}, ttnn returned {got.get('output')}\n  {both}", False
    missed = pkg["verdict"] == "accept" and ttnn_verdict == "reject"
    return ("agree" if pkg["verdict"] == ttnn_verdict else "disagree"), both, missed


def judge(case: dict, got: dict) -> Outcome:
    if "harness" in got:
        return Outcome(case, "harness", detail=got["harness"])
    if "crash" in got:
        got = {"verdict": "crash", "message": got["crash"], "package_on_real": None}
    if case["op"] != "chain":
        category, detail, missed = judge_step(case, got)
        return Outcome(
            case,
            category,
            crashed=got["verdict"] == "crash",
            ttnn_accepted=got["verdict"] == "accept",
            detail=detail,
            failing_step=case if category == "disagree" else None,
            failing_verdict="reject" if got["verdict"] == "crash" else got["verdict"],
            missed=missed,
        )
    if got.get("verdict") == "crash":  # ttnn crashes on host inputs, which the pre sees first
        pre = {"op": "pre", "system": case["system"], "x": case["x"], "kw": case["pre_kw"]}
        pre.update({"residual": case["residual"]} if case.get("residual") else {})
        category, detail, missed = judge_step(pre, got)
        return Outcome(
            case, category, crashed=True, detail=detail, failing_step=pre, failing_verdict="reject", missed=missed
        )
    category = "agree"
    for step in got["steps"]:
        if step["case"]["x"] is None:
            return Outcome(case, "harness", detail="an intermediate tensor has no spec form")
        cat, detail, missed = judge_step(step["case"], step)
        if cat == "disagree":
            return Outcome(
                case,
                cat,
                detail=f"step {step['case']['op']}: {detail}",
                failing_step=step["case"],
                failing_verdict=step["verdict"],
                missed=missed,
            )
        if cat == "package-only":
            category = cat
            break
    accepted = len(got["steps"]) == 3 and got["steps"][-1]["verdict"] == "accept"
    return Outcome(case, category, ttnn_accepted=accepted)


def run(cases: list[dict]) -> list[Outcome]:
    """Every call through both sides; outcomes in the order of `cases`."""
    by_system: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        by_system.setdefault(c["system"], []).append(i)
    outcomes: list[Outcome | None] = [None] * len(cases)
    for system in sorted(by_system, key=list(mock_cases.GRIDS).index):
        idx = by_system[system]
        for i, got in zip(idx, _ttnn_side(system, [cases[i] for i in idx]), strict=True):
            outcomes[i] = judge(cases[i], got)
    return outcomes


# ---------------------------------------------------------------------------------------------------------------------
# Reporting.

COLUMNS = (
    "calls",
    "agree",
    "package-only",
    "disagree",
    "pkg accepts, ttnn rejects",
    "crashes",
    "harness",
    "ttnn accepts",
    "agreement",
)


def agreement(outcomes: list[Outcome]) -> float:
    """The share of calls outside the package-only guards on which the package and ttnn agree."""
    judged = [o for o in outcomes if o.category != "package-only"]
    return sum(o.category == "agree" for o in judged) / len(judged) if judged else 1.0


def architecture_of(o: Outcome) -> str:
    return ARCHES[o.case["system"]]


def table(outcomes: list[Outcome]) -> str:
    """Per architecture, per op on each architecture, then per dtype of the input: the counts of each category,
    package accepts / ttnn rejects (within disagree), ttnn crashes, and the agreement outside the package-only
    guards."""
    by_arch = _rows(outcomes, "architecture", tuple(ARCHITECTURES), architecture_of)
    sections = [by_arch]
    for arch in ARCHITECTURES:
        mine = [o for o in outcomes if architecture_of(o) == arch]
        if mine:
            sections.append(_rows(mine, f"{arch} op", fuzz_cases.OPS, lambda o: o.case["op"]))
    sections.append(_rows(outcomes, "input dtype", tuple(mock_cases.DTYPES), lambda o: o.case["x"]["dtype"]))
    return "\n\n".join(sections)


def _rows(outcomes: list[Outcome], title: str, keys, key_of) -> str:
    rows = []
    for key in (*keys, "total"):
        mine = [o for o in outcomes if key == "total" or key_of(o) == key]
        if not mine and key != "total":
            continue
        counts = (
            len(mine),
            sum(o.category == "agree" for o in mine),
            sum(o.category == "package-only" for o in mine),
            sum(o.category == "disagree" for o in mine),
            sum(o.missed for o in mine),
            sum(o.crashed for o in mine),
            sum(o.category == "harness" for o in mine),
            sum(o.ttnn_accepted for o in mine),
        )
        rows.append((key, *counts, f"{agreement(mine):.2%}"))
    widths = [max(len(c), 7) + 2 for c in COLUMNS]
    lines = [f"{title:<17}" + "".join(f"{c:>{w}}" for c, w in zip(COLUMNS, widths, strict=True))]
    lines += [f"{r[0]:<17}" + "".join(f"{v:>{w}}" for v, w in zip(r[1:], widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _tensor(spec: dict) -> str:
    args = [repr(spec["shape"])]
    if spec["dtype"] != "bf16" or spec["layout"] != "TILE":
        args.append(repr(spec["dtype"]))
    if spec["layout"] != "TILE":
        args.append(repr(spec["layout"]))
    if spec["mem"] != "DRAM":
        args.append(f"mem={_value(spec['mem'])}")
    if spec["host"]:
        args.append("host=True")
    if spec["kind"]:
        args.append(f"kind={spec['kind']!r}")
    return f"T({', '.join(args)})"


def _value(v) -> str:
    if isinstance(v, tuple) and v and v[0] == "shard":
        _, strategy, grid, shard, orient = v
        return f"S({strategy!r}, {grid!r}, {shard!r}{'' if orient == 'ROW' else ', ' + repr(orient)})"
    if isinstance(v, tuple) and v and v[0] == "sharded_pc":
        _, grid, sub, bh, bw, inplace, welford = v
        extra = (", inplace=True" if inplace else "") + (", welford=True" if welford else "")
        return f"PC({grid!r}, {sub}, {bh}, {bw}{extra})"
    if isinstance(v, tuple) and v and v[0] == "default_pc":
        return f"DPC(welford={v[1]}, legacy_reduction={v[2]})"
    if isinstance(v, tuple) and v and v[0] == "sem":
        _, grid, count, shared = v
        return f"SEM({grid!r}, count={count}, shared={shared})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, tuple) and v and v[0] == "compute":
        _, fp32, fidelity, approx, sync, packer = v
        packer_kw = ", packer_l1_acc=True" if packer else ""
        return f"CK(fp32={fp32}, fidelity={fidelity!r}, approx={approx}, dst_sync={sync}{packer_kw})"
    return repr(v)


def battery_line(step: dict, expect: str, name: str) -> str:
    """`step` (a single-op call) as a line for its battery's table: mock_cases' case(id, op, x, expect, system=...,
    ...), or for the CCL ops mock_cases_ccl's case(id, op, system, x, expect, ...)."""
    if step["op"] in mock_cases_ccl.OPS:
        parts = [repr(name), repr(step["op"]), repr(step["system"]), _tensor(step["x"]), repr(expect)]
        slots = mock_cases_ccl.TENSOR_SLOTS[1:]
        parts += [f"{k}={_value(step[k])}" for k in ("sems", "barrier") if step.get(k)]
    else:
        parts = [repr(name), repr(step["op"]), _tensor(step["x"]), repr(expect), f"system={step['system']!r}"]
        slots = mock_cases.TENSOR_SLOTS[1:]
    parts += [f"{slot}={_tensor(step[slot])}" for slot in slots if step.get(slot)]
    parts += [f"{k}={_value(v)}" for k, v in step["kw"].items()]
    return f"case({', '.join(parts)})"


def failure_report(o: Outcome) -> str:
    head = f"{o.case['id']} [{o.category}] mutations={o.case.get('mutations')}"
    if o.failing_step is None:
        return f"{head}\n  {o.detail}"
    name = f"{o.case['id']}-{o.failing_step['op']}"
    return f"{head}\n  {o.detail}\n  {battery_line(o.failing_step, o.failing_verdict, name)}"


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 1000
    logger.disable("tt_rmsnorm")  # the rules' warnings, once per generated call, would bury the table
    seed = seed_from_env()
    print(f"fuzz seed {seed} ({SEED_ENV}={seed} repeats it), {n} calls", flush=True)
    t0 = time.perf_counter()
    cases = fuzz_cases.generate(seed, n)
    outcomes = run(cases)
    wall = time.perf_counter() - t0
    workers.shutdown_workers()
    failures = [o for o in outcomes if o.category in ("disagree", "harness")]
    for o in failures:
        print(failure_report(o), "\n")
    print(table(outcomes))
    near = sum(len(c["mutations"]) == 1 for c in cases)
    print(f"seed {seed}: {n} calls ({near} one mutation from a valid call) in {wall:.1f} s wall")
    for arch in ARCHITECTURES:
        mine = [o for o in outcomes if architecture_of(o) == arch]
        refused = sum(o.category == "disagree" and not o.missed for o in mine)
        print(
            f"{arch}: {len(mine)} calls, {sum(o.missed for o in mine)} false accepts (the package accepts, ttnn "
            f"rejects or crashes), {refused} other disagreements; agreement outside PACKAGE_ONLY_RULES "
            f"{agreement(mine):.2%}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
