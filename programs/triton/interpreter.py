"""Exact bfloat16 <-> float32 casts for Triton's CPU interpreter (TRITON_INTERPRET=1, what CI runs the kernels on).

The interpreter stores bf16 as uint16 and casts it with a generic bit-field converter, `_convert_float`, that gets
subnormals wrong: bf16 and fp32 share the exponent range, and it maps 3 * 2^-128 to 2^-127, 2^-130 to 0 (Triton 3.8;
the GPU's cvt is exact). The parity runner's "tiny" rows (2^-133..2^-126) then failed only under the interpreter.
A bf16 is the top half of an fp32, so both directions are bit operations; install() swaps them in for that pair only,
and use_exact_casts(device) does so where the kernels run under the interpreter (the launchers call it; importing
this module patches nothing).

fp32 -> bf16 rounds to nearest even, as the GPU's cvt.rn.bf16.f32 does for `.to(tl.bfloat16)`, unless round-toward-
zero is asked for; NaN stays a quiet NaN. Every other pair of types goes to the interpreter's own converter, whose
fp32 -> FP8 results are corrected only where the input is NaN (it gives a finite value there; the GPU gives NaN).
"""

from __future__ import annotations

import os

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

# the quiet NaN of the FP8 formats, as stored (e4m3fn: S.1111.111; e5m2: S.11111.11)
FP8_NAN = {tl.float8e4nv: 0x7F, tl.float8e5: 0x7F}


def install() -> None:
    """Route the interpreter's bf16 <-> fp32 casts through bit operations (idempotent)."""
    original = interpreter._convert_float
    if getattr(original, "exact_bf16", False):
        return

    def convert(data, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.bfloat16 and output_dtype == tl.float32:
            return data.view(np.uint16).astype(np.uint32) << np.uint32(16)
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            bits = data.view(np.uint32)
            ties_even = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))  # a carry into the exponent rounds
            b = bits if rounding_mode == interpreter._ir.ROUNDING_MODE.RTZ else bits + ties_even
            nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
            return np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x0040), b >> np.uint32(16)).astype(np.uint16)
        out = original(data, input_dtype, output_dtype, rounding_mode)
        if input_dtype == tl.float32 and output_dtype in FP8_NAN:
            # its bit-field converter turns NaN into a finite FP8 value; the GPU's cvt keeps NaN
            out = np.where(np.isnan(data.view(np.float32)), np.uint8(FP8_NAN[output_dtype]), out).astype(out.dtype)
        return out

    convert.exact_bf16 = True
    interpreter._convert_float = convert


def use_exact_casts(device) -> None:
    """install() where kernels run under the interpreter (a CPU device, TRITON_INTERPRET=1): the launchers call this
    before their first launch, so importing the package patches nothing."""
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") == "1":
        install()
