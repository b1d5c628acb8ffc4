"""Two-phase distributed RMSNorm with 2, 4 and 8 gloo processes on CPU (NCCL over GPUs in test_gpu.py)."""

import pytest

from tests.triton.ranks import run_ranks
from tests.triton.support import DIST_WORKER


@pytest.mark.parametrize(
    "world",
    [2, pytest.param(4, marks=pytest.mark.extended), pytest.param(8, marks=pytest.mark.extended)],
    ids=["2_ranks", "4_ranks", "8_ranks_t3k_world"],
)
def test_distributed_gloo(world):
    run_ranks(DIST_WORKER, world, "gloo", timeout=150.0)
