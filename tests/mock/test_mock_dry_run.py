"""Dry run: tt_rmsnorm.distributed_rms_norm end to end through real ttnn on mock T3000 (1x8) and Galaxy (8x4) meshes,
for the interleaved prefill and the sharded decode path; per device the right shape, memory config and dtype."""

import pytest

from tt_rmsnorm import mock_cluster

pytestmark = pytest.mark.mock_cluster

HIDDEN = 8192  # Llama-70B


@pytest.mark.parametrize("system", ["t3k", "galaxy"])
def test_distributed_rms_norm_dry_run(system):
    rows = mock_cluster.dry_run(system)
    mesh = mock_cluster.MESH_SHAPES[system]
    devices = mesh[0] * mesh[1]
    local = HIDDEN // mesh[1]  # hidden sharded over mesh columns (cluster_axis=1)
    by_case = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
    assert set(by_case) == {"prefill_interleaved", "decode_sharded"}
    for case, case_rows in by_case.items():
        assert sorted(r["device"] for r in case_rows) == list(range(devices))
        seq = case_rows[0]["input_shape"][2]
        for r in case_rows:
            assert r["plan"].startswith(case.split("_")[1]), r  # the path ttnn was driven through
            assert r["output_shape"] == (1, 1, seq, local), r
            assert (r["dtype"], r["layout"]) == ("BFLOAT16", "TILE"), r
            if case == "prefill_interleaved":
                assert r["memory_config"] == "INTERLEAVED DRAM", r
            else:
                assert r["memory_config"].startswith("WIDTH_SHARDED L1 shard [32, "), r


def _decode_from_sharded_activation(mesh):
    """Decode as models run it: the activation already width-sharded in L1 when the norm is called."""
    import torch
    import ttnn

    from tt_rmsnorm import configs
    from tt_rmsnorm import mesh as tt_mesh

    grid = mesh.compute_with_storage_grid_size()
    n = tuple(mesh.shape)[1]
    plan = configs.plan((1, 1, 32, HIDDEN // n), n, compute_grid=(grid.x, grid.y), sharded=True)
    x = tt_mesh.shard_activation(torch.randn(1, 1, 32, HIDDEN), mesh, memory_config=plan.input_memory_config)
    w = tt_mesh.prepare_weight(torch.randn(HIDDEN), mesh)
    y = tt_mesh.distributed_rms_norm(x, w, mesh, epsilon=1e-5)
    return [(tuple(t.shape), t.memory_config() == plan.input_memory_config) for t in ttnn.get_device_tensors(y)]


def test_decode_from_an_already_sharded_activation():
    rows = mock_cluster.run_isolated("t3k", _decode_from_sharded_activation)
    assert rows == [((1, 1, 32, HIDDEN // 8), True)] * 8


def _residual_and_dtype(mesh, tokens, out_dtype):
    """distributed_rms_norm(..., residual=r, dtype=...) on the mock mesh: returns (output, x + r) per device."""
    import torch
    import ttnn

    from tt_rmsnorm import mesh as tt_mesh

    x = tt_mesh.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh)
    r = tt_mesh.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh)
    w = tt_mesh.prepare_weight(torch.randn(HIDDEN), mesh)
    y, h = tt_mesh.distributed_rms_norm(x, w, mesh, epsilon=1e-5, residual=r, dtype=getattr(ttnn, out_dtype))
    describe = lambda t: (
        tuple(t.shape),
        str(t.dtype).rsplit(".", 1)[-1],
        str(t.memory_config().memory_layout).rsplit(".", 1)[-1],
    )
    return [describe(t) for t in ttnn.get_device_tensors(y)], [describe(t) for t in ttnn.get_device_tensors(h)]


@pytest.mark.parametrize(
    "tokens, out_dtype",
    [(128, "bfloat16"), (32, "bfloat16"), (128, "bfloat8_b")],
    ids=["prefill_residual", "decode_residual_sharded_pre_add", "prefill_bf8_output"],
)
def test_residual_returns_output_and_new_residual(tokens, out_dtype):
    out, new_residual = mock_cluster.run_isolated("t3k", _residual_and_dtype, tokens, out_dtype)
    local = (1, 1, tokens, HIDDEN // 8)
    assert out == [(local, out_dtype.upper(), "INTERLEAVED")] * 8
    assert new_residual == [(local, "BFLOAT16", "INTERLEAVED")] * 8
