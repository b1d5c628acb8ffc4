"""Mutation testing of the numerics, the accuracy policy and the rules, with cosmic-ray: `make mutation MODULE=...`.

Each module named in pyproject.toml's [tool.tt_rmsnorm.mutation.<module>] is mutated in a scratch copy of the tree
(build/mutation/<module>/src, so an interrupted run never leaves a mutant in the working tree) and judged by the tests
listed there, run with `pytest -x`. A mutant is killed when they fail (or time out), and survives when they pass.

Sampling keeps a run bounded on a small machine: SAMPLE=N draws N mutants with a fixed seed (SAMPLE=0 runs them all).
Not drawn at all, because they cannot change behaviour: mutations inside annotations (the modules use
`from __future__ import annotations`, so annotations are never evaluated) and inside f-string text (error-message
wording, which the rule tests match by rule id and fragment, not character by character).

The report gives the score per module, killed / (drawn - equivalent), and every surviving mutant with its diff. A
survivor listed in tools/mutation/equivalent.md (same file, same original and mutated line) counts as equivalent, with
the reason given there.

A module may also name `field_drops = "<function>.<name>"`: the tuple literal that function assigns to that name (or
attribute), a call signature's fields, is mutated once per element, the element replaced by None, so that every field
dropped from what a signature compares is a mutant of its own, drawn in full besides the sample.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import toml  # cosmic-ray's own dependency (tomllib needs Python 3.11)
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("tt_rmsnorm", "programs", "tests", "conftest.py", "pyproject.toml")
EQUIVALENT = Path(__file__).with_name("equivalent.md")
TIMEOUT_S = 180


def module_table(root: Path = ROOT) -> dict[str, dict]:
    """{module: {"paths": [...], "tests": [...]}} from pyproject.toml."""
    data = toml.loads((root / "pyproject.toml").read_text())
    return data["tool"]["tt_rmsnorm"]["mutation"]


def scratch_copy(dest: Path, root: Path = ROOT) -> None:
    """The tracked and untracked (not ignored) files the tests need, copied to `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *COPIED],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for rel in listed:
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def unevaluated_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions, parso-style (line from 1, column from 0), of annotations and f-strings."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        parts = []
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            parts.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            parts.append(node.returns)
        if isinstance(node, ast.JoinedStr):
            parts.append(node)
        spans += [((p.lineno, p.col_offset), (p.end_lineno, p.end_col_offset)) for p in parts]
    return spans


def _inside(pos, spans) -> bool:
    return any(start <= tuple(pos) < end for start, end in spans)


def sample(db: WorkDB, root: Path, n: int, seed: int) -> tuple[int, int]:
    """Mark as skipped every mutant in an unevaluated span, then all but `n` of the rest (n=0 keeps all).
    Returns (mutants in the module, mutants drawn)."""
    items = sorted(
        db.pending_work_items, key=lambda i: [(str(m.module_path), m.operator_name, m.occurrence) for m in i.mutations]
    )
    spans = {}
    live = []
    for item in items:
        m = item.mutations[0]
        path = str(m.module_path)
        if path not in spans:
            spans[path] = unevaluated_spans((root / path).read_text())
        if _inside(m.start_pos, spans[path]):
            db.set_result(item.job_id, WorkResult(output="unevaluated", worker_outcome=WorkerOutcome.SKIPPED))
        else:
            live.append(item)
    drawn = live if n <= 0 or n >= len(live) else random.Random(seed).sample(live, n)
    keep = {i.job_id for i in drawn}
    for item in live:
        if item.job_id not in keep:
            db.set_result(item.job_id, WorkResult(output="not drawn", worker_outcome=WorkerOutcome.SKIPPED))
    return len(live), len(drawn)


def equivalents(path: Path = EQUIVALENT) -> dict[tuple[str, str, str], str]:
    """{(file, original line, mutated line): reason} from the markdown table's rows
    `| file | `orig` | `mutated` | why |` (a `|` inside a cell written as `\\|`)."""
    table = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 4 and cells[1].startswith("`") and cells[2].startswith("`"):
            table[(cells[0], cells[1].strip("`"), cells[2].strip("`"))] = cells[3]
    return table


def diff_lines(diff: str) -> tuple[str, str]:
    """The changed line of a one-line mutant's unified diff: (original, mutated), stripped."""
    minus = [d[1:].strip() for d in diff.splitlines() if d.startswith("-") and not d.startswith("---")]
    plus = [d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
    return " ".join(minus), " ".join(plus)


def report(module: str, db: WorkDB, total: int, equivalent: dict) -> tuple[int, int, int]:
    """Prints the module's score and its survivors; returns (killed, survived, equivalent)."""
    killed = survived = equiv = 0
    lines = []
    for item, result in db.completed_work_items:
        if result.worker_outcome == WorkerOutcome.SKIPPED:
            continue
        if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == TestOutcome.INCOMPETENT:
            lines.append(f"  ERROR {item.job_id}: {result.worker_outcome} {result.output[-300:]}")
            continue
        if result.is_killed:
            killed += 1
            continue
        m = item.mutations[0]
        orig, new = diff_lines(result.diff)
        reason = equivalent.get((str(m.module_path), orig, new))
        if reason:
            equiv += 1
            lines.append(f"  equivalent  {m.module_path}:{m.start_pos[0]} {m.operator_name}: {reason}")
        else:
            survived += 1
            lines.append(
                f"  SURVIVED    {m.module_path}:{m.start_pos[0]} {m.operator_name}\n      - {orig}\n      + {new}"
            )
    judged = killed + survived
    score = 100.0 * killed / judged if judged else float("nan")
    print(
        f"{module}: score {score:.1f}% ({killed} killed / {judged} non-equivalent; {equiv} equivalent; "
        f"drawn {killed + survived + equiv} of {total} mutants)"
    )
    print("\n".join(lines))
    return killed, survived, equiv


def field_drop_mutants(source: str, target: str) -> list[tuple[str, str]]:
    """(the dropped element's text, the mutated source) for each element of the tuple `target` ("function.name")
    names: the tuple literal assigned to `name` (or `<anything>.name`) inside the module-level function."""
    function, attribute = target.split(".")
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(lineno, col):
        return offsets[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode())

    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == function):
            continue
        for stmt in ast.walk(node):
            assigned = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
            name = getattr(assigned, "attr", getattr(assigned, "id", None))
            if name == attribute and isinstance(stmt.value, ast.Tuple):
                mutants = []
                for element in stmt.value.elts:
                    start = offset(element.lineno, element.col_offset)
                    end = offset(element.end_lineno, element.end_col_offset)
                    mutants.append((source[start:end], source[:start] + "None" + source[end:]))
                return mutants
    raise ValueError(f"no tuple assigned to {attribute} in {function}()")


def run_field_drops(module: str, spec: dict, src: Path, env: dict, pytest: list[str]) -> tuple[int, int]:
    """Runs every field-drop mutant of the module (`field_drops`); prints each survivor. Returns (killed, survived)."""
    path = src / spec["paths"][0]
    original = path.read_text()
    killed = survived = 0
    try:
        for dropped, mutated in field_drop_mutants(original, spec["field_drops"]):
            path.write_text(mutated)
            try:
                outcome = subprocess.run(pytest, cwd=src, env=env, capture_output=True, timeout=TIMEOUT_S)
                failed = outcome.returncode != 0
            except subprocess.TimeoutExpired:
                failed = True
            killed += failed
            survived += not failed
            if not failed:
                print(f"  SURVIVED    field drop in {spec['field_drops']}: {dropped} -> None")
    finally:
        path.write_text(original)
    print(f"{module}: field drops {killed} killed / {killed + survived} ({spec['field_drops']})")
    return killed, survived


def run_module(module: str, spec: dict, *, n: int, seed: int, root: Path = ROOT) -> tuple[int, int, int]:
    work = root / "build" / "mutation" / module
    src = work / "src"
    scratch_copy(src, root)
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *spec["tests"]]
    base = subprocess.run(pytest, cwd=src, env=env, capture_output=True, text=True)
    if base.returncode != 0:
        sys.exit(f"{module}: the tests fail before any mutation:\n{base.stdout[-3000:]}")
    config = work / "cosmic-ray.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {spec['paths']!r}\n"
        f"timeout = {TIMEOUT_S}\n"
        "excluded-modules = []\n"
        f"test-command = {' '.join(pytest)!r}\n"
        "[cosmic-ray.distributor]\nname = 'local'\n"
    )
    session = work / "session.sqlite"
    cosmic = [sys.executable, "-m", "cosmic_ray.cli"]
    subprocess.run([*cosmic, "init", str(config), str(session), "--force"], cwd=src, env=env, check=True)
    with use_db(str(session), WorkDB.Mode.open) as db:
        total, drawn = sample(db, src, n, seed)
    print(f"{module}: {drawn} of {total} mutants drawn (seed {seed}); tests: {' '.join(spec['tests'])}", flush=True)
    start = time.monotonic()
    subprocess.run([*cosmic, "exec", str(config), str(session)], cwd=src, env=env, check=True)
    print(f"{module}: {time.monotonic() - start:.0f} s")
    with use_db(str(session), WorkDB.Mode.open) as db:
        killed, survived, equiv = report(module, db, total, equivalents())
    if "field_drops" in spec:
        drops_killed, drops_survived = run_field_drops(module, spec, src, env, pytest)
        killed, survived = killed + drops_killed, survived + drops_survived
    return killed, survived, equiv


def main(argv=None) -> None:
    modules = module_table()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"default: all of {sorted(modules)}")
    parser.add_argument("--sample", type=int, default=60, help="mutants drawn per module (0: every mutant)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = args.modules or sorted(modules)
    unknown = set(names) - set(modules)
    if unknown:
        parser.error(f"unknown modules {sorted(unknown)}; known: {sorted(modules)}")
    scores = {name: run_module(name, modules[name], n=args.sample, seed=args.seed) for name in names}
    print("\nmodule      killed  survived  equivalent  score")
    for name, (killed, survived, equiv) in scores.items():
        judged = killed + survived
        print(f"{name:<10} {killed:>7} {survived:>9} {equiv:>11}  {100.0 * killed / judged if judged else 0:5.1f}%")


if __name__ == "__main__":
    main()
