"""The peer kernels the tables time ours beside (Liger-Kernel, QuACK), loaded when importable."""

from __future__ import annotations

from collections.abc import Callable

from programs.triton.timing import EPS, log


def load_peers(wanted: set[str]) -> dict[str, Callable]:
    """The importable peer kernels among Liger and QuACK, each as norm(x, w) with eps EPS."""
    peers = {}
    if "liger" not in wanted and "quack" not in wanted:
        return peers
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        peers["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)
    except Exception as e:
        log(f"liger not importable: {e}")
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm

        peers["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
    except Exception as e:
        log(f"quack not importable: {type(e).__name__}: {e}")
    return peers
