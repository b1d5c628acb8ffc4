"""What runs inside the mock-cluster worker for the differential fuzzer: a batch of generated calls per message, each
judged by ttnn and by the package's rules on the same real tensors, and pre -> all_gather -> post compositions whose
intermediate tensors are described back as battery specs.

A call whose tensors cannot be built is reported under `harness` (a generator fault, never a verdict)."""

from __future__ import annotations

import ttnn

from tests.mock import mock_cases, mock_cases_ccl, mock_worker
from tt_rmsnorm.tensors import STATS_MEANS, STATS_SUMS, mark_stats

_NAMES = {v: k for k, v in mock_cases.DTYPES.items()}
_STRATEGIES = {v: k for k, v in mock_cases.SHARDING.items()}


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".split("backtrace:")[0].strip()[:2000]


def _judge(case: dict, tensors: dict):
    """The package's verdict on the real tensors, then ttnn's. Returns (result, ttnn output or None)."""
    try:
        package_on_real = mock_cases.package_verdict(case, tensors)
    except Exception as e:  # a package fault (anything but RuleError) is a verdict of its own
        package_on_real = {"verdict": "error", "rule": None, "message": _error_text(e), "warnings": []}
    kw = mock_cases.op_kwargs(case["kw"])
    try:
        out = mock_worker.call_ttnn(case, tensors, kw)
    except (RuntimeError, MemoryError) as e:  # ttnn's refusals: TT_FATAL/TT_THROW, std::get, std::bad_alloc
        return {"verdict": "reject", "message": _error_text(e), "package_on_real": package_on_real}, None
    return {"verdict": "accept", "message": "", "package_on_real": package_on_real}, out


def _build(mesh, case: dict) -> dict:
    return {k: mock_worker.build_tensor(mesh, case[k]) for k in mock_cases.TENSOR_SLOTS if case.get(k)}


def run_one(mesh, case: dict) -> dict:
    mock_worker.free_l1(mesh)
    if case["op"] == "chain":
        return run_chain(mesh, case)
    if case["op"] in mock_cases_ccl.OPS:  # builds its tensors and semaphores outside the ttnn calls: a fault raises
        return mock_worker.run_ccl_case(mesh, case)
    try:
        tensors = _build(mesh, case)
    except Exception as e:
        return {"harness": f"building the tensors: {_error_text(e)}"}
    return _judge(case, tensors)[0]


def run_batch(mesh, cases: list[dict]) -> list[dict]:
    return [_run_or_harness(mesh, c) for c in cases]


def _run_or_harness(mesh, case: dict) -> dict:
    """Any exception other than ttnn's refusals is a fault of the case or the harness, never a verdict."""
    try:
        return run_one(mesh, case)
    except Exception as e:
        return {"harness": f"calling the op: {_error_text(e)}"}


def spec_of(t, kind=None) -> dict | None:
    """A battery tensor spec for a device tensor, or None where its memory config has no spec form."""
    first = ttnn.get_device_tensors(t)[0]
    mc = first.memory_config()
    if mc.shard_spec is None:
        mem = "L1" if mc.buffer_type == ttnn.BufferType.L1 else "DRAM"
    else:
        ranges = mc.shard_spec.grid.ranges()
        if len(ranges) != 1 or mc.buffer_type != ttnn.BufferType.L1:
            return None
        r = ranges[0]
        orient = "ROW" if mc.shard_spec.orientation == ttnn.ShardOrientation.ROW_MAJOR else "COL"
        mem = mock_cases.S(
            _STRATEGIES[mc.memory_layout],
            (r.start.x, r.start.y, r.end.x, r.end.y),
            tuple(mc.shard_spec.shape),
            orient,
        )
    layout = "TILE" if first.layout == ttnn.TILE_LAYOUT else "RM"
    return mock_cases.T(tuple(first.shape), _NAMES[first.dtype], layout, mem=mem, kind=kind)


def run_chain(mesh, chain: dict) -> dict:
    """pre -> all_gather -> post. Each step's battery case and result; the chain stops where ttnn rejects."""
    try:
        tensors = _build(mesh, chain)
    except Exception as e:
        return {"harness": f"building the tensors: {_error_text(e)}"}
    steps = []
    pre = {"op": "pre", "system": chain["system"], "x": chain["x"], "kw": chain["pre_kw"]}
    if chain.get("residual"):
        pre["residual"] = chain["residual"]
    result, stats = _judge(pre, {k: tensors[k] for k in ("x", "residual") if k in tensors})
    steps.append({"case": pre, **result})
    if stats is None:
        return {"steps": steps}
    kind = STATS_MEANS if isinstance(chain["x"]["mem"], tuple) else STATS_SUMS
    mark_stats(stats, kind)
    gather = {"op": "all_gather", "system": chain["system"], "x": spec_of(stats, kind), "kw": chain["gather_kw"]}
    result, gathered = _judge(gather, {"x": stats})
    steps.append({"case": gather, **result})
    if gathered is None:
        return {"steps": steps}
    # The post is judged on a device holding only its own inputs, as the rules see it: the gathered stats are
    # described, everything is freed (the residual's L1 shard would otherwise leave a hole that no argument of the
    # post shows) and the post's inputs are built again, so the printed battery case is exactly the call judged.
    post = {"op": "post", "system": chain["system"], "x": chain["x"], "stats": spec_of(gathered, kind)}
    post.update({k: chain[k] for k in ("weight", "bias") if chain.get(k)})
    post["kw"] = chain["post_kw"]
    if post["stats"] is None:
        return {"harness": "the gathered stats have no spec form"}
    del stats, gathered, tensors
    mesh.clear_program_cache()
    try:
        tensors = _build(mesh, post)
    except Exception as e:
        return {"harness": f"building the post's tensors: {_error_text(e)}"}
    result, _ = _judge(post, tensors)
    steps.append({"case": post, **result})
    return {"steps": steps}
