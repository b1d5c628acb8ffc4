"""Path choice, the checked plans and the CCL link table, device-free: `plan_distributed_rms_norm` shows what a call
would run without a mesh (the mock-cluster cases in tests/mock run the same plans through real ttnn)."""

import pytest
import ttnn

import tt_rmsnorm
from tt_rmsnorm import ccl, signature
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planned_module import default_is_distributed, distribution_policy
from tt_rmsnorm.planning import paths, planner
from tt_rmsnorm.weights import weight_name

T3K, GALAXY, N300, N150 = (1, 8), (8, 4), (1, 2), (1, 1)


@pytest.mark.parametrize(
    "mesh_shape, axis, tokens, with_ccl, with_weight, in_l1, expect",
    [
        (T3K, None, 32, True, True, True, "fused"),
        (T3K, None, 32, True, True, False, "async"),  # a DRAM decode input: no reshard to L1 and back
        (T3K, None, 32, True, False, True, "async"),  # fused_rms_minimal requires a weight
        (T3K, None, 128, True, True, False, "async"),
        (T3K, None, 32, False, True, True, "classic"),
        (T3K, None, 2048, False, True, False, "classic"),
        (GALAXY, 1, 32, True, True, True, "fused"),
        (GALAXY, 1, 128, True, True, False, "async"),
        (GALAXY, 1, 128, False, True, False, "classic"),
        (N300, None, 32, True, True, True, "fused"),
        (N150, None, 32, False, True, False, "local"),
        (N150, None, 128, True, True, False, "local"),
    ],
    ids=[
        "t3k-decode-ccl",
        "t3k-decode-ccl-dram",
        "t3k-decode-ccl-no-weight",
        "t3k-prefill-ccl",
        "t3k-decode-eager",
        "t3k-prefill2048-eager",
        "galaxy-decode-ccl",
        "galaxy-prefill-ccl",
        "galaxy-prefill-eager",
        "n300-decode-ccl",
        "n150-decode",
        "n150-prefill",
    ],
)
def test_auto_picks_the_production_path(mesh_shape, axis, tokens, with_ccl, with_weight, in_l1, expect):
    n = mesh_shape[axis if axis is not None else 1]
    hidden = 8192 if n > 1 else 4096  # one chip's plain rms_norm holds a whole row in L1: 8192 does not fit
    plan = tt_rmsnorm.plan_distributed_rms_norm(
        (1, 1, tokens, hidden // n),
        mesh_shape,
        cluster_axis=axis,
        compute_grid=(8, 7),
        ccl=True if with_ccl else None,
        with_weight=with_weight,
        sharded=True if in_l1 else None,
    )
    assert plan.name == expect
    assert plan.reason and plan.reason in plan.describe() and expect in plan.describe()
    assert plan.call.num_devices == n


@pytest.mark.parametrize(
    "path, tokens, attr, layout",
    [("async", 128, "gathered", ttnn.TensorMemoryLayout.INTERLEAVED), ("fused", 32, "fused_stats", None)],
    ids=["async-gather-buffer", "fused-stats-buffer"],
)
def test_persistent_buffers_are_sized_from_the_plan(path, tokens, attr, layout):
    plan = tt_rmsnorm.plan_distributed_rms_norm((1, 1, tokens, 1024), T3K, compute_grid=(8, 7), path=path, ccl=True)
    buf = getattr(plan, attr)
    assert buf.shape[-1] == 32 * 8 and buf.shape[-2] == (tokens if path == "async" else 32)
    if path == "fused":  # one core, the accumulation format (fp32 with the plan's fp32_dest_acc_en)
        assert buf.shard_spec.grid.num_cores() == 1
        assert buf.dtype == (ttnn.float32 if plan.norm.compute_kernel_config.fp32_dest_acc_en else ttnn.bfloat16)
    else:
        assert buf.memory_layout == layout


@pytest.mark.parametrize(
    "mesh_shape, path, ccl_given, rule",
    [
        (T3K, "async", None, "path.needs_ccl"),
        (T3K, "fused", None, "path.needs_ccl"),
        (T3K, "local", True, "path.local_one_device"),
        (T3K, "nccl", True, "path.name"),
    ],
    ids=["async-without-ccl", "fused-without-ccl", "local-on-8-devices", "unknown-path"],
)
def test_path_preconditions_raise_before_any_device(mesh_shape, path, ccl_given, rule):
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, 32, 1024), mesh_shape, compute_grid=(8, 7), path=path, ccl=ccl_given
        )
    assert err.value.rule == rule and err.value.fix


def test_fused_prefill_is_refused_by_a_rule():
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm((1, 1, 128, 1024), T3K, compute_grid=(8, 7), path="fused", ccl=True)
    assert "128" in str(err.value)


def test_plan_runs_every_rule_of_its_ops():
    # a FLOAT32 activation on the interleaved layout with fp32 accumulation turned off: the pre's rule fires at planning
    off = tt_rmsnorm.planning.layouts.compute_kernel_config(fp32_dest_acc_en=False)
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, 128, 1024), T3K, compute_grid=(8, 7), dtype=ttnn.float32, compute_kernel_config=off
        )
    assert err.value.rule == "pre.fp32_needs_fp32_acc"


@pytest.mark.parametrize(
    "mesh_shape, arch, system, available",
    [
        (N300, "wormhole_b0", "N300", (0, 2)),
        (T3K, "wormhole_b0", "T3000", (0, 2)),
        (GALAXY, "wormhole_b0", "Galaxy", (4, 4)),
        ((1, 16), "wormhole_b0", "2 x T3000", (0, 2)),
        ((1, 2), "blackhole", "P300", (0, 2)),
        (GALAXY, "blackhole", "Blackhole Galaxy", (2, 2)),
        ((2, 2), "wormhole_b0", "2x2 mesh", (1, 1)),
    ],
    ids=["n300", "t3k", "galaxy", "2xt3k", "p300", "bh-galaxy", "unknown"],
)
def test_link_choice_per_system(mesh_shape, arch, system, available):
    """The stats gather's links come from the system of the mesh's shape and architecture (tt_rmsnorm.systems): one
    link, Linear, whatever the system has; the reason names what it has."""
    choice = ccl.link_choice(mesh_shape, arch)
    assert (choice.system, choice.num_links, choice.topology) == (system, 1, ttnn.Topology.Linear)
    assert choice.available == available and choice.num_links <= max(choice.available)
    assert choice.reason and ("/".join(map(str, available)) in choice.reason or system.endswith("mesh"))


def test_config_key_follows_mutation():
    cfg = tt_rmsnorm.planning.layouts.compute_kernel_config(fp32_dest_acc_en=True)
    before = signature.config_key(cfg)
    cfg.fp32_dest_acc_en = False
    assert signature.config_key(cfg) != before
    copy = planner.copy_config(cfg)
    assert copy is not cfg and signature.config_key(copy) == signature.config_key(cfg)


def test_choose_names_every_path():
    assert set(paths.PATHS) == {"classic", "async", "fused", "local"}


def test_a_path_name_is_read_by_value():
    """A path named by a string built at run time (a config file, a CLI flag) is the same path as the literal."""
    auto = "".join(["au", "to"])
    name, reason = paths.choose((1, 1, 128, 1024), 8, ccl=True, has_weight=True, path=auto)
    assert (name, reason) == paths.choose((1, 1, 128, 1024), 8, ccl=True, has_weight=True)
    assert paths.choose((1, 1, 128, 1024), 8, ccl=True, has_weight=True, path="".join(["cla", "ssic"])) == (
        "classic",
        "asked for",
    )


@pytest.mark.parametrize(
    "key, layer, prefix, expect",
    [
        ("attention_norm", 3, None, "layers.3.attention_norm.weight"),
        ("norm", None, None, "norm.weight"),
        ("input_layernorm", 3, "model.layers.3.", "model.layers.3.input_layernorm.weight"),
    ],
    ids=["meta-layer", "final-norm", "hf-prefix"],
)
def test_weight_key_conventions(key, layer, prefix, expect):
    assert weight_name(key, layer, prefix) == expect


@pytest.mark.parametrize(
    "devices, decode, prefill",
    [(1, False, False), (2, True, True), (8, True, True), (4, True, True)],
    ids=["n150", "n300", "t3k", "galaxy-columns"],
)
def test_default_is_distributed_policy(devices, decode, prefill):
    policy = default_is_distributed(devices)
    assert (policy("decode"), policy("prefill")) == (decode, prefill)


def test_a_caller_sharded_input_stays_where_it_is_with_the_callers_program_config():
    """Galaxy decode as tt-metal's Llama-70B lays it out: x width-sharded on cores (1,0)-(2,7) in [32, 128] shards,
    the program config on a (2, 8) grid with block_w 4. The fused op accepts it as given; the plan keeps x's shards
    (no reshard to the planner's own grid) and the caller's config."""
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(1, 0), ttnn.CoreCoord(2, 7))})
    spec = ttnn.ShardSpec(grid, [32, 128], ttnn.ShardOrientation.ROW_MAJOR)
    mc = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1, spec)
    pc = ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(2, 8), subblock_w=4, block_h=1, block_w=4, inplace=False
    )
    for path in ("fused", "async"):
        plan = tt_rmsnorm.plan_distributed_rms_norm(
            (1, 1, 32, 2048),
            GALAXY,
            cluster_axis=1,
            compute_grid=(8, 9),
            ccl=True,
            path=path,
            memory_config=mc,
            program_config=pc,
            input_memory_config=mc,
        )
        assert plan.norm.input_memory_config is None, path
        assert plan.norm.program_config is pc or signature.config_key(plan.norm.program_config) == signature.config_key(
            pc
        )


@pytest.mark.parametrize(
    "given, decode, prefill",
    [(None, True, True), (False, False, False), (True, True, True), (lambda mode: mode == "prefill", False, True)],
    ids=["none-default", "false-never", "true-always", "callable"],
)
def test_is_distributed_false_means_never(given, decode, prefill):
    policy = distribution_policy(given, 8)
    assert (policy("decode"), policy("prefill")) == (decode, prefill)


def test_is_distributed_of_another_kind_is_refused():
    with pytest.raises(RuleError, match="module.is_distributed"):
        distribution_policy("prefill", 8)


def test_a_rank_1_activation_is_one_tile_row():
    """ttnn tiles a rank-1 [W] as one tile row; planning one gives a plan or a RuleError (it raised IndexError)."""
    assert tt_rmsnorm.plan_distributed_rms_norm((1024,), (1, 1)).name == "local"
    with pytest.raises(RuleError) as err:
        tt_rmsnorm.plan_distributed_rms_norm((1024,), T3K, ccl=True)
    assert err.value.rule == "distributed.rank"
