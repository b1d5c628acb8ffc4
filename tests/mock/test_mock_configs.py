"""Every program, memory and compute config that tt_rmsnorm.planning.layouts produces for the demo and test shapes is
accepted by the package's rules and by real ttnn: pre -> all_gather -> post on the mock system the shape is meant
for."""

import pytest

from tests import support
from tests.mock import mock_cases, mock_worker
from tt_rmsnorm.rules.op_checks import check_all_gather, check_post_all_gather, check_pre_all_gather
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.testing import mock_cluster, workers

pytestmark = pytest.mark.mock_cluster

PLANS = support.plan_case_configurations()


def system_of(name: str) -> str:
    return name.split("_")[0]


def run_plan_by_name(mesh, name):
    """Worker side: rebuild the plan there (ttnn config objects do not pickle) and run it on raw ttnn."""
    plan = dict(support.plan_case_configurations())[name]
    return mock_worker.run_plan(mesh, plan, cluster_axis=1)


def test_plans_cover_every_system_and_path():
    seen = {(system_of(name), plan.layout) for name, plan in PLANS}
    assert {("t3k", "interleaved"), ("t3k", "sharded"), ("galaxy", "interleaved"), ("galaxy", "sharded")} <= seen


@pytest.mark.parametrize("name,plan", PLANS, ids=[name for name, _ in PLANS])
def test_demo_plan_is_accepted(name, plan):
    system = system_of(name)
    n = mock_cluster.MESH_SHAPES[system][1]
    assert plan.num_devices == n, f"{name}: plan for {plan.num_devices} devices, {system} gathers over {n}"
    grid = mock_cases.GRIDS[system]
    x = TensorDesc(
        plan.local_shape, memory_config=plan.input_memory_config or TensorDesc(plan.local_shape).memory_config
    )
    cfg = dict(program_config=plan.program_config, compute_kernel_config=plan.compute_kernel_config, compute_grid=grid)
    assert check_pre_all_gather(x, **cfg) == plan.layout
    stats_kind = "means" if plan.layout == "sharded" else "sums"
    stats = TensorDesc((*plan.local_shape[:-1], 32), stats_kind=stats_kind)
    check_all_gather(
        stats, 3, cluster_axis=1, mesh_shape=mock_cluster.MESH_SHAPES[system], memory_config=plan.stats_memory_config
    )
    gathered = TensorDesc(
        (*plan.local_shape[:-1], 32 * n), memory_config=plan.stats_memory_config, stats_kind=stats_kind
    )
    weight = TensorDesc((1, 1, plan.local_shape[-1] // 32, 32), layout=mock_cases.LAYOUTS["RM"])
    assert check_post_all_gather(x, gathered, epsilon=1e-5, weight=weight, **cfg) == plan.layout

    stats_out, gathered_out, y = workers.run_isolated(system, run_plan_by_name, name)
    assert stats_out["shape"] == (*plan.local_shape[:-1], 32)
    assert gathered_out["shape"] == (*plan.local_shape[:-1], 32 * n)
    assert y["shape"] == plan.local_shape and y["dtype"] == "BFLOAT16"
    if plan.layout == "sharded":
        assert gathered_out["memory_config"].startswith(f"WIDTH_SHARDED L1 shard [32, {32 * n}] on 1 cores")
        assert y["memory_config"].startswith("WIDTH_SHARDED L1")
    else:
        assert y["memory_config"] == gathered_out["memory_config"] == "INTERLEAVED DRAM"
