"""Architecture as data: the rules and the planner read every number that differs between Wormhole and Blackhole from
one table row (tt_rmsnorm.architecture), chosen by the TensorDesc's architecture without a device; the systems table
(tt_rmsnorm.systems) holds links and rings; the Blackhole mock descriptors are what their generator writes."""

import re
from pathlib import Path

import pytest
import ttnn

import tt_rmsnorm
from tt_rmsnorm import architecture, op_outputs, systems
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules import ccl_checks, l1_budget, op_checks
from tt_rmsnorm.tensors import TensorDesc as D
from tt_rmsnorm.testing import blackhole_boards

WH, BH = architecture.WORMHOLE_B0, architecture.BLACKHOLE
PACKAGE = Path(tt_rmsnorm.__file__).parent


@pytest.mark.parametrize(
    "given, expect",
    [
        (None, WH),
        ("blackhole", BH),
        ("BLACKHOLE", BH),
        (ttnn.device.Arch.BLACKHOLE, BH),
        (ttnn.device.Arch.WORMHOLE_B0, WH),
        (BH, BH),
    ],
    ids=["none", "name", "upper", "ttnn-bh", "ttnn-wh", "row"],
)
def test_architecture_from_any_name(given, expect):
    assert architecture.architecture(given) is expect
    assert D((1, 1, 32, 64), arch=given).arch is expect


def test_an_unknown_architecture_is_a_rule_error_before_any_check():
    with pytest.raises(RuleError) as err:
        D((1, 1, 32, 64), arch=ttnn.device.Arch.QUASAR)
    assert err.value.rule == "arch.known" and "blackhole" in err.value.fix and "wormhole_b0" in err.value.fix


def test_the_rows_hold_what_differs():
    assert (WH.l1_size, BH.l1_size) == (1_499_136, 1_572_864)
    assert BH.l1_base - WH.l1_base == 5920  # ttnn's reported end addresses, 5,920 B higher on P150 for one program
    assert (WH.dram_alignment, BH.dram_alignment) == (32, 64)
    assert (WH.noc_max_burst_bytes, BH.noc_max_burst_bytes) == (8192, 16384)
    assert (WH.default_compute_grid, BH.default_compute_grid) == ((8, 8), (13, 10))
    assert all(a.ttnn_arch.name.lower() == a.name for a in architecture.ARCHITECTURES.values())


def test_no_architecture_number_outside_the_table():
    """The L1 ends and allocator bases of both architectures appear in tt_rmsnorm/architecture.py only."""
    numbers = re.compile(r"1_?499_?136|1_?572_?864|105_?824|111_?744")
    found = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in PACKAGE.rglob("*.py")
        if p.name != "architecture.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if numbers.search(line)
    ]
    assert not found, found


RM_5120 = D((1, 1, 160, 32), layout=ttnn.ROW_MAJOR_LAYOUT)


@pytest.mark.parametrize("rows", [32, 128])
def test_one_call_fits_blackhole_l1_and_not_wormhole(rows):
    """rms_norm of a 5120-wide row with a ROW_MAJOR weight and fp32 accumulation (what the planner picks): its buffers
    end at 1,514,848 B on Wormhole (beyond its 1,499,136 B) and 5,920 B higher on Blackhole, inside its 1,572,864 B
    (ttnn on mock N150 and P150)."""
    x, cfg = (1, 1, rows, 5120), layouts.compute_kernel_config(fp32_dest_acc_en=True)
    with pytest.raises(RuleError) as err:
        op_checks.check_rms_norm(D(x), weight=RM_5120, epsilon=1e-5, compute_kernel_config=cfg)
    assert err.value.rule == "rms_norm.l1_budget" and "1514848" in str(err.value) and "1499136" in str(err.value)
    bh_weight = D(RM_5120.shape, layout=RM_5120.layout, arch=BH)
    assert op_checks.check_rms_norm(D(x, arch=BH), weight=bh_weight, compute_kernel_config=cfg) == "interleaved"
    assert l1_budget.rms_norm_l1_bytes(D(x, arch=BH), cfg, weight=bh_weight) == 1_514_848 + 5920


def test_the_burst_guard_reads_the_architecture():
    """Three fp32 stats tiles a reduce worker (12 KiB) exceed Wormhole's 8 KiB burst, not Blackhole's 16 KiB."""
    mc = ttnn.MemoryConfig(
        ttnn.TensorMemoryLayout.WIDTH_SHARDED,
        ttnn.BufferType.L1,
        ttnn.ShardSpec(
            ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(7, 7))}),
            [576, 32],
            ttnn.ShardOrientation.ROW_MAJOR,
        ),
    )
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=True)
    with pytest.raises(RuleError) as err:
        op_checks.check_rms_norm(D((576, 2048), memory_config=mc), compute_kernel_config=cfg, compute_grid=(8, 8))
    assert err.value.rule == "sharded.stats_gather_burst" and "8192 B" in str(err.value)
    assert op_checks.check_rms_norm(D((576, 2048), memory_config=mc, arch=BH), compute_kernel_config=cfg) == "sharded"


def test_derived_descriptions_keep_the_architecture():
    x = D((1, 1, 32, 1024), arch=BH)
    assert op_outputs.pre_stats_desc(x).arch is BH
    assert op_outputs.gathered_desc(op_outputs.pre_stats_desc(x), 3, 2).arch is BH


def test_the_plan_takes_the_architecture():
    """plan_distributed_rms_norm(arch=...): Blackhole's default grid and HiFi4 (no HiFi4 + fp32 accuracy bug there),
    Wormhole's HiFi3; a width Wormhole's L1 cannot hold with fp32 accumulation keeps it on Blackhole."""
    wh = tt_rmsnorm.plan_distributed_rms_norm((1, 1, 32, 4096), (1, 2), sharded=True)
    bh = tt_rmsnorm.plan_distributed_rms_norm((1, 1, 32, 4096), (1, 2), sharded=True, arch="blackhole")
    assert wh.compute_grid == (8, 8) and bh.compute_grid == (13, 10)
    assert wh.norm.compute_kernel_config.math_fidelity == ttnn.MathFidelity.HiFi3
    assert bh.norm.compute_kernel_config.math_fidelity == ttnn.MathFidelity.HiFi4
    assert "math_fidelity" in wh.norm.reasons and "math_fidelity" not in bh.norm.reasons
    wide = (1, 1, 128, 5120)
    assert layouts.plan(wide, 1).compute_kernel_config.fp32_dest_acc_en is True
    assert layouts.plan((1, 1, 128, 6144), 1).compute_kernel_config.fp32_dest_acc_en is False
    assert layouts.plan((1, 1, 128, 6144), 1, arch=BH).compute_kernel_config.fp32_dest_acc_en is False
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm(wide, (1, 1), arch="grayskull")
    assert err.value.rule == "arch.known"


@pytest.mark.parametrize(
    "arch, mesh, name, links",
    [
        ("wormhole_b0", (1, 8), "T3000", (None, 2)),
        ("wormhole_b0", (8, 4), "Galaxy", (4, 4)),
        ("blackhole", (1, 2), "P300", (None, 2)),
        ("blackhole", (8, 4), "Blackhole Galaxy", (2, 2)),
        ("wormhole_b0", (1, 16), "2 x T3000", (None, 2)),
    ],
)
def test_systems_by_architecture_and_mesh(arch, mesh, name, links):
    system = systems.system_of(arch, mesh)
    assert (system.name, system.links) == (name, links)
    assert systems.l1_banks(arch, mesh) == system.compute_grid[0] * system.compute_grid[1]


def test_num_links_are_bounded_by_the_system_of_the_mesh():
    """The same 8x4 mesh takes 4 links on a Wormhole Galaxy and 2 on a Blackhole Galaxy."""
    sem = ccl_checks.SemaphoreDesc(ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(0, 0))}), 2)
    for arch, most in (("wormhole_b0", 4), ("blackhole", 2)):
        stats = D((1, 1, 32, 32), arch=arch)
        kw = dict(multi_device_global_semaphore=sem, mesh_shape=(8, 4), cluster_axis=1)
        assert ccl_checks.check_all_gather_async(stats, 3, num_links=most, **kw) == 4
        with pytest.raises(RuleError) as err:
            ccl_checks.check_all_gather_async(stats, 3, num_links=most + 1, **kw)
        assert err.value.rule == "all_gather_async.num_links"


@pytest.mark.parametrize("system", sorted(blackhole_boards.BUILDERS))
def test_blackhole_descriptors_are_what_the_generator_writes(system):
    path = blackhole_boards.DESCRIPTOR_DIR / f"{system}.yaml"
    assert path.read_text() == blackhole_boards.descriptor_text(system)


def test_the_galaxy_descriptor_is_a_grid_without_wraparound():
    """32 chips, 52 neighbour pairs of two links each (a 4 x 8 grid: 4 x 7 + 3 x 8 pairs), every chip 2-4
    neighbours, every Ethernet port used once."""
    links = blackhole_boards.galaxy_links()
    pairs: dict[frozenset, int] = {}
    for a, _, b, _ in links:
        key = frozenset((a, b))
        pairs[key] = pairs.get(key, 0) + 1
    assert len(pairs) == 52 and set(pairs.values()) == {2}
    ports = [(a, pa) for a, pa, _, _ in links] + [(b, pb) for _, _, b, pb in links]
    assert len(ports) == len(set(ports))
    degree = {c: sum(c in k for k in pairs) for c in range(32)}
    assert sorted(set(degree.values())) == [2, 3, 4] and sum(d == 2 for d in degree.values()) == 4


def test_a_mesh_that_spans_hosts_decodes_async_not_fused():
    """Two T3000 hosts (1x16): the decode the fused op would run on one host takes the async path (its gather crosses
    the hosts); asking for fused is a RuleError before any device work. One host's T3000 still runs fused."""
    shape = (1, 1, 32, 512)
    across = tt_rmsnorm.plan_distributed_rms_norm(shape, (1, 16), ccl=True, sharded=True)
    assert across.name == "async" and "spans hosts" in across.reason
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm(shape, (1, 16), ccl=True, sharded=True, path="fused")
    assert err.value.rule == "fused.one_host" and "2 x T3000" in str(err.value) and 'path="async"' in err.value.fix
    assert tt_rmsnorm.plan_distributed_rms_norm((1, 1, 32, 1024), (1, 8), ccl=True, sharded=True).name == "fused"
    assert systems.system_of("wormhole_b0", (8, 8)).hosts == 2 and systems.system_of("wormhole_b0", (8, 16)).hosts == 4
