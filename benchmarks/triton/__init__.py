"""The Triton port's GPU benchmarks (run as modules from the repository root):

    python3 -m benchmarks.triton.rmsnorm                               # forward/backward tables, sweeps (--help)
    torchrun --nproc-per-node 2 -m benchmarks.triton.allreduce         # fused all-reduce + RMSNorm + FP8
    python3 -m benchmarks.triton.compare_trees BEFORE AFTER            # two source trees timed against each other

The measurement method they share is benchmarks/triton/timing.py.
"""
