"""Rule boundaries the one-violation-per-rule table (test_rules.py) leaves open: each condition checked on the side
it must reject and the side it must accept, and the L1 byte counts against what ttnn 0.81.1 reported on a mock N150."""

from functools import partial

import pytest
import ttnn

from tests.support import pc, shard_mc
from tt_rmsnorm.architecture import WORMHOLE_B0
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rules import ccl_checks, l1_budget, op_checks
from tt_rmsnorm.tensors import TensorDesc as D

FP32_ACC = layouts.compute_kernel_config(fp32_dest_acc_en=True)
W_SHARD, B_SHARD = ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.TensorMemoryLayout.BLOCK_SHARDED


def _rule(check, *args, **kw):
    """The id of the rule `check(*args, **kw)` raises."""
    with pytest.raises(RuleError) as err:
        check(*args, **kw)
    return err.value.rule


def _l1_verdict_is_ttnns(check, rule, end=None, floor=None):
    """`check()` runs where ttnn ran (`end` None); where ttnn rejected, it raises `rule` and its message names the end
    of the buffers and, where given, the lowest L1 buffer ttnn reported."""
    if end is None:
        check()
        return
    with pytest.raises(RuleError) as err:
        check()
    assert err.value.rule == rule
    assert f"needs {end} B" in str(err.value), str(err.value)
    assert floor is None or f"from {floor} B" in str(err.value), str(err.value)


# ttnn's "Statically allocated dataflow buffers ... grow to N B" for the interleaved pre (the agreement battery's
# cases): the model's end address is exactly ttnn's.
PRE_L1 = [
    ((1, 1, 32, 8192), ttnn.bfloat16, None, False, 1682784),
    ((1, 1, 32, 16384), ttnn.bfloat16, None, False, 3255648),
    ((1, 1, 32, 12288), ttnn.bfloat8_b, None, False, 1731936),
    ((1, 1, 32, 16384), ttnn.bfloat8_b, None, False, 2272608),
    ((1, 1, 32, 4096), ttnn.float32, FP32_ACC, False, 1684832),
    ((1, 1, 32, 6144), ttnn.bfloat16, FP32_ACC, False, 1684832),
    ((1, 1, 32, 7168), ttnn.bfloat16, FP32_ACC, False, 1946976),
    ((1, 1, 128, 8192), ttnn.bfloat8_b, None, True, 1736032),
    ((1, 1, 128, 16384), ttnn.bfloat16, None, True, 4324704),
    ((1, 1, 256, 12288), ttnn.bfloat16, None, True, 3276128),
    ((1, 1, 128, 16384), ttnn.bfloat8_b, None, True, 3341664),
]


@pytest.mark.parametrize(
    "shape, dtype, ckc, two_d, reported", PRE_L1, ids=lambda v: str(v) if isinstance(v, int) else None
)
def test_pre_l1_bytes_equal_ttnns_report(shape, dtype, ckc, two_d, reported):
    assert l1_budget.pre_l1_bytes(D(shape, dtype=dtype), ckc, use_2d_core_grid=two_d) == reported


@pytest.mark.parametrize("width, reported", [(12288, 1703264), (14336, 1965408), (16384, 2227552), (20480, 2751840)])
def test_post_l1_bytes_equal_ttnns_report(width, reported):
    """ttnn reports where all of the post's buffers end: the model's end address is exactly ttnn's."""
    assert l1_budget.post_l1_bytes(D((1, 1, 32, width)), D((1, 1, 32, 256))) == reported


@pytest.mark.parametrize("width", [24576, 32768])
def test_streamed_post_l1_bytes_equal_ttnns_report(width):
    """Past 95 % of L1 the post streams the row in a fixed number of tiles: ttnn reports the same end address at any
    width (fp32 accumulation, weight and bias: 1627488 B, rejected), and so does the model."""
    rm = D((1, 1, width // 32, 32), layout=ttnn.ROW_MAJOR_LAYOUT)
    got = l1_budget.post_l1_bytes(D((1, 1, 32, width)), D((1, 1, 32, 32)), FP32_ACC, weight=rm, bias=rm)
    assert got == 1627488


# ttnn 0.81.1 on a mock N150 at the edge of L1, rows [1, 1, 32, W], TILE bf16 weight/bias: (dtype, fp32_dest_acc_en,
# affine (0 none, 1 weight, 2 weight and bias), devices in the stats, W, the end ttnn reported or None where it ran).
# The float32 input's scalar tile and the two one-tile intermediates decide the cases within a few hundred bytes.
POST_L1_EDGE = [
    (ttnn.float32, True, 1, 1, 3072, None),  # the interleaved post the fuzzer found wrongly rejected (672 B to spare)
    (ttnn.float32, True, 1, 8, 3040, None),
    (ttnn.bfloat16, True, 2, 2, 2688, None),
    (ttnn.bfloat16, False, 0, 32, 10304, None),
    (ttnn.bfloat8_b, False, 0, 8, 20128, None),
    (ttnn.bfloat8_b, True, 1, 4, 5280, None),
    (ttnn.bfloat8_b, False, 2, 8, 4224, None),
    (ttnn.bfloat8_b, True, 0, 4, 20192, 1499360),
    (ttnn.bfloat8_b, False, 0, 4, 20256, 1499616),
    (ttnn.bfloat8_b, True, 2, 32, 2912, 1499872),
    (ttnn.float32, True, 2, 1, 6144, 4054368),
    (ttnn.bfloat16, True, 0, 1, 12288, 1693024),
]


@pytest.mark.parametrize(
    "dtype, acc, affine, devices, width, reported",
    POST_L1_EDGE,
    ids=[f"{d.name}-{'fp32acc' if a else 'bf16acc'}-aff{f}-n{n}-w{w}" for d, a, f, n, w, _ in POST_L1_EDGE],
)
def test_post_l1_edge_matches_ttnn(dtype, acc, affine, devices, width, reported):
    """Near the end of L1 the rules give ttnn's verdict; where ttnn rejects, the model gives its end address."""
    x, stats = D((1, 1, 32, width), dtype=dtype), D((1, 1, 32, 32 * devices), stats_kind="sums")
    affine_kw = {"weight": D((1, 1, 1, width)), "bias": D((1, 1, 1, width))}
    affine_kw = dict(list(affine_kw.items())[:affine])
    ckc = layouts.compute_kernel_config(fp32_dest_acc_en=acc)
    if reported is not None:
        assert l1_budget.post_l1_bytes(x, stats, ckc, **affine_kw) == reported
    check = partial(
        op_checks.check_post_all_gather, x, stats, compute_kernel_config=ckc, compute_grid=(8, 8), **affine_kw
    )
    _l1_verdict_is_ttnns(check, "post.l1_budget", reported)


# ttnn 0.81.1 on a mock N150, the interleaved pre of an L1-interleaved bfloat16 input (and residual): (rows, width,
# residual?, the lowest L1 buffer and the end of the buffers ttnn reported, or None where it ran). ttnn double-buffers
# x^2 where that still ends inside L1, blind to the L1 tensors below the end.
PRE_X2_DOUBLE = [
    (64, 3072, True, 1484800, 1486176),  # the fuzzer's call: double-buffered, into the tensors
    (64, 3104, True, None, None),  # double-buffered it would pass the end of L1: single, and it fits
    (8192, 3040, False, 712704, 888160),
    (8192, 3104, False, 696320, 904544),
    (4096, 6144, False, 708608, 1289568),  # single
]


@pytest.mark.parametrize(
    "rows, width, residual, floor, end",
    PRE_X2_DOUBLE,
    ids=[f"rows{r}-w{w}{'-res' if res else ''}" for r, w, res, _, _ in PRE_X2_DOUBLE],
)
def test_pre_double_buffers_x2_where_it_ends_inside_l1(rows, width, residual, floor, end):
    """The pre's verdict is ttnn's, and where ttnn rejects, the rule names its lowest L1 buffer and its buffers' end."""
    x = D((1, 1, rows, width), memory_config=ttnn.L1_MEMORY_CONFIG)
    check = partial(
        op_checks.check_pre_all_gather, x, residual_input_tensor=x if residual else None, compute_grid=(8, 8)
    )
    _l1_verdict_is_ttnns(check, "pre.l1_budget", end, floor)


# ttnn 0.81.1 on a mock N150, the interleaved pre of an L1-interleaved bfloat8_b input (and residual): (rows, width,
# residual dtype, use_2d_core_grid, the lowest L1 buffer and the end of the buffers ttnn reported, or None where it
# ran). Rows off the tile grid: ttnn refills the padding through a bfloat16 copy typecast back below it.
PRE_L1_REFILL = [
    (31, 10432, None, False, 1473792, 1486944),  # the fuzzer's call: accepted while the copies were not modelled
    (31, 10336, None, False, 1473792, 1474272),
    (31, 10304, None, False, None, None),
    (1, 10464, None, False, 1473792, 1491168),
    (33, 10432, None, False, 1452672, 1486944),
    (100, 10336, None, False, 1410432, 1474272),
    (31, 5216, ttnn.bfloat8_b, False, 1479936, 1486944),
    (31, 4256, ttnn.bfloat16, False, 1480320, 1488864),
    (31, 7008, None, True, 1482240, 1493728),
    (32, 10464, None, False, 1490560, 1491168),  # on the tile grid: no copy
]


@pytest.mark.filterwarnings("ignore::tt_rmsnorm.errors.AccuracyWarning")
@pytest.mark.parametrize(
    "rows, width, residual, two_d, floor, end",
    PRE_L1_REFILL,
    ids=[f"rows{r}-w{w}{'-res' if res else ''}{'-2d' if t else ''}" for r, w, res, t, _, _ in PRE_L1_REFILL],
)
def test_pre_l1_floor_counts_the_padding_refill_copies(rows, width, residual, two_d, floor, end):
    """The pre's verdict is ttnn's, and where ttnn rejects, the rule names its lowest L1 buffer and its buffers' end."""
    l1 = ttnn.L1_MEMORY_CONFIG
    x = D((1, 1, rows, width), dtype=ttnn.bfloat8_b, memory_config=l1)
    res = D((1, 1, rows, width), dtype=residual, memory_config=l1) if residual else None
    check = partial(
        op_checks.check_pre_all_gather, x, residual_input_tensor=res, use_2d_core_grid=two_d, compute_grid=(8, 8)
    )
    _l1_verdict_is_ttnns(check, "pre.l1_budget", end, floor)


@pytest.mark.parametrize("width, accepted", [(20480, False), (21504, True), (22528, True)])
def test_post_streams_rows_past_95_percent_of_l1(width, accepted):
    """ttnn on a mock N150: a 20480-wide bf16 row is buffered whole and does not fit; from 21504 (672 tiles, past 95 %
    of the 1.39 MB above the allocator base) the post streams it and runs."""
    check = op_checks.check_post_all_gather
    args = (D((1, 1, 32, width)), D((1, 1, 32, 32), stats_kind="sums"))
    if accepted:
        check(*args, compute_grid=(8, 8))
    else:
        assert _rule(check, *args, compute_grid=(8, 8)) == "post.l1_budget"


def test_post_l1_bytes_2d_core_grid_divide_the_row_over_the_largest_divisor():
    """2-D post: each core row buffers Wt / cores_y tiles, cores_y the largest divisor of Wt up to the grid height."""
    stats = D((1, 1, 32, 32))
    one_tile = l1_budget.post_l1_bytes(D((1, 1, 32, 32)), stats, use_2d_core_grid=True, grid_y=8)
    per_tile = l1_budget.post_l1_bytes(D((1, 1, 32, 64)), stats, use_2d_core_grid=True, grid_y=1) - one_tile
    for wt, grid_y, cores_y in [(8, 8, 8), (16, 8, 8), (12, 8, 6), (7, 8, 7), (9, 8, 3), (5, 4, 1)]:
        got = l1_budget.post_l1_bytes(D((1, 1, 32, 32 * wt)), stats, use_2d_core_grid=True, grid_y=grid_y)
        assert got == one_tile + (wt // cores_y - 1) * per_tile, (wt, grid_y)


def test_sharded_block_h_must_equal_the_shard_height():
    """rms_norm (not distributed) takes a 64-high shard: block_h 1 and 3 are both wrong, 2 is right."""
    x = D((1, 1, 64, 1024), memory_config=shard_mc(W_SHARD, (8, 4), (64, 32)))
    for block_h in (1, 3):
        got = _rule(op_checks.check_rms_norm, x, program_config=pc(block_h=block_h), compute_grid=(8, 7))
        assert got == "program_config.block_h_shard"
    op_checks.check_rms_norm(x, program_config=pc(block_h=2), compute_grid=(8, 7))


def test_sharded_residual_must_match_the_input_sharding():
    mc = shard_mc(W_SHARD, (8, 4), (32, 32))
    x = D((1, 1, 32, 1024), memory_config=mc)
    kw = dict(program_config=pc(), compute_grid=(8, 7))
    op_checks.check_rms_norm(x, residual_input_tensor=D((1, 1, 32, 1024), memory_config=mc), **kw)
    other = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (4, 4), (32, 64)))
    assert _rule(op_checks.check_rms_norm, x, residual_input_tensor=other, **kw) == "residual.same_sharding"


def test_sharded_tile_weight_needs_at_least_the_inputs_logical_width():
    """On the sharded layout ttnn asks for the input's padded width and at least its logical width (a wider logical
    weight is fine); the interleaved post asks for both equal."""
    mc = shard_mc(W_SHARD, (8, 4), (32, 32))
    x = D((1, 1, 32, 1000), padded_shape=(1, 1, 32, 1024), memory_config=mc)
    kw = dict(program_config=pc(), compute_grid=(8, 7))
    narrow = D((1, 1, 32, 990), padded_shape=(1, 1, 32, 1024))
    wide = D((1, 1, 32, 1010), padded_shape=(1, 1, 32, 1024))
    assert _rule(op_checks.check_rms_norm, x, weight=narrow, **kw) == "weight.tile_width"
    op_checks.check_rms_norm(x, weight=wide, **kw)


@pytest.mark.parametrize(
    "axis, rule", [(2, "all_gather.cluster_axis"), (3, "all_gather.cluster_axis"), (-1, "all_gather.cluster_axis")]
)
def test_all_gather_cluster_axis_outside_the_mesh(axis, rule):
    assert _rule(op_checks.check_all_gather, D((1, 1, 32, 32)), 3, cluster_axis=axis, mesh_shape=(8, 4)) == rule
    assert op_checks.check_all_gather(D((1, 1, 32, 32)), 3, cluster_axis=0, mesh_shape=(8, 4)) == 8


def test_all_gather_dim_range():
    for dim in (-4, 3):
        assert op_checks.check_all_gather(D((1, 1, 32, 32)), dim, cluster_axis=1, mesh_shape=(1, 8)) == 8
    for dim in (-5, 4):
        got = _rule(op_checks.check_all_gather, D((1, 1, 32, 32)), dim, cluster_axis=1, mesh_shape=(1, 8))
        assert got == "all_gather.dim"


def test_block_sharded_2d_config_with_more_rows_than_grid_rows():
    """Block sharding, Ht = 4 tiles over 2 grid rows: block_h = 2 is right (Ht divisible by the rows), 1 is not."""
    x = D((1, 1, 128, 1024), memory_config=shard_mc(B_SHARD, (8, 2), (64, 128)))
    op_checks.check_rms_norm(x, program_config=pc((8, 2), block_h=2, block_w=4), compute_grid=(8, 7))
    got = _rule(op_checks.check_rms_norm, x, program_config=pc((8, 2), block_h=1, block_w=4), compute_grid=(8, 7))
    assert got == "program_config.block_h_shard"


def test_program_grid_larger_than_the_shard_grid_is_accepted():
    """The shard grid must fit the program config's grid, not equal it (ttnn runs a 4x2 shard grid under 8x8)."""
    x = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (8, 4), (32, 32)))
    for grid in [(8, 4), (8, 6), (8, 7)]:
        op_checks.check_pre_all_gather(x, program_config=pc(grid), compute_grid=(8, 7))
    assert _rule(op_checks.check_pre_all_gather, x, program_config=pc((8, 3)), compute_grid=(8, 7)) == (
        "program_config.grid_fits_shards"
    )
    assert _rule(op_checks.check_pre_all_gather, x, program_config=pc((7, 4)), compute_grid=(8, 7)) == (
        "program_config.grid_fits_shards"
    )


X, STATS = D((1, 1, 32, 1024)), D((1, 1, 32, 32))


@pytest.mark.parametrize(
    "check, args",
    [
        (op_checks.check_pre_all_gather, (X,)),
        (op_checks.check_post_all_gather, (X, STATS)),
        (op_checks.check_rms_norm, (X,)),
        (op_checks.check_all_gather, (STATS, 3)),
    ],
    ids=["pre", "post", "rms_norm", "all_gather"],
)
def test_options_are_keyword_only(check, args):
    """Past the tensors (and all_gather's dim) every option is keyword-only, as in ttnn's Python API: a stray positional
    value is a TypeError, never silently taken for the next option."""
    with pytest.raises(TypeError):
        check(*args, ttnn.bfloat16)


def test_residual_needs_the_same_logical_and_padded_shape():
    x = D((1, 1, 30, 1024))
    assert _rule(op_checks.check_pre_all_gather, x, residual_input_tensor=D((1, 1, 32, 1024))) == "residual.shape"
    padded_only = D((1, 1, 30, 1024), padded_shape=(1, 1, 64, 1024))
    assert _rule(op_checks.check_pre_all_gather, x, residual_input_tensor=padded_only) == "residual.shape"
    op_checks.check_pre_all_gather(x, residual_input_tensor=D((1, 1, 30, 1024)))


@pytest.mark.parametrize("rows, accepted", [(6, True), (7, True), (8, False), (9, False)])
def test_shard_grid_must_end_inside_the_compute_grid(rows, accepted):
    """A width-sharded input over 1 x rows cores on an 8x7 compute grid: rows 0..6 exist, a 7th or 8th does not."""
    x = D((1, 1, 32, 32 * rows), memory_config=shard_mc(W_SHARD, (1, rows), (32, 32)))
    kw = dict(program_config=pc((1, rows)), compute_grid=(8, 7))
    if accepted:
        op_checks.check_rms_norm(x, **kw)
    else:
        assert _rule(op_checks.check_rms_norm, x, **kw) == "input.shard_grid_on_device"


def test_post_stats_with_more_rows_than_the_input():
    x, stats = D((1, 1, 32, 1024)), D((1, 1, 64, 32), stats_kind="sums")
    assert _rule(op_checks.check_post_all_gather, x, stats, compute_grid=(8, 8)) == "post.stats_dims"


def test_shard_wider_than_256_columns():
    """One core holding the whole 1024-wide row: block_w 32 (shard width 1024) is right."""
    x = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (1, 1), (32, 1024)))
    op_checks.check_pre_all_gather(x, program_config=pc((1, 1), subblock_w=8, block_w=32), compute_grid=(8, 8))
    got = _rule(
        op_checks.check_pre_all_gather, x, program_config=pc((1, 1), subblock_w=8, block_w=16), compute_grid=(8, 8)
    )
    assert got == "program_config.block_w_shard"


def test_host_tensor_is_a_rule_error_not_a_device_query_error():
    """A real host tensor has no device to ask for its grid: the check falls back to the default grid and names the
    rule, rather than failing in ttnn's device() call."""
    import torch

    host = ttnn.from_torch(torch.zeros(1, 1, 32, 32), dtype=ttnn.bfloat16)
    assert _rule(op_checks.check_pre_all_gather, host) == "input.on_device"


def test_shard_grid_offset_from_the_origin_fits_by_its_extent():
    """Shards on cores (2, 0)..(5, 1): a 4x2 box, which fits a 4x2 program grid wherever it starts."""
    x = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (4, 2), (32, 128), start=(2, 0)))
    op_checks.check_pre_all_gather(x, program_config=pc((4, 2), block_w=4), compute_grid=(8, 7))
    got = _rule(op_checks.check_pre_all_gather, x, program_config=pc((3, 2), block_w=4), compute_grid=(8, 7))
    assert got == "program_config.grid_fits_shards"


def test_block_w_is_the_ceiling_of_tiles_over_cores():
    """34 tiles over 8 grid columns: block_w = ceil(34 / 8) = 5 (the last shard partial) is right, not 34 // 8."""
    x = D((1, 1, 64, 1088), memory_config=shard_mc(B_SHARD, (8, 2), (32, 160)))
    op_checks.check_rms_norm(x, program_config=pc((8, 2), block_h=1, block_w=5), compute_grid=(8, 7))


def test_1d_block_w_off_the_ceiling_is_rejected():
    """32 tiles over 16 cores need block_w 2. Shards three tiles wide cover the row on 11 of the cores, but the
    factory splits the row by ceil(Wt / cores); shards one tile wide do not cover the row, so ttnn makes no such
    tensor."""
    x = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (8, 2), (32, 96)))
    got = _rule(op_checks.check_pre_all_gather, x, program_config=pc((8, 2), block_w=3), compute_grid=(8, 7))
    assert got == "program_config.block_w_cores"
    x = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (8, 2), (32, 32)))
    got = _rule(op_checks.check_pre_all_gather, x, program_config=pc((8, 2), block_w=1), compute_grid=(8, 7))
    assert got == "memory_config.shard_fits"


def test_interleaved_post_tile_weight_needs_the_inputs_padded_width():
    x, stats = D((1, 1, 128, 1024)), D((1, 1, 128, 32), stats_kind="sums")
    wide_pad = D((1, 1, 1, 1024), padded_shape=(1, 1, 32, 1056))
    assert _rule(op_checks.check_post_all_gather, x, stats, weight=wide_pad, compute_grid=(8, 8)) == "weight.tile_width"
    op_checks.check_post_all_gather(x, stats, weight=D((1, 1, 1, 1024)), compute_grid=(8, 8))


def test_sharded_post_input_is_one_tile_row_high():
    x = D((1, 1, 64, 1024), memory_config=shard_mc(W_SHARD, (8, 4), (64, 32)))
    stats = D((1, 1, 64, 256), memory_config=shard_mc(W_SHARD, (1, 1), (64, 256)), stats_kind="means")
    got = _rule(op_checks.check_post_all_gather, x, stats, program_config=pc(block_h=2), compute_grid=(8, 7))
    assert got == "sharded.height_32"


def test_rms_norm_takes_a_default_program_config_on_an_interleaved_input():
    x = D((1, 1, 128, 1024))
    op_checks.check_rms_norm(x, program_config=ttnn.LayerNormDefaultProgramConfig(), compute_grid=(8, 8))
    assert _rule(op_checks.check_rms_norm, x, program_config=pc(), compute_grid=(8, 8)) == (
        "rms_norm.sharded_config_interleaved"
    )


# ttnn 0.81.1 on a mock N150, the 2-D pre at rows [1, 1, 64, 32 * Wt]: (dtype, fp32_dest_acc_en, Wt, the end ttnn
# reported or None where it ran). Near the end of L1 the one block of x^2 (the largest divisor of Wt up to 8 tiles)
# decides: 169 tiles (block 1) end below 168 tiles (block 8).
PRE_2D_L1 = [
    (ttnn.bfloat16, False, 167, None),
    (ttnn.bfloat16, False, 168, 1506656),
    (ttnn.bfloat16, False, 169, 1500512),
    (ttnn.bfloat16, False, 170, 1516896),
    (ttnn.bfloat16, True, 110, None),
    (ttnn.bfloat16, True, 111, None),
    (ttnn.bfloat16, True, 112, 1529184),
    (ttnn.bfloat16, True, 116, 1561952),
    (ttnn.bfloat16, True, 124, 1660256),
    (ttnn.float32, True, 83, None),
    (ttnn.bfloat8_b, False, 219, None),
    (ttnn.bfloat8_b, True, 130, None),
]


@pytest.mark.filterwarnings("ignore::tt_rmsnorm.errors.AccuracyWarning")
@pytest.mark.parametrize(
    "dtype, acc, wt, reported",
    PRE_2D_L1,
    ids=[f"{d.name}-{'fp32acc' if a else 'bf16acc'}-wt{w}" for d, a, w, _ in PRE_2D_L1],
)
def test_2d_pre_l1_matches_ttnn(dtype, acc, wt, reported):
    """The 2-D pre's verdict near the end of L1 is ttnn's, and where ttnn rejects, the model gives its end address."""
    x, ckc = D((1, 1, 64, 32 * wt), dtype=dtype), layouts.compute_kernel_config(fp32_dest_acc_en=acc)
    if reported is not None:
        assert l1_budget.pre_l1_bytes(x, ckc, use_2d_core_grid=True) == reported
    check = partial(
        op_checks.check_pre_all_gather, x, compute_kernel_config=ckc, use_2d_core_grid=True, compute_grid=(8, 8)
    )
    _l1_verdict_is_ttnns(check, "pre.l1_budget", reported)


@pytest.mark.parametrize("width, row_tiles", [(1024, 32), (1056, 40), (32, 8)], ids=["32-tiles", "33-tiles", "1-tile"])
def test_rms_norm_l1_bytes_buffer_the_row_rounded_up_to_the_dst_block(width, row_tiles):
    # bf16 input, no weight/residual, bf16 dst (block of 8 tiles): in0 and im3 hold the row rounded up to the block,
    # out two blocks, im4 8 tiles, scaler and epsilon two tiles each, im2 two - all 2048-byte tiles
    tiles = 2 * row_tiles + 2 * 8 + 8 + 2 * 2 + 2
    assert l1_budget.rms_norm_l1_bytes(D((1, 1, 32, width))) - WORMHOLE_B0.l1_base == tiles * 2048


def _residual_on_one_core(rows):
    """An interleaved [1, 1, rows, 2048] bf16 input and its residual width-sharded whole onto one core, whose shard
    (rows * 4096 B) takes the top of that core's L1."""
    shard = shard_mc(W_SHARD, (1, 1), (rows, 2048))
    return D((1, 1, rows, 2048)), D((1, 1, rows, 2048), memory_config=shard)


@pytest.mark.parametrize(
    "rows, streams, accepted",
    [(224, False, True), (256, True, True), (288, True, True), (320, True, False)],
    ids=["224-rows-whole-row", "256-rows-streams", "288-rows-streams", "320-rows-streaming-misfit"],
)
def test_rms_norm_streams_when_a_residual_shard_leaves_too_little_l1_for_the_row(rows, streams, accepted):
    """ttnn on a mock N150 (the agreement battery's residual-sharded-1core cases): the whole-row buffers (389,120 B)
    fit 95% of the L1 span below a 224-row residual shard (from 581,632 B) but not below a 256-row one (from 450,560 B),
    where ttnn streams the row through 161,792 B of buffers; below a 320-row shard (from 188,416 B) those do not fit
    either (ttnn: "require 161792 bytes, but only 78462 bytes of the allocator's L1 span are available")."""
    x, residual = _residual_on_one_core(rows)
    floor = WORMHOLE_B0.l1_size - rows * 4096
    assert l1_budget.rms_norm_l1_bytes(x, residual=residual, floor=floor) - WORMHOLE_B0.l1_base == (
        161_792 if streams else 389_120
    )
    if accepted:
        op_checks.check_rms_norm(x, residual_input_tensor=residual, compute_grid=(8, 8))
    else:
        assert _rule(op_checks.check_rms_norm, x, residual_input_tensor=residual, compute_grid=(8, 8)) == (
            "rms_norm.l1_budget"
        )


@pytest.mark.parametrize(
    "residual, weight, fp32_acc, reported",
    [
        (False, False, False, 112_640),
        (True, False, False, 161_792),
        (True, True, False, 210_944),
        (True, True, True, 176_128),
    ],
    ids=["bare", "residual", "residual-weight", "residual-weight-fp32acc"],
)
@pytest.mark.parametrize("width", [256, 2048, 4096])
def test_rms_norm_streaming_buffers_equal_ttnns_report_at_any_width(width, residual, weight, fp32_acc, reported):
    """ttnn's "LayerNorm streaming circular buffers require N bytes" on a mock N150 for bf16 rows: the streaming
    buffers hold a few dst blocks, whatever the width."""
    x = D((1, 1, 32, width))
    got = l1_budget.rms_norm_l1_bytes(
        x,
        FP32_ACC if fp32_acc else None,
        residual=x if residual else None,
        weight=D((1, 1, 1, width)) if weight else None,
        floor=WORMHOLE_B0.l1_base,  # no L1 left: always streams
    )
    assert got - WORMHOLE_B0.l1_base == reported


NO_SPEC = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1)
GRID = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(7, 6))})


def test_a_sharded_output_config_without_shard_spec():
    """ttnn fails with 'bad optional access' where the op derives no shard spec: the gathers, the posts and the
    interleaved rms_norm (the gathers raised AttributeError in the L1 model). The sharded rms_norm derives the spec
    from its input."""
    stats = D((1, 1, 32, 32))
    assert _rule(op_checks.check_all_gather, stats, 3, cluster_axis=1, mesh_shape=(1, 8), memory_config=NO_SPEC) == (
        "memory_config.shard_fits"
    )
    sems, barrier = ccl_checks.SemaphoreDesc(GRID, 2, (0, 1)), ccl_checks.SemaphoreDesc(GRID, 1, (2,))
    for persistent in (None, D((1, 1, 32, 256))):
        got = _rule(
            ccl_checks.check_all_gather_async,
            stats,
            3,
            multi_device_global_semaphore=sems,
            barrier_semaphore=barrier,
            mesh_shape=(1, 8),
            cluster_axis=1,
            memory_config=NO_SPEC,
            persistent_output_buffer=persistent,
        )
        assert got == "memory_config.shard_fits"
    x = D((1, 1, 32, 1024))
    post = partial(op_checks.check_post_all_gather, x, D((1, 1, 32, 256)), compute_grid=(8, 8))
    assert _rule(post, memory_config=NO_SPEC) == "memory_config.shard_fits"
    assert _rule(op_checks.check_rms_norm, x, memory_config=NO_SPEC, compute_grid=(8, 8)) == "memory_config.shard_fits"
    xs = D((1, 1, 32, 1024), memory_config=shard_mc(W_SHARD, (4, 2), (32, 128)))
    op_checks.check_rms_norm(xs, program_config=pc((4, 2), block_w=4), memory_config=NO_SPEC, compute_grid=(8, 8))


def test_shards_of_no_rows_or_not_whole_tiles():
    """ttnn makes no tensor, and writes no output, whose shards are empty or (TILE layout) not whole tiles
    (tensor_spec.cpp: shard_grid_fit_error, tensor_layout.cpp: shard_align_error; mock N300). Such a gather output
    raised ZeroDivisionError, such an rms_norm input ZeroDivisionError in the reduce-worker split."""
    stats = D((1, 1, 32, 32))
    for shard in ((0, 256), (32, 0), (16, 256)):
        out = shard_mc(W_SHARD, (4, 1), shard)
        got = _rule(op_checks.check_all_gather, stats, 3, cluster_axis=1, mesh_shape=(1, 8), memory_config=out)
        assert got == "memory_config.shard_fits", shard
        got = _rule(op_checks.check_rms_norm, D((1, 1, 32, 1024)), memory_config=out, compute_grid=(8, 8))
        assert got == "memory_config.shard_fits", shard
    x = D((1, 1, 16, 1024), memory_config=shard_mc(W_SHARD, (4, 1), (16, 256)))
    assert _rule(op_checks.check_rms_norm, x, compute_grid=(8, 8)) == "memory_config.shard_fits"
    rows16 = D((1, 1, 16, 32), layout=ttnn.ROW_MAJOR_LAYOUT)  # a ROW_MAJOR gather output takes 16-row shards
    op_checks.check_all_gather(
        rows16, 3, cluster_axis=1, mesh_shape=(1, 2), memory_config=shard_mc(W_SHARD, (1, 1), (16, 64))
    )
