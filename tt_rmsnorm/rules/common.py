"""The checks every op shares: a tensor on device, in TILE layout, of rank 4 and an allowed dtype; the per-device width;
epsilon; and the compute kernel config as the ops resolve it (the dst-register limit on subblock_w, FLOAT32 needing
fp32 accumulation). `fail` raises `tt_rmsnorm.errors.RuleError` with a rule id from `tt_rmsnorm.rules.table`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ttnn

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.tiles import TILE

PRE_INPUT_DTYPES = (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)
STATS_DTYPES = (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32)
GAMMA_DTYPES = (ttnn.bfloat16, ttnn.float32)


def enum_name(x) -> str:
    return str(x).rsplit(".", 1)[-1] if x is not None else "None"


def fail(rule: str, message: str, seen, fix: str):
    raise RuleError(rule, message, seen, fix)


# Compute kernel config as the ops resolve it (defaults: rmsnorm_default_compute_config = HiFi4, approx, fp32 off).
@dataclass(frozen=True)
class ComputeFlags:
    fp32_dest_acc_en: bool
    dst_full_sync_en: bool


def compute_flags(cfg) -> ComputeFlags:
    if cfg is None:
        return ComputeFlags(False, False)
    return ComputeFlags(bool(cfg.fp32_dest_acc_en), bool(getattr(cfg, "dst_full_sync_en", False)))


def max_subblock_w(cfg) -> int:
    """The dst-register limit on subblock_w (sharded factory `assert_subblock_compute_config_compatible`)."""
    c = compute_flags(cfg)
    return {(False, False): 8, (True, False): 4, (False, True): 16, (True, True): 8}[
        (c.fp32_dest_acc_en, c.dst_full_sync_en)
    ]


def is_sharded_program_config(pc) -> bool:
    return isinstance(pc, ttnn.LayerNormShardedMultiCoreProgramConfig)


def bbox_extent(shard_spec) -> tuple[int, int]:
    box = shard_spec.grid.bounding_box()
    return box.end.x - box.start.x + 1, box.end.y - box.start.y + 1


def check_on_device(t: TensorDesc, what: str):
    if not t.on_device:
        fail(
            "input.on_device" if what == "input" else f"{what}.on_device",
            f"{what} tensor must be on device (ttnn crashes on a host input)",
            "host storage",
            f"move it first: ttnn.to_device({what}, mesh_device) or ttnn.from_torch(..., device=mesh_device)",
        )


def check_tile(t: TensorDesc, what: str):
    if t.layout != ttnn.TILE_LAYOUT:
        fail(
            f"{what}.layout",
            f"{what} tensor must be in TILE layout",
            enum_name(t.layout),
            f"ttnn.to_layout({what}, ttnn.TILE_LAYOUT)",
        )


def check_rank4(t: TensorDesc, op: str):
    if t.rank != 4:
        fail(
            "distributed.rank",
            f"{op} needs a rank-4 input [batch, 1, seq, hidden_local] (it indexes dim 3)",
            f"rank {t.rank} shape {t.shape}",
            "reshape to 4 dims, e.g. x.reshape(1, 1, seq, hidden_local)",
        )


def check_dtype(t: TensorDesc, allowed, rule: str, what: str):
    if t.dtype not in allowed:
        fail(
            rule,
            f"{what} dtype must be one of {[enum_name(d) for d in allowed]}",
            enum_name(t.dtype),
            f"convert it, e.g. ttnn.typecast({what}, ttnn.bfloat16)",
        )


def check_width_multiple_of_32(x: TensorDesc):
    if x.width % TILE:
        fail(
            "distributed.width_multiple_of_32",
            "the per-device width must be a multiple of 32: the post divides sum(x^2) by the padded width",
            x.width,
            "shard the hidden dim so each device holds a multiple of 32 "
            "(pad the hidden size with zeros and the weight with ones)",
        )


def check_fp32_needs_acc(tensors: dict, compute_kernel_config, op: str):
    if compute_flags(compute_kernel_config).fp32_dest_acc_en:
        return
    for what, t in tensors.items():
        if t is not None and t.dtype == ttnn.float32:
            fail(
                f"{op}.fp32_needs_fp32_acc",
                f"the interleaved {op} with a FLOAT32 {what} requires fp32_dest_acc_en=True",
                f"{what} FLOAT32 with fp32_dest_acc_en=False",
                "pass compute_kernel_config=tt_rmsnorm.planning.layouts.compute_kernel_config(fp32_dest_acc_en=True)",
            )


def check_epsilon(epsilon):
    if epsilon is not None and epsilon < 0:
        fail("epsilon.non_negative", "epsilon must be >= 0", epsilon, "use e.g. 1e-5 (Llama) or 1e-6")
