"""The format of a conformance-corpus entry (one tt-metal RMSNorm test parameter set) and the builders the corpus's
sections share: `add_entry`, `call`, shard-spec helpers and `product` (stacked pytest parametrize decorators).

An entry is one tt-metal parameter set (pytest id), with
- `source` (path in tenstorrent/tt-metal) and `test` (the test function), `params` (its parameter values);
- `system`: the mock cluster whose devices match the test's (n150 for `device`, t3k for (1, 8) meshes, galaxy for
  TG); `grid`: the compute grid the test runs with;
- `calls`: the per-device op calls in the agreement battery's spec language (tests/mock/mock_cases.py): shapes,
  dtypes, layouts, memory configs and shard specs, program and compute configs, weight / bias / residual, stats;
- `intent`: "runs" (the test asserts a correct result), "raises" (tt-metal declares the configuration invalid),
  "wrong" (tt-metal shows the output is wrong: a repro, an xfail, a skip for accuracy), "skipped" (the test skips
  before any call, for a reason unrelated to the call); `why` says which;
- `notes`: facts that decide how to read a verdict: "newer_ttnn" (written for a ttnn newer than 0.81.1), "newer_api"
  (uses names 0.81.1 lacks), "rank1_weight" (a (W,) weight), "not_on_mock" (the test's grid is no mock configuration).

Stats tensors carry the kind they hold (`kind`: sums from the interleaved pre, means from the sharded pre or from the
test's own torch means), as a user marks them with `tt_rmsnorm.mark_stats`. The gathers between pre and post are not
calls here: the tests use `ttnn.experimental.all_gather_async`, `ttnn.concat` or host-built stats, and the post's stats
spec is the gathered tensor. Shapes are per device. Facts only: parameter values, not test code.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.mock.mock_cases import GRIDS, S

FUSED = "tests/ttnn/unit_tests/operations/fused/"
EAGER = "tests/tt_eager/python_api_testing/unit_testing/misc/"
DEEPSEEK = "models/demos/deepseek_v3/tests/unit/test_rmsnorm.py"
INTENTS = ("runs", "raises", "wrong", "skipped")
NOTES = ("newer_ttnn", "newer_api", "rank1_weight", "not_on_mock")


def call(op, x, **slots_and_kw) -> dict:
    slots = {k: slots_and_kw.pop(k) for k in ("stats", "weight", "bias", "residual") if k in slots_and_kw}
    kw = {k: v for k, v in slots_and_kw.items() if v is not None}
    return {"op": op, "x": x, **{k: v for k, v in slots.items() if v is not None}, "kw": kw}


def add_entry(
    entries: list[dict], source, test, params: dict, system, calls, intent="runs", why="", notes=(), grid=None
):
    assert intent in INTENTS and set(notes) <= set(NOTES), (intent, notes)
    pid = "-".join(str(v) for v in params.values())
    ident = f"{Path(source).stem}::{test}[{pid}]"
    repeats = sum(e["id"].split("#")[0] == ident for e in entries)  # tt-metal repeats some parameter sets verbatim
    grid = tuple(grid or GRIDS[system])
    for c in calls:
        c.update(system=system, grid=grid)
    entries.append(
        {
            "id": ident + (f"#{repeats + 1}" if repeats else ""),
            "source": source,
            "test": test,
            "params": params,
            "system": system,
            "grid": grid,
            "calls": calls,
            "intent": intent,
            "why": why,
            "notes": tuple(notes),
        }
    )


def grid_range(grid, offset=(0, 0)):
    return (offset[0], offset[1], offset[0] + grid[0] - 1, offset[1] + grid[1] - 1)


def width_shard(width, grid, rows=32, offset=(0, 0), orient="ROW"):
    return S("WIDTH", grid_range(grid, offset), (rows, width // (grid[0] * grid[1])), orient)


def stats_one_core(width, core=(0, 0), rows=32):
    return S("WIDTH", grid_range((1, 1), core), (rows, width))


def product(**axes):
    """The parameter sets of stacked pytest.mark.parametrize decorators, as dicts."""
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]
