"""The compiled kernels' facts at the launch shapes the port uses, without a GPU (tools/compiled.py
compiles them for sm_90a): PTX lines, shared stores, registers, spills, atomics, fences, wide loads, L2 prefetches,
async sends and copies.

    python3 -m tools.ptx_report            # the split kernels and the fused all-reduce kernels
    python3 -m tools.ptx_report --check    # exit 1 if a known pathology is back (used by the tests)

Needs Triton's NVIDIA backend (its bundled ptxas); TRITON_INTERPRET must be unset (the kernels are compiled).
"""

from __future__ import annotations

import argparse
import os
import sys

from programs.triton import backward_config, forward_config
from programs.triton.fp8 import OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC
from tools.compiled import (
    MAX_SHARED_STORES,
    Report,
    allreduce,
    bwd_decode,
    bwd_rows,
    bwd_split,
    bwd_split_words,
    fwd_async,
    fwd_cluster,
    fwd_rows,
    fwd_split,
    fwd_split_words,
)


def default_reports() -> list[Report]:
    f, b = forward_config, backward_config
    return [
        fwd_rows(16384, 32, 1, 32),
        fwd_rows(8192, 16, 1, 32, True),
        fwd_split(f.SPLIT_CHUNK, f.SPLIT_WARPS, 1, OUT_CAST, False, f.SPLIT_MAXNREG),
        fwd_split_words(f.SPLIT_CHUNK, f.SPLIT_WARPS, 3, 16, f.SPLIT_MAXNREG),
        fwd_split_words(f.SPLIT_CHUNK, f.SPLIT_WARPS, 4, 32, f.SPLIT_MAXNREG),
        fwd_cluster(65536, 4096, 4),
        fwd_cluster(131072, 8192, 4, maxnreg=f.CLUSTER_MAXNREG),
        fwd_cluster(262144, 16384, 8, maxnreg=f.CLUSTER_MAXNREG),
        fwd_cluster(65536, 16384, 8, maxnreg=f.CLUSTER_ROW_MAX_MAXNREG, out_mode=OUT_FP8_ROW),
        fwd_async(4096, 1, 4096 // 1024),
        fwd_split(8192, 16, 1, OUT_FP8_ROW, True),
        fwd_split(8192, 16, 1, OUT_FP8_STATIC, True),
        bwd_split(b.SPLIT_CHUNK, b.SPLIT_WARPS, 1),
        bwd_split_words(b.SPLIT_CHUNK, b.SPLIT_WARPS, 3),
        bwd_split_words(b.SPLIT_CHUNK, b.SPLIT_WARPS, 4, 32),
        bwd_rows(b.STREAM_ROWS_N, 32, 1, True, 1),
        bwd_rows(1024, 16, 8, False, 0),
        bwd_decode(32, 128, 4),
        allreduce("one_shot_flags", 2, 1, 16, True),
        allreduce("two_shot_pulled", 2, 1, 16, True),
        allreduce("two_shot_pulled", 4, 2, 16, True),
        allreduce("two_shot_lamport", 4, 1, 16, False),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--check", action="store_true", help=f"exit 1 if a kernel holds more than {MAX_SHARED_STORES} shared stores"
    )
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print(
            "TRITON_INTERPRET is set: the kernels would not be compiled; run with TRITON_INTERPRET=0", file=sys.stderr
        )
        return 2
    reports = default_reports()
    print(
        f"{'kernel (sm_90a)':58} {'PTX lines':>9} {'st.shared':>9} {'regs':>5} {'spill B':>7} {'atomics':>7} "
        f"{'fences':>6} {'ld.16':>5} {'L2 pf':>5} {'st.async':>8} {'cp.async':>8}"
    )
    for r in reports:
        print(
            f"{r.name:58} {r.ptx_lines:9d} {r.shared_stores:9d} {r.registers:5d} {r.spill_bytes:7d} {r.atomics:7d} "
            f"{r.fences:6d} {r.wide_loads:5d} {r.l2_prefetches:5d} {r.async_sends:8d} {r.async_copies:8d}"
        )
    bad = [r for r in reports if r.shared_stores > MAX_SHARED_STORES]
    for r in bad:
        print(
            f"FAIL: {r.name} has {r.shared_stores} shared stores (> {MAX_SHARED_STORES}): a layout conversion through "
            "shared memory is back",
            file=sys.stderr,
        )
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
