"""What several Triton test files share: the device the tests run on, random inputs, batches of rows at the edges of
the number formats, and the launch configurations the forward and backward tests run every case under."""

import torch

from programs.triton.backward_config import BwdConfig
from programs.triton.forward_config import FwdConfig

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DIST_WORKER = "tests.triton.dist_worker"  # the distributed RMSNorm's rank worker, run as a module by ranks.run_ranks
# the rows every extreme batch holds, in this order, between ordinary ones
ROWS = ("huge", "one_huge", "tiny", "subnormal", "inf", "nan", "zero")

# "looped" at tiny N: 32-wide chunks, so N=37 and N=100 span several chunks (and a partial last one); "looped_head"
# keeps the first 32 columns in registers and streams the rest in 16-wide chunks
# "split": on CUDA 32-wide chunks, so a row is shared by up to 4 programs that exchange partials; the interpreter runs
# programs one after another, so there a chunk holds the whole row (the exchange runs, with one program per row)
SPLIT_CHUNK = 32 if DEV == "cuda" else 128
FWD_KERNELS = {
    "rows": None,
    "looped": FwdConfig("looped", 4, chunk=32, programs=3),
    "looped_head": FwdConfig("looped", 4, chunk=16, programs=2, head=32),
    # a row a program (ONE_ROW: the persistent loop compiled away), the normalize pass first chunk first: the two-pass
    # launch of tall tensors of rows up to 8192 columns (fwd_config)
    "looped_row_a_program": FwdConfig("looped", 4, chunk=32, programs=1 << 20, reverse=False),
    "split": FwdConfig("split", 4, block_m=2, chunk=SPLIT_CHUNK, programs=8),
    "split_1row": FwdConfig("split", 4, block_m=1, chunk=SPLIT_CHUNK, programs=8),  # per-row factors as scalars
    # the decode cut: 32 columns per program, each taking the sum and row max over the whole row (N=100: 4 programs
    # a row, the last partial)
    "rows_sliced": FwdConfig("rows", 4, block_m=2, chunk=32),
}
# "cols" at tiny N: 32-wide column tiles and 3 row groups, so partial sums span several programs
BWD_KERNELS = {
    "rows": None,
    "cols": BwdConfig("cols", 4, block_m=2, programs=3, block_n=32),
    # 37 partial rows: the partial-sum kernel takes them in two 32-row steps, the second one masked
    "rows_37_programs": BwdConfig("rows", 4, block_m=1, programs=37),
    # one program for all rows: its partial row is stored as the final dweight / dbias, no partial-sum kernel
    "rows_one_program": BwdConfig("rows", 4, block_m=1, programs=1),
    # no register look-ahead, the weight re-read every row (the default for 8192 < N <= 16384; its L2 look-ahead is
    # CUDA-only, test_gpu.py)
    "rows_stream": BwdConfig("rows", 4, block_m=1, programs=5, stream=True),
    # on CUDA 32-wide chunks: 3 programs share a row and exchange its dot; the interpreter runs programs one after
    # another, so there one 128-wide chunk holds the row (the exchange still runs, with one program per row)
    "split": BwdConfig("split", 4, block_m=2, programs=9, block_n=32 if DEV == "cuda" else 128),
}


def rand(*shape, dtype=torch.float32, seed=0):
    """Standard normal values drawn on the CPU (the same on every device), on DEV."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def cuda_rand(*shape, dtype=torch.bfloat16, seed=0):
    """Standard normal values drawn on the GPU, bf16 by default (the GPU tests' shapes are large)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def extreme_batch(dtype, n: int, rows=ROWS, seed: int = 0, m: int = 0) -> torch.Tensor:
    """[max(m, 2 * len(rows) + 1), n]: ordinary rows, each named row after one (rows 1, 3, 5, ...)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(max(m, 2 * len(rows) + 1), n, generator=g, dtype=torch.float64)
    top = torch.finfo(dtype).max
    for i, kind in enumerate(rows):
        r, sign = 2 * i + 1, torch.randn(n, generator=g).sign().double()
        if kind == "huge":  # every square past fp32's range
            x[r] = sign * top * (0.25 + 0.75 * torch.rand(n, generator=g, dtype=torch.float64))
        elif kind == "one_huge":  # one square past it, the rest ordinary
            x[r, n // 2] = top * 0.9
        elif kind == "tiny":  # squares below fp32's smallest normal (2^-140): lost with eps = 0 but for the rescale
            x[r] *= 2.0**-70
        elif kind == "subnormal":  # values in the subnormal range of bf16 and fp32
            x[r] *= 2.0**-132
        elif kind == "inf":
            x[r, 3] = float("inf")
            x[r, n - 2] = -float("inf")
        elif kind == "nan":
            x[r, 5] = float("nan")
        elif kind == "zero":
            x[r] = 0.0
    return x.to(dtype).to(DEV)


def positive_weight(n: int, dtype, seed: int = 1) -> torch.Tensor:
    """[n] weights in [0.5, 1.5): no weight hides a row's extreme values."""
    g = torch.Generator().manual_seed(seed)
    return (0.5 + torch.rand(n, generator=g)).to(dtype).to(DEV)
