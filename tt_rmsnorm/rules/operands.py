"""The rules of the operands beside the input of ttnn 0.81.1's RMSNorm ops: the residual, the gathered stats the post
normalises with, and the weight (gamma) and bias (beta).

The stats carry their kind (per-device sums from the interleaved pre, means from the sharded pre; see
`tt_rmsnorm.tensors.mark_stats`), and each post reads only its own kind. The weight and bias come in TILE layout (the
input's width, one tile high) or ROW_MAJOR ([1, 1, W/32, 32]); the interleaved post alone drops a bias without weight.
"""

from __future__ import annotations

import math

import ttnn

from tt_rmsnorm.rules.common import (
    GAMMA_DTYPES,
    STATS_DTYPES,
    check_dtype,
    check_on_device,
    check_tile,
    enum_name,
    fail,
)
from tt_rmsnorm.rules.sharding import require_sharded_program_config
from tt_rmsnorm.tensors import STATS_MEANS, STATS_SUMS, TensorDesc
from tt_rmsnorm.tiles import TILE


def check_residual(x: TensorDesc, residual: TensorDesc | None, sharded_residual_ok: bool = False):
    """`sharded_residual_ok`: rms_norm reads a residual through its buffer's own layout, so an interleaved input may
    take a sharded residual there (the pre may not)."""
    if residual is None:
        return
    check_on_device(residual, "residual")
    check_tile(residual, "residual")
    if residual.shape != x.shape or residual.padded_shape != x.padded_shape:
        fail(
            "residual.shape",
            "input and residual logical and padded shapes must match",
            f"residual {residual.shape}/{residual.padded_shape} vs input {x.shape}/{x.padded_shape}",
            "pass a residual of the input's shape",
        )
    if x.is_sharded:
        if not residual.is_sharded or residual.memory_config != x.memory_config:
            fail(
                "residual.same_sharding",
                "with a sharded input the residual must be sharded with the same shard spec and memory config",
                enum_name(residual.memory_layout),
                "ttnn.to_memory_config(residual, x.memory_config())",
            )
    elif residual.is_sharded and not sharded_residual_ok:
        fail(
            "residual.interleaved",
            "with an interleaved input the residual must be interleaved",
            enum_name(residual.memory_layout),
            "ttnn.to_memory_config(residual, ttnn.DRAM_MEMORY_CONFIG)",
        )


def _check_bias_needs_weight(weight, bias):
    """Only the interleaved post loses a lone bias: its compute kernel adds beta inside the gamma branch. The sharded
    post (layernorm_sharded_post_allgather.cpp) and rms_norm (layernorm.cpp, layernorm_sharded.cpp) add beta to the
    normalised x when there is no gamma; tt-metal's test_rms_norm_sharded_with_bias_only runs that."""
    if bias is not None and weight is None:
        fail(
            "bias.needs_weight",
            "a bias given without a weight is silently dropped by the interleaved rms_norm_post_all_gather",
            "bias given, weight None",
            "pass weight (ones if you only want the bias)",
        )


def check_gamma(x: TensorDesc, g: TensorDesc | None, what: str, layout: str):
    """Weight/bias rules. layout: 'interleaved_post' | 'sharded' (sharded post and rms_norm)."""
    if g is None:
        return
    check_on_device(g, what)
    if g.layout == ttnn.TILE_LAYOUT:
        if layout == "interleaved_post":
            if g.width != x.width or g.padded_width != x.padded_width:
                fail(
                    f"{what}.tile_width",
                    f"a TILE {what} must have the input's last logical and padded dims",
                    f"{what} {g.width}/{g.padded_width} vs input {x.width}/{x.padded_width}",
                    f"{what} shape [1, 1, 1, {x.width}]",
                )
        elif g.padded_width != x.padded_width or g.width < x.width:
            fail(
                f"{what}.tile_width",
                f"a TILE {what} must have the input's padded width and at least its logical width",
                f"{what} {g.width}/{g.padded_width} vs input {x.width}/{x.padded_width}",
                f"{what} shape [1, 1, 1, {x.width}]",
            )
        if g.padded_shape[-2] != TILE:
            fail(
                f"{what}.tile_height",
                f"a TILE {what} must be one tile high (padded height 32)",
                g.padded_shape[-2],
                f"{what} shape [1, 1, 1, {x.width}]",
            )
        if layout == "interleaved_post":
            check_dtype(g, GAMMA_DTYPES, f"{what}.dtype", what)
    elif g.layout == ttnn.ROW_MAJOR_LAYOUT:
        volume = math.prod(g.padded_shape)
        if g.padded_width != TILE or volume // TILE != x.padded_width // TILE:
            fail(
                f"{what}.row_major_shape",
                f"a ROW_MAJOR {what} must be [1, 1, W/32, 32] for the input's padded width W",
                f"{what} {g.padded_shape} for W={x.padded_width}",
                f"{what}.reshape(1, 1, {x.padded_width // TILE}, 32) (tt_rmsnorm.prepare_weight does this)",
            )
        check_dtype(g, GAMMA_DTYPES, f"{what}.dtype", what)


def check_gamma_beta(x, weight, bias, layout):
    if layout == "interleaved_post":
        _check_bias_needs_weight(weight, bias)
    check_gamma(x, weight, "weight", layout)
    check_gamma(x, bias, "bias", layout)
    if layout == "sharded" and weight is not None and bias is not None and weight.layout != bias.layout:
        fail(
            "bias.same_layout",
            "weight and bias must have the same layout",
            f"{enum_name(weight.layout)} vs {enum_name(bias.layout)}",
            "prepare both the same way",
        )


def check_stats(s: TensorDesc | None):
    """The post's gathered stats: given, on device, in TILE layout, one tile per device wide."""
    if s is None:
        fail(
            "stats.present",
            "post_all_gather requires the gathered stats",
            None,
            "pass the all_gather output of rms_norm_pre_all_gather",
        )
    check_on_device(s, "stats")
    check_tile(s, "stats")
    if s.padded_width % TILE:
        fail(
            "stats.width",
            "the stats' padded last dim must be a multiple of 32 (one tile per device)",
            s.padded_width,
            "gather the [.., 32]-wide per-device stats on dim 3",
        )


def check_sharded_post_stats(x: TensorDesc, s: TensorDesc, program_config):
    """The sharded post's stats: means, bfloat16, sharded on one core, the input's rows. ttnn asks for the sharded
    program config before it reads the stats' shard spec, so that check runs here in its place."""
    if s.stats_kind == STATS_SUMS:
        fail(
            "stats.kind_mismatch",
            "the sharded post averages per-device MEANS but these stats hold SUMS (from the interleaved pre)",
            STATS_SUMS,
            "run the sharded pre on the same sharded input (tt_rmsnorm.distributed_rms_norm does)",
        )
    if not s.is_sharded:
        fail(
            "stats.sharded",
            "the sharded post needs its stats sharded on one core",
            enum_name(s.memory_layout),
            "all_gather with memory_config=tt_rmsnorm.planning.layouts.stats_memory_config(num_devices)",
        )
    if s.dtype != ttnn.bfloat16:
        fail(
            "stats.bf16_sharded",
            "the sharded post supports only bfloat16 stats",
            enum_name(s.dtype),
            "gather the stats in bfloat16",
        )
    require_sharded_program_config(program_config)
    if s.shard_spec.grid.num_cores() != 1:
        fail(
            "stats.one_core",
            "with a sharded program config the stats must be sharded on exactly 1 core",
            f"{s.shard_spec.grid.num_cores()} cores",
            "memory_config=tt_rmsnorm.planning.layouts.stats_memory_config(num_devices)",
        )
    if s.padded_shape[:-1] != x.padded_shape[:-1]:
        fail(
            "stats.rows_match",
            "stats rows and batch dims must equal the input's",
            f"stats {s.padded_shape} vs input {x.padded_shape}",
            "gather the stats of this same input",
        )


def check_interleaved_post_stats(x: TensorDesc, s: TensorDesc):
    """The interleaved post's stats: sums, an allowed dtype, the input's dims 0 to 2."""
    if s.stats_kind == STATS_MEANS:
        fail(
            "stats.kind_mismatch",
            "the interleaved post expects per-device SUMS but these stats hold MEANS (from the sharded pre)",
            STATS_MEANS,
            "run the interleaved pre on an interleaved input, or use the sharded post",
        )
    check_dtype(s, STATS_DTYPES, "stats.dtype", "stats")
    if s.padded_shape[:-1] != x.padded_shape[:-1]:
        fail(
            "post.stats_dims",
            "stats and input padded dims 0, 1 and 2 must match",
            f"stats {s.padded_shape} vs input {x.padded_shape}",
            "gather the stats of this same input",
        )
