"""Triton/CUDA port of tt_rmsnorm: fused RMSNorm forward/backward (residual, FP8 output), and the two-phase
distributed RMSNorm over a torch.distributed group.

    from programs.triton import rmsnorm_fwd, RMSNorm, distributed_rms_norm

Without a CUDA device the kernels run under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors). Triton reads that
variable when a kernel is decorated, so it is set here, before any kernel module is imported.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter's own bf16 casts get subnormals wrong (interpreter.py)
    from programs.triton.interpreter import install as _exact_bf16_casts

    _exact_bf16_casts()

from importlib import import_module  # noqa: E402

_EXPORTS = {
    "RMSNorm": "autograd",
    "RMSNormFunction": "autograd",
    "rms_norm": "autograd",
    "rms_norm_fp8": "autograd",
    "distributed_rms_norm": "distributed",
    "post": "distributed",
    "pre_stats": "distributed",
    "rmsnorm_bwd": "rmsnorm_bwd",
    "RMSNormOutput": "rmsnorm_fwd",
    "rmsnorm_fwd": "rmsnorm_fwd",
    "row_sum_of_squares": "rmsnorm_fwd",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
