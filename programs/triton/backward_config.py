"""The backward's launch heuristics: which kernel serves a call, and with what shape (BwdConfig).

bwd_config walks BACKWARD_RULES in order; the first rule that takes the call gives its launch. Each rule says in one
line why it wins where it applies; the measurements behind the thresholds are in docs/gpu-performance.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import triton

from programs.triton.forward_config import LEAN_DRAM_GBPS_PER_SM
from programs.triton.launch import dram_gbps_per_sm, sm_count

MAX_ROWS_N = 8192  # x, dy, their prefetched successors and the dweight accumulator all live in registers
STREAM_ROWS_N = 16384  # up to here the rows kernel streams (BwdConfig.stream): no register look-ahead, L2 prefetch
DECODE_M = 32  # the decode kernel's column programs hold all rows of their columns
SPLIT_CHUNK, SPLIT_WARPS = 8192, 16  # longer rows: columns a program of the split kernel, and its warps
LEAN_DRAM_MIN_TILES = 32  # on lean-DRAM devices 8 warps from this many tiles a program (fewer: level or slower)
SPLIT_WORDS_FOUR_STAGES = 32  # from this many chunks a row the words split kernel publishes two blocks ahead
COLS_BLOCK_N = 2048  # the interpreter's two-kernel path: column tile width


@dataclass(frozen=True)
class BwdConfig:
    kernel: str  # "rows" | "cols" | "split" | "decode"
    num_warps: int
    block_m: int = 1
    programs: int = 0  # rows: persistent programs; cols: row groups; split: programs resident together
    block_n: int = 0  # cols: column tile width; split: columns a program; decode: dweight columns a program
    maxnreg: int = 0  # split: registers a thread capped (0: the compiler's choice), e.g. 128 for two programs an SM
    stream: bool = False  # rows: no register look-ahead and the weight re-read each row (N = 16384 at 32 warps)
    l2_ahead: int = 0  # rows: tiles asked of the L2 this many steps past the register look-ahead (CUDA only; 0: none)
    words: bool = False  # split: h, dy, dx and the weight held as 32-bit words of two 16-bit values (words_ok)
    stages: int = 3  # split with words: row blocks in registers; 4 publishes two blocks ahead instead of one


@dataclass(frozen=True)
class BwdCall:
    """What bwd_config is asked (see its arguments)."""

    m: int
    n: int
    device: object
    sms: int
    l2_ok: bool
    words_ok: bool


def stream_config(m: int, device, l2_ahead: int = 0) -> BwdConfig:
    """The streaming rows launch (8192 < N <= STREAM_ROWS_N): one row at a time, 32 warps, one program an SM."""
    return BwdConfig("rows", 32, block_m=1, programs=min(m, sm_count(device)), stream=True, l2_ahead=l2_ahead)


def _decode(c: BwdCall) -> BwdConfig | None:
    if not (c.m <= DECODE_M and c.n <= MAX_ROWS_N):
        return None
    if c.m == 1:  # the row program is all the work: more warps
        return BwdConfig("decode", 16, block_n=512)
    return BwdConfig("decode", 4, block_n=max(32, triton.next_power_of_2(c.n) // 64))  # 64 column programs


def _rows(c: BwdCall) -> BwdConfig | None:
    if c.n > MAX_ROWS_N:
        return None
    block_n = triton.next_power_of_2(c.n)
    block_m = max(1, min(8192 // block_n, 8))
    num_warps = 32 if block_n >= 8192 else 16
    gbps = dram_gbps_per_sm(c.device)
    lean = gbps is not None and gbps < LEAN_DRAM_GBPS_PER_SM
    if block_n >= 4096 and c.m >= LEAN_DRAM_MIN_TILES * block_m * c.sms and lean:
        num_warps = 8  # fewer bytes in flight keep up, and 8 warps reduce a row with fewer barriers
    return BwdConfig("rows", num_warps, block_m=block_m, programs=min(triton.cdiv(c.m, block_m), c.sms))


def _stream(c: BwdCall) -> BwdConfig | None:
    if c.n > STREAM_ROWS_N:
        return None
    return stream_config(c.m, c.device, l2_ahead=1 if c.device.type == "cuda" and c.l2_ok else 0)


def _split(c: BwdCall) -> BwdConfig | None:
    if c.device.type != "cuda":
        return None
    splits = triton.cdiv(c.n, SPLIT_CHUNK)
    words = c.words_ok and splits & (splits - 1) == 0  # words: faster only at a power-of-two number of chunks
    stages = 4 if words and splits >= SPLIT_WORDS_FOUR_STAGES else 3
    return BwdConfig("split", SPLIT_WARPS, block_m=1, programs=c.sms, block_n=SPLIT_CHUNK, words=words, stages=stages)


def _cols(c: BwdCall) -> BwdConfig:
    groups = max(1, min(triton.cdiv(c.m, 8), (2 * c.sms) // triton.cdiv(c.n, COLS_BLOCK_N)))
    return BwdConfig("cols", 4, block_m=8, programs=groups, block_n=COLS_BLOCK_N)


# (rule, where it applies, why it wins there), tried top to bottom
BACKWARD_RULES: tuple[tuple[Callable[[BwdCall], BwdConfig | None], str, str], ...] = (
    (
        _decode,
        "M <= 32, N <= 8192",
        "one launch, no partials: M programs write dx while column programs sum dweight over all rows",
    ),
    (
        _rows,
        "N <= 8192",
        "persistent, one CTA an SM: the next tile's loads in flight while this one is reduced",
    ),
    (
        _stream,
        "N <= 16384",
        "a look-ahead in registers would spill beside the weight: the next row is asked of the L2 instead",
    ),
    (
        _split,
        "CUDA, longer rows",
        "co-resident programs share a row's dot product, so h and dy cross DRAM once",
    ),
    (
        _cols,
        "the interpreter, longer rows",
        "programs run one after another there: c per row first, then column tiles",
    ),
)


def bwd_config(m: int, n: int, device, l2_ok: bool = True, words_ok: bool = False) -> BwdConfig:
    """The launch of the first rule in BACKWARD_RULES that takes the call. l2_ok: the rows of h and dy may be
    bulk-prefetched (16-byte aligned, a 16-byte multiple long; backward.l2_prefetchable). words_ok: the split kernel
    may hold its blocks as 32-bit words (backward.words_fit)."""
    call = BwdCall(m, n, device, sm_count(device), l2_ok, words_ok)
    for rule, _where, _why in BACKWARD_RULES:
        cfg = rule(call)
        if cfg is not None:
            return cfg
    raise AssertionError("the last rule takes every call")
