"""Every rule of tt_rmsnorm.rules: one violating case each (asserting the rule id and the message), valid cases that
must pass, and a completeness check so that removing or renaming a rule fails the suite."""

import warnings
from pathlib import Path

import pytest
import ttnn

from tests.support import pc, shard_mc
from tt_rmsnorm.errors import AccuracyWarning, RuleError
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules import l1_budget, op_checks
from tt_rmsnorm.rules.common import max_subblock_w
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES, RULES
from tt_rmsnorm.tensors import TensorDesc as D

RM = ttnn.ROW_MAJOR_LAYOUT
GRID_T3K = (8, 7)
PLAN = layouts.plan((1, 1, 32, 1024), 8, compute_grid=GRID_T3K, grid=(8, 4))  # width-sharded 8x4, block_w 1
CKC, PC = PLAN.compute_kernel_config, PLAN.program_config
FP32_ACC = layouts.compute_kernel_config(fp32_dest_acc_en=True)
NO_FP32_ACC = layouts.compute_kernel_config(fp32_dest_acc_en=False)


def x(shape=(1, 1, 128, 1024), **kw):
    return D(shape, **kw)


def xs(shape=(1, 1, 32, 1024), memory_config=None, **kw):
    return D(shape, memory_config=memory_config or PLAN.input_memory_config, **kw)


def sums(shape=(1, 1, 128, 256), stats_kind="sums", **kw):
    return D(shape, stats_kind=stats_kind, **kw)


def means(shape=(1, 1, 32, 256), memory_config=None, **kw):
    return D(shape, memory_config=memory_config or PLAN.stats_memory_config, stats_kind="means", **kw)


def rm_weight(width=1024, **kw):
    return D((1, 1, width // 32, 32), layout=RM, **kw)


W_SHARD, B_SHARD, H_SHARD = (
    ttnn.TensorMemoryLayout.WIDTH_SHARDED,
    ttnn.TensorMemoryLayout.BLOCK_SHARDED,
    ttnn.TensorMemoryLayout.HEIGHT_SHARDED,
)


def pre(inp, **kw):
    kw.setdefault("compute_grid", GRID_T3K)
    if inp.is_sharded:
        kw.setdefault("program_config", PC)
        kw.setdefault("compute_kernel_config", CKC)
    return lambda: op_checks.check_pre_all_gather(inp, **kw)


def post(inp, stats, **kw):
    kw.setdefault("compute_grid", GRID_T3K)
    kw.setdefault("epsilon", 1e-5)
    if inp.is_sharded:
        kw.setdefault("program_config", PC)
        kw.setdefault("compute_kernel_config", CKC)
    return lambda: op_checks.check_post_all_gather(inp, stats, **kw)


def rms(inp, **kw):
    kw.setdefault("compute_grid", GRID_T3K)
    return lambda: op_checks.check_rms_norm(inp, **kw)


def gather(inp, dim=3, mesh_shape=(1, 8), **kw):
    return lambda: op_checks.check_all_gather(inp, dim, mesh_shape=mesh_shape, **kw)


# (rule id, a fragment of the message, the check)
BAD = [
    ("input.on_device", "must be on device", pre(x(on_device=False))),
    ("residual.on_device", "must be on device", pre(x(), residual_input_tensor=x(on_device=False))),
    ("stats.on_device", "must be on device", post(x(), sums(on_device=False))),
    ("weight.on_device", "must be on device", post(x(), sums(), weight=rm_weight(on_device=False))),
    ("bias.on_device", "must be on device", post(x(), sums(), weight=rm_weight(), bias=rm_weight(on_device=False))),
    ("input.layout", "TILE layout", pre(x(layout=RM))),
    ("residual.layout", "TILE layout", pre(x(), residual_input_tensor=x(layout=RM))),
    ("stats.layout", "TILE layout", post(x(), sums(layout=RM))),
    ("distributed.rank", "rank-4", pre(x((128, 1024)))),
    ("pre.input.dtype", "dtype must be one of", pre(x(dtype=ttnn.uint32))),
    ("post.input.dtype", "dtype must be one of", post(x(dtype=ttnn.uint16), sums())),
    ("rms_norm.input.dtype", "dtype must be one of", rms(x(dtype=ttnn.uint32))),
    ("stats.dtype", "dtype must be one of", post(x(), sums(dtype=ttnn.uint32))),
    ("weight.dtype", "dtype must be one of", post(x(), sums(), weight=rm_weight(dtype=ttnn.uint32))),
    (
        "bias.dtype",
        "dtype must be one of",
        post(x(), sums(), weight=rm_weight(), bias=D((1, 1, 1, 1024), dtype=ttnn.bfloat8_b)),
    ),
    ("use_2d_core_grid.ignored", "interleaved layout only", pre(xs(), use_2d_core_grid=True)),
    (
        "input.height_sharded",
        "height-sharded",
        rms(x((1, 1, 256, 1024), memory_config=shard_mc(H_SHARD, (8, 1), (32, 1024)))),
    ),
    (
        "input.shard_grid_on_device",
        "inside the device's compute grid",
        pre(xs(memory_config=shard_mc(W_SHARD, (2, 8), (32, 64))), program_config=pc((2, 8), block_w=2)),
    ),
    (
        "sharded.height_32",
        "padded height 32",
        pre(xs((1, 1, 64, 1024), memory_config=shard_mc(W_SHARD, (8, 4), (64, 32)))),
    ),
    (
        "sharded.program_config",
        "LayerNormShardedMultiCoreProgramConfig",
        pre(xs(), program_config=layouts.interleaved_program_config()),
    ),
    ("program_config.block_w", "block_w must be >= 1", pre(xs(), program_config=pc(block_w=0))),
    (
        "program_config.subblock_w_divides",
        "divisible by subblock_w",
        pre(
            xs((1, 1, 32, 3072), memory_config=shard_mc(W_SHARD, (8, 4), (32, 96))),
            program_config=pc(block_w=3, subblock_w=2),
        ),
    ),
    (
        "program_config.subblock_w_limit",
        "subblock_w must be <= 4",
        pre(
            xs((1, 1, 32, 8192), memory_config=shard_mc(W_SHARD, (8, 4), (32, 256))),
            program_config=pc(block_w=8, subblock_w=8),
            compute_kernel_config=FP32_ACC,
        ),
    ),
    ("program_config.welford", "Welford", pre(xs(), program_config=pc(use_welford=True))),
    (
        "program_config.grid_fits_shards",
        "must fit compute_with_storage_grid_size",
        pre(xs(), program_config=pc((8, 2))),
    ),
    ("program_config.block_h_shard", "block_h * 32", pre(xs(), program_config=pc(block_h=2))),
    ("program_config.block_w_shard", "block_w * 32", pre(xs(), program_config=pc(block_w=2))),
    (
        "program_config.block_w_cores",
        "ceil(Wt / shard cores)",
        pre(xs(memory_config=shard_mc(W_SHARD, (8, 4), (32, 64))), program_config=pc(block_w=2)),
    ),
    (
        "program_config.block_2d",
        "block sharding needs",
        # 64 x 1024 in blocks of 32 x 160 on 2 x 8 cores: block_w 5, where ceil(32 tiles / 8 columns) is 4
        rms(
            x((1, 1, 64, 1024), memory_config=shard_mc(B_SHARD, (8, 2), (32, 160))),
            program_config=pc((8, 2), block_w=5),
        ),
    ),
    ("program_config.ignored", "silently ignored", pre(x(), program_config=PC)),
    ("memory_config.sharded_output", "sharded output", pre(xs(), memory_config=ttnn.DRAM_MEMORY_CONFIG)),
    ("memory_config.matches_input", "must match", pre(xs(), memory_config=shard_mc(B_SHARD, (8, 4), (32, 32)))),
    ("memory_config.interleaved_output", "interleaved output", pre(x(), memory_config=PLAN.input_memory_config)),
    ("all_gather.cluster_axis", "needs cluster_axis", gather(x(), mesh_shape=(8, 4))),
    (
        "memory_config.shard_height",
        "shard height",
        post(xs(), means(), memory_config=shard_mc(W_SHARD, (8, 4), (64, 32))),
    ),
    (
        "rms_norm.output_shard_holds_block",
        "8-tile block",
        rms(
            x((1, 1, 1, 512), memory_config=shard_mc(W_SHARD, (2, 1), (32, 256))),
            memory_config=shard_mc(W_SHARD, (4, 2), (32, 128)),
        ),
    ),
    ("sharded_pre.dtype_ignored", "always writes bfloat16", pre(xs(), dtype=ttnn.bfloat8_b)),
    ("residual.shape", "shapes must match", pre(x(), residual_input_tensor=x((1, 1, 64, 1024)))),
    ("residual.same_sharding", "same shard spec", pre(xs(), residual_input_tensor=x((1, 1, 32, 1024)))),
    ("residual.interleaved", "must be interleaved", pre(x((1, 1, 32, 1024)), residual_input_tensor=xs())),
    ("pre.welford", "Welford", pre(x(), program_config=ttnn.LayerNormDefaultProgramConfig(use_welford=True))),
    ("post.welford", "Welford", post(x(), sums(), program_config=ttnn.LayerNormDefaultProgramConfig(use_welford=True))),
    (
        "pre.fp32_needs_fp32_acc",
        "requires fp32_dest_acc_en",
        pre(x(dtype=ttnn.float32), compute_kernel_config=NO_FP32_ACC),
    ),
    ("post.fp32_needs_fp32_acc", "requires fp32_dest_acc_en", post(x(), sums(dtype=ttnn.float32))),
    ("pre.l1_budget", "L1", pre(x((1, 1, 32, 8192)))),
    ("post.l1_budget", "L1", post(x((1, 1, 32, 16384)), sums((1, 1, 32, 32)))),
    ("stats.present", "requires the gathered stats", post(x(), None)),
    ("stats.width", "multiple of 32", post(x(), sums((1, 1, 128, 48), padded_shape=(1, 1, 128, 48)))),
    ("epsilon.non_negative", "epsilon must be >= 0", post(x(), sums(), epsilon=-1e-5)),
    ("arch.known", "the architectures of their table", lambda: op_checks.check_pre_all_gather(x(arch="quasar"))),
    ("distributed.width_multiple_of_32", "multiple of 32", post(x((1, 1, 128, 1000)), sums())),
    ("stats.kind_mismatch", "hold MEANS", post(x(), sums(stats_kind="means"))),
    ("stats.sharded", "sharded on one core", post(xs(), D((1, 1, 32, 256)))),
    ("stats.bf16_sharded", "only bfloat16 stats", post(xs(), means(dtype=ttnn.float32))),
    ("stats.one_core", "exactly 1 core", post(xs(), means(memory_config=shard_mc(W_SHARD, (8, 1), (32, 32))))),
    ("stats.rows_match", "rows and batch", post(xs(), means((2, 1, 32, 256)))),
    ("post.stats_dims", "dims 0, 1 and 2", post(x(), sums((1, 1, 64, 256)))),
    ("weight.tile_width", "last logical and padded", post(x(), sums(), weight=D((1, 1, 1, 512)))),
    ("bias.tile_width", "last logical and padded", post(x(), sums(), weight=rm_weight(), bias=D((1, 1, 1, 512)))),
    ("weight.tile_height", "one tile high", post(x(), sums(), weight=D((1, 1, 64, 1024)))),
    ("bias.tile_height", "one tile high", post(x(), sums(), weight=D((1, 1, 1, 1024)), bias=D((1, 1, 64, 1024)))),
    ("weight.row_major_shape", "[1, 1, W/32, 32]", post(x(), sums(), weight=D((1, 1, 1, 1024), layout=RM))),
    ("bias.row_major_shape", "[1, 1, W/32, 32]", post(x(), sums(), weight=rm_weight(), bias=rm_weight(512))),
    ("bias.needs_weight", "silently dropped", post(x(), sums(), bias=rm_weight())),
    ("bias.same_layout", "same layout", rms(x(), weight=rm_weight(), bias=D((1, 1, 1, 1024)))),
    ("rms_norm.sharded_config_interleaved", "needs a sharded input", rms(x(), program_config=PC)),
    (  # tt-metal's test_rms_norm_bad_user_repro: 576 rows width-sharded over 8x8 cores, fp32 accumulation
        "sharded.stats_gather_burst",
        "BLOCK_SHARDED L1 on a 8x6 grid, shard [96, 256]",
        rms(
            D((576, 2048), memory_config=shard_mc(W_SHARD, (8, 8), (576, 32))),
            compute_kernel_config=FP32_ACC,
            compute_grid=(8, 8),
        ),
    ),
    ("all_gather.dim", "dim must be in", gather(x(), dim=4)),
    ("all_gather.cluster_axis", "cluster_axis must be an axis", gather(x(), cluster_axis=2)),
    ("all_gather.num_devices", "more than one device", gather(x(), cluster_axis=0)),
    ("all_gather.sharded_needs_memory_config", "explicit output memory_config", gather(means())),
    ("rms_norm.welford", "Welford", rms(x(), program_config=ttnn.LayerNormDefaultProgramConfig(use_welford=True))),
    ("all_gather.empty", "empty tensor", gather(D((0, 1024), layout=RM), dim=0)),
    ("all_gather.composite_dtype", "bfloat4_b", gather(D((1, 1, 32, 100), dtype=ttnn.bfloat4_b), dim=3)),
    # 675 tiles of output per bank on T3000's 56 banks: one past the 674 that fit beside the gather's buffers
    (
        "all_gather.l1_budget",
        "fit one L1 bank",
        gather(D((1, 1, 675 * 7 * 32, 32)), mesh_shape=(1, 8), memory_config=ttnn.L1_MEMORY_CONFIG),
    ),
    (
        "all_gather.composite_l1_bound",
        "an upper bound",
        gather(
            D((1, 1, 341, 6144), ttnn.float32, memory_config=ttnn.L1_MEMORY_CONFIG),
            dim=2,
            mesh_shape=(8, 4),
            cluster_axis=1,
        ),
    ),
    (
        "memory_config.shard_fits",
        "does not fit a 128 x 1024 tensor",
        post(x(), sums(), memory_config=shard_mc(W_SHARD, (4, 2), (32, 128))),
    ),
    (
        "sharded.reduce_workers",
        "reduce workers",  # a one-core-wide ROW_MAJOR grid off x = 0: tt-metal's work split starts outside it
        pre(
            xs(memory_config=shard_mc(W_SHARD, (1, 4), (32, 256), start=(2, 0))),
            program_config=pc((1, 4), subblock_w=4, block_w=8),
        ),
    ),
    (
        "sharded.l1_budget",
        "above its tensors' shards",  # the whole 8192-wide row on one core
        rms(x((1, 1, 32, 8192), memory_config=shard_mc(W_SHARD, (1, 1), (32, 8192)))),
    ),
    (
        "rms_norm.l1_budget",
        "no streaming variant",
        rms(x((1, 1, 32, 8192), dtype=ttnn.float32), weight=rm_weight(8192), compute_kernel_config=FP32_ACC),
    ),
]


@pytest.mark.parametrize("rule, fragment, check", BAD, ids=[b[0] for b in BAD])
def test_violation_raises_named_rule(rule, fragment, check):
    with pytest.raises(RuleError) as err:
        check()
    assert err.value.rule == rule, str(err.value)
    msg = str(err.value)
    assert fragment in msg and "got" in msg and "Fix:" in msg, msg
    assert isinstance(err.value, ValueError)


def test_every_rule_has_a_violating_case():
    covered = {b[0] for b in BAD}
    own = {r for r in RULES if not r.startswith(("fused.", "all_gather_async."))}  # those: test_ccl_rules.py
    assert covered == own, f"untested: {own - covered}; unknown: {covered - own}"


def test_package_only_rules_are_rules():
    assert set(PACKAGE_ONLY_RULES) <= set(RULES)


# Valid combinations (model-code usage and the tests' shard specs): the rules must accept each.
SHARD_SPECS = [
    # (per-device width, grid (x, y)) as tt-metal's sharded distributed tests and model code use them
    (2048, (8, 4)),
    (1024, (1, 4)),
    (2048, (8, 2)),
    (1024, (2, 8)),
    (1024, (8, 4)),
    (2048, (4, 8)),
]


@pytest.mark.parametrize("width, grid", SHARD_SPECS, ids=[f"w{w}_grid{g[0]}x{g[1]}" for w, g in SHARD_SPECS])
@pytest.mark.parametrize("weight_layout", [RM, ttnn.TILE_LAYOUT], ids=["rm_weight", "tile_weight"])
def test_sharded_configs_accepted(width, grid, weight_layout):
    shape, n = (1, 1, 32, width), 8
    cfg = layouts.compute_kernel_config()
    pcfg = layouts.sharded_program_config(shape, grid, layouts.WIDTH, cfg)
    inp = D(shape, memory_config=layouts.sharded_memory_config(shape, grid, layouts.WIDTH))
    stats = D((1, 1, 32, 32 * n), memory_config=layouts.stats_memory_config(n), stats_kind="means")
    weight = rm_weight(width) if weight_layout == RM else D((1, 1, 1, width))
    kw = dict(program_config=pcfg, compute_kernel_config=cfg, compute_grid=(8, 8))
    assert op_checks.check_pre_all_gather(inp, **kw) == "sharded"
    assert op_checks.check_post_all_gather(inp, stats, epsilon=1e-5, weight=weight, **kw) == "sharded"
    assert op_checks.check_rms_norm(inp, weight=weight, **kw) == "sharded"


@pytest.mark.parametrize(
    "shape, dtype, fp32_acc",
    [
        ((1, 1, 128, 1024), ttnn.bfloat16, True),
        ((1, 1, 2048, 1024), ttnn.bfloat16, True),
        ((2, 1, 128, 2048), ttnn.bfloat8_b, False),
        ((1, 1, 32, 7168), ttnn.bfloat16, False),
        ((1, 1, 32, 8192), ttnn.bfloat8_b, False),
        ((1, 1, 32, 3072), ttnn.float32, True),
        ((1, 1, 100, 1024), ttnn.bfloat16, True),
    ],
    ids=["t3k_prefill128", "t3k_prefill2048", "batch2_bf8", "w7168_bf16", "w8192_bf8", "w3072_fp32", "ragged_rows"],
)
@pytest.mark.parametrize("n_dev", [1, 8, 32], ids=["n1", "n8", "n32"])
def test_interleaved_accepted(shape, dtype, fp32_acc, n_dev):
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=fp32_acc)
    inp = D(shape, dtype=dtype)
    stats = D(shape[:-1] + (32 * n_dev,), stats_kind="sums")
    assert (
        op_checks.check_pre_all_gather(
            inp, compute_kernel_config=cfg, residual_input_tensor=D(shape, dtype=dtype) if shape[-1] <= 2048 else None
        )
        == "interleaved"
    )
    affine = (
        dict(weight=rm_weight(shape[-1]), bias=rm_weight(shape[-1])) if shape[-1] <= 2048 else {}
    )  # wide rows: L1 (data/l1_verdicts.txt)
    assert (
        op_checks.check_post_all_gather(inp, stats, epsilon=1e-5, compute_kernel_config=cfg, **affine) == "interleaved"
    )
    assert op_checks.check_rms_norm(inp, weight=D((1, 1, 1, shape[-1])), compute_kernel_config=cfg) == "interleaved"


def _data_rows(name: str) -> list[list[str]]:
    """The rows of a recorded-verdicts file in data/, split on whitespace, comments left out."""
    path = Path(__file__).with_name("data") / name
    return [line.split() for line in path.read_text().splitlines() if line and not line.startswith("#")]


def _l1_verdicts():
    rows = _data_rows("l1_verdicts.txt")
    return [
        (op, int(w), int(aff), acc == "True", dt, res == "True", verdict)
        for op, w, aff, acc, dt, res, verdict, *_ in rows
    ]


@pytest.mark.parametrize(
    "op, width, affine, acc, dt, residual, verdict",
    _l1_verdicts(),
    ids=[
        f"{r[0]}-w{r[1]}-aff{r[2]}-{'fp32acc' if r[3] else 'bf16acc'}-{r[4]}{'-res' if r[5] else ''}"
        for r in _l1_verdicts()
    ],
)
def test_l1_budget_matches_ttnn_verdicts(op, width, affine, acc, dt, residual, verdict):
    """Every verdict ttnn 0.81.1 gave on a mock N150 for the interleaved pre/post L1 budgets (data/l1_verdicts.txt,
    recorded with tt_rmsnorm.testing.mock_cluster): the rules reproduce each accept and each reject."""
    dtype = {"bf16": ttnn.bfloat16, "bf8": ttnn.bfloat8_b, "fp32": ttnn.float32}[dt]
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=acc)
    inp = D((1, 1, 32, width), dtype=dtype)
    if op == "pre":
        check = pre(
            inp,
            compute_kernel_config=cfg,
            residual_input_tensor=D((1, 1, 32, width), dtype=dtype) if residual else None,
        )
    else:
        affine_kw = (
            {"weight": rm_weight(width), "bias": rm_weight(width)}
            if affine == 2
            else ({"weight": rm_weight(width)} if affine else {})
        )
        check = post(inp, sums((1, 1, 32, 32)), compute_kernel_config=cfg, **affine_kw)
    _assert_l1_verdict(check, op, verdict)


def _assert_l1_verdict(check, op, verdict):
    """The rules accept where ttnn accepted and raise `{op}.l1_budget` where ttnn rejected."""
    if verdict == "ok":
        check()
    else:
        with pytest.raises(RuleError) as err:
            check()
        assert err.value.rule == f"{op}.l1_budget"


def _l1_verdicts_2d():
    rows = _data_rows("l1_verdicts_2d.txt")
    return [(op, int(w), int(s), acc == "True", dt, int(g), verdict) for op, w, s, acc, dt, g, verdict, *_ in rows]


@pytest.mark.filterwarnings("ignore::tt_rmsnorm.errors.AccuracyWarning")
@pytest.mark.parametrize(
    "op, width, rows, acc, dt, weight, verdict",
    _l1_verdicts_2d(),
    ids=[
        f"{r[0]}-w{r[1]}-s{r[2]}-{'fp32acc' if r[3] else 'bf16acc'}-{r[4]}{'-weight' if r[5] else ''}"
        for r in _l1_verdicts_2d()
    ],
)
def test_l1_budget_2d_core_grid_matches_ttnn_verdicts(op, width, rows, acc, dt, weight, verdict):
    """The 2-D core-grid factories' L1 verdicts from ttnn on a mock N150 (data/l1_verdicts_2d.txt, grid 8x8)."""
    dtype = {"bf16": ttnn.bfloat16, "bf8": ttnn.bfloat8_b}[dt]
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=acc)
    inp = D((1, 1, rows, width), dtype=dtype)
    if op == "pre":
        check = pre(inp, compute_kernel_config=cfg, use_2d_core_grid=True, compute_grid=(8, 8))
    else:
        check = post(
            inp,
            sums((1, 1, rows, 32)),
            compute_kernel_config=cfg,
            use_2d_core_grid=True,
            compute_grid=(8, 8),
            **({"weight": rm_weight(width)} if weight else {}),
        )
    _assert_l1_verdict(check, op, verdict)


def test_use_2d_core_grid_warns_on_interleaved():
    with pytest.warns(AccuracyWarning, match="35435"):
        op_checks.check_pre_all_gather(x(), use_2d_core_grid=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op_checks.check_pre_all_gather(x(), use_2d_core_grid=False)


def test_all_gather_galaxy_axes():
    assert op_checks.check_all_gather(x(), 3, cluster_axis=1, mesh_shape=(8, 4)) == 4
    assert op_checks.check_all_gather(x(), 3, cluster_axis=0, mesh_shape=(8, 4)) == 8
    assert op_checks.check_all_gather(x(), 3, mesh_shape=(1, 8)) == 8
    local = means((1, 1, 32, 32), memory_config=shard_mc(W_SHARD, (1, 1), (32, 32)))  # one device's stats
    assert (
        op_checks.check_all_gather(local, 3, cluster_axis=1, mesh_shape=(1, 8), memory_config=PLAN.stats_memory_config)
        == 8
    )


def _l1_verdicts_sharded():
    rows = _data_rows("l1_verdicts_sharded.txt")
    return [
        (op, int(c), int(t), dt, acc == "True", int(w), v, [int(n) for n in rest])
        for op, c, t, dt, acc, w, v, *rest in rows
    ]


@pytest.mark.parametrize(
    "op, cores, tiles, dt, acc, weight, verdict, reported",
    _l1_verdicts_sharded(),
    ids=[
        f"{r[0]}-{r[1]}cores-{r[2]}tiles-{r[3]}-{'fp32acc' if r[4] else 'bf16acc'}{'-weight' if r[5] else ''}"
        for r in _l1_verdicts_sharded()
    ],
)
def test_sharded_l1_matches_ttnn_verdicts(op, cores, tiles, dt, acc, weight, verdict, reported):
    """The sharded factories' L1 on a mock N150 (data/l1_verdicts_sharded.txt): each accept and reject, and where
    ttnn reported them, the exact end of the static buffers and the address of the lowest tensor shard."""
    dtype = {"bf16": ttnn.bfloat16, "bf8": ttnn.bfloat8_b, "fp32": ttnn.float32}[dt]
    cfg = layouts.compute_kernel_config(fp32_dest_acc_en=acc)
    width = cores * tiles * 32
    inp = D((1, 1, 32, width), dtype=dtype, memory_config=shard_mc(W_SHARD, (cores, 1), (32, tiles * 32)))
    subblock = max(d for d in range(1, max_subblock_w(cfg) + 1) if tiles % d == 0)
    kw = dict(program_config=pc((cores, 1), subblock, 1, tiles), compute_kernel_config=cfg, compute_grid=(8, 8))
    w = rm_weight(width) if weight else None
    stats = means((1, 1, 32, 256), memory_config=shard_mc(W_SHARD, (1, 1), (32, 256))) if op == "post" else None
    check = {
        "pre": lambda: op_checks.check_pre_all_gather(inp, **kw),
        "post": lambda: op_checks.check_post_all_gather(inp, stats, epsilon=1e-5, weight=w, **kw),
        "rms_norm": lambda: op_checks.check_rms_norm(inp, weight=w, **kw),
    }[op]
    if verdict == "ok":
        check()
        return
    with pytest.raises(RuleError) as err:
        check()
    assert err.value.rule == "sharded.l1_budget"
    end, floor = l1_budget.sharded_l1_bytes(op, inp, cfg, weight=w, stats=stats, compute_grid=(8, 8))
    assert [end, floor][: len(reported)] == reported


RANK1 = [ttnn.TILE_LAYOUT, RM]


@pytest.mark.parametrize("layout", RANK1, ids=["tile", "row_major"])
def test_rank1_weight_is_described_as_ttnn_pads_it(layout):
    """ttnn tiles a rank-1 [W] weight as one tile row (padded (32, W)); ROW_MAJOR keeps [W]. On a mock N150 the TILE
    one is taken by every post and rms_norm (bfloat16/float32; bfloat8_b only off the interleaved post) and the
    ROW_MAJOR one by none."""
    g = D((1024,), layout=layout)
    assert g.padded_shape == ((32, 1024) if layout == ttnn.TILE_LAYOUT else (1024,))
    calls = {
        "post": post(x((1, 1, 32, 1024)), sums((1, 1, 32, 256)), weight=g),
        "sharded_post": post(xs(), means(), weight=g),
        "rms_norm": rms(x(), weight=g),
        "sharded_rms_norm": rms(xs(), weight=g, program_config=PC, compute_kernel_config=CKC),
    }
    for name, check in calls.items():
        if layout == ttnn.TILE_LAYOUT:
            check()
        else:
            with pytest.raises(RuleError) as err:
                check()
            assert err.value.rule == "weight.row_major_shape", name
    with pytest.raises(RuleError) as err:
        op_checks.check_post_all_gather(x(), sums(), weight=D((1024,), dtype=ttnn.bfloat8_b))
    assert err.value.rule == "weight.dtype"


def test_guards_ttnn_does_not_have_are_package_only():
    """ttnn takes a negative epsilon; the package refuses it on purpose, as a package-only guard."""
    for check in (post(x(), sums(), epsilon=-1e-5), rms(x(), epsilon=-1e-5)):
        with pytest.raises(RuleError) as err:
            check()
        assert err.value.rule == "epsilon.non_negative" and err.value.rule in PACKAGE_ONLY_RULES
    rms(x(), epsilon=0.0)()


def test_rms_norm_cases_ttnn_accepts_or_rejects():
    """rms_norm, unlike the pre, takes a sharded residual and writes any sharded output (that fits) for an interleaved
    input; it refuses a default program config on a sharded input ("std::get: wrong index for variant") but derives
    one when none is given."""
    assert rms(x((1, 1, 32, 1024)), residual_input_tensor=xs())() == "interleaved"
    with pytest.raises(RuleError) as err:
        rms(xs(), program_config=layouts.interleaved_program_config())()
    assert err.value.rule == "sharded.program_config"
    assert rms(xs())() == "sharded"
    assert rms(x((1, 1, 32, 1024)), memory_config=shard_mc(B_SHARD, (4, 1), (32, 256)))() == "interleaved"
    with pytest.raises(RuleError, match="memory_config.shard_fits"):
        rms(x((1, 1, 32, 1024)), memory_config=shard_mc(W_SHARD, (4, 2), (64, 128)))()


def test_interleaved_rms_norm_streams_only_tile_affine():
    """A TILE weight lets ttnn stream a row that does not fit (a few dst blocks at a time); a ROW_MAJOR one does not."""
    wide = x((1, 1, 32, 8192), dtype=ttnn.float32)
    assert rms(wide, weight=D((1, 1, 1, 8192)), compute_kernel_config=FP32_ACC)() == "interleaved"
    assert rms(wide, compute_kernel_config=FP32_ACC)() == "interleaved"
    with pytest.raises(RuleError, match="rms_norm.l1_budget"):
        rms(wide, weight=rm_weight(8192), compute_kernel_config=FP32_ACC)()


def test_l1_interleaved_tensors_lower_the_l1_ceiling():
    """An L1-interleaved input (and the pre's stats, which follow it into L1) take the top of every core's L1: on
    a mock N300 (56 banks) the pre at width 7200 fits with a DRAM input and clashes with an L1 one."""
    kw = dict(compute_kernel_config=layouts.compute_kernel_config(fp32_dest_acc_en=False, dst_full_sync_en=True))
    assert pre(x((1, 1, 32, 7200)), compute_grid=(8, 7), **kw)() == "interleaved"
    with pytest.raises(RuleError, match="pre.l1_budget"):
        pre(x((1, 1, 32, 7200), memory_config=ttnn.L1_MEMORY_CONFIG), compute_grid=(8, 7), **kw)()


def test_all_gather_without_axis_on_2d_mesh():
    """ttnn needs cluster_axis on a 2-D mesh, except for a last dim off the tile grid (its composite gather, over
    every device of the mesh)."""
    with pytest.raises(RuleError, match="all_gather.cluster_axis"):
        gather(x((1, 1, 32, 32)), mesh_shape=(8, 4))()
    assert gather(x((1, 1, 7, 100)), mesh_shape=(8, 4))() == 32


def test_2d_pre_counts_the_residual():
    """The 2-D pre double-buffers the residual and keeps a+b: ttnn on a mock N150 rejects [2,1,128,2048] FLOAT32 with
    a FLOAT32 residual (static buffers to 1,987,936 B), and the rules count the same bytes."""
    inp, res = x((2, 1, 128, 2048), dtype=ttnn.float32), x((2, 1, 128, 2048), dtype=ttnn.float32)
    assert l1_budget.pre_l1_bytes(inp, FP32_ACC, res, use_2d_core_grid=True) == 1_987_936
    with pytest.warns(AccuracyWarning), pytest.raises(RuleError, match="pre.l1_budget"):
        pre(
            inp, residual_input_tensor=res, compute_kernel_config=FP32_ACC, use_2d_core_grid=True, compute_grid=(8, 8)
        )()
