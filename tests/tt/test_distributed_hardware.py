"""distributed_rms_norm on a real mesh equals the reference model and single-device RMSNorm (skips without hardware;
the same calls run through real ttnn on mock clusters in tests/mock for shapes and acceptance)."""

import pytest
import torch
import ttnn

import tt_rmsnorm
from tt_rmsnorm import accuracy, reference

pytestmark = pytest.mark.requires_tt_hardware

MESHES = [((1, 2), None), ((1, 8), None), ((8, 4), 1)]
MESH_IDS = ["n300_1x2", "t3k_1x8", "galaxy_8x4"]


@pytest.mark.parametrize(
    "mesh_device, cluster_axis", [((m), a) for m, a in MESHES], ids=MESH_IDS, indirect=["mesh_device"]
)
@pytest.mark.parametrize("tokens", [32, 128, 2048], ids=["decode32", "prefill128", "prefill2048"])
@pytest.mark.parametrize("dtype", [ttnn.bfloat16, ttnn.bfloat8_b], ids=["bf16", "bf8b"])
@pytest.mark.parametrize("weight_layout", [ttnn.ROW_MAJOR_LAYOUT, ttnn.TILE_LAYOUT], ids=["rm_weight", "tile_weight"])
def test_distributed_matches_reference(mesh_device, cluster_axis, tokens, dtype, weight_layout):
    hidden, eps = 8192, 1e-5
    n = mesh_device.shape[cluster_axis if cluster_axis is not None else 1]
    torch.manual_seed(tokens)
    x = torch.randn(1, 1, tokens, hidden) * 2
    w = 1 + 0.1 * torch.randn(hidden)
    tx = tt_rmsnorm.shard_activation(x, mesh_device, cluster_axis=cluster_axis, dtype=dtype)
    tw = tt_rmsnorm.prepare_weight(w, mesh_device, cluster_axis=cluster_axis, layout=weight_layout)
    y = tt_rmsnorm.distributed_rms_norm(tx, tw, mesh_device, epsilon=eps, cluster_axis=cluster_axis)
    out = tt_rmsnorm.gather_output(y, mesh_device, cluster_axis=cluster_axis)
    name = accuracy.dtype_name(dtype)
    layout = tt_rmsnorm.planning.layouts.choose_layout((1, 1, tokens, hidden // n))
    expect, _ = reference.distributed_rms_norm(x, w, num_devices=n, epsilon=eps, layout=layout, dtype=name)
    accuracy.assert_close(out, expect.double(), name, context="device vs reference model")
    golden = reference.golden_rms_norm(reference.quantize(x, name), reference.quantize(w, "bfloat16"), epsilon=eps)
    accuracy.assert_close(out, golden, name, context="device vs float64")


@pytest.mark.parametrize("mesh_device", [(1, 8)], ids=["t3k_1x8"], indirect=True)
def test_residual_returns_the_sum(mesh_device):
    torch.manual_seed(0)
    x, r = torch.randn(1, 1, 128, 8192), torch.randn(1, 1, 128, 8192)
    tx, tr = tt_rmsnorm.shard_activation(x, mesh_device), tt_rmsnorm.shard_activation(r, mesh_device)
    y, h = tt_rmsnorm.distributed_rms_norm(tx, None, mesh_device, epsilon=1e-5, residual=tr)
    expect = reference.golden_rms_norm(
        reference.quantize(x, "bfloat16"), epsilon=1e-5, residual=reference.quantize(r, "bfloat16")
    )
    accuracy.assert_close(tt_rmsnorm.gather_output(y, mesh_device), expect, "bfloat16")
    accuracy.assert_close(
        tt_rmsnorm.gather_output(h, mesh_device),
        (reference.quantize(x, "bfloat16").double() + reference.quantize(r, "bfloat16").double()),
        "bfloat16",
    )
