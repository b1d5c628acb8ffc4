"""Validating wrappers of the ttnn ops, with ttnn's names and keyword arguments.

Each wrapper runs its check in `tt_rmsnorm.rules.op_checks` first, so bad input raises `RuleError` before any device
work, then calls ttnn, and records what kind of stats a pre produced (sums or means) so the post can refuse the other
kind.
"""

from __future__ import annotations

import ttnn

from tt_rmsnorm.rules import op_checks
from tt_rmsnorm.tensors import STATS_MEANS, STATS_SUMS, mark_stats, stats_kind_of


def _given(kw: dict) -> dict:
    """ttnn's bindings take None for optional arguments but not for every default; pass only what was given."""
    return {k: v for k, v in kw.items() if v is not None}


def rms_norm_pre_all_gather(
    input_tensor,
    *,
    dtype=ttnn.bfloat16,
    residual_input_tensor=None,
    compute_kernel_config=None,
    program_config=None,
    memory_config=None,
    use_2d_core_grid=None,
):
    """Per-device stats: sum(x^2) per row (interleaved input) or E[x^2] (sharded input, decode)."""
    kw = dict(
        dtype=dtype,
        residual_input_tensor=residual_input_tensor,
        compute_kernel_config=compute_kernel_config,
        program_config=program_config,
        memory_config=memory_config,
        use_2d_core_grid=use_2d_core_grid,
    )
    layout = op_checks.check_pre_all_gather(input_tensor, **kw)
    stats = ttnn.rms_norm_pre_all_gather(input_tensor, **_given(kw))
    mark_stats(stats, STATS_MEANS if layout == "sharded" else STATS_SUMS)
    return stats


def all_gather(input_tensor, dim, *, cluster_axis=None, memory_config=None):
    """ttnn.all_gather over the input's mesh; gathered stats keep the kind of the stats they came from."""
    op_checks.check_all_gather(
        input_tensor,
        dim,
        cluster_axis=cluster_axis,
        mesh_shape=tuple(input_tensor.device().shape),
        memory_config=memory_config,
    )
    out = ttnn.all_gather(input_tensor, dim, **_given(dict(cluster_axis=cluster_axis, memory_config=memory_config)))
    kind = stats_kind_of(input_tensor)
    if kind:
        mark_stats(out, kind)
    return out


def rms_norm_post_all_gather(
    input_tensor,
    stats,
    *,
    epsilon=1e-12,
    weight=None,
    bias=None,
    memory_config=None,
    compute_kernel_config=None,
    program_config=None,
    dtype=None,
    use_2d_core_grid=None,
):
    """Normalize the local slice with the gathered stats of every device on the gather axis."""
    kw = dict(
        weight=weight,
        bias=bias,
        memory_config=memory_config,
        compute_kernel_config=compute_kernel_config,
        program_config=program_config,
        dtype=dtype,
        use_2d_core_grid=use_2d_core_grid,
    )
    op_checks.check_post_all_gather(input_tensor, stats, epsilon=epsilon, **kw)
    return ttnn.rms_norm_post_all_gather(input_tensor, stats, epsilon=epsilon, **_given(kw))


def rms_norm(
    input_tensor,
    *,
    epsilon=1e-12,
    weight=None,
    bias=None,
    residual_input_tensor=None,
    memory_config=None,
    program_config=None,
    compute_kernel_config=None,
):
    """Single-device RMSNorm: the reference the distributed composition must equal."""
    kw = dict(
        weight=weight,
        bias=bias,
        residual_input_tensor=residual_input_tensor,
        memory_config=memory_config,
        program_config=program_config,
        compute_kernel_config=compute_kernel_config,
    )
    op_checks.check_rms_norm(input_tensor, epsilon=epsilon, **kw)
    return ttnn.rms_norm(input_tensor, epsilon=epsilon, **_given(kw))
