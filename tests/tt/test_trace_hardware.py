"""The trace contract on a real mesh: create the module and its CCL resources, warm up once, capture the decode call,
replay it 100 times, and get the eager output every time. Trace capture segfaults on the mock cluster for every op,
so this runs on Tenstorrent hardware only; `tests/mock/test_mock_paths.py` shows on the mock that a planned call
allocates no semaphore and no buffer, which is what capture needs."""

import pytest
import torch
import ttnn

import tt_rmsnorm
from tt_rmsnorm import accuracy

pytestmark = pytest.mark.requires_tt_hardware

DIM = 8192


TRACE_REGION_BYTES = 1 << 20


@pytest.fixture
def traced_mesh(request):
    """A mesh opened with a trace region (the `mesh_device` fixture opens none)."""
    from tt_rmsnorm.devices import close_mesh, open_mesh

    mesh_device = open_mesh(request.param, trace_region_size=TRACE_REGION_BYTES)
    yield mesh_device
    close_mesh(mesh_device)


@pytest.mark.parametrize(
    "traced_mesh, cluster_axis",
    [((1, 8), None), ((8, 4), 1)],
    ids=["t3k_1x8", "galaxy_8x4"],
    indirect=["traced_mesh"],
)
@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
def test_traced_decode_replays_the_eager_output(traced_mesh, cluster_axis, with_residual):
    mesh_device = traced_mesh
    torch.manual_seed(0)
    sd = {"layers.0.attention_norm.weight": 1 + 0.1 * torch.randn(DIM)}
    ccl = tt_rmsnorm.CCLResources(mesh_device, cluster_axis=cluster_axis)
    norm = tt_rmsnorm.DistributedRMSNorm(
        mesh_device, DIM, sd, "attention_norm", layer_num=0, cluster_axis=cluster_axis, ccl=ccl
    )
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, DIM), mesh_device, cluster_axis=cluster_axis)
    r = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, DIM), mesh_device, cluster_axis=cluster_axis)

    def step():
        out = norm(x, "decode", residual=ttnn.clone(r)) if with_residual else norm(x, "decode")
        return out[0] if with_residual else out

    eager = tt_rmsnorm.gather_output(step(), mesh_device, cluster_axis=cluster_axis)  # warm-up: plans and allocates
    trace = ttnn.begin_trace_capture(mesh_device, cq_id=0)
    traced = step()
    ttnn.end_trace_capture(mesh_device, trace, cq_id=0)
    for _ in range(100):
        ttnn.execute_trace(mesh_device, trace, cq_id=0, blocking=False)
    ttnn.synchronize_device(mesh_device)
    replayed = tt_rmsnorm.gather_output(traced, mesh_device, cluster_axis=cluster_axis)
    ttnn.release_trace(mesh_device, trace)
    accuracy.assert_close(replayed, eager.double(), "bfloat16", context="100 trace replays vs eager")
