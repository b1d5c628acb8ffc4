"""RMSNorm forward in Triton: y = h * rsqrt(mean(h^2) + eps) * (w + weight_offset) (+ bias), h = x (+ residual).

Launcher (reusable entry point, also for a fused all-reduce + RMSNorm + FP8 built on top of it):

    rmsnorm_fwd(x, weight=None, *, epsilon=1e-5, weight_offset=0.0, bias=None, residual=None, dtype=None,
                scale_mode="row", scale=None, scale_ub=inf, return_rsigma=False, stats=None, hidden_size=None,
                config=None, enable_pdl=None) -> RMSNormOutput(y, rsigma, residual_out, scale)

    x         [..., N] bf16/fp16/fp32, hidden dim contiguous, rows may be strided; math in fp32, 64-bit offsets.
    weight    [N] or None; the kernel multiplies by (weight + weight_offset) (weight_offset=1.0: zero-centered gamma).
    residual  [..., N]: h = x + residual rounded to residual.dtype is both normalized and returned as residual_out.
    dtype     output dtype: None (x.dtype), bf16/fp16/fp32, or torch.float8_e4m3fn / torch.float8_e5m2.
    FP8       scale_mode="row":    one float32 scale per row, min(rowmax|v|, scale_ub) / fp8_max, returned [M]
              scale_mode="tensor": one float32 scale [1]: `scale` if given (static), else min(max|v|, scale_ub)/fp8_max
                                   from a first pass over x (dynamic); y = fp8(clamp(v / scale)), v ~= y * scale.
    rsigma    float32 [M], rsqrt(mean(h^2) + eps) (TransformerEngine's nvte_rmsnorm_fwd rsigma).
    stats     float32 [W, M] per-shard sums of squares (distributed post): summed in rank order, divided by hidden_size
              (default N), instead of the sum over x's own row.
    enable_pdl programmatic dependent launch of the rows, looped, cp.async and cluster kernels (None: wherever it runs,
              Hopper and later): each CTA first waits for the previous kernel in the stream to finish
              (griddepcontrol.wait, before any load or store), then lets the next kernel's CTAs launch as this grid's
              free their SMs, so back-to-back PDL kernels overlap one's launch with the other's tail. The split
              launch, whose programs must all be resident at once (they wait on each other through global memory),
              launches plainly; a cluster's CTAs wait only on each other, and the hardware starts them together.

Kernels: `_fwd_rows_kernel` keeps BLOCK_M whole rows in registers (N <= MAX_ROWS_N: one read of x, one write of y);
at decode sizes it cuts rows into column slices, one program each, every program summing the whole row itself.
`_fwd_looped_kernel` serves longer rows: a persistent grid, one row at a time in CHUNK-wide pieces, a stats pass that
keeps the row in L2 (evict_last) and a normalize pass in reverse order that reads it back from there (evict_first), so
DRAM sees about one read and one write. Launched a row a program with the normalize pass in order, it is also the
two-pass form of tall tensors of plain 16-bit rows up to 8192 columns (TWO_PASS_N). With stats given (distributed post)
there is no stats pass. For 16-bit rows up to 65536 columns without a residual its stats pass is one load of the whole
row as 32-bit words (FwdConfig.words); an FP8 row max then takes a pass of its own over the row in L2.
`_fwd_split_kernel` cuts rows past WIDE_CHUNK_N over co-resident programs that exchange their partial sums
(split_publish / split_reduce), so x crosses DRAM once; `_fwd_split_words_kernel` is its form for plain 16-bit rows held
as 32-bit words, with a fourth stage from 32 chunks a row (split_words_fit, FwdConfig.words and stages).
Where thread-block clusters run (Hopper, Gluon), the forward of x as given (no residual or distributed stats) over
power-of-two rows of 32768-262144 columns takes rmsnorm_cluster.py's kernel instead, into a float or FP8 output (a row
max without a bias): a row a cluster of up to 16 CTAs, the partials (and row maxima) met in distributed shared memory.
Where cp.async runs from Gluon, plain 16-bit rows of 4096 and 8192 columns past decode sizes take rmsnorm_async.py's
kernel: whole rows a CTA with x moved into shared memory by cp.async, so its bytes in flight hold no registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from programs.triton import fp8 as fp8mod
from programs.triton import rmsnorm_async, rmsnorm_cluster
from programs.triton.checks import (
    TritonRuleError,
    as_rows,
    check_activation,
    check_epsilon,
    check_same_rows,
    check_vector,
)
from programs.triton.fp8 import OUT_AMAX, OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC

MAX_ROWS_N = 32768  # longest row the register-resident kernel takes (32 warps x 32 fp32 per thread)
LOOPED_HEAD = 16384  # leading columns the looped kernel keeps in registers (16 fp32 per thread at 32 warps)
WIDE_CHUNK_N = 65536  # up to here the looped kernel reads 32768-column chunks (64 KB of bf16 per load step)
# The looped kernel's 32 warps may use the whole register file (64 a thread); said explicitly, because under Triton 3.8
# ptxas otherwise stopped at 56 and 2048 x 65536 ran 173 us against 145 (H200, NOTES.md v11). Triton 3.6: no change.
LOOPED_MAXNREG = 64
# The looped kernel's words stats pass (FwdConfig.words) holds the whole row, N / 2 words over 32 warps: 32 registers a
# thread at N = WIDE_CHUNK_N; its normalize pass reads WORDS_CHUNK columns a step.
WORDS_CHUNK = 16384
# Elements a program of the rows kernel for the fused variants (FP8 output, a residual, distributed stats) past
# decode sizes, rows of 1024 to 8192 columns (fwd_config)
FUSED_ROWS_TILE = 2048
# The rows kernel takes FP8 row scales' max in the sum's reduction at up to this many elements a thread (decode sizes)
JOINT_MAX_PER_THREAD = 8
# Decode rows (M <= DECODE_SLICED_M, N <= 8192) are cut into DECODE_SLICE-column programs; every program re-reads
# its whole row from L2 for the sum, which more rows or longer rows would make the bottleneck (not measured past them).
DECODE_SLICED_M, DECODE_SLICE = 128, 2048
# Plain 16-bit rows of TWO_PASS_N columns (powers of two) in tensors of at least TWO_PASS_MIN_M rows and
# TWO_PASS_MIN_ELEMENTS elements take the looped kernel one row a program, in two halves (fwd_config, NOTES.md v17).
TWO_PASS_N = (1024, 8192)
TWO_PASS_MIN_M, TWO_PASS_MIN_ELEMENTS = 8192, 1 << 24
# split kernel default: columns per program, its warps, programs per SM, and the register cap that lets two share an SM
# (H200, 1024 x 262144: 292.8 us against 355.3 us at one 16-warp program per SM, chunk 16384; NOTES.md v9)
SPLIT_CHUNK, SPLIT_WARPS, SPLIT_PER_SM, SPLIT_MAXNREG = 8192, 8, 2, 128

# cluster kernel default (rmsnorm_cluster.py): rows of a power of two in this range (the longest: 16-bit only),
# CLUSTER_PER_THREAD elements a thread at 4 warps or more (16 CTAs a row at most), twice that for 16-bit x in rows past
# 65536 columns and in tensors of >= CLUSTER_WIDE_MIN_ELEMENTS elements at N = 65536 or into FP8, under a cap of
# CLUSTER_MAXNREG registers (4 CTAs of 8 warps a SM), or CLUSTER_ROW_MAX_MAXNREG where the row max is taken (3)
CLUSTER_N, CLUSTER_PER_THREAD, CLUSTER_WIDE_MIN_ELEMENTS = (32768, 262144), 32, 1 << 25
CLUSTER_MAXNREG, CLUSTER_ROW_MAX_MAXNREG = 64, 80
# FP8 output of 16-bit x as given, rows of these widths in tensors of >= FP8_CLUSTER_MIN_ELEMENTS: a row over the two
# CTAs of a cluster (fwd_config)
FP8_CLUSTER_N, FP8_CLUSTER_MIN_ELEMENTS = (8192, 16384), 1 << 23
# below this DRAM bandwidth per SM (dram_gbps_per_sm: H100 SXM 25.4, H200 36.5) fewer bytes in flight keep up: the
# backward's rows kernel takes 8 warps, and the FP8 rows forward keeps 16 elements a thread at rows under 4096 columns
LEAN_DRAM_GBPS_PER_SM = 30
# cp.async rows kernel default (rmsnorm_async.py): plain 16-bit rows of a power of two in this range, past decode sizes,
# and below ASYNC_MAX_M rows where the two-pass launch also serves
ASYNC_N, ASYNC_MAX_M = (4096, 8192), 16384


class RMSNormOutput(NamedTuple):
    y: torch.Tensor | None  # output (x's shape), None for the amax-only pass
    rsigma: torch.Tensor | None  # float32 [M] when asked for
    residual_out: torch.Tensor | None  # x + residual when residual was given
    scale: torch.Tensor | None  # FP8: float32 [M] (row) or [1] (tensor)


@dataclass(frozen=True)
class FwdConfig:
    """Launch shape. kernel "rows": block_m rows per program (chunk > 0: `chunk` columns of them per program, each
    program summing the whole rows itself); "looped": `programs` persistent programs, chunk-wide;
    "split": rows cut into chunk-wide pieces, one per program, at most `programs` programs resident together;
    "cluster": a row a thread-block cluster, chunk columns a CTA (rmsnorm_cluster.py); "async": block_m whole rows a
    CTA, x moved into shared memory by cp.async (rmsnorm_async.py)."""

    kernel: str
    num_warps: int
    block_m: int = 1
    chunk: int = 0
    programs: int = 0
    head: int = 0  # looped: leading columns kept in registers (a power of two <= N)
    words: bool = False  # looped: the stats pass loads each whole row at once as 32-bit words; split: x, y and the
    # weight held as 32-bit words (split_words_fit)
    reverse: bool = True  # looped: the normalize pass walks the chunks last to first (long rows: the chunks read last
    # are the likeliest still in L2); False walks them in order (a row a program in two chunks, NOTES.md v17)
    stages: int = (
        3  # split with words: row blocks in registers; 4 publishes two blocks ahead and reads the exchange early
    )
    maxnreg: int = 0  # registers per thread capped (0: the compiler's choice), e.g. 128 for two split programs per SM


def sm_count(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: a few programs, so persistent loops and partial buffers see several


def dram_gbps_per_sm(device) -> float | None:
    """Nominal DRAM bandwidth per SM (GB/s) from the device's memory bus (None off CUDA or where torch does not report
    it): how many bytes each SM must keep in flight, so which launch shapes keep up (H100 SXM 25.4, H200 36.5)."""
    if device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    bus, clock_khz = getattr(p, "memory_bus_width", 0), getattr(p, "memory_clock_rate", 0)
    if not bus or not clock_khz:
        return None
    return 2 * bus / 8 * clock_khz * 1e3 / p.multi_processor_count / 1e9


def lean_dram(device) -> bool:
    """Whether the device has less DRAM bandwidth per SM than LEAN_DRAM_GBPS_PER_SM (False where unknown)."""
    gbps = dram_gbps_per_sm(device)
    return gbps is not None and gbps < LEAN_DRAM_GBPS_PER_SM


def _cluster_launch(chunk: int, per_thread: int, row_max: bool) -> FwdConfig:
    """A cluster launch of chunk columns a CTA at per_thread elements a thread: past CLUSTER_PER_THREAD (x or the
    weight staged through the exchange, rmsnorm_cluster.x_staged, or the weight beside x for a row max) under a
    register cap, for CTAs an SM."""
    maxnreg = 0
    if per_thread > CLUSTER_PER_THREAD:
        maxnreg = CLUSTER_ROW_MAX_MAXNREG if row_max else CLUSTER_MAXNREG
    return FwdConfig("cluster", chunk // (32 * per_thread), chunk=chunk, maxnreg=maxnreg)


def split_default(device) -> FwdConfig:
    return FwdConfig(
        "split", SPLIT_WARPS, chunk=SPLIT_CHUNK, programs=SPLIT_PER_SM * sm_count(device), maxnreg=SPLIT_MAXNREG
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
    """Launch shape by size, from the H200 sweeps in NOTES.md (`benchmark --sweep`, `--sweep-long`). fused: a residual
    add, distributed stats or FP8 output rides along. split_ok: False where the split kernel cannot serve (a bias
    with a row max: FP8 row or dynamic tensor scales). bias: a bias vector is added. words_ok: x's rows can be read
    as 32-bit words (wordable_rows: 16-bit) and are what is normalized (no residual, no distributed stats).
    split_words_ok: the split kernel may hold x, y and the weight as words (split_words_fit). cluster_ok: the cluster
    kernel can serve the call here (rmsnorm_cluster.supported; x normalized as given, into a float or FP8 output, and
    no bias beside a row max); async_ok: the cp.async rows kernel can run here and copy x (rmsnorm_async.supported
    and aligned). row_max: FP8 row scales (each row's max|y| taken)."""
    sms = sm_count(device)
    # fused with words_ok (x's own 16-bit rows: no residual or distributed stats) is FP8 output of x as given; the
    # launches below measured for it were measured without a bias
    fp8_of_x = fused and words_ok and not bias
    if cluster_ok and CLUSTER_N[0] <= n <= CLUSTER_N[1] and n & (n - 1) == 0 and (n < CLUSTER_N[1] or words_ok):
        # a row a cluster of up to 16 CTAs, 32 elements a thread (H100, NOTES.md v19, us, against the launch this
        # function gave before in the same run; copy of the same bytes in brackets): 2048 x 65536 179.5 against 190.1
        # [179.2], 64 x 65536 7.53 against 8.79 [7.86], 512 x 65536 46.5 against 50.6, 4096 x 32768 178.7 against
        # 182.2, 1024 x 131072 182.2 against the split kernel's 192.9, fp32 2048 x 65536 396.0 against 469.7. Level
        # at N = 8192 and 16384 (the rows kernel stays); rows that are not a power of two leave CTAs part-empty and
        # lost (2048 x 49152 159.9 against 145.1, 1024 x 98304 173.6 against 145.3); 16 warps at 32 elements a
        # thread lost (4096 x 32768 219.2). N = 262144 (16-bit rows): 64 elements a thread at 8 warps, capped at 64
        # registers so that 4 CTAs share an SM (rmsnorm_cluster stages what waits for the exchange in shared memory):
        # 1024 x 262144 360.5 against the split kernel's 375 and QuACK's 360.3, 512 x 262144 182.5 against 189.9
        # (v20).
        # FP8 output (NOTES.md v25): x read once where the looped kernel read it twice. A row max needs the weight
        # beside x before the exchange: at 64 elements a thread that spills under the cap of 64 (ptxas: 316 bytes), so
        # FP8 row scales take a looser cap (below; H100, FP8 row scales, us: 1024 x 262144 310.7 uncapped, 577.3
        # capped, 602.9 at 16 warps and 32 elements a thread, 385.2 at 16 warps capped; the looped kernel 466.7;
        # 298.9 uncapped with the joint reduction of rmsnorm_cluster, whose 66 registers at 4 warps ran level with
        # a cap of 64).
        # 64 elements a thread (x or the weight staged through the exchange, capped; chunk 8192 at 4 warps where 16
        # CTAs a row allow) for rows past 65536 columns, and in tensors of >= 32M elements at N = 65536 or into FP8
        # (H200, 64 x 65536 into FP8: row scales 7.31 against 6.99, given scale 6.65 against 6.51); FP8 row scales at
        # 8 warps (NOTES.md v26, us, H200 / H100, against the 32-a-thread launch in the same run, uncapped):
        # 1024 x 131072 134.7 / 179.9 against 143.7 / 180.5, 2048 x 65536 133.0 / 179.6 against 134.9 / 178.8 (512
        # x 65536 35.7 / 46.9 against 36.7 / 46.8; 64 x 65536 lost 2% / 12%, 4096 x 32768 2% / 1%); FP8 given scale
        # 2048 x 65536 105.8 / 135.1 against 120.1 / 142.7, 4096 x 32768 102.6 / 134.5 against 113.0 / 136.9; FP8
        # row scales 2048 x 65536 126.2 / 142.2 against 136.1 / 146.3, 4096 x 32768 114.3 / 136.4 against 122.6 /
        # 138.0, 1024 x 131072 132.5 / 147.0 against 144.8 / 153.3. Not with a bias (unmeasured; x is not staged
        # beside one) nor fp32 rows.
        wide = (
            n == CLUSTER_N[1]
            or not bias
            and (n > WIDE_CHUNK_N or m * n >= CLUSTER_WIDE_MIN_ELEMENTS and (fused or n == WIDE_CHUNK_N))
        )
        per_thread = 2 * CLUSTER_PER_THREAD if words_ok and wide else CLUSTER_PER_THREAD
        min_warps = 8 if row_max and per_thread > CLUSTER_PER_THREAD else 4
        chunk = max(min_warps * 32 * per_thread, n // rmsnorm_cluster.MAX_CLUSTER)
        # FP8 row scales at 64 elements a thread: capped at 80, 3 CTAs of 8 warps a SM. Uncapped, Triton 3.6 took 80
        # with its own ptxas (CUDA 12.8) but 88 with torch's (CUDA 13.0, set by any torch.compile in the process),
        # 2 CTAs a SM (H100, us, 80 / 88 registers: 2048 x 65536 141.8 / 173.9, 1024 x 262144 297.3 / 404.6; under
        # torch's ptxas capped at 80: 146.5, 304.2, no spill; NOTES.md v26). rmsnorm_cluster drops a cap that spills.
        return _cluster_launch(chunk, per_thread, row_max)
    if cluster_ok and fp8_of_x and n in FP8_CLUSTER_N and m * n >= FP8_CLUSTER_MIN_ELEMENTS:
        # FP8 output at 8192 or 16384 columns: a row over two CTAs, where the rows kernel held it in one of 16-32
        # warps and reduced it twice (the row max after the sum). us, H200 / H100, against the rows kernel in the same
        # run (NOTES.md v27): row scales 16384 x 8192 111.8 / 132.9 against 135.1 / 148.9, 8192 x 16384 106.7 / 134.5
        # against 145.3 / 152.1, 1024 x 8192 9.18 / 10.08 against 11.18 / 11.96; a given scale 100.8 / 132.6 against
        # 118.3 / 141.6 and 102.0 / 134.8 against 121.0 / 139.2; a dynamic one 192.9 / 238.0 against 216.6 / 248.0
        # and 172.9 / 231.2 against 260.7 / 290.2. Below 8M elements the dynamic scale lost (128 x 16384: 11.62 /
        # 11.97 against 10.77 / 11.34). bf16 output: level (16384 x 8192 130.1 / 179.7 against 127.4 / 179.4), not
        # taken. At 16384 columns 64 elements a thread (capped) with row scales, and from CLUSTER_WIDE_MIN_ELEMENTS
        # with a tensor scale (H200 8192 x 16384 101.1 against 104.3 at 32 a thread; 2048 x 16384 29.5 against 28.8).
        wide = n == FP8_CLUSTER_N[1] and (row_max or m * n >= CLUSTER_WIDE_MIN_ELEMENTS)
        return _cluster_launch(n // 2, 2 * CLUSTER_PER_THREAD if wide else CLUSTER_PER_THREAD, row_max)
    if n > WIDE_CHUNK_N and not fused and split_ok and device.type == "cuda":
        # H200, 1024 x 262144 (NOTES.md v9): 292.8 us against the looped kernel's 386.3 us in the same run. At
        # N = 65536 the looped kernel stays (144.3 us against the split kernel's best 145.3 us); the fused variants
        # measured slower split (NOTES.md v6, v8).
        cfg = split_default(device)
        if split_words_ok:
            # words: 16 registers of x a stage where 16-bit elements take 32, so 3 stages fit without the element
            # kernel's spill, and 4 (publishing two blocks ahead, the exchange read before the publish) from 32
            # programs a row (H200, NOTES.md v16, us, against the element kernel in the same run: 1024 x 262144
            # 278.9 (4 stages) against 292.5, 1024 x 524288 611.9 against 677.7, 2048 x 131072 289.0 (3) against
            # 306.2, 2048 x 81920 182.3 against 201.1; 4 stages at 16 chunks 309.3, at 24 216.6 against 214.7)
            cfg = replace(cfg, words=True, stages=4 if triton.cdiv(n, cfg.chunk) >= 32 else 3)
        return cfg
    plain_words = words_ok and not (fused or bias) and n & (n - 1) == 0
    two_pass = (
        plain_words and TWO_PASS_N[0] <= n <= TWO_PASS_N[1] and m >= TWO_PASS_MIN_M and m * n >= TWO_PASS_MIN_ELEMENTS
    )
    if (
        async_ok
        and plain_words
        and ASYNC_N[0] <= n <= ASYNC_N[1]
        and m > 4 * sms
        and not (two_pass and m >= ASYNC_MAX_M)
    ):
        # whole rows, x moved by cp.async, 32 elements a thread (H100, NOTES.md v20, us, medians of 3 alternations
        # against the launch this function gave before): 4096 x 4096 24.90 against 25.08, 2048 x 4096 10.76 against
        # 11.60, 8192 x 4096 45.60 against the two-pass kernel's 47.61, 1000 x 8192 11.03 against 11.51, 4096 x 8192
        # 47.30 against 47.63; at 4096 x 16384 the rows kernel stays (level); decode sizes keep their launches (not
        # measured); a bias: not measured. From 16384 rows the two-pass launch (below) runs level on H100 and faster
        # on H200 (NOTES.md v26, us, H200 / H100: 32768 x 4096 128.0 / 178.6 against 132.2 / 179.3, 16384 x 8192
        # 128.9 / 178.5 against 131.1 / 179.2, 65536 x 4096 250.6 / 355.1 against 260.4 / 356.4, 16384 x 4096 65.4 /
        # 90.6 against 65.8 / 90.8; at 8192 rows cp.async stays: 8192 x 8192 65.7 / 90.7 against 66.3 / 90.6,
        # 8192 x 4096 33.6 / 45.5 against 34.1 / 46.9).
        return FwdConfig("async", n // 1024, block_m=1)
    if n <= MAX_ROWS_N:
        block_n = triton.next_power_of_2(n)
        if m <= DECODE_SLICED_M and DECODE_SLICE < n <= 8192 and not fused:
            # decode: rows cut into 2048-column programs of 8 warps, each summing its whole row (H100 sweep, NOTES.md
            # v11: 1 x 8192 2.02 us against 2.34 whole rows, 32 x 8192 2.38 against 2.62, 128 x 8192 3.33 against 3.48).
            # Not the fused variants: FP8 row scales ran no faster sliced and a residual only at some sizes (H200, v11).
            return FwdConfig("rows", 8, block_m=1, chunk=DECODE_SLICE)
        if m <= 4 * sms:  # decode-sized: one row per program, one 16-byte load per thread (latency-bound)
            return FwdConfig("rows", min(32, max(4, block_n // 256)), block_m=1)
        if two_pass:
            # a row a program in two halves, one 16-byte load a thread each: summed, then re-read from L1/L2 to scale
            # and store, 32 registers so 2048 threads fill the SM. H200 (NOTES.md v17, us, against the rows launch in
            # the same run): 16384 x 8192 128.4 against 131.5, 8192 x 8192 66.3 against 67.1, 32768 x 4096 127.4
            # against 131.2, 65536 x 2048 127.4 against 133.0, 16384 x 1024 19.1 against 20.0; H100 level to 4%
            # faster. Fewer rows lost (2048 x 8192 -4%, 4096 x 2048 -3%; H100 8192 x 1024 -3%), as did rows that
            # are not a power of two (the half-empty last chunk: 16384 x 5120 -19%) and N = 16384 (-7%).
            return FwdConfig("looped", n // 512, chunk=n // 2, programs=m, reverse=False, maxnreg=32)
        block_m = max(1, min(8192 // block_n, triton.next_power_of_2(max(1, m // (4 * sms)))))
        if fused and block_n >= 1024:
            # the fused variants in tiles of FUSED_ROWS_TILE elements (a row a program from 2048 columns), 4-8 warps
            # at 16 elements a thread, where the plain kernel's 8192 took 16 warps (NOTES.md v26, us, H200 / H100,
            # against the 8192-element tile in the same run): FP8 row scales 32768 x 4096 124.8 / 139.8 against
            # 140.0 / 149.6, 65536 x 2048 121.2 / 134.6 against 134.2 / 147.3, 65536 x 1024 60.2 / 68.5 against 71.4
            # / 76.6; a given scale 110.9 / 134.5 against 114.7 / 137.3 (32768 x 4096); a residual 197.4 / 272.7
            # against 202.6 / 273.9 (65536 x 2048); distributed stats (H100) 46.6 against 48.0 (16384 x 2048)
            block_m = min(block_m, max(1, FUSED_ROWS_TILE // block_n))
        num_warps = min(32, max(4, block_m * block_n // 512))
        if fp8_of_x and block_n >= 1024 and (block_n >= 4096 or not lean_dram(device)):
            # FP8 output: 32 elements a thread (NOTES.md v27, us, H200 / H100, against 16 in the same run): row scales
            # 32768 x 4096 108.9 / 133.3 against 125.0 / 139.9, 4096 x 4096 16.6 / 19.1 against 18.9 / 20.4, 600 x
            # 8192 7.34 / 7.57 against 8.16 / 8.43; a given scale 101.7 / 133.0 against 111.0 / 134.5; a dynamic one
            # 184.6 / 232.2 against 204.6 / 236.5. Under 4096 columns on H200 only (65536 x 2048 108.1 against 121.9,
            # 65536 x 1024 55.0 against 60.2); H100 there level or slower (4096 x 1024 6.52 against 6.10). A
            # residual beside FP8 output: level (not taken).
            num_warps = block_m * block_n // 1024
        # A full SM (2048 threads: two 32-warp or four 16-warp programs) needs <= 32 registers a thread. At 16
        # elements a thread the compilers take 38-40 (Triton 3.8 at N = 16384: one program per SM, 4096 x 16384 88.7
        # us against 67.5; both versions at N = 8192: three per SM, 2048 x 8192 20.3 us against 19.5; H200, NOTES.md
        # v11, v14; on H100, already at 99% of copy uncapped, it cost 0.3-0.5%). Capped for rows of >= 4096 columns,
        # where the plain kernel spills nothing under the cap (ptxas, both versions, rsigma stored or not); shorter
        # rows in taller tiles spilled, and a bias or the fused variants would, so they keep the compiler's choice.
        capped = block_n >= 4096 and block_m * block_n // (num_warps * 32) <= 16 and not (fused or bias)
        return FwdConfig("rows", num_warps, block_m=block_m, maxnreg=32 if capped else 0)
    if n <= WIDE_CHUNK_N and words_ok:
        # the stats pass was latency-bound: loading the whole row at once (64 KB a CTA in flight where 32768-column
        # chunks had 32 KB) takes 2048 x 65536 from 144.5 to 138.0 us on H200, 2048 x 49152 from 130.6 to 103.4; with
        # FP8 row scales (the row max then a pass of its own, from L2) 215.6 -> 188.6 us on H100 (NOTES.md v13)
        return FwdConfig("looped", 32, chunk=WORDS_CHUNK, programs=min(m, 2 * sms), maxnreg=LOOPED_MAXNREG, words=True)
    if n <= WIDE_CHUNK_N and not fused:
        # 4 loads of 16 bytes per thread in flight per step instead of 1 (chunk 8192 at 32 warps): the stats pass was
        # latency-bound (H200, 2048 x 65536: 159 -> 145 us, 80% -> 88% of copy). Not for the fused variants: measured
        # in the same run, FP8 row output 192 -> 295 us (its row-max accumulator beside a 32768 chunk spills, ptxas:
        # 260 bytes) and a residual add 306 -> 332 us; distributed stats were not measured.
        return FwdConfig("looped", 32, chunk=32768, programs=min(m, 2 * sms), maxnreg=LOOPED_MAXNREG)
    return FwdConfig("looped", 32, chunk=8192, programs=min(m, 2 * sms), head=LOOPED_HEAD, maxnreg=LOOPED_MAXNREG)


# ---------------------------------------------------------------------------------------------------------------------
# device helpers


@triton.jit
def dependent_launch():
    # PDL: wait for the previous kernel's writes first (x, the weight or y's memory may be its), then let the next
    # kernel's CTAs launch into the SM slots this grid frees
    gdc_wait()
    gdc_launch_dependents()


@triton.jit
def pre_round(v, DROP: tl.constexpr, MIN_NORMAL: tl.constexpr, SUB_MAGIC: tl.constexpr):
    """Round fp32 v to nearest even on the grid of a format with (23 - DROP) mantissa bits (interpreter only; DROP=0
    is the identity). Normal values by integer carry on the bits, subnormals of that format by a magic-number add."""
    if DROP == 0:
        return v
    else:
        b = v.to(tl.uint32, bitcast=True)
        b = b + ((1 << (DROP - 1)) - 1) + ((b >> DROP) & 1)
        b = b & (0xFFFFFFFF ^ ((1 << DROP) - 1))
        r = b.to(tl.float32, bitcast=True)
        if SUB_MAGIC != 0.0:
            a = tl.abs(v)
            s = (a + SUB_MAGIC) - SUB_MAGIC
            s = tl.where(v < 0, -s, s)
            r = tl.where(a < MIN_NORMAL, s, r)
        return r


@triton.jit
def fp8_recip(scale):
    return tl.where(scale == 0.0, 0.0, 1.0 / scale)


@triton.jit
def vector_at(P, cols, ok):
    """The vector P (weight or bias) at these columns in fp32: 0 where not ok, or, ok None, every column loaded."""
    if ok is None:
        v = tl.load(P + cols)
    else:
        v = tl.load(P + cols, mask=ok, other=0.0)
    return v.to(tl.float32)


@triton.jit
def plus_offset(w, w_off: tl.constexpr):
    """w + weight_offset: the kernels take the offset as a constexpr, so that at 0 (the usual case) the add, one
    instruction an element, is compiled out (H200, the cluster forward into FP8: 1024 x 262144 given scale 240.3 ->
    219.7 us, NOTES.md v28)."""
    if w_off != 0:
        w = w + w_off
    return w


@triton.jit
def weight_at(W, cols, ok, w_off: tl.constexpr):
    """The factor the kernels multiply by at these columns: weight + weight_offset in fp32 (0 + w_off where not ok)."""
    return plus_offset(vector_at(W, cols, ok), w_off)


@triton.jit
def row_words_sumsq(P, stride, row, N, WORDS: tl.constexpr):
    """Sum of squares (fp32) of row `row` of the 16-bit [M, N] tensor P, loaded at once as WORDS 32-bit words (two
    values each: half the registers of the values, so a whole row of 65536 fits 32 warps) and kept in L2 (evict_last)
    for a second read. P's base and stride even in elements (wordable_rows)."""
    wc = tl.arange(0, WORDS)
    PW = P.to(tl.pointer_type(tl.int32))
    v = tl.load(
        PW + tl.cast(row, tl.int64) * (stride // 2) + wc, mask=wc < N // 2, other=0, eviction_policy="evict_last"
    )
    lo, hi = unpack_words(v, P.dtype.element_ty)
    return tl.sum(lo * lo + hi * hi, axis=0)


@triton.jit
def unpack_words(v, DT: tl.constexpr):
    """(lo, hi) in fp32: the two 16-bit values of dtype DT in each 32-bit word of v, lo the one at the lower address
    (little-endian), so lo is column 2j and hi column 2j + 1 of word j."""
    lo = v.to(tl.int16).to(DT, bitcast=True).to(tl.float32)
    hi = (v >> 16).to(tl.int16).to(DT, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def load_words(P, stride, rows, M, jc, j_ok):
    """Words jc of rows `rows` of the 16-bit [M, N] tensor P as int32 [BLOCK_M, CHUNK // 2], 0 where masked."""
    return tl.load(
        P.to(tl.pointer_type(tl.int32)) + rows.to(tl.int64)[:, None] * (stride // 2) + jc[None, :],
        mask=(rows < M)[:, None] & j_ok[None, :],
        other=0,
    )


@triton.jit
def store_words(P, stride, rows, M, jc, j_ok, lo, hi):
    """load_words' inverse: lo and hi (fp32 [BLOCK_M, CHUNK // 2]) rounded to P's 16-bit dtype, stored as words jc."""
    DT: tl.constexpr = P.dtype.element_ty
    words = (lo.to(DT).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) | (
        hi.to(DT).to(tl.int16, bitcast=True).to(tl.int32) << 16
    )
    tl.store(
        P.to(tl.pointer_type(tl.int32)) + rows.to(tl.int64)[:, None] * (stride // 2) + jc[None, :],
        words,
        mask=(rows < M)[:, None] & j_ok[None, :],
    )


@triton.jit
def weight_words(ww, W, w_off: tl.constexpr):
    """(w_lo, w_hi): the weight's words ww (split_words_program) unpacked, + weight_offset, as weight_at gives them."""
    w_lo, w_hi = unpack_words(ww, W.dtype.element_ty)
    return plus_offset(w_lo, w_off), plus_offset(w_hi, w_off)


@triton.jit
def load_rows(P, stride, rows, M, cols, col_ok):
    """P[rows, cols] in its stored dtype, zero where rows >= M or not col_ok (rows [BLOCK_M], cols [n])."""
    return tl.load(
        P + rows.to(tl.int64)[:, None] * stride + cols[None, :], mask=(rows < M)[:, None] & col_ok[None, :], other=0.0
    )


@triton.jit
def residual_sum(h, R, stride_r, RO, r64, cols, mask):
    """h + residual, rounded to residual_out's dtype and returned in it: the rounded sum is what gets normalized, as
    an unfused x + r then norm."""
    return (h + tl.load(R + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)).to(
        RO.dtype.element_ty
    )


@triton.jit
def add_residual(h, R, stride_r, RO, stride_ro, r64, cols, mask):
    """residual_sum, also stored to residual_out."""
    hq = residual_sum(h, R, stride_r, RO, r64, cols, mask)
    tl.store(RO + r64 * stride_ro + cols[None, :], hq, mask=mask)
    return hq


@triton.jit
def gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M: tl.constexpr):
    """The rows' sum of squares from the gathered per-shard stats [n_stats, M], in rank order: every rank gets the
    same bits."""
    ss = tl.zeros([BLOCK_M], dtype=tl.float32)
    for k in range(n_stats):
        ss += tl.load(STATS + k * stride_stats + rows, mask=row_ok, other=0.0)
    return ss


@triton.jit
def fp8_quantize(
    v, fp8_max, Y_DTYPE: tl.constexpr, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr
):
    """v (already divided by its scale) clamped to the FP8 range and rounded to Y_DTYPE."""
    q = tl.minimum(tl.maximum(v, -fp8_max), fp8_max)
    return pre_round(q, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y_DTYPE)


@triton.jit
def _store_fp8(
    v, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP: tl.constexpr, Y_MIN_NORMAL: tl.constexpr, Y_SUB: tl.constexpr
):
    tl.store(
        Y + r64 * stride_y + cols[None, :],
        fp8_quantize(v, fp8_max, Y.dtype.element_ty, Y_DROP, Y_MIN_NORMAL, Y_SUB),
        mask=mask,
    )


@triton.jit
def _store_out(
    v,
    amax,
    Y,
    stride_y,
    SC,
    SCALE_IN,
    rows,
    r64,
    cols,
    mask,
    sc_mask,
    scale_ub,
    fp8_max,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """Write the normalized rows v [BLOCK_M, cols] as OUT_MODE says: cast (0), FP8 with per-row scales from the row
    max amax (1), FP8 with the one given scale (2), or only the row max (3, first pass of a dynamic tensor scale).
    sc_mask: which programs write the per-row values (one program per row when a row is split)."""
    if OUT_MODE == 0:
        y = pre_round(v, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y.dtype.element_ty)
        tl.store(Y + r64 * stride_y + cols[None, :], y, mask=mask)
    elif OUT_MODE == 3:
        tl.store(SC + rows, amax, mask=sc_mask)
    else:
        if OUT_MODE == 1:
            scale = tl.minimum(amax, scale_ub) / fp8_max
            tl.store(SC + rows, scale, mask=sc_mask)
            recip = fp8_recip(scale)[:, None]
        else:
            recip = fp8_recip(tl.load(SCALE_IN))
        _store_fp8(v * recip, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP, Y_MIN_NORMAL, Y_SUB)


@triton.jit
def split_program(N, SPLITS: tl.constexpr, CHUNK: tl.constexpr):
    """(g, lane, lanes, cols, col_ok) of this program in a split launch: program lane * SPLITS + g holds columns
    [g * CHUNK, (g + 1) * CHUNK) of the rows of its lane, one of lanes row blocks in flight."""
    pid = tl.program_id(0)
    g = pid % SPLITS
    cols = g * CHUNK + tl.arange(0, CHUNK)
    return g, pid // SPLITS, tl.num_programs(0) // SPLITS, cols, cols < N


@triton.jit
def split_words_program(N, W, SPLITS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, HAS_W: tl.constexpr):
    """split_program of the kernels holding words: (g, first_row, step, jc, j_ok, ww): program lane * SPLITS + g holds
    words jc (columns 2jc and 2jc + 1) of rows first_row + k * step of its lane, and the weight's words there."""
    pid = tl.program_id(0)
    jc = pid % SPLITS * (CHUNK // 2) + tl.arange(0, CHUNK // 2)
    j_ok = jc < N // 2
    ww = tl.zeros([CHUNK // 2], dtype=tl.int32)
    if HAS_W:
        ww = tl.load(W.to(tl.pointer_type(tl.int32)) + jc, mask=j_ok, other=0)
    return pid % SPLITS, pid // SPLITS * BLOCK_M, tl.num_programs(0) // SPLITS * BLOCK_M, jc, j_ok, ww


# The split kernels exchange row partials as 8-byte words: the fp32 bits in the low half, a flag (1) in the high half,
# in a buffer zeroed before the launch (NCCL's LL protocol, as the fused all-reduce). An aligned 8-byte store lands
# whole, so a reader that sees the flag sees the value: no fence, no counter. The release-fenced counter used before
# made every thread wait for its own look-ahead loads (a gpu-scope release waits for every earlier access of the
# thread), draining the load pipeline once per step (NOTES.md v8, v9).
SPLIT_FLAG = tl.constexpr(1 << 32)


@triton.jit
def split_publish(XCH, rows, row_ok, g, value, XW: tl.constexpr):
    """Publish this program's partial of each row: XCH[row * XW + g] = the flagged word of `value` (fp32 [BLOCK_M])."""
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.store(XCH + rows * XW + g, bits | SPLIT_FLAG, mask=row_ok)


@triton.jit
def split_reduce(XCH, rows, row_ok, SPLITS: tl.constexpr, XW: tl.constexpr, MAX: tl.constexpr):
    """Sum (MAX: max) of the rows' partials XCH[row, 0:SPLITS] (row stride XW, SPLITS rounded up to a power of two),
    fp32 [BLOCK_M], reduced in a fixed order: same bits every run and in every program
    of a row. Reads the words (volatile: from L2, never a stale L1 line) until every flag is set. The programs of a
    launch are resident together (grid <= one CTA per SM, cooperative launch on CUDA), so the wait ends; with
    SPLITS == 1 (the interpreter) the program reads its own word, stored before.
    The [BLOCK_M, XW] tile is smaller than the CTA, so threads hold copies of a word, and the loop's test (a
    reduction) sees one copy of each: it can pass while another thread's copy is stale (the race of NOTES.md v8).
    So each thread then re-reads the words its own copy saw unflagged. That read comes after a read that saw the
    flag (the test depends on it), and L2 is coherent, so it sees the word; predicated off, it costs nothing when no
    copy is stale (NOTES.md v9: as fast as the racy form; test_split_exchange_repeats_bit_for_bit)."""
    return split_reduce_from(split_words(XCH, rows, row_ok, SPLITS, XW), XCH, rows, row_ok, SPLITS, XW, MAX)


@triton.jit
def split_words(XCH, rows, row_ok, SPLITS: tl.constexpr, XW: tl.constexpr):
    """split_reduce's first read of the rows' words, [BLOCK_M, XW]: issued apart, it is in flight while the program
    does other work, and split_reduce_from waits for it."""
    gs = tl.arange(0, XW)
    return tl.load(
        XCH + rows[:, None] * XW + gs[None, :],
        mask=row_ok[:, None] & (gs < SPLITS)[None, :],
        other=SPLIT_FLAG,
        volatile=True,
    )


@triton.jit
def split_reduce_from(word, XCH, rows, row_ok, SPLITS: tl.constexpr, XW: tl.constexpr, MAX: tl.constexpr):
    """split_reduce from a first read `word` (split_words)."""
    gs = tl.arange(0, XW)
    ok = row_ok[:, None] & (gs < SPLITS)[None, :]
    ptr = XCH + rows[:, None] * XW + gs[None, :]
    while tl.min(tl.min((word >> 32).to(tl.int32), axis=1), axis=0) == 0:
        word = tl.load(ptr, mask=ok, other=SPLIT_FLAG, volatile=True)
    word = tl.load(ptr, mask=(word >> 32) == 0, other=word, volatile=True)
    v = word.to(tl.int32).to(tl.float32, bitcast=True)
    if MAX:
        return tl.max(v, axis=1)
    return tl.sum(v, axis=1)


# ---------------------------------------------------------------------------------------------------------------------
# kernels


@triton.jit
def _sum_max(a0, a1, b0, b1):  # combine of the (sum of squares, max|h*w|) reduction
    return a0 + b0, tl.maximum(a1, b1)


@triton.jit
def _fwd_rows_kernel(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    W,
    B,
    RSIG,
    SC,
    STATS,
    stride_stats,
    n_stats,
    SCALE_IN,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLICES: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    PDL: tl.constexpr = False,
    JOINT_MAX: tl.constexpr = False,
):
    if PDL:
        dependent_launch()
    # SLICES > 1 (decode): SLICES programs per row block, each writing BLOCK_N columns of it. Each takes the row's sum
    # (and row max) over the whole row itself, the other slices' bytes coming again from L2, so no program waits on
    # another and a row's latency is that of a smaller CTA (H100, 1 x 8192: NOTES.md v11).
    pid = tl.program_id(0)
    rows = (pid // SLICES) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % SLICES) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)[:, None]
    # weight and bias first: their loads overlap x's instead of waiting behind the row reduction (decode latency)
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)

    h = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        h = add_residual(h, R, stride_r, RO, stride_ro, r64, cols, mask).to(tl.float32)

    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    if SLICES > 1 and (NEED_AMAX or not HAS_STATS):
        # the whole row, h as residual_sum rounds it (add_residual stored only this program's slice of residual_out)
        full = tl.arange(0, BLOCK_N * SLICES)
        full_ok = full < N
        fmask = row_ok[:, None] & full_ok[None, :]
        hf = tl.load(X + r64 * stride_x + full[None, :], mask=fmask, other=0.0).to(tl.float32)
        if HAS_RES:
            hf = residual_sum(hf, R, stride_r, RO, r64, full, fmask).to(tl.float32)
    # FP8 row scales of whole rows without a bias, JOINT_MAX (launches of <= 8 elements a thread: decode sizes):
    # max|y| = rs * max|h * w| (rs > 0), so the max comes from the same reduction as the sum of squares instead of a
    # second one after it, each with its shared-memory pass and barriers (as the cluster kernel). At 16 elements a
    # thread the registers it holds cost more than the barriers it saves (NOTES.md v26).
    JOINT: tl.constexpr = JOINT_MAX and NEED_AMAX and SLICES == 1 and not (HAS_B or HAS_STATS)
    if HAS_STATS:
        ss = gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M)
    elif SLICES > 1:
        ss = tl.sum(hf * hf, axis=1)
    elif JOINT:
        hw = h
        if HAS_W:
            hw = h * w[None, :]
        ss, hwmax = tl.reduce((h * h, tl.abs(hw)), 1, _sum_max)
    else:
        ss = tl.sum(h * h, axis=1)
    rs = tl.rsqrt(ss * inv_n + eps)
    first = pid % SLICES == 0  # the one program of a row that writes the per-row values
    if STORE_RSIG:
        tl.store(RSIG + rows, rs, mask=row_ok & first)

    v = h * rs[:, None]
    if HAS_W:
        v = v * w[None, :]
    if HAS_B:
        v += b[None, :]

    amax = 0.0
    if NEED_AMAX:
        if SLICES > 1:
            vf = hf * rs[:, None]
            if HAS_W:
                vf = vf * weight_at(W, full, full_ok, w_off)[None, :]
            if HAS_B:
                vf += tl.load(B + full, mask=full_ok, other=0.0).to(tl.float32)[None, :]
            amax = tl.max(tl.where(fmask, tl.abs(vf), 0.0), axis=1)
        elif JOINT:
            amax = rs * hwmax  # masked columns are 0 in h
        else:
            amax = tl.max(tl.where(mask, tl.abs(v), 0.0), axis=1)
    _store_out(
        v,
        amax,
        Y,
        stride_y,
        SC,
        SCALE_IN,
        rows,
        r64,
        cols,
        mask,
        row_ok & first,
        scale_ub,
        fp8_max,
        OUT_MODE,
        Y_DROP,
        Y_MIN_NORMAL,
        Y_SUB,
    )


@triton.jit
def _looped_scaled(h, W, B, c, ok, rs, w_off: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """h * rs * (w + weight_offset) (+ bias) for the fp32 values h at columns c of one row: the streamed chunks (ok
    masks the row's end) and the register-held head (ok None)."""
    v = h * rs
    if HAS_W:
        v = v * weight_at(W, c, ok, w_off)
    if HAS_B:
        v += vector_at(B, c, ok)
    return v


@triton.jit
def _looped_cast(
    v,
    recip,
    fp8_max,
    Y_DTYPE: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    """The normalized v in the output dtype: FP8 (OUT_MODE 1, 2) times the scale's reciprocal, clamped and rounded;
    otherwise rounded."""
    if OUT_MODE != 0:
        y = fp8_quantize(v * recip, fp8_max, Y_DTYPE, Y_DROP, Y_MIN_NORMAL, Y_SUB)
    else:
        y = pre_round(v, Y_DROP, Y_MIN_NORMAL, Y_SUB).to(Y_DTYPE)
    return y


@triton.jit
def _looped_out_chunk(
    hrow,
    yrow,
    W,
    B,
    c,
    N,
    rs,
    recip,
    w_off: tl.constexpr,
    fp8_max,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    Y_EVICT: tl.constexpr,
):
    """The looped kernel's normalize pass at columns c of one row: h re-read from L2 (the last read: evict_first),
    scaled, cast, stored (with Y_EVICT as the store's eviction policy)."""
    ok = c < N
    h = tl.load(hrow + c, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    v = _looped_scaled(h, W, B, c, ok, rs, w_off, HAS_W, HAS_B)
    y = _looped_cast(v, recip, fp8_max, yrow.dtype.element_ty, OUT_MODE, Y_DROP, Y_MIN_NORMAL, Y_SUB)
    tl.store(yrow + c, y, mask=ok, eviction_policy=Y_EVICT)


@triton.jit
def _fwd_looped_kernel(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    W,
    B,
    RSIG,
    SC,
    STATS,
    stride_stats,
    n_stats,
    SCALE_IN,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    CHUNK: tl.constexpr,
    HEAD: tl.constexpr,
    WORDS: tl.constexpr,
    REVERSE: tl.constexpr,
    ONE_ROW: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
    PDL: tl.constexpr = False,
):
    if PDL:
        dependent_launch()
    # Columns [0, HEAD) stay in registers between the stats pass and the normalize pass; [HEAD, N) stream through in
    # CHUNK pieces and are read twice, the second time (REVERSE: last chunk first) mostly from L2. HEAD=0: everything
    # streams. The chunk loops step a column offset (tl.range(HEAD, N, CHUNK)): the same loops indexed as
    # HEAD + i * CHUNK were unrolled differently by ptxas (a peeled first trip) and ran slower (H200, NOTES.md v17:
    # a two-chunk row program at 16384 x 8192 133.1 us against 128.9; this kernel at 2048 x 65535, 32768-column
    # chunks, 429.0 against 409.3).
    # WORDS > 0 (plain rows of 16-bit x, no head): the stats pass is one load of the whole row (row_words_sumsq).
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(N - HEAD, CHUNK)
    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    STATS_PASS: tl.constexpr = (not HAS_STATS) or HAS_RES
    # Without bias, max|h*rs*w| = rs * max|h*w| (rs > 0): the row max rides along the stats pass.
    AMAX_IN_STATS: tl.constexpr = NEED_AMAX and (not HAS_B) and STATS_PASS and WORDS == 0
    # ONE_ROW (a program a row): a loop of one trip that the compiler removes; the persistent loop around the two-pass
    # row cost 2% at 16384 x 8192 (H200, NOTES.md v17), and 0.3-5.7% on the launches of M <= 2 x SMs rows (H100, v18)
    for row in range(pid, pid + 1 if ONE_ROW else M, 1 if ONE_ROW else nprog):
        r64 = tl.cast(row, tl.int64)
        xrow = X + r64 * stride_x
        if HAS_RES:  # h is re-read from RO, the stored sum
            hrow = RO + r64 * stride_ro
        else:
            hrow = xrow
        acc = tl.zeros([CHUNK], dtype=tl.float32)
        mx = tl.zeros([CHUNK], dtype=tl.float32)
        head_ss = 0.0
        head_mx = 0.0
        if HEAD > 0:
            hc = tl.arange(0, HEAD)
            hh = tl.load(xrow + hc).to(tl.float32)
            if HAS_RES:
                hh += tl.load(R + r64 * stride_r + hc).to(tl.float32)
                hq_head = hh.to(RO.dtype.element_ty)
                tl.store(hrow + hc, hq_head)
                hh = hq_head.to(tl.float32)
            if STATS_PASS:
                head_ss = tl.sum(hh * hh, axis=0)
            if AMAX_IN_STATS:
                if HAS_W:
                    head_mx = tl.max(tl.abs(hh * plus_offset(tl.load(W + hc).to(tl.float32), w_off)), axis=0)
                else:
                    head_mx = tl.max(tl.abs(hh), axis=0)
        if STATS_PASS and WORDS == 0:
            for c0 in tl.range(HEAD, N, CHUNK):
                c = c0 + cols
                ok = c < N
                h = tl.load(xrow + c, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
                if HAS_RES:
                    h += tl.load(R + r64 * stride_r + c, mask=ok, other=0.0, eviction_policy="evict_first").to(
                        tl.float32
                    )
                    hq = h.to(RO.dtype.element_ty)
                    tl.store(hrow + c, hq, mask=ok, eviction_policy="evict_last")
                    h = hq.to(tl.float32)
                acc += h * h
                if AMAX_IN_STATS:
                    if HAS_W:
                        wv = weight_at(W, c, ok, w_off)
                        mx = tl.maximum(mx, tl.abs(h * wv))
                    else:
                        mx = tl.maximum(mx, tl.abs(h))
        if HAS_STATS:
            ss = 0.0
            for k in range(n_stats):
                ss += tl.load(STATS + k * stride_stats + row)
        elif WORDS > 0:
            ss = row_words_sumsq(X, stride_x, row, N, WORDS)
        else:
            ss = tl.sum(acc, axis=0) + head_ss
        rs = tl.rsqrt(ss * inv_n + eps)
        if STORE_RSIG:
            tl.store(RSIG + row, rs)

        amax = 0.0
        if NEED_AMAX:
            if AMAX_IN_STATS:
                amax = tl.maximum(tl.max(mx, axis=0), head_mx) * rs
            else:
                for c0 in tl.range(HEAD, N, CHUNK):
                    c = c0 + cols
                    ok = c < N
                    # evict_last: the normalize pass reads it again
                    h = tl.load(hrow + c, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
                    v = _looped_scaled(h, W, B, c, ok, rs, w_off, HAS_W, HAS_B)
                    mx = tl.maximum(mx, tl.where(ok, tl.abs(v), 0.0))
                amax = tl.max(mx, axis=0)
                if HEAD > 0:
                    vh = _looped_scaled(hh, W, B, hc, None, rs, w_off, HAS_W, HAS_B)
                    amax = tl.maximum(amax, tl.max(tl.abs(vh), axis=0))

        if OUT_MODE == 3:
            tl.store(SC + row, amax)
        else:
            recip = 1.0
            if OUT_MODE == 1:
                scale = tl.minimum(amax, scale_ub) / fp8_max
                tl.store(SC + row, scale)
                recip = fp8_recip(scale)
            elif OUT_MODE == 2:
                recip = fp8_recip(tl.load(SCALE_IN))
            yrow = Y + r64 * stride_y
            # y stored evict_first where the normalize pass runs last chunk first (long rows: what the L2 holds of the
            # row is read back from its end, and y should not push it out); in order (the two-pass launch of rows up
            # to 8192, read back right after the sum) without a hint: 0.5% faster at 16384 x 8192 (H200, NOTES.md v27)
            if REVERSE:
                for j in range(n_chunks):
                    _looped_out_chunk(
                        hrow,
                        yrow,
                        W,
                        B,
                        HEAD + (n_chunks - 1 - j) * CHUNK + cols,
                        N,
                        rs,
                        recip,
                        w_off,
                        fp8_max,
                        HAS_W,
                        HAS_B,
                        OUT_MODE,
                        Y_DROP,
                        Y_MIN_NORMAL,
                        Y_SUB,
                        "evict_first",
                    )
            else:
                for c0 in tl.range(HEAD, N, CHUNK):
                    _looped_out_chunk(
                        hrow,
                        yrow,
                        W,
                        B,
                        c0 + cols,
                        N,
                        rs,
                        recip,
                        w_off,
                        fp8_max,
                        HAS_W,
                        HAS_B,
                        OUT_MODE,
                        Y_DROP,
                        Y_MIN_NORMAL,
                        Y_SUB,
                        "",
                    )
            if HEAD > 0:
                vh = _looped_scaled(hh, W, B, hc, None, rs, w_off, HAS_W, HAS_B)
                tl.store(
                    yrow + hc,
                    _looped_cast(vh, recip, fp8_max, Y.dtype.element_ty, OUT_MODE, Y_DROP, Y_MIN_NORMAL, Y_SUB),
                )


@triton.jit
def _fwd_split_publish(
    xv,
    rows,
    row_ok,
    mask,
    cols,
    w,
    R,
    stride_r,
    RO,
    stride_ro,
    XSS,
    XMX,
    g,
    XW: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    NEED_AMAX: tl.constexpr,
):
    """First half of a row block in the split kernel: h (x, or x + residual rounded and stored as residual_out), its
    chunk's partials stored and published. Returns h in its storage dtype (fewer registers while it waits)."""
    hn = xv
    h = xv.to(tl.float32)
    if HAS_RES:
        hn = add_residual(h, R, stride_r, RO, stride_ro, rows.to(tl.int64)[:, None], cols, mask)
        h = hn.to(tl.float32)
    if not HAS_STATS:
        split_publish(XSS, rows, row_ok, g, tl.sum(h * h, axis=1), XW)
    if NEED_AMAX:  # no bias (launcher rule): max|h*rs*w| = rs * max|h*w|
        if HAS_W:
            h = h * w[None, :]
        split_publish(XMX, rows, row_ok, g, tl.max(tl.where(mask, tl.abs(h), 0.0), axis=1), XW)
    return hn


@triton.jit
def _fwd_split_kernel(
    X,
    stride_x,
    R,
    stride_r,
    RO,
    stride_ro,
    Y,
    stride_y,
    W,
    B,
    RSIG,
    SC,
    STATS,
    stride_stats,
    n_stats,
    SCALE_IN,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    scale_ub,
    fp8_max,
    XSS,
    XMX,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_STATS: tl.constexpr,
    STORE_RSIG: tl.constexpr,
    OUT_MODE: tl.constexpr,
    Y_DROP: tl.constexpr,
    Y_MIN_NORMAL: tl.constexpr,
    Y_SUB: tl.constexpr,
):
    # A row is cut into SPLITS column chunks, one per program (program = lane * SPLITS + g): each program keeps its
    # chunk of BLOCK_M rows in registers, so x is read from DRAM once however long the row (the looped kernel reads
    # it twice, the second time hoping for L2). The row's sum of squares (and, for FP8 row scales, max|h*w|) is the
    # fixed-order sum (max) of the chunks' partials, exchanged through XSS/XMX. Distributed stats need no exchange.
    # Pipeline, per step: the loads of block k+2 are issued, block k+1's partials published, then block k (published
    # a step earlier, so its peers have usually arrived) is finished: the exchange latency hides behind a step.
    g, lane, lanes, cols, col_ok = split_program(N, SPLITS, CHUNK)
    ar = tl.arange(0, BLOCK_M)
    NEED_AMAX: tl.constexpr = OUT_MODE == 1 or OUT_MODE == 3
    w = tl.zeros([CHUNK], dtype=tl.float32)
    if HAS_W:
        w = weight_at(W, cols, col_ok, w_off)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    step = lanes * BLOCK_M
    first_row = lane * BLOCK_M
    rows = first_row + ar
    mask = (rows < M)[:, None] & col_ok[None, :]
    x_a = load_rows(X, stride_x, rows, M, cols, col_ok)
    h_a = _fwd_split_publish(
        x_a,
        rows,
        rows < M,
        mask,
        cols,
        w,
        R,
        stride_r,
        RO,
        stride_ro,
        XSS,
        XMX,
        g,
        XW,
        HAS_W,
        HAS_RES,
        HAS_STATS,
        NEED_AMAX,
    )
    x_b = load_rows(X, stride_x, first_row + step + ar, M, cols, col_ok)
    for start in range(first_row, M, step):
        x_c = load_rows(X, stride_x, start + 2 * step + ar, M, cols, col_ok)
        rows_b = start + step + ar
        mask_b = (rows_b < M)[:, None] & col_ok[None, :]
        h_b = _fwd_split_publish(
            x_b,
            rows_b,
            rows_b < M,
            mask_b,
            cols,
            w,
            R,
            stride_r,
            RO,
            stride_ro,
            XSS,
            XMX,
            g,
            XW,
            HAS_W,
            HAS_RES,
            HAS_STATS,
            NEED_AMAX,
        )
        # finish block k
        rows = start + ar
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        if HAS_STATS:
            ss = gathered_stats(STATS, stride_stats, n_stats, rows, row_ok, BLOCK_M)
        else:
            ss = split_reduce(XSS, rows, row_ok, SPLITS, XW, False)
        rs = tl.rsqrt(ss * inv_n + eps)
        first = row_ok & (g == 0)  # per-row outputs: written by the row's first chunk
        if STORE_RSIG:
            tl.store(RSIG + rows, rs, mask=first)
        amax = 0.0
        if NEED_AMAX:
            amax = split_reduce(XMX, rows, row_ok, SPLITS, XW, True) * rs
        if OUT_MODE == 1:
            # FP8 row scales: rs / scale as one factor per row, and for one row a plain scalar. Scaling the finished
            # row by 1/scale (scale built from both gathered partials, rs and the row max) made Triton convert it
            # through shared memory (PTX: 4096 shared stores per thread; 17 ms instead of ~0.2, NOTES.md v6;
            # programs/triton/ptx_report.py watches the count)
            scale = tl.minimum(amax, scale_ub) / fp8_max
            tl.store(SC + rows, scale, mask=first)
            f = rs * fp8_recip(scale)
            if BLOCK_M == 1:
                v = h_a.to(tl.float32) * tl.sum(f, axis=0)
            else:
                v = h_a.to(tl.float32) * f[:, None]
            if HAS_W:
                v = v * w[None, :]
            _store_fp8(v, Y, stride_y, r64, cols, mask, fp8_max, Y_DROP, Y_MIN_NORMAL, Y_SUB)
        else:
            v = h_a.to(tl.float32) * rs[:, None]
            if HAS_W:
                v = v * w[None, :]
            if HAS_B:
                v += b[None, :]
            _store_out(
                v,
                amax,
                Y,
                stride_y,
                SC,
                SCALE_IN,
                rows,
                r64,
                cols,
                mask,
                first,
                scale_ub,
                fp8_max,
                OUT_MODE,
                Y_DROP,
                Y_MIN_NORMAL,
                Y_SUB,
            )
        h_a = h_b
        x_b = x_c


@triton.jit
def _words_sumsq_publish(xw, rows, M, XSS, g, XW: tl.constexpr, DT: tl.constexpr):
    lo, hi = unpack_words(xw, DT)
    split_publish(XSS, rows, rows < M, g, tl.sum(lo * lo + hi * hi, axis=1), XW)


@triton.jit
def _fwd_split_words_kernel(
    X,
    stride_x,
    Y,
    stride_y,
    W,
    RSIG,
    M,
    N,
    inv_n,
    eps,
    w_off: tl.constexpr,
    XSS,
    SPLITS: tl.constexpr,
    XW: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    STAGES: tl.constexpr,
    HAS_W: tl.constexpr,
    STORE_RSIG: tl.constexpr,
):
    # _fwd_split_kernel for plain rows (x normalized as given, cast output, no bias), with x, y and the weight as
    # 32-bit words (column pair j = word j of the chunk, lo / hi its even / odd column): half the registers of 16-bit
    # elements, so 3 stages hold without the element kernel's spill, and 4 fit: block k+2 published while block k
    # finishes, whose words (published two steps before) are read before the publish, in flight through it.
    # With 3 stages that early read more often finds a peer's word unset and spins (NOTES.md v16).
    DT: tl.constexpr = X.dtype.element_ty
    g, first_row, step, jc, j_ok, ww = split_words_program(N, W, SPLITS, CHUNK, BLOCK_M, HAS_W)
    ar = tl.arange(0, BLOCK_M)
    rows = first_row + ar
    x_a = load_words(X, stride_x, rows, M, jc, j_ok)
    _words_sumsq_publish(x_a, rows, M, XSS, g, XW, DT)
    rows = first_row + step + ar
    x_b = load_words(X, stride_x, rows, M, jc, j_ok)
    x_c = x_b  # the third held block of 4 stages; with 3 never read
    if STAGES == 4:
        _words_sumsq_publish(x_b, rows, M, XSS, g, XW, DT)
        x_c = load_words(X, stride_x, first_row + 2 * step + ar, M, jc, j_ok)
    for start in range(first_row, M, step):
        x_n = load_words(X, stride_x, start + (STAGES - 1) * step + ar, M, jc, j_ok)
        rows_k = start + ar
        row_ok = rows_k < M
        rows = start + (STAGES - 2) * step + ar
        if STAGES == 4:
            word = split_words(XSS, rows_k, row_ok, SPLITS, XW)
            _words_sumsq_publish(x_c, rows, M, XSS, g, XW, DT)
            ss = split_reduce_from(word, XSS, rows_k, row_ok, SPLITS, XW, False)
        else:
            _words_sumsq_publish(x_b, rows, M, XSS, g, XW, DT)
            ss = split_reduce(XSS, rows_k, row_ok, SPLITS, XW, False)
        rs = tl.rsqrt(ss * inv_n + eps)
        if STORE_RSIG:
            tl.store(RSIG + rows_k, rs, mask=row_ok & (g == 0))
        lo, hi = unpack_words(x_a, DT)
        y_lo = lo * rs[:, None]
        y_hi = hi * rs[:, None]
        if HAS_W:
            w_lo, w_hi = weight_words(ww, W, w_off)
            y_lo = y_lo * w_lo[None, :]
            y_hi = y_hi * w_hi[None, :]
        store_words(Y, stride_y, rows_k, M, jc, j_ok, y_lo, y_hi)
        x_a = x_b
        if STAGES == 4:
            x_b = x_c
            x_c = x_n
        else:
            x_b = x_n


@triton.jit
def _row_sumsq_kernel(X, stride_x, OUT, M, N, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, CHUNK)
    r64 = rows.to(tl.int64)[:, None]
    acc = tl.zeros([BLOCK_M, CHUNK], dtype=tl.float32)
    for i in range(tl.cdiv(N, CHUNK)):
        c = i * CHUNK + cols
        x = tl.load(X + r64 * stride_x + c[None, :], mask=row_ok[:, None] & (c < N)[None, :], other=0.0).to(tl.float32)
        acc += x * x
    tl.store(OUT + rows, tl.sum(acc, axis=1), mask=row_ok)


# ---------------------------------------------------------------------------------------------------------------------
# launchers


def _launch_option(name: str) -> bool:
    """Whether this Triton's CUDA launcher takes the launch option `name`."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return name in getattr(CUDAOptions, "__dataclass_fields__", {})


_COOPERATIVE = _launch_option("launch_cooperative_grid")
_PDL = _launch_option("launch_pdl")


def pdl_supported(device) -> bool:
    """Programmatic dependent launch: a CUDA device of compute capability 9+ (griddepcontrol) and a Triton whose
    launcher sets the attribute."""
    return _PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def resolve_pdl(device, enable_pdl: bool | None) -> bool:
    """Whether to launch with PDL: enable_pdl, or (None) wherever it runs; True where it cannot run is refused."""
    supported = pdl_supported(device)
    if enable_pdl and not supported:
        raise TritonRuleError(
            "enable_pdl.device",
            "programmatic dependent launch needs a CUDA device of compute capability >= 9 and a Triton whose launcher has launch_pdl",
            f"device {device}, Triton launch_pdl {_PDL}",
            "enable_pdl=None (on where supported) or False",
        )
    return supported if enable_pdl is None else bool(enable_pdl)


def split_shape(
    m: int, n: int, chunk: int, block_m: int, programs: int, device, exchange: bool = True
) -> tuple[int, int, int]:
    """(splits, exchange row width, lanes) of a split launch: splits programs per row block, lanes row blocks in
    flight, splits * lanes <= programs (all resident together, or the exchange would wait forever)."""
    if chunk <= 0 or chunk & (chunk - 1):
        raise TritonRuleError(
            "config.chunk", "config.chunk of a split launch must be a power of two", chunk, "config=None"
        )
    cap = programs or sm_count(device)
    splits = triton.cdiv(n, chunk)
    if splits > cap:
        raise TritonRuleError(
            "config.chunk",
            f"a row of {n} in chunks of {chunk} needs {splits} programs resident together, more than {cap}",
            chunk,
            f"chunk >= {triton.next_power_of_2(triton.cdiv(n, cap))}",
        )
    if exchange and splits > 1 and device.type != "cuda":
        raise TritonRuleError(
            "config.split_interpreter",
            "the interpreter runs programs one after another, so programs exchanging row partials would wait forever",
            f"{splits} splits on {device.type}",
            f"chunk >= {triton.next_power_of_2(n)} (one program per row)",
        )
    lanes = max(1, min(triton.cdiv(m, block_m), cap // splits))
    return splits, triton.next_power_of_2(splits), lanes


def launch_options(device, splits: int = 1, maxnreg: int = 0, pdl: bool = False) -> dict:
    """Cooperative launch of a split grid where Triton offers it: the driver then refuses a grid that cannot be
    resident at once instead of letting the exchange spin forever. maxnreg: a register cap (compiled code only).
    pdl: programmatic dependent launch (the kernel waits with dependent_launch)."""
    opts = {"launch_cooperative_grid": True} if device.type == "cuda" and splits > 1 and _COOPERATIVE else {}
    if maxnreg and device.type == "cuda":
        opts["maxnreg"] = maxnreg
    if pdl and device.type == "cuda":
        opts["launch_pdl"] = True
    return opts


def _out_mode(dtype, scale_mode, scale) -> int:
    if not fp8mod.is_fp8(dtype):
        return OUT_CAST
    if scale_mode == "row":
        if scale is not None:
            raise TritonRuleError(
                "scale.row_mode",
                "a given scale applies to scale_mode='tensor' only",
                "scale with scale_mode='row'",
                "scale_mode='tensor'",
            )
        return OUT_FP8_ROW
    return OUT_FP8_STATIC


def split_words_fit(x2: torch.Tensor, y2: torch.Tensor, weight, plain: bool) -> bool:
    """Whether the split forward may hold its blocks as words (_fwd_split_words_kernel): the rows of x and y wordable
    (so y in x's 16-bit dtype), the weight absent or 16-bit on a 4-byte boundary, and plain: x normalized as given
    into a cast output, no bias."""
    return plain and wordable_rows(x2) and wordable_rows(y2) and wordable_weight(weight)


def wordable_weight(weight) -> bool:
    """Whether a weight vector can be held as 32-bit words beside wordable rows: absent, or 16-bit on a 4-byte
    boundary (contiguous and of an even length, as the rows' N, by check_vector and wordable_rows)."""
    return weight is None or (weight.element_size() == 2 and weight.data_ptr() % 4 == 0)


def wordable_rows(x2: torch.Tensor) -> bool:
    """Whether the rows of x2 [M, N] can be read as 32-bit words: 16-bit values, N, the row stride and the base even."""
    return x2.element_size() == 2 and x2.shape[1] % 2 == 0 and x2.stride(0) % 2 == 0 and x2.data_ptr() % 4 == 0


def rmsnorm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    epsilon: float = 1e-5,
    weight_offset: float = 0.0,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    scale_mode: str = "row",
    scale: torch.Tensor | None = None,
    scale_ub: float = math.inf,
    return_rsigma: bool = False,
    stats: torch.Tensor | None = None,
    hidden_size: int | None = None,
    config: FwdConfig | None = None,
    enable_pdl: bool | None = None,
) -> RMSNormOutput:
    """Fused RMSNorm forward (see the module docstring for every argument)."""
    check_activation(x)
    eps = check_epsilon(epsilon)
    n = x.shape[-1]
    check_vector(weight, n, "weight", x.device)
    check_vector(bias, n, "bias", x.device)
    check_same_rows(residual, x, "residual")
    if weight is None and weight_offset != 0.0:
        raise TritonRuleError(
            "weight_offset.no_weight",
            "weight_offset shifts a weight, but weight is None",
            weight_offset,
            "pass weight or weight_offset=0.0",
        )
    out_dtype = x.dtype if dtype is None else dtype
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32) and not fp8mod.is_fp8(out_dtype):
        fp8mod.fp8_format(out_dtype)  # raises with the FP8 rule
    if scale_mode not in fp8mod.SCALE_MODES:
        raise TritonRuleError(
            "scale_mode.value", f"scale_mode must be one of {fp8mod.SCALE_MODES}", scale_mode, "scale_mode='row'"
        )
    if not (scale_ub > 0):
        raise TritonRuleError("scale_ub.range", "scale_ub must be > 0 (inf: no bound)", scale_ub, "scale_ub=math.inf")
    if scale is not None:
        if not fp8mod.is_fp8(out_dtype):
            raise TritonRuleError(
                "scale.dtype", "a scale is only used for FP8 output", out_dtype, "dtype=torch.float8_e4m3fn"
            )
        if scale.numel() != 1 or scale.dtype != torch.float32 or scale.device != x.device:
            raise TritonRuleError(
                "scale.shape",
                "scale must be one float32 element on x's device",
                (tuple(scale.shape), scale.dtype, scale.device),
                "torch.tensor([s], dtype=torch.float32, device=x.device)",
            )
    hidden = n if hidden_size is None else int(hidden_size)
    if hidden < n:
        raise TritonRuleError(
            "hidden_size.range",
            f"hidden_size must be >= the local width {n}",
            hidden_size,
            "hidden_size = the global hidden dim",
        )
    pdl = resolve_pdl(x.device, enable_pdl)

    x2 = as_rows(x)
    m = x2.shape[0]
    if stats is not None:
        if (
            stats.dim() != 2
            or stats.shape[1] != m
            or stats.dtype != torch.float32
            or stats.stride(1) != 1
            or stats.device != x.device
        ):
            raise TritonRuleError(
                "stats.shape",
                f"stats must be float32 [world, {m}] with contiguous rows on x's device",
                (tuple(stats.shape), stats.dtype),
                "stack the gathered pre_stats outputs",
            )
        if residual is not None:
            raise TritonRuleError(
                "stats.residual",
                "stats from pre_stats already include any residual",
                "residual and stats",
                "add the residual before pre_stats",
            )

    mode = _out_mode(out_dtype, scale_mode, scale)
    dynamic_tensor_scale = mode == OUT_FP8_STATIC and scale is None
    fmax = fp8mod.fp8_format(out_dtype).max if mode != OUT_CAST else 1.0
    ub = min(scale_ub, 3.0e38)  # scale_ub as the kernels take it: a finite float32

    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    rsig = torch.empty(m, dtype=torch.float32, device=x.device) if return_rsigma else None
    res_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device) if residual is not None else None
    sc = None
    if mode == OUT_FP8_ROW:
        sc = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        if mode == OUT_FP8_STATIC:
            sc = scale if scale is not None else torch.zeros(1, dtype=torch.float32, device=x.device)
        return RMSNormOutput(y, rsig, res_out, sc)

    row_max_with_bias = bias is not None and (mode == OUT_FP8_ROW or dynamic_tensor_scale)
    fused = mode != OUT_CAST or residual is not None or stats is not None
    wordable, of_x = wordable_rows(x2), residual is None and stats is None
    y2 = y.view(-1, n)
    split_words_ok = split_words_fit(x2, y2, weight, not fused and bias is None)
    cfg = config or fwd_config(
        m,
        n,
        x.device,
        fused=fused,
        split_ok=not row_max_with_bias,
        bias=bias is not None,
        words_ok=wordable and of_x,
        split_words_ok=split_words_ok,
        cluster_ok=rmsnorm_cluster.supported(x.device) and of_x and not row_max_with_bias,
        row_max=mode == OUT_FP8_ROW,
        async_ok=rmsnorm_async.supported(x.device) and rmsnorm_async.aligned(x2),
    )
    if cfg.words and cfg.kernel == "split":
        if not split_words_ok or cfg.chunk < 2:
            raise TritonRuleError(
                "config.words",
                "the words split kernel holds x, y and the weight as 32-bit words: 16-bit x with N, the row stride and the base even, output in x's dtype, a 16-bit weight on a 4-byte boundary or none, no bias, residual, stats or FP8 (chunk >= 2)",
                f"x {x2.dtype}, y {out_dtype}, weight {None if weight is None else weight.dtype}, N {n}, row stride {x2.stride(0)}, bias {bias is not None}, residual {residual is not None}, stats {stats is not None}, chunk {cfg.chunk}",
                "words=False",
            )
    elif cfg.words:
        if cfg.kernel != "looped" or cfg.head or not of_x:
            raise TritonRuleError(
                "config.words",
                "the words stats pass is the looped kernel's, for x itself: no head, residual or stats",
                f"kernel {cfg.kernel}, head {cfg.head}, residual {residual is not None}, stats {stats is not None}",
                "words=False",
            )
        if not wordable or n > WIDE_CHUNK_N:
            raise TritonRuleError(
                "config.words",
                f"the words stats pass reads 16-bit rows with an even base and stride as 32-bit words, N <= {WIDE_CHUNK_N} (one row in registers)",
                f"dtype {x2.dtype}, N {n}, row stride {x2.stride(0)}, base {x2.data_ptr() % 4} bytes past a 4-byte boundary",
                "words=False",
            )
    if cfg.stages != 3 and not (cfg.words and cfg.kernel == "split" and cfg.stages == 4):
        raise TritonRuleError(
            "config.stages",
            "the element split kernel holds 3 row blocks; the words split kernel 3 or 4",
            (cfg.kernel, cfg.words, cfg.stages),
            "stages=3",
        )
    if cfg.kernel == "async" and fused:
        raise TritonRuleError(
            "config.async",
            "the async kernel (Gluon) normalizes x itself into x's or another float dtype: no residual, distributed stats or FP8 output",
            f"residual {residual is not None}, stats {stats is not None}, dtype {out_dtype}",
            "config=None",
        )
    if cfg.kernel == "cluster" and not of_x:
        raise TritonRuleError(
            "config.cluster",
            "the cluster kernel (Gluon) normalizes x itself, into a float or FP8 output: no residual or distributed stats",
            f"residual {residual is not None}, stats {stats is not None}",
            "config=None",
        )
    if cfg.kernel in ("split", "cluster") and row_max_with_bias:
        raise TritonRuleError(
            f"config.{cfg.kernel}_bias_rowmax",
            f"the {cfg.kernel} kernel takes the row max from max|x*w| before the bias is added, so it cannot give FP8 row or dynamic tensor scales with a bias",
            cfg.kernel,
            "config=None (the looped kernel serves this case)",
        )
    if cfg.kernel == "cluster":
        sizes = [rmsnorm_cluster.element_size(v) for v in (weight, bias)]
        busy = m * rmsnorm_cluster.cluster_size(n, cfg.chunk) >= 2 * sm_count(x.device)
        # the widest of the call's passes (a dynamic tensor scale: the row max, then the FP8 output)
        staged = max(
            rmsnorm_cluster.shared_bytes(n, cfg.chunk, cfg.num_warps, x2.element_size(), *sizes, busy, om)
            for om in ((OUT_AMAX, OUT_FP8_STATIC) if dynamic_tensor_scale else (mode,))
        )
        rmsnorm_cluster.check(n, cfg.chunk, cfg.num_warps, x.device, staged)
    if cfg.kernel == "async":
        rmsnorm_async.check(n, cfg.block_m, cfg.num_warps, x2, x.device)
    r2 = as_rows(residual, "residual") if residual is not None else None
    ro2 = res_out.view(-1, n) if res_out is not None else None
    dummy = x2
    y_drop, y_min, y_sub = fp8mod.downcast_consts(out_dtype)

    def launch(src, out_mode, y_t, sc_t, scale_in, store_rsig, rsig_t, ro_t, r_t):
        args = (
            src,
            src.stride(0),
            r_t if r_t is not None else dummy,
            r_t.stride(0) if r_t is not None else 0,
            ro_t if ro_t is not None else dummy,
            ro_t.stride(0) if ro_t is not None else 0,
            y_t,
            y_t.stride(0),
            weight if weight is not None else dummy,
            bias if bias is not None else dummy,
            rsig_t if rsig_t is not None else dummy,
            sc_t if sc_t is not None else dummy,
            stats if stats is not None else dummy,
            stats.stride(0) if stats is not None else 0,
            stats.shape[0] if stats is not None else 0,
            scale_in if scale_in is not None else dummy,
            m,
            n,
            1.0 / hidden,
            eps,
            float(weight_offset),
            float(ub),
            float(fmax),
        )
        flags = dict(
            HAS_W=weight is not None,
            HAS_B=bias is not None,
            HAS_RES=r_t is not None,
            HAS_STATS=stats is not None,
            STORE_RSIG=store_rsig,
            OUT_MODE=out_mode,
            Y_DROP=y_drop,
            Y_MIN_NORMAL=y_min,
            Y_SUB=y_sub,
        )
        if cfg.kernel == "rows":
            row_n = block_n = triton.next_power_of_2(n)
            if cfg.chunk and cfg.chunk < row_n:
                if cfg.chunk & (cfg.chunk - 1):
                    raise TritonRuleError(
                        "config.chunk",
                        "config.chunk of a rows launch (columns per program) must be a power of two",
                        cfg.chunk,
                        "chunk=0 (whole rows)",
                    )
                block_n = cfg.chunk
            slices = row_n // block_n
            grid = (triton.cdiv(m, cfg.block_m) * slices,)
            _fwd_rows_kernel[grid](
                *args,
                BLOCK_M=cfg.block_m,
                BLOCK_N=block_n,
                SLICES=slices,
                num_warps=cfg.num_warps,
                PDL=pdl,
                JOINT_MAX=cfg.block_m * block_n <= JOINT_MAX_PER_THREAD * 32 * cfg.num_warps,
                **launch_options(x.device, maxnreg=cfg.maxnreg, pdl=pdl),
                **flags,
            )
        elif cfg.kernel == "looped":
            grid = (min(m, cfg.programs or sm_count(x.device)),)
            if cfg.head and (cfg.head > n or cfg.head & (cfg.head - 1)):
                raise TritonRuleError("config.head", f"config.head must be a power of two <= N={n}", cfg.head, "head=0")
            words = triton.next_power_of_2(triton.cdiv(n, 2)) if cfg.words else 0
            _fwd_looped_kernel[grid](
                *args,
                CHUNK=cfg.chunk,
                HEAD=cfg.head,
                WORDS=words,
                REVERSE=cfg.reverse,
                ONE_ROW=grid[0] == m,
                num_warps=cfg.num_warps,
                PDL=pdl,
                **launch_options(x.device, maxnreg=cfg.maxnreg, pdl=pdl),
                **flags,
            )
        elif cfg.kernel == "split":
            splits, xw, lanes = split_shape(
                m,
                n,
                cfg.chunk,
                cfg.block_m,
                cfg.programs,
                x.device,
                exchange=stats is None or out_mode in (OUT_FP8_ROW, OUT_AMAX),
            )
            # the exchange words (split_publish) start unflagged: zeroed per call, one memset for both
            xch = torch.zeros(
                (2 if out_mode in (OUT_FP8_ROW, OUT_AMAX) else 1, m * xw), dtype=torch.int64, device=x.device
            )
            if cfg.words:
                _fwd_split_words_kernel[(splits * lanes,)](
                    src,
                    src.stride(0),
                    y_t,
                    y_t.stride(0),
                    weight if weight is not None else dummy,
                    rsig_t if rsig_t is not None else dummy,
                    m,
                    n,
                    1.0 / hidden,
                    eps,
                    float(weight_offset),
                    xch[0],
                    SPLITS=splits,
                    XW=xw,
                    CHUNK=cfg.chunk,
                    BLOCK_M=cfg.block_m,
                    STAGES=cfg.stages,
                    HAS_W=weight is not None,
                    STORE_RSIG=store_rsig,
                    num_warps=cfg.num_warps,
                    **launch_options(x.device, splits, cfg.maxnreg),
                )
                return
            _fwd_split_kernel[(splits * lanes,)](
                *args,
                xch[0],
                xch[-1],
                SPLITS=splits,
                XW=xw,
                CHUNK=cfg.chunk,
                BLOCK_M=cfg.block_m,
                num_warps=cfg.num_warps,
                **launch_options(x.device, splits, cfg.maxnreg),
                **flags,
            )
        elif cfg.kernel == "cluster":
            rmsnorm_cluster.launch(
                src,
                y_t,
                weight,
                bias,
                rsig_t if store_rsig else None,
                n,
                1.0 / hidden,
                eps,
                weight_offset,
                cfg.chunk,
                cfg.num_warps,
                cfg.maxnreg,
                busy,
                out_mode,
                sc_t,
                scale_in,
                ub,
                fmax,
                pdl,
            )
        elif cfg.kernel == "async":
            rmsnorm_async.launch(
                src,
                y_t,
                weight,
                bias,
                rsig_t if store_rsig else None,
                n,
                1.0 / hidden,
                eps,
                weight_offset,
                cfg.block_m,
                cfg.num_warps,
                pdl,
            )
        else:
            raise TritonRuleError(
                "config.kernel",
                "config.kernel must be 'rows', 'looped', 'split', 'cluster' or 'async'",
                cfg.kernel,
                "config=None",
            )

    if dynamic_tensor_scale:
        # pass 1: per-row max|v| (also writes residual_out and rsigma); pass 2 quantizes with the one scale
        amax = torch.empty(m, dtype=torch.float32, device=x.device)
        launch(x2, OUT_AMAX, y2, amax, None, return_rsigma, rsig, ro2, r2)
        sc = (torch.clamp(amax.amax(), max=ub) / fmax).reshape(1)
        # pass 2 normalizes residual_out (the rounded sum written by pass 1) when there is a residual
        launch(ro2 if ro2 is not None else x2, OUT_FP8_STATIC, y2, None, sc, False, None, None, None)
    else:
        if mode == OUT_FP8_STATIC:
            sc = scale
        launch(x2, mode, y2, sc if mode == OUT_FP8_ROW else None, scale, return_rsigma, rsig, ro2, r2)
    return RMSNormOutput(y, rsig, res_out, sc)


def row_sum_of_squares(x: torch.Tensor) -> torch.Tensor:
    """float32 [M]: the sum of squares of each row of x [..., N] (fp32 accumulation), the distributed pre-stats."""
    check_activation(x)
    x2 = as_rows(x)
    m, n = x2.shape
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        return out
    chunk = min(triton.next_power_of_2(n), 4096)
    block_m = max(1, min(4096 // chunk, 16))
    _row_sumsq_kernel[(triton.cdiv(m, block_m),)](
        x2, x2.stride(0), out, m, n, BLOCK_M=block_m, CHUNK=chunk, num_warps=8
    )
    return out
