"""Triton/CUDA port of tt_rmsnorm: fused RMSNorm forward/backward (residual, FP8 output), and the two-phase
distributed RMSNorm over a torch.distributed group.

    from programs.triton import rmsnorm_fwd, RMSNorm, distributed_rms_norm, AllReduceRMSNormFP8

One name a function: the two phases of the distributed call, `pre_stats` and `post`, are programs.triton.distributed's
(pre_stats is row_sum_of_squares, exported here; post is rmsnorm_fwd with stats=), and the autograd Function behind
rms_norm is programs.triton.autograd's RMSNormFunction.

Without a CUDA device the kernels run under Triton's interpreter on CPU tensors; Triton reads TRITON_INTERPRET=1 when
a kernel is decorated, so the caller sets it before the first import of a kernel module (the test suite's conftest
and the parity runner do). Importing this package or any of its modules changes no environment variable and patches
nothing; the launchers install exact bf16 casts into the interpreter when they run under it (interpreter.py).

The public names load their module on first use, so `import programs.triton` costs no Triton import.
"""

from importlib import import_module

_EXPORTS = {
    "AllReduceRMSNormFP8": "allreduce.api",
    "RMSNorm": "autograd",
    "rms_norm": "autograd",
    "rms_norm_fp8": "autograd",
    "distributed_rms_norm": "distributed",
    "rmsnorm_bwd": "backward",
    "RMSNormOutput": "forward",
    "rmsnorm_fwd": "forward",
    "row_sum_of_squares": "forward",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
