"""FP8 output formats and the per-row / per-tensor scale rule shared by the forward kernels.

scale = min(rowmax, scale_ub) / fp8_max (MAX's allreduce_rmsnorm_fp8; vLLM's dynamic per-token quant without its floor);
q = fp8(clamp(v * (0 if scale == 0 else 1/scale), -fp8_max, fp8_max)); v ~= q * scale.

Triton's interpreter (CPU CI) converts fp32 to fp8 with a rounding that drops the exponent carry, so under the
interpreter the kernels pre-round FP8 values to the target grid (round to nearest even, as the GPU's cvt.rn does) and
the cast becomes exact. `downcast_consts` gives the constants for that; on the GPU they are all zero. (Its bf16 casts
are replaced by exact ones: interpreter.py.)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from tt_rmsnorm.errors import RuleError


@dataclass(frozen=True)
class FP8Format:
    dtype: torch.dtype
    max: float
    mantissa_bits: int
    min_normal_exp: int


def _describe(dtype: torch.dtype) -> FP8Format:
    fi = torch.finfo(dtype)  # e4m3fn: max 448, eps 2^-3, smallest normal 2^-6; e5m2: 57344, 2^-2, 2^-14
    return FP8Format(dtype, float(fi.max), round(-math.log2(fi.eps)), round(math.log2(fi.smallest_normal)))


FP8_FORMATS = {dt: _describe(dt) for dt in (torch.float8_e4m3fn, torch.float8_e5m2)}
SCALE_MODES = ("row", "tensor")
# what a forward kernel writes (its OUT_MODE): the cast output, FP8 with per-row scales from the row max, FP8 with one
# given scale, or only each row's max|y| (the first pass of a dynamic tensor scale)
OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC, OUT_AMAX = 0, 1, 2, 3


def is_fp8(dtype) -> bool:
    return dtype in FP8_FORMATS


def fp8_format(dtype) -> FP8Format:
    if dtype not in FP8_FORMATS:
        raise RuleError(
            "dtype.fp8",
            "FP8 output must be torch.float8_e4m3fn or torch.float8_e5m2",
            dtype,
            "dtype=torch.float8_e4m3fn",
        )
    return FP8_FORMATS[dtype]


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def downcast_consts(dtype) -> tuple[int, float, float]:
    """(DROP, MIN_NORMAL, SUB_MAGIC) for the kernels' `pre_round`: mantissa bits to drop from fp32, the target's
    smallest normal magnitude and the magic constant that rounds its subnormals. (0, 0, 0) means "cast directly"."""
    if not interpreting() or not is_fp8(dtype):  # numpy's fp16 cast rounds to nearest even, bf16: interpreter.py
        return 0, 0.0, 0.0
    f = fp8_format(dtype)
    min_normal = 2.0**f.min_normal_exp
    # (|v| + 2^(e_min - m + 23)) - that rounds |v| < 2^e_min to the subnormal spacing 2^(e_min - m), ties to even.
    return 23 - f.mantissa_bits, min_normal, 2.0 ** (f.min_normal_exp - f.mantissa_bits + 23)
