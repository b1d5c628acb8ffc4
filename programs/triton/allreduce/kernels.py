"""The Triton kernels of the fused all-reduce + residual + RMSNorm + per-row FP8, one name per strategy, and the
constants the launcher and tests share. Where each part lives:
  sync.py      the cross-rank barrier, its flags and epochs, the counter layout
  row_math.py  the row math after the sum (residual, RMSNorm, FP8) that every strategy shares, bit for bit
  pulled.py    two-shot pulled (rows pulled over NVLink between barriers)
  pushed.py    one-shot flags (rows pushed as 8-byte flag words)
  lamport.py   one-shot and two-shot Lamport (rows pushed with the flags in the data)
"""

from programs.triton.allreduce.lamport import (
    LAMPORT_EMPTY,
    LAMPORT_EMPTY32,
    one_shot_lamport_kernel,
    two_shot_lamport_kernel,
)
from programs.triton.allreduce.pulled import two_shot_pulled_kernel
from programs.triton.allreduce.pushed import one_shot_flags_kernel
from programs.triton.allreduce.sync import (
    LAMPORT2_CALLS,
    LAMPORT_CALLS,
    MAX_PROGRAMS,
    N_COUNTERS,
    N_SLOTS,
    NO_STALL_NS,
    PHASE_A,
    PHASE_B,
    PHASE_C,
    PUSH_CALLS,
    STALL,
    STALL_MIN_NS,
    STALLED_FLAGS,
    STALLED_LAMPORT,
    STALLED_LAMPORT2,
    STALLED_PULLED,
)

__all__ = [
    "LAMPORT2_CALLS",
    "LAMPORT_CALLS",
    "LAMPORT_EMPTY",
    "LAMPORT_EMPTY32",
    "MAX_PROGRAMS",
    "N_COUNTERS",
    "N_SLOTS",
    "NO_STALL_NS",
    "PHASE_A",
    "PHASE_B",
    "PHASE_C",
    "PUSH_CALLS",
    "STALL",
    "STALL_MIN_NS",
    "STALLED_FLAGS",
    "STALLED_LAMPORT",
    "STALLED_LAMPORT2",
    "STALLED_PULLED",
    "one_shot_flags_kernel",
    "one_shot_lamport_kernel",
    "two_shot_lamport_kernel",
    "two_shot_pulled_kernel",
]
