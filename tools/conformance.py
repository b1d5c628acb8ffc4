"""Runs tt-metal's RMSNorm test parameter sets (corpus.ENTRIES) through the package's rules (device-free) and through
real ttnn 0.81.1 on mock clusters, and prints the table: package verdict vs tt-metal's intent vs ttnn on mock.

    python -m tools.conformance                 # everything (make conformance)
    python -m tools.conformance --sample 40     # a seeded sample

A call agrees when the package and ttnn give the same verdict, or when the package refuses with one of its documented
package-only rules (tt_rmsnorm.rules.table.PACKAGE_ONLY_RULES) where ttnn accepts. An entry's verdict is its first
refused call. The exit status is 1 when a call disagrees.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter

from loguru import logger

from tests.conformance import conformance_worker, corpus, corpus_format
from tests.mock import mock_cases
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES
from tt_rmsnorm.testing import workers

KEYWORD_RULE = "api.keyword"  # a keyword 0.81.1's ops do not take: a TypeError from the rules' signature, as from ttnn


def package_call(case: dict) -> dict:
    """The rules' verdict on one call, from TensorDescs built from its specs."""
    try:
        return mock_cases.package_side(case)
    except TypeError as e:
        return {"verdict": "reject", "rule": KEYWORD_RULE, "message": str(e), "warnings": []}
    except Exception as e:  # a call the rules cannot describe: reported, never hidden
        return {"verdict": "crash", "rule": type(e).__name__, "message": str(e), "warnings": []}


def package_entry(entry: dict) -> dict:
    results = [package_call(c) for c in entry["calls"]]
    warned = sorted({w for r in results for w in r["warnings"]})
    refused = next((r for r in results if r["verdict"] != "accept"), None)
    if refused:
        return {**refused, "warnings": warned}
    return {
        "verdict": "warn" if "AccuracyWarning" in warned else "accept",
        "rule": None,
        "message": "",
        "warnings": warned,
    }


def call_key(case: dict) -> str:
    return repr({k: case[k] for k in sorted(case)})


def ttnn_calls(entries, timeout=120) -> dict[str, dict]:
    """ttnn's verdict for every distinct call of `entries` that runs on a mock, keyed by call_key."""
    todo = {}
    for e in entries:
        if "not_on_mock" not in e["notes"]:
            for c in e["calls"]:
                todo.setdefault(call_key(c), c)
    verdicts = {}
    for key, case in sorted(todo.items(), key=lambda kv: list(mock_cases.GRIDS).index(kv[1]["system"])):
        try:
            verdicts[key] = workers.run_isolated(case["system"], conformance_worker.ttnn_call, case, timeout=timeout)
        except workers.WorkerCrashed as err:
            verdicts[key] = {"verdict": "crash", "message": str(err).splitlines()[0]}
    return verdicts


def ttnn_entry(entry: dict, verdicts: dict) -> dict:
    if "not_on_mock" in entry["notes"]:
        return {"verdict": "n/a", "message": "no mock configuration for this grid"}
    results = [verdicts[call_key(c)] for c in entry["calls"]]
    return next((r for r in results if r["verdict"] != "accept"), results[0] if results else {"verdict": "accept"})


def agrees(pkg: dict, got: dict) -> bool | None:
    """None where there is nothing to compare (no mock run, or a call the rules cannot describe yet)."""
    if got["verdict"] == "n/a" or pkg["verdict"] == "crash":
        return None
    ttnn_verdict = "accept" if got["verdict"] == "accept" else "reject"
    pkg_verdict = "reject" if pkg["verdict"] == "reject" else "accept"
    if pkg_verdict == ttnn_verdict:
        return True
    return pkg_verdict == "reject" and pkg["rule"] in PACKAGE_ONLY_RULES and got["verdict"] in ("accept", "crash")


def package_class(pkg: dict) -> str:
    if pkg["verdict"] in ("accept", "warn"):
        return pkg["verdict"]
    if pkg["verdict"] == "crash":
        return f"crash ({pkg['rule']})"
    return f"refuse, package-only {pkg['rule']}" if pkg["rule"] in PACKAGE_ONLY_RULES else f"refuse {pkg['rule']}"


def run(entries, with_mock=True) -> list[dict]:
    verdicts = ttnn_calls(entries) if with_mock else {}
    rows = []
    for e in entries:
        pkg = package_entry(e)
        got = ttnn_entry(e, verdicts) if with_mock else {"verdict": "n/a", "message": "not run"}
        per_call = [
            agrees(package_call(c), verdicts[call_key(c)]) if call_key(c) in verdicts else None for c in e["calls"]
        ]
        rows.append({"entry": e, "package": pkg, "ttnn": got, "agree": per_call})
    return rows


def sample(entries, n: int, seed: int) -> list[dict]:
    return random.Random(seed).sample(entries, min(n, len(entries)))


def table(rows) -> str:
    files = len({r["entry"]["source"] for r in rows})
    lines = [f"tt-metal RMSNorm test parameter sets: {len(rows)} entries from {files} files"]
    counts = Counter((r["entry"]["intent"], package_class(r["package"]), r["ttnn"]["verdict"]) for r in rows)
    width = max(len(k[1]) for k in counts) + 2
    lines += ["", f"{'tt-metal intent':<16}{'package':<{width}}{'ttnn 0.81.1 on mock':<22}entries"]
    for (intent, pkg, got), n in sorted(counts.items(), key=lambda kv: (corpus_format.INTENTS.index(kv[0][0]), -kv[1])):
        lines.append(f"{intent:<16}{pkg:<{width}}{got:<22}{n}")
    calls = [a for r in rows for a in r["agree"] if a is not None]
    lines += ["", f"calls compared with ttnn: {len(calls)}; agree: {sum(calls)}; disagree: {len(calls) - sum(calls)}"]
    by_file = Counter(r["entry"]["source"] for r in rows)
    lines += ["", "entries per source file:"] + [f"  {n:4d}  {src}" for src, n in sorted(by_file.items())]
    notes = Counter(n for r in rows for n in r["entry"]["notes"])
    lines += ["", "notes: " + ", ".join(f"{k} {v}" for k, v in sorted(notes.items()))]
    odd = [r for r in rows if False in r["agree"]]
    if odd:
        lines += ["", "disagreements:"]
        for r in odd:
            lines.append(
                f"  {r['entry']['id']}: package {package_class(r['package'])}; ttnn {r['ttnn']['message'][:200]}"
            )
    wrong = [r for r in rows if r["entry"]["intent"] == "wrong"]
    lines += ["", "known-wrong entries (tt-metal shows the output is wrong):"]
    for r in wrong:
        lines.append(f"  {r['entry']['id']}: package {package_class(r['package'])}; ttnn {r['ttnn']['verdict']}")
    return "\n".join(lines)


def _tt_metal_config(c: dict) -> dict:
    """What a tt-metal test passed to a distributed pre/post, in the terms the planner chooses."""
    kw = c["kw"]
    ck, pc, mem = kw.get("compute_kernel_config"), kw.get("program_config"), c["x"]["mem"]
    cfg = {
        "fp32_acc": bool(ck and ck[1]),
        "fidelity": ck[2] if ck else "HiFi4",
        "legacy_reduction": bool(pc and pc[0] == "default_pc" and pc[2]),
        "2d_grid": bool(kw.get("use_2d_core_grid")),
    }
    if isinstance(mem, tuple) and mem[0] == "shard":
        x0, y0, x1, y1 = mem[2]
        cfg.update(grid=f"{x1 - x0 + 1}x{y1 - y0 + 1}", block_w=pc[4] if pc else None)
    return cfg


def _planned_config(c: dict, grid) -> dict:
    sharded = isinstance(c["x"]["mem"], tuple)
    p = layouts.plan(c["x"]["shape"], 8, compute_grid=grid, sharded=sharded)
    ck = p.compute_kernel_config
    cfg = {
        "fp32_acc": bool(ck.fp32_dest_acc_en),
        "fidelity": str(ck.math_fidelity).rsplit(".", 1)[-1],
        "legacy_reduction": False,
        "2d_grid": False,
    }
    if sharded:
        cfg.update(grid=f"{p.grid[0]}x{p.grid[1]}", block_w=p.program_config.block_w)
    return cfg


def planner_vs_tt_metal(entries) -> str:
    """The planner's configs against the ones tt-metal's tests pass to the distributed ops, over distinct calls."""
    rows = {}
    for e in entries:
        if e["intent"] != "runs" or e["notes"]:
            continue
        for c in e["calls"]:
            if c["op"] in ("pre", "post"):
                theirs = _tt_metal_config(c)
                key = repr((c["op"], c["x"]["shape"], c["x"]["dtype"], sorted(theirs.items())))
                rows.setdefault(key, (theirs, _planned_config(c, e["grid"])))
    same = sum(theirs == ours for theirs, ours in rows.values())
    lines = [f"planner vs tt-metal's configs for the distributed ops: {len(rows)} distinct calls, the same in {same}"]
    for aspect in ("fp32_acc", "fidelity", "legacy_reduction", "2d_grid", "grid", "block_w"):
        pairs = Counter((t.get(aspect), o.get(aspect)) for t, o in rows.values() if aspect in t or aspect in o)
        differ = {f"{t}->{o}": n for (t, o), n in pairs.items() if t != o}
        lines.append(f"  {aspect:<17} differs in {sum(differ.values()):3d}: {differ or ''}  (tt-metal -> planner)")
    lines.append("  reasons: tt_rmsnorm.planning.layouts.PLANNER_REASONS, docs/planner.md")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=0, help="run a seeded sample of this many entries (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-mock", action="store_true", help="package verdicts only")
    args = ap.parse_args(argv)
    logger.remove()  # the rules' AccuracyWarning log lines would drown the table; the table counts them as "warn"
    logger.add(sys.stderr, level="ERROR")
    entries = sample(corpus.ENTRIES, args.sample, args.seed) if args.sample else corpus.ENTRIES
    try:
        rows = run(entries, with_mock=not args.no_mock)
    finally:
        workers.shutdown_workers()
    print(table(rows))
    print()
    print(planner_vs_tt_metal(entries))
    return 1 if any(False in r["agree"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
