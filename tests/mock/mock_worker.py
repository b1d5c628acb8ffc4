"""What runs inside the mock-cluster worker process (tt_rmsnorm.testing.workers.run_isolated): real device tensors from
the case specs, then real ttnn ops. Each function takes the worker's open mesh first."""

from __future__ import annotations

import gc

import torch
import ttnn

from tests.mock import mock_cases
from tt_rmsnorm.tensors import mark_stats, stats_kind_of
from tt_rmsnorm.testing.dry_run import memory_config_text


def build_tensor(mesh, spec):
    """A tensor of `spec` replicated on every device of `mesh` (or on the host), with its stats kind recorded."""
    dtype = mock_cases.DTYPES[spec["dtype"]]
    if spec["dtype"] in mock_cases.INTEGER_DTYPES:
        values = torch.randint(0, 100, spec["shape"], dtype=torch.int32)
    else:
        values = torch.randn(spec["shape"])
    kwargs = {"dtype": dtype, "layout": mock_cases.LAYOUTS[spec["layout"]]}
    if not spec["host"]:
        kwargs.update(device=mesh, memory_config=mock_cases.memory_config(spec["mem"]))
    t = ttnn.from_torch(values, **kwargs)
    if spec["kind"]:
        mark_stats(t, spec["kind"])
    return t


def call_ttnn(case, tensors, kw):
    x = tensors["x"]
    if case["op"] == "pre":
        return ttnn.rms_norm_pre_all_gather(x, residual_input_tensor=tensors.get("residual"), **kw)
    if case["op"] == "post":
        return ttnn.rms_norm_post_all_gather(
            x, tensors["stats"], weight=tensors.get("weight"), bias=tensors.get("bias"), **kw
        )
    if case["op"] == "rms_norm":
        return ttnn.rms_norm(
            x,
            weight=tensors.get("weight"),
            bias=tensors.get("bias"),
            residual_input_tensor=tensors.get("residual"),
            **kw,
        )
    kw = dict(kw)
    return ttnn.all_gather(x, kw.pop("dim"), **kw)


def describe_output(t) -> dict:
    first = ttnn.get_device_tensors(t)[0]
    return {
        "shape": tuple(first.shape),
        "dtype": str(first.dtype).rsplit(".", 1)[-1],
        "memory_config": memory_config_text(first.memory_config()),
    }


def free_l1(mesh) -> None:
    """Start a call from an empty L1, as the rules assume. Other tests in this worker leave L1 buffers behind: the
    plans `distributed_rms_norm` caches hold their CCL semaphores and persistent buffers, and ttnn's program cache
    holds the all_gather's semaphores, placed wherever L1 was free when the program was made."""
    from tt_rmsnorm.plan_cache import forget_plans

    forget_plans()
    gc.collect()
    if any(b.buffer_type == ttnn.BufferType.L1 for b in ttnn._ttnn.reports.get_buffers([mesh])):
        mesh.clear_program_cache()


def run_case(mesh, case: dict) -> dict:
    """ttnn's verdict on `case`, and the package's verdict on the same real tensors (TensorDesc.from_tensor path).
    A tensor that cannot even be built raises: that is a broken case, not a verdict."""
    free_l1(mesh)
    tensors = {k: build_tensor(mesh, case[k]) for k in mock_cases.TENSOR_SLOTS if case.get(k)}
    package_on_real = mock_cases.package_verdict(case, tensors)
    kw = mock_cases.op_kwargs(case["kw"])
    try:
        out = call_ttnn(case, tensors, kw)
    except RuntimeError as e:  # ttnn's refusals (TT_FATAL/TT_THROW, "std::get: wrong index", ...) are RuntimeErrors;
        # anything else (a KeyError, a TypeError binding the arguments) is a fault of the case or the harness: it
        # propagates and fails the test instead of counting as ttnn's reject
        return {
            "verdict": "reject",
            "message": f"{type(e).__name__}: {e}".split("backtrace:")[0].strip(),
            "package_on_real": package_on_real,
        }
    return {"verdict": "accept", "message": "", "output": describe_output(out), "package_on_real": package_on_real}


def mesh_facts(mesh) -> dict:
    grid = mesh.compute_with_storage_grid_size()
    return {
        "shape": tuple(mesh.shape),
        "num_devices": mesh.get_num_devices(),
        "grid": (grid.x, grid.y),
        "arch": str(mesh.arch()).rsplit(".", 1)[-1],
    }


def run_plan(mesh, plan, cluster_axis) -> list[dict]:
    """pre -> all_gather -> post with exactly the configs of a tt_rmsnorm.planning.layouts.NormPlan, on raw ttnn."""
    shape = plan.local_shape
    x = ttnn.from_torch(
        torch.randn(shape),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=mesh,
        memory_config=plan.input_memory_config or ttnn.DRAM_MEMORY_CONFIG,
    )
    w = ttnn.from_torch(
        torch.randn(1, 1, shape[-1] // 32, 32), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=mesh
    )
    cfg = dict(program_config=plan.program_config, compute_kernel_config=plan.compute_kernel_config)
    stats = ttnn.rms_norm_pre_all_gather(x, **cfg)
    gathered = ttnn.all_gather(stats, 3, cluster_axis=cluster_axis, memory_config=plan.stats_memory_config)
    y = ttnn.rms_norm_post_all_gather(x, gathered, epsilon=1e-5, weight=w, **cfg)
    return [describe_output(t) for t in (stats, gathered, y)]


def worker_identity(mesh) -> str:
    """'pid cache-dir' of the worker process."""
    import os

    return f"{os.getpid()} {os.environ['TT_METAL_CACHE'].rstrip('/')}"


# ---------------------------------------------------------------------------------------------------------------------
# The CCL battery (mock_cases_ccl): all_gather_async, fused_rms_minimal and pre -> all_gather_async -> post.


def _all_gather_async_call(mesh, x, kw, handles, persistent):
    """A zero-argument call of ttnn.experimental.all_gather_async in the case's overload."""
    kw = dict(kw)
    dim, overload = kw.pop("dim"), kw.pop("overload", "buffer")
    common = dict(barrier_semaphore=handles["barrier"], **kw)
    if overload == "mesh":
        axis, topology = common.pop("cluster_axis"), common.pop("topology")
        return lambda: ttnn.experimental.all_gather_async(
            x, dim, axis, mesh, topology, handles["sems"], persistent_output_tensor=persistent, **common
        )
    return lambda: ttnn.experimental.all_gather_async(
        x, persistent_output_buffer=persistent, dim=dim, multi_device_global_semaphore=handles["sems"], **common
    )


def _fused_call(mesh, case, t, kw, handles):
    kw = dict(kw)
    pc, axis = kw.pop("program_config"), kw.pop("cluster_axis")
    sem = handles["sems"][0] if len(handles["sems"]) == 1 else handles["sems"]
    slots = dict(
        weight="weight", stats="stats", residual_input_tensor="residual", persistent_output_tensor="persistent"
    )
    kw.update({name: t[slot] for name, slot in slots.items() if slot in t})
    return lambda: ttnn.fused_rms_minimal(t["x"], pc, axis, mesh, sem, **kw)


def _compose_stages(mesh, t, kw, handles, produced):
    """The pre, all_gather_async and post calls of a composition; each stage records what it returned in `produced`."""
    shared = {k: kw[k] for k in ("program_config", "compute_kernel_config") if k in kw}

    def pre():
        stats = ttnn.rms_norm_pre_all_gather(
            t["x"], residual_input_tensor=t.get("residual"), **shared, **kw.get("pre", {})
        )
        mark_stats(stats, "means" if t["x"].memory_config().is_sharded() else "sums")
        produced["stats"] = stats
        return stats

    def gather():
        out = _all_gather_async_call(mesh, produced["stats"], kw["gather"], handles, t.get("persistent"))()
        mark_stats(out, stats_kind_of(produced["stats"]))
        produced["gathered"] = out
        return out

    def post():
        return ttnn.rms_norm_post_all_gather(
            t["x"], produced["gathered"], epsilon=1e-5, weight=t.get("weight"), **shared
        )

    return [pre, gather, post]


def run_ccl_case(mesh, case: dict) -> dict:
    """ttnn's verdict on a mock_cases_ccl case, and the package's verdict on the same real tensors and semaphores.
    Everything up to the ttnn calls runs outside the try: a case that cannot be built raises (a broken case)."""
    from tests.mock import mock_cases_ccl

    free_l1(mesh)
    t = {k: build_tensor(mesh, case[k]) for k in mock_cases_ccl.TENSOR_SLOTS if case.get(k)}
    handles = mock_cases_ccl.semaphores(case, lambda grid: ttnn.create_global_semaphore(mesh, grid, 0))
    kw = mock_cases_ccl.op_kwargs(case["kw"])
    produced = {}
    if case["op"] == "fused":
        stages = [_fused_call(mesh, case, t, kw, handles)]
    elif case["op"] == "all_gather_async":
        stages = [_all_gather_async_call(mesh, t["x"], kw, handles, t.get("persistent"))]
    else:
        stages = _compose_stages(mesh, t, kw, handles, produced)
    verdict, message, out = "accept", "", None
    for stage in stages:
        try:
            out = stage()
        except (
            Exception
        ) as e:  # TT_FATAL as RuntimeError; nanobind argument errors as TypeError; bad_alloc as MemoryError
            verdict, message = "reject", f"{type(e).__name__}: {e}".split("backtrace:")[0].strip()
            break
    result = {"verdict": verdict, "message": message}
    if verdict == "accept":
        result["output"] = describe_output(produced.get("gathered", out))
    result["package_on_real"] = mock_cases_ccl.package_verdict(case, t, handles, produced)
    return result
