"""A planned call reaches ttnn's ops through the functions their Python wrappers call, where the wrappers would do
nothing else; with ttnn's graph capture on (the wrappers record every op) it goes through the wrappers. Held on a mock
T3000: both routes give the same outputs and residual, and a graph capture sees every op of the call."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192


def _both_routes(mesh, mode, path):
    """The outputs' facts by the direct route, then inside a graph capture (the wrappers' route), and the ops the
    capture's Python records name."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import direct_calls
    from tt_rmsnorm.testing.tt_metal_stand_ins import facts

    mc = None
    if mode == "decode":
        grid = mesh.compute_with_storage_grid_size()
        mc = tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, 32, DIM // 8), (1, 8), compute_grid=(grid.x, grid.y), sharded=True
        ).norm.input_memory_config
    tokens = 32 if mode == "decode" else 128
    x, r = (tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, DIM), mesh, memory_config=mc) for _ in range(2))
    w = tt_rmsnorm.prepare_weight(torch.randn(DIM), mesh)
    ccl = tt_rmsnorm.CCLResources(mesh) if path != "classic" else None

    def call():
        out, summed = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, residual=r, ccl=ccl, path=path)
        return facts(out), summed is r

    call()  # planned
    direct = direct_calls.passes_through(), call()
    ttnn.graph.begin_graph_capture()
    try:
        wrapped = direct_calls.passes_through(), call()
        names = [record["name"] for record in ttnn.graph._python_io_data]
    finally:
        ttnn.graph.end_graph_capture()
    return direct, wrapped, names


@pytest.mark.parametrize(
    "mode, path, ops",
    [
        ("decode", "fused", ("ttnn.fused_rms_minimal",)),
        ("prefill", "async", ("ttnn.add", "ttnn.rms_norm_pre_all_gather", "ttnn.experimental.all_gather_async")),
        ("prefill", "classic", ("ttnn.add", "ttnn.rms_norm_pre_all_gather", "ttnn.all_gather")),
    ],
    ids=["fused-decode", "async-prefill", "classic-prefill"],
)
def test_the_direct_and_the_wrapped_route_give_the_same_result_and_a_capture_sees_every_op(mode, path, ops):
    (direct_on, direct), (wrapped_on, wrapped), names = workers.run_isolated("t3k", _both_routes, mode, path)
    assert direct_on and not wrapped_on
    assert direct == wrapped and direct[1], (direct, wrapped)
    assert all(op in names for op in ops), names
