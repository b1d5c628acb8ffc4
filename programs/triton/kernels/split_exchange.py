"""The split kernels' exchange of per-row partials between co-resident programs: which columns a program holds
(split_program, split_words_program), publishing its partial (split_publish) and reading every program's partial of
a row once all are there (split_reduce, or split_words then split_reduce_from).

The partials travel as 8-byte words: the fp32 bits in the low half, a flag (1) in the high half, in a buffer zeroed
before the launch (the flag-in-word scheme of NCCL's LL protocol, as the fused all-reduce uses). An aligned 8-byte
store lands whole, so a reader that sees the flag sees the value: no fence and no counter. A release-fenced counter
would make every thread wait for its own look-ahead loads (a gpu-scope release waits for every earlier access of the
thread), draining the load pipeline once a step.
"""

import triton
import triton.language as tl


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


# the flag in the high half of an exchange word (the module docstring)
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
    reduction) sees one copy of each: it can pass while another thread's copy is stale.
    So each thread then re-reads the words its own copy saw unflagged. That read comes after a read that saw the
    flag (the test depends on it), and L2 is coherent, so it sees the word; predicated off, it costs nothing when no
    copy is stale (as fast as the form without it; test_split_exchange_repeats_bit_for_bit)."""
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
