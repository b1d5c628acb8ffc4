"""Two-phase distributed RMSNorm over a torch.distributed group (NCCL on GPUs, gloo on CPU).

The hidden dimension is sharded over the group's ranks (rank r holds columns [r*N_local, (r+1)*N_local)), as
tt_rmsnorm.distributed_rms_norm shards it over a mesh axis:

    stats     = pre_stats(x_local)                        # float64 [M]: sum of squares of the local columns
    stats_all = gather_stats(stats, group)                # float64 [W, M]: one all_gather, 8*M bytes per rank
    y_local   = post(x_local, stats_all, w_local, epsilon=eps, hidden_size=H)   # one kernel
    y_local   = distributed_rms_norm(x_local, w_local, group, epsilon=eps)       # the three, composed

post sums the W partial sums in rank order (every rank computes the same rsigma bits), divides by the GLOBAL hidden
size H and normalizes the local columns; it is the forward kernel with its stats pass replaced. The stats are
float64: a row's sum of squares past fp32's range (rows near the bf16 / fp32 maximum) or below it (subnormal rows)
is held exactly enough, and the rstd is taken from it in float64, so a row needs no second pass
(kernels/row_stats.py gives the rule the single-device kernels follow, with the same result).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from programs.triton.checks import check_activation
from programs.triton.forward import rmsnorm_fwd, row_sum_of_squares
from tt_rmsnorm.errors import RuleError


def pre_stats(x_local: torch.Tensor) -> torch.Tensor:
    """float64 [M]: per-row sum of squares of this rank's columns (float64 accumulation)."""
    return row_sum_of_squares(x_local)


def gather_stats(stats: torch.Tensor, group=None) -> torch.Tensor:
    """[W, M] in stats' dtype: every rank's pre_stats, in rank order."""
    world = dist.get_world_size(group)
    out = torch.empty((world, stats.shape[0]), dtype=stats.dtype, device=stats.device)
    if dist.get_backend(group) == "gloo":  # gloo has no all_gather_into_tensor in every torch release
        dist.all_gather(list(out.unbind(0)), stats, group=group)
    else:
        dist.all_gather_into_tensor(out, stats, group=group)
    return out


def post(
    x_local: torch.Tensor,
    stats_all: torch.Tensor,
    weight_local: torch.Tensor | None = None,
    *,
    epsilon: float = 1e-5,
    hidden_size: int | None = None,
    weight_offset: float = 0.0,
    bias_local: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The local columns of the normalized rows, in one kernel. hidden_size: the global H (default W * N_local)."""
    check_activation(x_local, "x_local")
    if stats_all.dim() != 2:
        raise RuleError(
            "stats_all.shape",
            "stats_all must be [world, M] (gather_stats)",
            tuple(stats_all.shape),
            "gather_stats(pre_stats(x_local), group)",
        )
    hidden = hidden_size if hidden_size is not None else stats_all.shape[0] * x_local.shape[-1]
    if dtype is not None and dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise RuleError(
            "dtype.distributed",
            "distributed output must be bf16/fp16/fp32 (a per-row FP8 scale would need the global row max)",
            dtype,
            "dtype=None",
        )
    return rmsnorm_fwd(
        x_local,
        weight_local,
        epsilon=epsilon,
        weight_offset=weight_offset,
        bias=bias_local,
        dtype=dtype,
        stats=stats_all,
        hidden_size=hidden,
    ).y


def distributed_rms_norm(
    x_local: torch.Tensor,
    weight_local: torch.Tensor | None = None,
    group=None,
    *,
    epsilon: float = 1e-5,
    hidden_size: int | None = None,
    weight_offset: float = 0.0,
    bias_local: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """pre_stats -> all_gather of the stats -> post: the local columns of RMSNorm over the group-sharded hidden dim."""
    check_activation(x_local, "x_local")
    stats_all = gather_stats(pre_stats(x_local), group)
    return post(
        x_local,
        stats_all,
        weight_local,
        epsilon=epsilon,
        hidden_size=hidden_size,
        weight_offset=weight_offset,
        bias_local=bias_local,
        dtype=dtype,
    )
