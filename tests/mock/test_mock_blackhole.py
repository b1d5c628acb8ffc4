"""Blackhole on mock P150, P300 and Galaxy: the rules read the architecture from the device, so a call ttnn runs on a
Blackhole core's larger L1 is accepted, and one it refuses is refused by the same rule; the mock's own facts (grid,
architecture, L1 end) are the table's."""

import re

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster


def _norm_on_one_chip(mesh, hidden, rows, fp32):
    """prepare_weight + distributed_rms_norm on a one-chip mesh, and the same rms_norm straight through ttnn: each
    verdict ('ok' or the refusal's rule / message)."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=True, arch=mesh.arch()) if fp32 else None
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, rows, hidden), mesh)
    w = tt_rmsnorm.prepare_weight(torch.randn(hidden), mesh)
    out = {"arch": str(mesh.arch()), "described_arch": tt_rmsnorm.TensorDesc.from_tensor(x).arch.name}
    try:
        y = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, compute_kernel_config=cfg)
        out["package"] = ("ok", tuple(ttnn.get_device_tensors(y)[0].shape))
    except tt_rmsnorm.RuleError as e:
        out["package"] = (e.rule, str(e))
    try:
        ttnn.rms_norm(x, weight=w, epsilon=1e-5, compute_kernel_config=cfg)
        out["ttnn"] = ("ok", None)
    except RuntimeError as e:
        out["ttnn"] = ("refused", str(e)[:2000])
    return out


@pytest.mark.parametrize("fp32", [False, True], ids=["default-config", "fp32-acc"])
@pytest.mark.parametrize("rows", [32, 128])
def test_p150_runs_what_its_l1_holds(rows, fp32):
    """H=5120 with a ROW_MAJOR weight fits a Blackhole core's 1,572,864 B of L1 (not a Wormhole core's 1,499,136 B):
    ttnn runs it on the mock P150 and so does distributed_rms_norm (the local path), reading the architecture from the
    device."""
    got = workers.run_isolated("p150", _norm_on_one_chip, 5120, rows, fp32)
    assert got["arch"] == "Arch.BLACKHOLE" and got["described_arch"] == "blackhole"
    assert got["ttnn"] == ("ok", None)
    assert got["package"] == ("ok", (1, 1, rows, 5120)), got


@pytest.mark.parametrize("fp32", [False, True], ids=["default-config", "fp32-acc"])
def test_p150_refuses_what_its_l1_cannot_hold(fp32):
    """H=8192: ttnn refuses the row's buffers (1,778,816 B without fp32 accumulation) beyond the P150's L1, and the
    package refuses first with the same end address and the Blackhole L1 size."""
    got = workers.run_isolated("p150", _norm_on_one_chip, 8192, 32, fp32)
    assert got["ttnn"][0] == "refused"
    rule, message = got["package"]
    assert rule == "rms_norm.l1_budget", got
    reported = re.search(r"grow to (\d+) B which is beyond max L1 size of (\d+) B", got["ttnn"][1])
    assert reported, got["ttnn"]
    end, l1_size = reported.groups()
    assert f"end at {end} B" in message and f"above {l1_size} B" in message, (message, got["ttnn"])


def _facts(mesh):
    """What the mock device reports about itself, beside the table row the package picks for it."""
    import ttnn

    from tt_rmsnorm.architecture import of_device

    grid = mesh.compute_with_storage_grid_size()
    arch = of_device(mesh)
    facts = {
        "arch": arch.name,
        "grid": (grid.x, grid.y),
        "cluster": str(ttnn.cluster.get_cluster_type()).rsplit(".", 1)[-1],
        "table": (arch.fabric_packet_bytes, arch.fabric_packet_header_bytes, arch.default_compute_grid),
    }
    if mesh.get_num_devices() > 1:  # one chip has no fabric
        facts["fabric"] = (ttnn.get_tt_fabric_max_payload_size_bytes(), ttnn.get_tt_fabric_packet_header_size_bytes())
    return facts


@pytest.mark.parametrize(
    "system, grid, cluster",
    [("p150", (13, 10), "P150"), ("p300", (11, 10), "P300"), ("bh-galaxy", (12, 10), "BLACKHOLE_GALAXY")],
)
def test_blackhole_mocks_open_as_their_boards(system, grid, cluster):
    """Each descriptor of tt_rmsnorm.testing.blackhole_boards opens as its board: a Blackhole device, the grid its
    harvesting leaves (13 columns of a P150 less the dispatch column, two more off on a P300 chip, one on a Galaxy
    chip), the cluster type ttnn names, and the fabric packet the architecture table holds."""
    got = workers.run_isolated(system, _facts)
    assert (got["arch"], got["grid"], got["cluster"]) == ("blackhole", grid, cluster)
    if "fabric" in got:
        assert got["table"][:2] == got["fabric"]
    else:
        assert got["table"][2] == grid  # the architecture's default grid is the unharvested card's
