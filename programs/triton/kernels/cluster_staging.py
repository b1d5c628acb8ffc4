"""How the cluster kernel (forward_cluster.py) lays a row out: the CTAs a row takes, what a CTA stages in shared
memory (the bias, and the weight or x), and whether the row max rides the exchange. The launch rules
(forward_rules.py) size a launch with these before anything is compiled."""

from __future__ import annotations

from programs.triton.fp8 import OUT_AMAX, OUT_CAST, OUT_FP8_ROW

MAX_CLUSTER = 16  # 16 CTAs is Hopper's non-portable cluster size (Triton's launcher allows it for num_ctas == 16)


def cluster_size(n: int, chunk: int) -> int:
    """CTAs a row takes: the power of two covering N in chunk-column pieces (the CGA bases need a power of two)."""
    k = 1
    while k * chunk < n:
        k *= 2
    return k


def row_max(out_mode: int) -> bool:
    """Whether the output needs the row max (FP8 row scales, or the row max alone): exchanged beside the sum."""
    return out_mode in (OUT_FP8_ROW, OUT_AMAX)


X_STAGED_MIN_CTAS = 16  # CTAs a row from which x waits in shared memory through the exchange (x_staged)


def x_staged(
    n: int, chunk: int, num_warps: int, w_size: int, b_size: int, busy: bool = True, out_mode: int = OUT_CAST
) -> bool:
    """Whether x waits in shared memory through the exchange while the weight is loaded: at 64 elements a thread,
    with a weight of at most 16 bits (an fp32 weight in registers would take all 64 of them), no bias, and busy: at
    least two CTAs for every SM, so that others run while one waits (H100, us, against the weight and
    bias staged: 1024 x 262144 with a bias 435.2 against 425.4; 8 x 262144, 128 CTAs, 6.58 against 6.24; 64 x
    262144 27.3 against 27.7). Only in rows of X_STAGED_MIN_CTAS: the weight's L2 latency hides behind the wait for
    16 peers, not for 8 or fewer, where the weight staged before x's loads ran faster on H200 (us, x
    staged / the weight staged, H200 then H100: 2048 x 65536 131.9 / 130.2, 179.5 / 180.1; FP8 given scale 2048 x
    65536 104.5 / 100.0, 135.1 / 134.9; 8192 x 16384 101.9 / 97.4, 134.8 / 134.6; 16 CTAs, 1024 x 131072 132.3 /
    136.6, 180.2 / 181.9; 512 x 262144 134.8 / 155.6, 181.4 / 188.1). Only into a float output: into FP8 with a
    tensor scale the weight staged ran faster at 16 CTAs too, but for 1024 x 131072 on H100 (given scale 512 x
    262144 126.9 / 122.2, 142.6 / 139.3; 1024 x 131072 114.5 / 113.9, 135.8 / 138.2; dynamic 1024 x 262144 395.3 /
    387.7, 455.7 / 453.1), and a row max needs the weight beside x before the exchange, so the weight
    waits in shared memory and x in registers."""
    return (
        chunk // (32 * num_warps) > 32
        and cluster_size(n, chunk) >= X_STAGED_MIN_CTAS
        and w_size <= 2
        and b_size == 0
        and busy
        and out_mode == OUT_CAST
    )


def shared_bytes(
    n: int,
    chunk: int,
    num_warps: int,
    x_size: int,
    w_size: int,
    b_size: int,
    busy: bool = True,
    out_mode: int = OUT_CAST,
) -> int:
    """A CTA's staging buffers: the bias, and x or the weight (x_staged), element sizes in bytes (0: absent)."""
    staged = x_size if x_staged(n, chunk, num_warps, w_size, b_size, busy, out_mode) else w_size
    return chunk * (staged + b_size)


def element_size(t) -> int:
    """Bytes an element of the optional weight or bias (0: absent), as x_staged and shared_bytes take it."""
    return 0 if t is None else t.element_size()
