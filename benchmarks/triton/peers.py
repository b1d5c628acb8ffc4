"""The peer kernels the tables time ours beside (Liger-Kernel, QuACK, FlashInfer), loaded when importable.

A peer that is not importable is logged and left out: the tables then have no column for it."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import torch

from benchmarks.triton.timing import EPS, log

# FlashInfer's norms have no backward: the backward tables leave them out
FORWARD_ONLY = frozenset({"flashinfer"})
# residual peers whose kernels normalize the fp32 sum x + r, not the x + r they return rounded to r's dtype
NORMALIZES_FP32_SUM = frozenset({"quack", "flashinfer"})
_DISTRIBUTIONS = {"liger": "liger-kernel", "quack": "quack-kernels", "flashinfer": "flashinfer-python"}


def load_peers(wanted: set[str]) -> dict[str, Callable]:
    """The importable peer kernels among `wanted` (liger, quack, flashinfer), each as norm(x, w) with eps EPS."""
    peers = {}
    if "liger" in wanted:
        try:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            peers["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)
        except Exception as e:
            log(f"liger not importable: {e}")
    if "quack" in wanted:
        try:
            from quack.rmsnorm import rmsnorm as quack_rmsnorm

            peers["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
        except Exception as e:
            log(f"quack not importable: {type(e).__name__}: {e}")
    if "flashinfer" in wanted:
        try:
            from flashinfer.norm import rmsnorm as fi_rmsnorm

            # its default launch: PDL wherever the device supports it, as ours
            peers["flashinfer"] = lambda x, w: fi_rmsnorm(x, w, eps=EPS)
        except Exception as e:
            log(f"flashinfer not importable: {type(e).__name__}: {e}")
    return peers


def load_residual_peers(wanted: set[str]) -> dict[str, Callable]:
    """The importable fused add + RMSNorm peers among `wanted` (quack, flashinfer), each as
    norm(x, r, w) -> (y, x + r) with eps EPS. FlashInfer's works in place: x becomes y and r becomes x + r."""
    peers = {}
    if "quack" in wanted:
        try:
            from quack.rmsnorm import rmsnorm_fwd as quack_rmsnorm_fwd

            peers["quack"] = lambda x, r, w: quack_rmsnorm_fwd(x, w, residual=r, eps=EPS)[:2]
        except Exception as e:
            log(f"quack residual not importable: {type(e).__name__}: {e}")
    if "flashinfer" in wanted:
        try:
            from flashinfer.norm import fused_add_rmsnorm

            def fi_fused_add(x, r, w):
                fused_add_rmsnorm(x, r, w, eps=EPS)
                return x, r

            peers["flashinfer"] = fi_fused_add
        except Exception as e:
            log(f"flashinfer residual not importable: {type(e).__name__}: {e}")
    return peers


def describe(names, device: torch.device) -> str:
    """The peers' versions, and which of FlashInfer's two norm implementations runs on `device`."""
    parts = []
    for name in names:
        try:
            version = metadata.version(_DISTRIBUTIONS.get(name, name))
        except metadata.PackageNotFoundError:
            version = "?"
        parts.append(f"{name} {version}")
        if name == "flashinfer":
            try:
                import flashinfer.norm as fi_norm

                # a private switch, read only to say which kernels were timed
                kind = "CUDA JIT" if fi_norm._use_cuda_norm(device) else "CuTe DSL"
                parts[-1] += f" ({kind} kernels, PDL {'on' if _fi_pdl(device) else 'off'})"
            except Exception as e:
                parts[-1] += f" (kernels unknown: {type(e).__name__})"
    return ", ".join(parts)


def _fi_pdl(device: torch.device) -> bool:
    from flashinfer.utils import device_support_pdl

    return bool(device_support_pdl(device))
