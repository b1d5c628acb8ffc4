"""The Triton kernels of the fused all-reduce + residual + RMSNorm + per-row FP8, one name per stage, and the constants
the launcher and tests share. Where each part lives:
  sync.py      the cross-rank barrier, its flags and epochs, the counter layout
  row_math.py  the row math after the sum (residual, RMSNorm, FP8) that every stage shares, bit for bit
  pulled.py    stage 2 (rows pulled over NVLink between barriers)
  pushed.py    stage 0 (rows pushed as 8-byte flag words)
  lamport.py   stages 3 and 5 (rows pushed with the flags in the data)
"""

from programs.triton.allreduce.lamport import (
    LAMPORT_EMPTY,
    LAMPORT_EMPTY32,
    lamport_one_stage_kernel,
    lamport_two_stage_kernel,
)
from programs.triton.allreduce.pulled import two_stage_kernel
from programs.triton.allreduce.pushed import push_one_stage_kernel
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
    "lamport_one_stage_kernel",
    "lamport_two_stage_kernel",
    "push_one_stage_kernel",
    "two_stage_kernel",
]
