"""Cross-rank synchronisation of the fused all-reduce kernels: the per-program barrier, its flags and epochs, the
counter layout every strategy keeps in device memory, and the peer-pointer pick.

Barrier (`cross_rank_barrier`, at each phase boundary of two-shot pulled): program b of rank i
  1. waits for its own threads' stores to be issued (CTA barrier),
  2. raises flag[slot, i] in every peer's symmetric flag array to its epoch (atomic max, release, system scope),
  3. spins until flag[slot, j] in its own flag array reached the epoch for every peer j (acquire, system scope),
  4. stores the epoch and lets its threads go on (CTA barrier).
The epoch is a per-(rank, slot) counter in ordinary device memory: it counts this program's uses of the slot. Every
rank makes the same sequence of calls with the same grid, so the counters of program b agree on all ranks, and the
start-barrier epochs of all programs agree with each other (each counts the two-shot pulled calls); nothing is
reset, the flags only grow, and CUDA-graph replays stay correct (no host-side state).

Program b of a rank meets only program b of the other ranks: the barriers are per program, never grid-wide. Every
program of a launch spins on its peers, so all of them must be resident at once: the grids are at most one program
per SM, and no other kernel may hold SMs meanwhile.

Counters (one int32 array per rank, N_COUNTERS long): the start-barrier epoch of program b at b, the middle-barrier
epoch at MAX_PROGRAMS + b (the kernels write that literal, 1024), then the per-program call counters of one-shot flags
from PUSH_CALLS, one-shot Lamport from LAMPORT_CALLS and two-shot Lamport from LAMPORT2_CALLS (the launcher passes those
slices), and a stall record at STALL.

Bounded polling (every fused strategy): a launch takes deadline = globaltimer + STALL_NS at its start, and a poll that
still waits past it gives up: it records [the kernel's STALLED code, the program's call number, the program]
(report_stall) in the stall record, host memory the API reads on its next call, and returns what it read; the launch
then ends, each later poll giving up at once. Every thread of a program must leave a poll loop together (the loops hold
CTA barriers), while each thread reads its own timer: the row polls of the pushed strategies fold the decision into
their reduction over the row; the barrier's spin, a scalar atomic that one thread makes, carries that thread's decision
in its operand (GIVE_UP).
"""

from __future__ import annotations

import triton
import triton.language as tl

PHASE_A, PHASE_B, PHASE_C = 1, 2, 4
N_SLOTS = 2  # barrier slots per program: start, middle (two shots)
MAX_PROGRAMS = (
    1024  # flag slots per barrier (the kernels write it as the literal 1024); grids are capped at the SM count
)
PUSH_CALLS = N_SLOTS * MAX_PROGRAMS
LAMPORT_CALLS = PUSH_CALLS + MAX_PROGRAMS
LAMPORT2_CALLS = LAMPORT_CALLS + MAX_PROGRAMS
STALL = LAMPORT2_CALLS + MAX_PROGRAMS  # 4 words: a stall's record where no host buffer is given (launch's `stall`)
N_COUNTERS = STALL + 4
# STALL_NS when polling is unbounded; a bound is at least STALL_MIN_NS (the argument stays a 64-bit integer)
NO_STALL_NS = 2**62
STALL_MIN_NS = 2**31
# The flag value a barrier spin writes into its own slot when it gives up: the scalar atomic of the spin is made by
# one thread and its result broadcast to the program (through shared memory, with CTA barriers in the loop), so the
# thread's own deadline check rides in the atomic's operand and every thread sees the same result, and leaves the
# loop together, one read later. No call number reaches it; the slot keeps it, and the communicator is dead anyway.
GIVE_UP: tl.constexpr = tl.constexpr(2**31 - 1)
# A stall record's first word: the kernel whose poll gave up (0: none)
STALLED_FLAGS: tl.constexpr = tl.constexpr(1)
STALLED_PULLED: tl.constexpr = tl.constexpr(2)
STALLED_LAMPORT: tl.constexpr = tl.constexpr(3)
STALLED_LAMPORT2: tl.constexpr = tl.constexpr(4)


@triton.jit
def pick(r: tl.constexpr, P0, P1, P2, P3, P4, P5, P6, P7):
    """Rank r's pointer of eight (ranks >= world are None and never picked)."""
    p = P0
    if r == 1:
        p = P1
    if r == 2:
        p = P2
    if r == 3:
        p = P3
    if r == 4:
        p = P4
    if r == 5:
        p = P5
    if r == 6:
        p = P6
    if r == 7:
        p = P7
    return p


@triton.jit
def cross_rank_barrier(F0, F1, F2, F3, F4, F5, F6, F7, EPOCH, slot, ep, RANK: tl.constexpr, WORLD: tl.constexpr, watch):
    """Meet program `slot % 1024` of every peer; ep = EPOCH[slot] + 1, loaded by the caller at its start.
    watch = (stall record, deadline, STALLED code, call number): a spin still waiting past the deadline gives up
    (GIVE_UP) and reports the stall with that call number."""
    STALL_REC, deadline, KERNEL, calls = watch
    tl.debug_barrier()
    for r in tl.static_range(WORLD):
        if r != RANK:
            peer = pick(r, F0, F1, F2, F3, F4, F5, F6, F7)
            tl.atomic_max(peer + slot * WORLD + RANK, ep, sem="release", scope="sys")
    mine = pick(RANK, F0, F1, F2, F3, F4, F5, F6, F7)
    for r in tl.static_range(WORLD):
        if r != RANK:
            seen = tl.atomic_max(mine + slot * WORLD + r, 0, sem="acquire", scope="sys")
            give_up = 0
            while seen < ep:
                seen = tl.atomic_max(mine + slot * WORLD + r, give_up, sem="acquire", scope="sys")
                # for the next round: a flag already there costs no timer read, and a spin's round starts with the
                # atomic, not behind the timer
                give_up = tl.where(clock_ns() > deadline, GIVE_UP, 0)
            if seen == GIVE_UP:
                report_stall(STALL_REC, KERNEL, calls)
    tl.store(EPOCH + slot, ep)
    tl.debug_barrier()


@triton.jit
def clock_ns():
    """The GPU's global timer in ns (each thread reads its own)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def waiting(missing, deadline):
    """The state of a poll over a block whose words `missing` have not arrived: 0 all arrived, 1 wait on, 2 give up
    (some have not, and the deadline passed). One value for every thread where the block spans the program."""
    late = (clock_ns() > deadline).to(tl.int32)
    return tl.max(tl.max(tl.where(missing, 1 + late, 0), axis=1), axis=0)


@triton.jit
def report_stall(STALL_REC, kernel: tl.constexpr, calls):
    """Record a poll that gave up: [the kernel's STALLED code, this program's call number of that kernel, the
    program]."""
    tl.store(STALL_REC + 1, calls)
    tl.store(STALL_REC + 2, tl.program_id(0))
    tl.store(STALL_REC, kernel)
