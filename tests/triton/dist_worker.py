"""One rank of the distributed RMSNorm checks: `python -m tests.triton.dist_worker RANK WORLD PORT BACKEND` from the
repository root (gloo: CPU; nccl: GPUs).

Every rank draws the same full activation, keeps its column shard (a strided view) and checks pre_stats, the gathered
stats, post and the composed call against the float64 RMSNorm of the full rows, ordinary rows and rows at the edges of
the number formats (check_extreme). Exit status 0 means every check held."""

import os
import sys

rank, world, port, backend = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if backend == "gloo":
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from programs.triton.distributed import distributed_rms_norm, gather_stats, post, pre_stats  # noqa: E402
from tests.triton.ranks import serve_rank  # noqa: E402
from tests.triton.ref64 import assert_close_cancelling, norm64  # noqa: E402
from tests.triton.support import extreme_batch, positive_weight  # noqa: E402
from tt_rmsnorm.accuracy import assert_close  # noqa: E402


def check(device, m, n_local, dtype):
    g = torch.Generator().manual_seed(1234)
    hidden = n_local * world
    x = torch.randn(m, hidden, generator=g).to(dtype)
    w = torch.randn(hidden, generator=g).to(dtype)
    b = torch.randn(hidden, generator=g).to(dtype)
    cols = slice(rank * n_local, (rank + 1) * n_local)
    x_local = x.to(device)[:, cols]  # strided rows, as a column shard of a larger tensor is
    w_local, b_local = w[cols].contiguous().to(device), b[cols].contiguous().to(device)

    stats = pre_stats(x_local)
    assert_close(stats, x[:, cols].double().pow(2).sum(-1), torch.float32, context="pre_stats")
    stats_all = gather_stats(stats)
    assert stats_all.shape == (world, m)
    full = torch.stack([x[:, r * n_local : (r + 1) * n_local].double().pow(2).sum(-1) for r in range(world)])
    assert_close(stats_all, full, torch.float32, context="gathered stats")

    v, _, _ = norm64(x, w, epsilon=1e-5)
    y = post(x_local, stats_all, w_local, epsilon=1e-5, hidden_size=hidden)
    assert_close(y, v[:, cols], dtype, context="post")

    want_b, _, _ = norm64(x, w, epsilon=1e-6, weight_offset=1.0, bias=b)
    y2 = distributed_rms_norm(x_local, w_local, epsilon=1e-6, weight_offset=1.0, bias_local=b_local)
    assert_close_cancelling(y2, want_b[:, cols], dtype, context="distributed_rms_norm (bias: cancellation)")

    # every rank used the same rsigma bits: the ranks' outputs reassemble into exactly one full tensor
    parts = [torch.empty_like(y2) for _ in range(world)]
    dist.all_gather(parts, y2.contiguous())
    assert_close_cancelling(torch.cat(parts, dim=-1), want_b, dtype, context="reassembled")


def check_extreme(device, n_local, dtype):
    """Rows past fp32's range, tiny, subnormal, +-inf, NaN and zero rows among ordinary ones (support.extreme_batch):
    the gathered float64 stats and post give every rank's columns of the float64 RMSNorm of the full rows."""
    import warnings

    hidden = n_local * world
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy (the interpreter) on the overflowing squares
        for eps in (1e-5, 0.0):
            rows = ("huge", "one_huge", "tiny", "inf", "nan", "zero") + (("subnormal",) if eps > 0 else ())
            x, w = extreme_batch(dtype, hidden, rows).cpu(), positive_weight(hidden, dtype).cpu()
            cols = slice(rank * n_local, (rank + 1) * n_local)
            stats_all = gather_stats(pre_stats(x.to(device)[:, cols]))
            y = post(x.to(device)[:, cols], stats_all, w[cols].contiguous().to(device), epsilon=eps)
            v, _, _ = norm64(x, w, epsilon=eps)
            assert_close(y, v[:, cols], dtype, context=f"post of extreme rows, eps={eps}")


def work(rank, world, backend):
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        cases = [(4096, 4096, torch.bfloat16), (37, 1000, torch.float32)]
    else:
        cases = [(5, 13, torch.float32), (3, 24, torch.bfloat16)]
    for m, n_local, dtype in cases:
        check(device, m, n_local, dtype)
    for dtype in (torch.bfloat16, torch.float32):
        check_extreme(device, 24, dtype)


if __name__ == "__main__":
    serve_rank(work, timeout_s=90)
