"""The wrappers check before ttnn runs (a host input would crash ttnn), mesh axis resolution, and stats provenance."""

import pytest
import torch
import ttnn

import tt_rmsnorm
from tt_rmsnorm import devices, ops, topology
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.tensors import STATS_MEANS, TensorDesc, mark_stats, stats_kind_of


@pytest.fixture
def host_x():
    return ttnn.from_torch(
        torch.randn(1, 1, 32, 64, dtype=torch.bfloat16), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda t: ops.rms_norm_pre_all_gather(t),
        lambda t: ops.rms_norm_post_all_gather(t, t, epsilon=1e-5),
        lambda t: ops.rms_norm(t, epsilon=1e-5),
    ],
    ids=["pre", "post", "rms_norm"],
)
def test_host_input_rejected_before_ttnn(host_x, call):
    # ttnn itself segfaults on a host input (ttnn-findings #2): reaching this assertion proves the rule ran first.
    with pytest.raises(RuleError) as err:
        call(host_x)
    assert err.value.rule == "input.on_device" and "ttnn.to_device" in str(err.value)


def test_describe_real_tensor(host_x):
    d = TensorDesc.from_tensor(host_x)
    assert d.shape == (1, 1, 32, 64) and d.dtype == ttnn.bfloat16 and d.layout == ttnn.TILE_LAYOUT and not d.on_device


def test_stats_provenance_follows_tensor_id(host_x):
    assert stats_kind_of(host_x) is None
    mark_stats(host_x, STATS_MEANS)
    assert stats_kind_of(host_x) == STATS_MEANS and TensorDesc.from_tensor(host_x).stats_kind == STATS_MEANS
    other = ttnn.from_torch(
        torch.zeros(1, 1, 32, 32, dtype=torch.bfloat16), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT
    )
    assert stats_kind_of(other) is None


@pytest.mark.parametrize(
    "mesh_shape, axis, expect",
    [
        ((1, 8), None, (1, 8)),
        ((1, 2), None, (1, 2)),
        ((1, 1), None, (None, 1)),
        ((8, 4), 1, (1, 4)),
        ((8, 4), 0, (0, 8)),
        ((4, 1), None, (0, 4)),
    ],
    ids=["t3k", "n300", "n150", "galaxy_cols", "galaxy_rows", "column_mesh"],
)
def test_resolve_cluster_axis(mesh_shape, axis, expect):
    assert topology.resolve_cluster_axis(mesh_shape, axis) == expect


def test_2d_mesh_needs_cluster_axis():
    with pytest.raises(RuleError) as err:
        topology.resolve_cluster_axis((8, 4))
    assert err.value.rule == "mesh.cluster_axis_required" and "cluster_axis=1" in str(err.value)


class _FakeMesh:
    shape = (1, 8)


def test_prepare_weight_rejects_ragged_slices_before_device():
    with pytest.raises(RuleError) as err:
        devices.prepare_weight(torch.ones(8192 + 32), _FakeMesh())
    assert err.value.rule == "distributed.width_multiple_of_32" and "8224" in str(err.value)


def test_distributed_rms_norm_needs_ttnn_tensors():
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.distributed_rms_norm(torch.ones(1, 1, 32, 1024), None, _FakeMesh(), epsilon=1e-5)
    assert err.value.rule == "input.ttnn_tensor" and "shard_activation" in str(err.value)


@pytest.mark.parametrize(
    "local, mesh_shape, axis, sharded, layout",
    [
        ((1, 1, 128, 1024), (1, 8), None, None, "interleaved"),
        ((1, 1, 32, 2048), (8, 4), 1, True, "sharded"),
        ((1, 1, 32, 2048), (8, 4), 1, None, "interleaved"),  # a DRAM decode input is not resharded unless asked
    ],
    ids=["t3k_prefill", "galaxy_decode_sharded", "galaxy_decode_dram"],
)
def test_plan_without_device(local, mesh_shape, axis, sharded, layout):
    p = tt_rmsnorm.plan_distributed_rms_norm(local, mesh_shape, cluster_axis=axis, compute_grid=(8, 7), sharded=sharded)
    assert p.norm.layout == layout and p.call.num_devices == mesh_shape[-1]
