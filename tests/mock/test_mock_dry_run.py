"""Dry run: tt_rmsnorm.distributed_rms_norm end to end through real ttnn on every mock system (Wormhole N150, N300,
T3000, Galaxy; Blackhole P150, P300, Galaxy), for the interleaved prefill and the sharded decode layout; per device the
right shape, memory config and dtype."""

import pytest

from tt_rmsnorm.testing import dry_run, mock_cluster, workers

pytestmark = pytest.mark.mock_cluster

HIDDEN = 8192  # Llama-70B


@pytest.mark.parametrize("system", list(dry_run.HIDDEN))
def test_every_path_is_accepted_by_real_ttnn(system):
    rows = dry_run.run(system)
    mesh = mock_cluster.MESH_SHAPES[system]
    hidden = dry_run.HIDDEN[system]
    expect = {(m, p) for m, _ in dry_run.MODES for p in dry_run.PATHS[system]}
    expect -= {("prefill", "fused")}  # fused_rms_minimal takes one tile row
    assert {(r["mode"], r["path"]) for r in rows} == expect
    for r in rows:
        assert r["verdict"] == "ACCEPTED", r
        assert r["devices"] == mesh[0] * mesh[1], r
        # every device returns its slice, bf16, in x's memory config (DRAM interleaved here)
        assert r["outputs"] == [((1, 1, r["tokens"], hidden // mesh[1]), "BFLOAT16", "INTERLEAVED DRAM")], r


def _decode_from_sharded_activation(mesh):
    """Decode as models run it: the activation already width-sharded in L1 when the norm is called."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    grid = mesh.compute_with_storage_grid_size()
    n = tuple(mesh.shape)[1]
    plan = layouts.plan((1, 1, 32, HIDDEN // n), n, compute_grid=(grid.x, grid.y), sharded=True)
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, HIDDEN), mesh, memory_config=plan.input_memory_config)
    w = tt_rmsnorm.prepare_weight(torch.randn(HIDDEN), mesh)
    y = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5)
    return [(tuple(t.shape), t.memory_config() == plan.input_memory_config) for t in ttnn.get_device_tensors(y)]


def test_decode_from_an_already_sharded_activation():
    rows = workers.run_isolated("t3k", _decode_from_sharded_activation)
    assert rows == [((1, 1, 32, HIDDEN // 8), True)] * 8


def _residual_and_dtype(mesh, tokens, out_dtype):
    """distributed_rms_norm(..., residual=r, dtype=...) on the mock mesh: returns (output, x + r) per device."""
    import torch
    import ttnn

    import tt_rmsnorm

    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh)
    r = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh)
    w = tt_rmsnorm.prepare_weight(torch.randn(HIDDEN), mesh)
    y, h = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, residual=r, dtype=getattr(ttnn, out_dtype))

    def describe(t):
        return tuple(t.shape), str(t.dtype).rsplit(".", 1)[-1], str(t.memory_config().memory_layout).rsplit(".", 1)[-1]

    return [describe(t) for t in ttnn.get_device_tensors(y)], [describe(t) for t in ttnn.get_device_tensors(h)]


@pytest.mark.parametrize(
    "tokens, out_dtype",
    [(128, "bfloat16"), (32, "bfloat16"), (128, "bfloat8_b")],
    ids=["prefill_residual", "decode_residual_sharded_pre_add", "prefill_bf8_output"],
)
def test_residual_returns_output_and_new_residual(tokens, out_dtype):
    out, new_residual = workers.run_isolated("t3k", _residual_and_dtype, tokens, out_dtype)
    local = (1, 1, tokens, HIDDEN // 8)
    assert out == [(local, out_dtype.upper(), "INTERLEAVED")] * 8
    assert new_residual == [(local, "BFLOAT16", "INTERLEAVED")] * 8
