"""What the fused all-reduce tests hold a call to: every rank's partials from one seed, the float64 expectation
(tests/triton/ref64.py) and its check under tt_rmsnorm.accuracy's policy, the cross-rank bit check, and the sums the
nccl strategy normalizes."""

from __future__ import annotations

import torch

from tests.triton.ref64 import fp8_expected, norm64
from tt_rmsnorm.accuracy import assert_close

E4M3 = torch.float8_e4m3fn


def partials(world, t, h, seed, dtype=torch.bfloat16, device="cpu", spread=True):
    """Every rank's partial [t, h] (any rank can draw all of them), a weight and a residual, from one seed."""
    g = torch.Generator(device=device).manual_seed(seed)
    # rows of very different magnitude, so the per-row scales differ
    rowscale = torch.logspace(-2, 2, t, device=device)[:, None] if spread and t > 1 else 1.0
    xs = [(torch.randn(t, h, generator=g, device=device) * rowscale).to(dtype) for _ in range(world)]
    w = torch.randn(h, generator=g, device=device).to(dtype)
    res = (torch.randn(t, h, generator=g, device=device) * rowscale).to(dtype)
    return xs, w, res


def expected(xs, w, res, *, epsilon, weight_offset, scale_ub, dtype=E4M3, sums=None):
    """(float64 quantized values and scales of the exact sum of the partials, residual_out bits). residual_out is
    defined bit for bit: the fp32 sum in rank order plus the residual in fp32, rounded once to the residual's dtype.
    sums: the sums as the transport delivered them, in place of the exact sum (the nccl strategy: NCCL's bf16 sums,
    rounded at each of its steps in its own order: nccl_sums)."""
    total = sum(x.double() for x in xs) if sums is None else sums.double()
    v, _, _ = norm64(total, w, epsilon=epsilon, weight_offset=weight_offset, residual=res)
    q, s = fp8_expected(v, dtype, "row", scale_ub)
    ro = ro64 = None
    if res is not None:
        acc = xs[0].float()
        for x in xs[1:]:
            acc = acc + x.float()
        ro = (acc + res.float()).to(res.dtype)
        ro64 = total + res.double()
    return q, s, ro, ro64


def check(out, exp, dtype=E4M3, context="", bf16_sums=False, code_rows=None):
    """bf16_sums: the nccl path, whose sums NCCL rounds to bf16: scales and residual_out are held to the bf16
    policy (residual_out against the float64 sum) instead of fp32 / bit equality with the fp32 rank-order sum.
    code_rows: the rows whose FP8 codes are compared (None: every row; the comparison's host work grows with the
    elements); the scales and residual_out of every row are."""
    q, s, ro, _ = exp
    assert out.y.dtype == dtype and out.scale.dtype == torch.float32
    y = out.y if code_rows is None else out.y[code_rows.to(out.y.device)]
    assert_close(
        y.float(), q if code_rows is None else q[code_rows.to(q.device)], dtype, context=f"{context} fp8 values"
    )
    assert_close(out.scale, s, torch.bfloat16 if bf16_sums else torch.float32, context=f"{context} row scales")
    assert (out.residual_out is None) == (ro is None)
    if ro is not None and bf16_sums:
        assert_close(out.residual_out, exp[3], torch.bfloat16, context=f"{context} residual_out")
    elif ro is not None:
        bad = (out.residual_out != ro) & ~(out.residual_out.isnan() & ro.isnan())  # any NaN is the NaN
        assert not bool(bad.any()), (
            f"{context}: residual_out differs from the fp32 rank-order sum + residual in "
            f"{int(bad.sum())} of {bad.numel()} elements, rows {bad.any(-1).nonzero().flatten()[:8].tolist()}"
        )


def same_bits_on_every_rank(out, dist, world, context):
    """Every rank holds the same FP8 codes, scales and residual_out bits (one all_gather of their bytes)."""
    parts = [out.y.view(torch.uint8).flatten(), out.scale.view(torch.uint8)]
    if out.residual_out is not None:
        parts.append(out.residual_out.contiguous().view(torch.uint8).flatten())
    bits = torch.cat(parts)
    gathered = [torch.empty_like(bits) for _ in range(world)]
    dist.all_gather(gathered, bits)
    assert all(torch.equal(g, gathered[0]) for g in gathered), f"{context}: ranks disagree"


def nccl_sums(x, dist, world, in_place):
    """The sums the nccl strategy normalizes, made by the same NCCL calls on the same partial: reduce-scatter (+
    all-gather), or all_reduce where T is not a multiple of the world size or the call all-reduces in place (in_place:
    a residual and reuse_x). From 3 ranks on NCCL rounds to bf16 at every step of its reduction, so they are not the
    exact sum rounded once (4 x H100: 0.993 of the FP8 values within 1 ULP of that at T = 256)."""
    t = x.shape[0]
    if t % world or in_place:
        total = x.clone()
        dist.all_reduce(total)
        return total
    part = torch.empty(t // world, x.shape[1], dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(part, x)
    total = torch.empty_like(x)
    dist.all_gather_into_tensor(total, part)
    return total


def takes_nccl(comm, strategy, xs, res):
    """Whether a call of these partials with this `strategy` (None: dispatched, reuse_x as the worker passes it)
    takes nccl, whose sums are NCCL's."""
    from programs.triton.allreduce.dispatch import Strategy, choose_strategy

    if strategy is None:
        t, residual = xs[0].shape[0], res is not None
        strategy = choose_strategy(t, comm.hidden, comm.dtype.itemsize, comm.world, residual=residual, reuse_x=True)
    return strategy == Strategy.NCCL
