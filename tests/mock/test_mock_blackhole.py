"""Blackhole on mock P150, P300 and Galaxy: the rules read the architecture from the device, so a call ttnn runs on a
Blackhole core's larger L1 is accepted, and one it refuses is refused by the same rule; the mock's own facts (grid,
architecture, L1 end) are the table's."""

import re

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster


def _norm_on_one_chip(mesh, hidden, rows, fp32, weight_layout=None):
    """prepare_weight (its own layout choice, or `weight_layout` as named) + distributed_rms_norm on a one-chip mesh,
    and the same rms_norm straight through ttnn: each verdict ('ok' or the refusal's rule / message)."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=True, arch=mesh.arch()) if fp32 else None
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, rows, hidden), mesh)
    layout = {"row_major": ttnn.ROW_MAJOR_LAYOUT, "tile": ttnn.TILE_LAYOUT, None: None}[weight_layout]
    w = tt_rmsnorm.prepare_weight(torch.randn(hidden), mesh, layout=layout)
    out = {
        "weight_layout": str(w.layout),
        "arch": str(mesh.arch()),
        "described_arch": tt_rmsnorm.TensorDesc.from_tensor(x).arch.name,
    }
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
    assert got["weight_layout"] == "Layout.ROW_MAJOR", got
    assert got["ttnn"] == ("ok", None)
    assert got["package"] == ("ok", (1, 1, rows, 5120)), got


@pytest.mark.parametrize("fp32", [False, True], ids=["default-config", "fp32-acc"])
def test_p150_refuses_what_its_l1_cannot_hold(fp32):
    """H=8192 with a ROW_MAJOR weight: ttnn refuses the row's buffers (1,778,816 B without fp32 accumulation) beyond
    the P150's L1, and the package refuses first with the same end address and the Blackhole L1 size."""
    got = workers.run_isolated("p150", _norm_on_one_chip, 8192, 32, fp32, "row_major")
    assert got["ttnn"][0] == "refused"
    rule, message = got["package"]
    assert rule == "rms_norm.l1_budget", got
    reported = re.search(r"grow to (\d+) B which is beyond max L1 size of (\d+) B", got["ttnn"][1])
    assert reported, got["ttnn"]
    end, l1_size = reported.groups()
    assert f"end at {end} B" in message and f"above {l1_size} B" in message, (message, got["ttnn"])


@pytest.mark.parametrize("fp32", [False, True], ids=["default-config", "fp32-acc"])
def test_p150_weight_layout_left_to_prepare_weight_fits(fp32):
    """H=8192 with prepare_weight's own layout: it takes the TILE weight the ROW_MAJOR row cannot fit beside, and
    both ttnn and the package run the call."""
    got = workers.run_isolated("p150", _norm_on_one_chip, 8192, 32, fp32)
    assert got["weight_layout"] == "Layout.TILE", got
    assert got["ttnn"] == ("ok", None)
    assert got["package"] == ("ok", (1, 1, 32, 8192)), got


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


# --- the systems: which axes close into rings, links, and the configs distributed_rms_norm hands ttnn -----------------

HIDDEN = 8192  # Llama-70B over each system's columns


def _config_fields(kw) -> dict:
    """The fields of the configs and CCL arguments one ttnn call was handed."""
    out = {}
    pc = kw.get("program_config")
    if pc is not None and hasattr(pc, "block_w"):
        g = pc.compute_with_storage_grid_size
        out["program_config"] = ((g.x, g.y), pc.block_w, pc.subblock_w)
    ck = kw.get("compute_kernel_config")
    if ck is not None:
        out["compute"] = (str(ck.math_fidelity).rsplit(".", 1)[-1], bool(ck.fp32_dest_acc_en))
    for key in ("num_links", "topology", "cluster_axis"):
        if key in kw:
            out[key] = str(kw[key]).rsplit(".", 1)[-1] if key == "topology" else kw[key]
    return out


def _system(mesh):
    """What ttnn says of the mesh's axes, the links and topology the package picks for the stats gather, and the
    configs each path of distributed_rms_norm hands ttnn (decode: fused; prefill: async; and classic for both)."""
    import torch
    import ttnn

    import tt_rmsnorm

    rows, cols = tuple(mesh.shape)
    axis = 1 if rows > 1 else None
    x_any = ttnn.from_torch(
        torch.zeros(1, 1, 32, 32 * rows * cols),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=mesh,
        mesh_mapper=ttnn.ShardTensor2dMesh(mesh, mesh_shape=(rows, cols), dims=(None, 3)),
    )
    facts = {"ttnn_links": {}, "ttnn_rings": {}}
    for a, n in enumerate((rows, cols)):
        if n > 1:
            facts["ttnn_links"][a] = ttnn.get_num_links(mesh, a)
            usable = ttnn.get_usable_topology(x_any, ttnn.Topology.Ring, a)
            facts["ttnn_rings"][a] = usable == ttnn.Topology.Ring
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis)
    links = ccl.links
    facts["links"] = (links.system, links.available, links.num_links, str(links.topology).rsplit(".", 1)[-1])
    w = tt_rmsnorm.prepare_weight(torch.randn(HIDDEN), mesh, cluster_axis=axis)
    seen = []
    targets = [(ttnn, "fused_rms_minimal"), (ttnn.experimental, "all_gather_async"), (ttnn, "rms_norm_pre_all_gather")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in targets]

    def wrap(name, fn):
        def recorded(*args, **kwargs):
            seen.append(
                (name, _config_fields(kwargs if name != "fused_rms_minimal" else {**kwargs, "program_config": args[1]}))
            )
            return fn(*args, **kwargs)

        return recorded

    for owner, name, fn in saved:
        setattr(owner, name, wrap(name, fn))
    try:
        for tokens, path in ((32, "auto"), (128, "auto"), (32, "classic"), (128, "classic")):
            x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
            sharded = True if tokens == 32 else None
            y = tt_rmsnorm.distributed_rms_norm(
                x,
                w,
                mesh,
                epsilon=1e-5,
                cluster_axis=axis,
                ccl=ccl if path == "auto" else None,
                sharded=sharded,
                path=path,
            )
            facts[(tokens, path)] = (tuple(ttnn.get_device_tensors(y)[0].shape), list(seen))
            seen.clear()
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    return facts


# per system: the gather axis' devices, the decode grid (4 tiles of the local width a core, rows first), the math
# fidelity with fp32 accumulation (HiFi3 where Wormhole's HiFi4 bug bites, HiFi4 on Blackhole)
SYSTEM_PLANS = {
    "t3k": (8, (8, 1), "HiFi3"),
    "galaxy": (4, (8, 2), "HiFi3"),
    "p300": (2, (8, 4), "HiFi4"),
    "bh-galaxy": (4, (8, 2), "HiFi4"),
}


@pytest.mark.parametrize("system", list(SYSTEM_PLANS))
def test_each_system_runs_with_its_links_rings_and_configs(system):
    """On T3000, Galaxy, P300 and the Blackhole Galaxy, through distributed_rms_norm and CCLResources: the rings the
    systems table names are the axes ttnn finds a wraparound on; the links it names are at least those ttnn counts
    for CCLs (equal where no plane is kept for dispatch); the stats gather takes one link, Linear; decode runs fused
    on the system's grid and prefill async, each with the architecture's compute config; the classic path gathers
    with ttnn.all_gather."""
    from tt_rmsnorm.systems import system_of
    from tt_rmsnorm.testing.mock_cluster import ARCHES, MESH_SHAPES

    got = workers.run_isolated(system, _system, timeout=600)
    table = system_of(ARCHES[system], MESH_SHAPES[system])
    for axis, ring in got["ttnn_rings"].items():
        assert ring == table.rings[axis], (axis, got["ttnn_rings"], table.rings)
    for axis, n in got["ttnn_links"].items():
        assert 1 <= n <= table.links[axis], (axis, got["ttnn_links"], table.links)
        if system != "t3k":  # T3000's mock keeps one of its two planes for dispatch
            assert n == table.links[axis]
    assert got["links"] == (table.name, tuple(n or 0 for n in table.links), 1, "Linear")
    devices, grid, fidelity = SYSTEM_PLANS[system]
    width = HIDDEN // devices
    shape, calls = got[(32, "auto")]
    assert shape == (1, 1, 32, width) and [c[0] for c in calls] == ["fused_rms_minimal"], calls
    fused = calls[0][1]
    assert fused["program_config"] == (grid, width // 32 // (grid[0] * grid[1]), 4)
    assert fused["compute"] == (fidelity, True) and fused["num_links"] == 1 and fused["topology"] == "Linear"
    shape, calls = got[(128, "auto")]
    assert shape == (1, 1, 128, width) and [c[0] for c in calls] == ["rms_norm_pre_all_gather", "all_gather_async"]
    assert calls[0][1]["compute"] == (fidelity, True) and calls[1][1]["num_links"] == 1
    for tokens in (32, 128):
        shape, calls = got[(tokens, "classic")]
        assert shape == (1, 1, tokens, width) and [c[0] for c in calls] == ["rms_norm_pre_all_gather"]
