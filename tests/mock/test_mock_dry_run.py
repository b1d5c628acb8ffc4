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
