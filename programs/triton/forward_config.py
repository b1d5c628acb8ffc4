"""The forward's launch heuristics: which kernel serves a call, and with what shape (FwdConfig).

fwd_config walks FORWARD_RULES in order; the first rule that takes the call gives its launch. Each rule says in one
line why it wins where it applies; the measurements behind the thresholds (H100 and H200, against the launch the
next rule down would give, in the same run) are in docs/gpu-performance.md. The constants are the rules' thresholds,
named so that the tests and ptx_report can check the launches they lead to.

The kernels: "rows" (whole rows in registers), "looped" (a row in chunks, a stats and a normalize pass), "split" (a row
over co-resident programs exchanging partials), "cluster" (a row a thread-block cluster, kernels/forward_cluster.py) and
"async" (whole rows moved by cp.async, kernels/forward_async.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import triton

from programs.triton.kernels import cluster_staging
from programs.triton.launch import dram_gbps_per_sm, sm_count

# --- rows kernel --------------------------------------------------------------------------------------------------
MAX_ROWS_N = 32768  # longest row the register-resident kernel takes (32 warps x 32 fp32 per thread)
FUSED_ROWS_TILE = 2048  # elements a program for the fused variants past decode sizes (16 a thread at 4-8 warps)
JOINT_MAX_PER_THREAD = 8  # up to this many elements a thread the FP8 row max rides in the sum's reduction
DECODE_SLICED_M, DECODE_SLICE = 128, 2048  # decode rows cut into 2048-column programs, each summing its whole row
# below this DRAM bandwidth per SM (H100 SXM 25.4, H200 36.5 GB/s) fewer bytes in flight keep up
LEAN_DRAM_GBPS_PER_SM = 30

# --- looped kernel ------------------------------------------------------------------------------------------------
LOOPED_HEAD = 16384  # leading columns the looped kernel keeps in registers (16 fp32 a thread at 32 warps)
WIDE_CHUNK_N = 65536  # up to here the looped kernel reads 32768-column chunks (64 KB of bf16 a load step)
LOOPED_MAXNREG = 64  # said explicitly: the whole register file for 32 warps (ptxas otherwise may stop at 56)
WORDS_CHUNK = 16384  # the words stats pass holds the whole row; its normalize pass reads this many columns a step
# plain 16-bit rows of these widths in tall tensors: a row a program in two halves (the "two-pass" launch)
TWO_PASS_N = (1024, 8192)
TWO_PASS_MIN_M, TWO_PASS_MIN_ELEMENTS = 8192, 1 << 24

# --- split kernel -------------------------------------------------------------------------------------------------
# columns a program, its warps, programs an SM, and the register cap that lets two programs share an SM
SPLIT_CHUNK, SPLIT_WARPS, SPLIT_PER_SM, SPLIT_MAXNREG = 8192, 8, 2, 128
SPLIT_WORDS_FOUR_STAGES = 32  # from this many chunks a row the words split kernel publishes two blocks ahead

# --- cluster kernel (kernels/forward_cluster.py) ----------------------------------------------------------------
# power-of-two rows in this range (the longest: 16-bit only), CLUSTER_PER_THREAD elements a thread, twice that in
# "wide" launches (see _cluster_per_thread) under a cap of CLUSTER_MAXNREG registers (4 CTAs of 8 warps an SM), or
# CLUSTER_ROW_MAX_MAXNREG where the row max is taken (3 CTAs an SM)
CLUSTER_N, CLUSTER_PER_THREAD, CLUSTER_WIDE_MIN_ELEMENTS = (32768, 262144), 32, 1 << 25
CLUSTER_MAXNREG, CLUSTER_ROW_MAX_MAXNREG = 64, 80
# FP8 output of 16-bit x as given: rows of these widths over the two CTAs of a cluster, in tensors this large
FP8_CLUSTER_N, FP8_CLUSTER_MIN_ELEMENTS = (8192, 16384), 1 << 23

# --- cp.async rows kernel (kernels/forward_async.py) ------------------------------------------------------------
# plain 16-bit rows of a power of two in this range, past decode sizes, below ASYNC_MAX_M rows where the two-pass
# launch also serves
ASYNC_N, ASYNC_MAX_M = (4096, 8192), 16384


KERNELS = ("rows", "looped", "split", "cluster", "async")  # FwdConfig.kernel's values


@dataclass(frozen=True)
class FwdConfig:
    """Launch shape. kernel "rows": block_m rows a program (chunk > 0: `chunk` columns of them a program, each
    program summing the whole rows itself); "looped": `programs` persistent programs, chunk-wide;
    "split": rows cut into chunk-wide pieces, one a program, at most `programs` programs resident together;
    "cluster": a row a thread-block cluster, chunk columns a CTA (kernels/forward_cluster.py); "async": block_m whole
    rows a CTA, x moved into shared memory by cp.async (kernels/forward_async.py)."""

    kernel: str
    num_warps: int
    block_m: int = 1
    chunk: int = 0
    programs: int = 0
    head: int = 0  # looped: leading columns kept in registers (a power of two <= N)
    # looped: the stats pass loads each whole row at once as 32-bit words; split: x, y and the weight held as words
    words: bool = False
    # looped: the normalize pass walks the chunks last to first (the chunks read last are the likeliest still in L2);
    # False walks them in order (a row a program in two chunks, both still in L1/L2)
    reverse: bool = True
    # split with words: row blocks in registers; 4 publishes two blocks ahead and reads the exchange early
    stages: int = 3
    maxnreg: int = 0  # registers a thread capped (0: the compiler's choice), e.g. 128 for two split programs an SM


@dataclass(frozen=True)
class FwdCall:
    """What fwd_config is asked: the shape, the device, and what the call allows (see fwd_config's arguments)."""

    m: int
    n: int
    device: object
    sms: int
    fused: bool
    split_ok: bool
    bias: bool
    words_ok: bool
    split_words_ok: bool
    cluster_ok: bool
    async_ok: bool
    row_max: bool

    @property
    def pow2(self) -> bool:
        return self.n & (self.n - 1) == 0

    @property
    def fp8_of_x(self) -> bool:
        """FP8 output of x as given: fused with x's own 16-bit rows (no residual or stats); measured without a bias."""
        return self.fused and self.words_ok and not self.bias

    @property
    def plain_words(self) -> bool:
        """Plain 16-bit power-of-two rows of x into a cast output: nothing fused, no bias."""
        return self.words_ok and not (self.fused or self.bias) and self.pow2

    @property
    def two_pass(self) -> bool:
        lo, hi = TWO_PASS_N
        big = self.m >= TWO_PASS_MIN_M and self.m * self.n >= TWO_PASS_MIN_ELEMENTS
        return self.plain_words and lo <= self.n <= hi and big


def lean_dram(device) -> bool:
    """Whether the device has less DRAM bandwidth per SM than LEAN_DRAM_GBPS_PER_SM (False where unknown)."""
    gbps = dram_gbps_per_sm(device)
    return gbps is not None and gbps < LEAN_DRAM_GBPS_PER_SM


def split_default(device) -> FwdConfig:
    """Two 8-warp programs an SM at 8192 columns each, capped at 128 registers so that both fit."""
    programs = SPLIT_PER_SM * sm_count(device)
    return FwdConfig("split", SPLIT_WARPS, chunk=SPLIT_CHUNK, programs=programs, maxnreg=SPLIT_MAXNREG)


def _cluster_launch(chunk: int, per_thread: int, row_max: bool) -> FwdConfig:
    """A cluster launch of chunk columns a CTA at per_thread elements a thread: past CLUSTER_PER_THREAD (x or the
    weight staged through the exchange, or the weight beside x for a row max) under a register cap, for CTAs an SM."""
    maxnreg = 0
    if per_thread > CLUSTER_PER_THREAD:
        maxnreg = CLUSTER_ROW_MAX_MAXNREG if row_max else CLUSTER_MAXNREG
    return FwdConfig("cluster", chunk // (32 * per_thread), chunk=chunk, maxnreg=maxnreg)


def _cluster_per_thread(c: FwdCall) -> int:
    """64 elements a thread for 16-bit x at 262144 columns, past 65536 without a bias, and in tensors of >= 32M
    elements at 65536 or into FP8 (more bytes in flight a CTA); else 32."""
    big = c.m * c.n >= CLUSTER_WIDE_MIN_ELEMENTS and (c.fused or c.n == WIDE_CHUNK_N)
    wide = c.n == CLUSTER_N[1] or not c.bias and (c.n > WIDE_CHUNK_N or big)
    return 2 * CLUSTER_PER_THREAD if c.words_ok and wide else CLUSTER_PER_THREAD


# --- the rules, in the order fwd_config tries them ----------------------------------------------------------------


def _cluster_rows(c: FwdCall) -> FwdConfig | None:
    lo, hi = CLUSTER_N
    if not (c.cluster_ok and lo <= c.n <= hi and c.pow2 and (c.n < hi or c.words_ok)):
        return None
    per_thread = _cluster_per_thread(c)
    # a row max beside 64 elements a thread: 8 warps, so the weight's registers fit under the looser cap
    min_warps = 8 if c.row_max and per_thread > CLUSTER_PER_THREAD else 4
    chunk = max(min_warps * 32 * per_thread, c.n // cluster_staging.MAX_CLUSTER)
    return _cluster_launch(chunk, per_thread, c.row_max)


def _fp8_cluster_pairs(c: FwdCall) -> FwdConfig | None:
    if not (c.cluster_ok and c.fp8_of_x and c.n in FP8_CLUSTER_N and c.m * c.n >= FP8_CLUSTER_MIN_ELEMENTS):
        return None
    wide = c.n == FP8_CLUSTER_N[1] and (c.row_max or c.m * c.n >= CLUSTER_WIDE_MIN_ELEMENTS)
    return _cluster_launch(c.n // 2, 2 * CLUSTER_PER_THREAD if wide else CLUSTER_PER_THREAD, c.row_max)


def _split_rows(c: FwdCall) -> FwdConfig | None:
    if not (c.n > WIDE_CHUNK_N and not c.fused and c.split_ok and c.device.type == "cuda"):
        return None
    cfg = split_default(c.device)
    if c.split_words_ok:  # words: half the registers of x a stage, so 3 stages fit without a spill, 4 from 32 chunks
        stages = 4 if triton.cdiv(c.n, cfg.chunk) >= SPLIT_WORDS_FOUR_STAGES else 3
        cfg = replace(cfg, words=True, stages=stages)
    return cfg


def _async_rows(c: FwdCall) -> FwdConfig | None:
    lo, hi = ASYNC_N
    taken = c.async_ok and c.plain_words and lo <= c.n <= hi and c.m > 4 * c.sms
    if not taken or (c.two_pass and c.m >= ASYNC_MAX_M):
        return None
    return FwdConfig("async", c.n // 1024, block_m=1)  # 32 elements a thread


def _decode_rows(c: FwdCall) -> FwdConfig | None:
    if c.n > MAX_ROWS_N:
        return None
    if c.m <= DECODE_SLICED_M and DECODE_SLICE < c.n <= 8192 and not c.fused:
        return FwdConfig("rows", 8, block_m=1, chunk=DECODE_SLICE)
    if c.m <= 4 * c.sms:  # one 16-byte load a thread: latency-bound, so the smallest CTA that holds the row
        return FwdConfig("rows", min(32, max(4, triton.next_power_of_2(c.n) // 256)), block_m=1)
    return None


def _two_pass_rows(c: FwdCall) -> FwdConfig | None:
    if c.n > MAX_ROWS_N or not c.two_pass:
        return None
    # a row a program in two halves, summed then re-read from L1/L2; 32 registers, so 2048 threads fill the SM
    return FwdConfig("looped", c.n // 512, chunk=c.n // 2, programs=c.m, reverse=False, maxnreg=32)


def _tiled_rows(c: FwdCall) -> FwdConfig | None:
    if c.n > MAX_ROWS_N:
        return None
    block_n = triton.next_power_of_2(c.n)
    block_m = max(1, min(8192 // block_n, triton.next_power_of_2(max(1, c.m // (4 * c.sms)))))
    if c.fused and block_n >= 1024:  # fused work a row: smaller tiles, 16 elements a thread at 4-8 warps
        block_m = min(block_m, max(1, FUSED_ROWS_TILE // block_n))
    num_warps = min(32, max(4, block_m * block_n // 512))
    if c.fp8_of_x and block_n >= 1024 and (block_n >= 4096 or not lean_dram(c.device)):
        num_warps = block_m * block_n // 1024  # FP8 of x: 32 elements a thread (short rows only with DRAM to spare)
    # a full SM (2048 threads) needs <= 32 registers a thread; capped only where the plain kernel spills nothing
    capped = block_n >= 4096 and block_m * block_n // (num_warps * 32) <= 16 and not (c.fused or c.bias)
    return FwdConfig("rows", num_warps, block_m=block_m, maxnreg=32 if capped else 0)


def _looped_rows(c: FwdCall) -> FwdConfig:
    programs = min(c.m, 2 * c.sms)
    if c.n <= WIDE_CHUNK_N and c.words_ok:
        return FwdConfig("looped", 32, chunk=WORDS_CHUNK, programs=programs, maxnreg=LOOPED_MAXNREG, words=True)
    if c.n <= WIDE_CHUNK_N and not c.fused:
        return FwdConfig("looped", 32, chunk=32768, programs=programs, maxnreg=LOOPED_MAXNREG)
    return FwdConfig("looped", 32, chunk=8192, programs=programs, head=LOOPED_HEAD, maxnreg=LOOPED_MAXNREG)


# (rule, where it applies, why it wins there), tried top to bottom
FORWARD_RULES: tuple[tuple[Callable[[FwdCall], FwdConfig | None], str, str], ...] = (
    (
        _cluster_rows,
        "clusters run; x as given; power-of-two N in 32768..262144",
        "a row a cluster of up to 16 CTAs reads x once; partials meet in distributed shared memory",
    ),
    (
        _fp8_cluster_pairs,
        "clusters run; FP8 of x; N 8192 or 16384; >= 8M elements",
        "two CTAs a row halve the registers a row and its two reductions (sum, then max) hold",
    ),
    (
        _split_rows,
        "CUDA; N > 65536; nothing fused",
        "co-resident programs share a row, so x crosses DRAM once where the looped kernel reads it twice",
    ),
    (
        _async_rows,
        "cp.async runs; plain 16-bit N 4096..8192; past decode sizes",
        "x's bytes in flight sit in shared memory, not registers, so more of them are in flight",
    ),
    (
        _decode_rows,
        "N <= 32768; M <= 4 x SMs",
        "latency-bound: a row a program, sliced into 2048-column programs at N 4096..8192",
    ),
    (
        _two_pass_rows,
        "plain 16-bit N 1024..8192; M >= 8192; >= 16M elements",
        "a row a program in two halves at 32 registers: a full SM where whole rows needed more",
    ),
    (
        _tiled_rows,
        "N <= 32768",
        "whole rows in registers: one read of x, one write of y",
    ),
    (
        _looped_rows,
        "everything else",
        "a row in chunks: the stats pass keeps it in L2, the normalize pass reads it back from there",
    ),
)


def fwd_config(
    m: int,
    n: int,
    device,
    fused: bool = False,
    split_ok: bool = True,
    bias: bool = False,
    words_ok: bool = False,
    split_words_ok: bool = False,
    cluster_ok: bool = False,
    async_ok: bool = False,
    row_max: bool = False,
) -> FwdConfig:
    """The launch of the first rule in FORWARD_RULES that takes the call. fused: a residual add, distributed stats
    or FP8 output rides along. split_ok: False where the split kernel cannot serve (a bias with a row max: FP8 row or
    dynamic tensor scales). bias: a bias vector is added. words_ok: x's rows can be read as 32-bit words
    (launch.wordable_rows: 16-bit) and are what is normalized (no residual, no distributed stats). split_words_ok:
    the split kernel may hold x, y and the weight as words (forward.split_words_fit). cluster_ok: the cluster kernel
    can serve the call here (forward_cluster.supported; x normalized as given, into a float or FP8 output, and no
    bias beside a row max). async_ok: the cp.async rows kernel can run here and copy x (forward_async.supported and
    aligned). row_max: FP8 row scales (each row's max|y| taken)."""
    call = FwdCall(
        m, n, device, sm_count(device), fused, split_ok, bias, words_ok, split_words_ok, cluster_ok, async_ok, row_max
    )
    for rule, _where, _why in FORWARD_RULES:
        cfg = rule(call)
        if cfg is not None:
            return cfg
    raise AssertionError("the last rule takes every call")
