"""RMSNorm kernels for AWS Trainium, in NKI: fused, and the two stages of the distributed form.

    y = x * rsqrt(mean(x^2) + epsilon) * weight        (mean over the hidden axis, rows independent)

Layout, as in the NKI RMSNorm tutorial: rows map to the 128 SBUF partitions, 128 rows per tile, the last partial
row tile masked; the weight is loaded once, outside the row loop, and broadcast across the partitions. The hidden
(free) axis is processed in chunks of FREE_TILE columns, so any hidden size streams through the same small tiles;
only the broadcast weight stays resident (hidden * itemsize bytes per partition, see LIMITS.md).

Every kernel takes `row_scale`, (rows, 1) float32 powers of two c_r: the statistics are computed on x * c_r, which
is exact, and y = (x * c_r) * rsqrt(mean((x * c_r)^2) + epsilon * c_r^2) equals x * rsqrt(mean(x^2) + epsilon).
With c_r = 1 the arithmetic is the plain one; the host picks c_r < 1 only for rows whose float32 sum of squares could
overflow (|x| near 2^64 / sqrt(hidden) and above), which would otherwise turn into inf and zero outputs. The scale
rides on instructions the kernel issues anyway (the square's activation scale, the normalizing tensor_scalar's first
operator): per 128-row tile it costs one (128, 1) load and one (128, 1) instruction.

Distributed form (hidden axis sharded over devices): `rms_norm_pre_stats_kernel` returns each row's fp32 sum of
squares over the local slice; the host all-gathers them into (rows, devices); `rms_norm_post_kernel` sums the
gathered stats and normalizes the local slice, dividing by the *global* hidden size.

Statistics are accumulated in float32 whatever the input dtype; the output is rounded once, to the input dtype.
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

PMAX = nl.tile_size.pmax
# Columns per chunk. nl.broadcast_to and the Vector/Scalar engine instructions set no free-size limit below a tile's
# SBUF room, so the width trades instruction count against SBUF: 2048 issues a quarter of the instructions of 512
# (chunk_widths.py next to this file) and keeps the streaming tiles at 24 KiB (bfloat16) / 32 KiB (float32) per
# partition.
FREE_TILE = 2048


def _chunking(hidden):
    ftile = min(hidden, FREE_TILE)
    return ftile, math.ceil(hidden / ftile)


def _broadcast_weight(weight, ftile, n_chunks):
    """The (1, hidden) weight as one resident (PMAX, n_chunks * ftile) tile, identical on every partition, filled
    chunk by chunk (a whole-row broadcast would hold a second hidden-wide copy while it is written). A 2-D tile with
    the partition axis first: no block dimension, which the standalone nki namespace no longer has."""
    hidden = weight.shape[1]
    ip = nl.arange(PMAX)[:, None]
    iw = nl.arange(1)[:, None]
    jf = nl.arange(ftile)[None, :]
    w_all = nl.ndarray((PMAX, n_chunks * ftile), dtype=weight.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(n_chunks):
        cols = j * ftile + jf
        w_row = nl.load(weight[iw, cols], mask=(cols < hidden))
        w_all[ip, cols] = w_row.broadcast_to((PMAX, ftile))
    return w_all


def _load_row_scale(row_scale, row0):
    """(PMAX, 1) float32 row scales c_r for rows row0 .. row0+PMAX-1."""
    num_rows = row_scale.shape[0]
    rows = row0 + nl.arange(PMAX)[:, None]
    return nl.load(row_scale[rows, nl.arange(1)[None, :]], mask=(rows < num_rows))


def _row_sum_of_squares(x, scale, row0, ftile, n_chunks):
    """(PMAX, 1) float32 sums of (x[r, :] * c_r)^2 for rows row0 .. row0+PMAX-1; rows past the end stay 0."""
    num_rows, hidden = x.shape
    ip = nl.arange(PMAX)[:, None]
    jf = nl.arange(ftile)[None, :]
    rows = row0 + ip
    acc = nl.zeros((PMAX, 1), dtype=nl.float32, buffer=nl.sbuf)
    # sequential: every chunk accumulates into acc (a loop-carried dependency)
    for j in nl.sequential_range(n_chunks):
        cols = j * ftile + jf
        valid = (rows < num_rows) & (cols < hidden)
        x_tile = nl.load(x[rows, cols], mask=valid)
        sq = nisa.activation(op=nl.square, data=x_tile, scale=scale, dtype=nl.float32, mask=valid)
        part = nisa.tensor_reduce(nl.add, sq, axis=[1], dtype=nl.float32, keepdims=True, mask=valid)
        acc[...] = nl.add(acc, part, dtype=nl.float32, mask=(rows < num_rows))
    return acc


def _reciprocal_rms(sum_sq, scale, rows_valid, hidden_size, epsilon):
    """rsqrt(sum_sq / hidden_size + epsilon * c^2) in float32, one value per partition (sum_sq is of x * c)."""
    eps_scaled = nisa.tensor_scalar(
        scale, op0=nl.multiply, operand0=scale, op1=nl.multiply, operand1=epsilon, dtype=nl.float32, mask=rows_valid
    )
    mean_sq = nisa.tensor_scalar(
        sum_sq,
        op0=nl.multiply,
        operand0=1.0 / hidden_size,
        op1=nl.add,
        operand1=eps_scaled,
        dtype=nl.float32,
        mask=rows_valid,
    )
    return nl.rsqrt(mean_sq, dtype=nl.float32, mask=rows_valid)


def _normalize_rows(x, out, w_all, scale, rstd, row0, ftile, n_chunks):
    """out[rows] = (x[rows] * c) * rstd (* weight), chunk by chunk along the free axis."""
    num_rows, hidden = x.shape
    ip = nl.arange(PMAX)[:, None]
    jf = nl.arange(ftile)[None, :]
    rows = row0 + ip
    for j in nl.affine_range(n_chunks):
        cols = j * ftile + jf
        valid = (rows < num_rows) & (cols < hidden)
        x_tile = nl.load(x[rows, cols], mask=valid)
        if w_all is None:
            y = nisa.tensor_scalar(
                x_tile, op0=nl.multiply, operand0=scale, op1=nl.multiply, operand1=rstd, dtype=out.dtype, mask=valid
            )
        else:
            x_hat = nisa.tensor_scalar(
                x_tile, op0=nl.multiply, operand0=scale, op1=nl.multiply, operand1=rstd, dtype=nl.float32, mask=valid
            )
            y = nisa.tensor_tensor(x_hat, w_all[ip, cols], op=nl.multiply, dtype=out.dtype, mask=valid)
        nl.store(out[rows, cols], value=y, mask=valid)


def _gathered_sum_of_squares(stats, row0):
    """(PMAX, 1) float32 totals of the per-device partial sums in stats[rows, :] (rows, devices)."""
    num_rows, num_devices = stats.shape
    ip = nl.arange(PMAX)[:, None]
    idev = nl.arange(num_devices)[None, :]
    rows = row0 + ip
    partials = nl.load(stats[rows, idev], mask=(rows < num_rows))
    return nisa.tensor_reduce(nl.add, partials, axis=[1], dtype=nl.float32, keepdims=True, mask=(rows < num_rows))


def _fused(x, weight, row_scale, epsilon):
    num_rows, hidden = x.shape
    out = nl.ndarray((num_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    ftile, n_chunks = _chunking(hidden)
    w_all = None if weight is None else _broadcast_weight(weight, ftile, n_chunks)
    ip = nl.arange(PMAX)[:, None]
    for i in nl.affine_range(math.ceil(num_rows / PMAX)):
        scale = _load_row_scale(row_scale, i * PMAX)
        sum_sq = _row_sum_of_squares(x, scale, i * PMAX, ftile, n_chunks)
        rstd = _reciprocal_rms(sum_sq, scale, (i * PMAX + ip < num_rows), hidden, epsilon)
        _normalize_rows(x, out, w_all, scale, rstd, i * PMAX, ftile, n_chunks)
    return out


def _post(x, stats, weight, row_scale, epsilon, hidden_size):
    num_rows, hidden = x.shape
    assert stats.shape[0] == num_rows, "stats must hold one row of per-device partial sums per input row"
    out = nl.ndarray((num_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    ftile, n_chunks = _chunking(hidden)
    w_all = None if weight is None else _broadcast_weight(weight, ftile, n_chunks)
    ip = nl.arange(PMAX)[:, None]
    for i in nl.affine_range(math.ceil(num_rows / PMAX)):
        scale = _load_row_scale(row_scale, i * PMAX)
        sum_sq = _gathered_sum_of_squares(stats, i * PMAX)
        rstd = _reciprocal_rms(sum_sq, scale, (i * PMAX + ip < num_rows), hidden_size, epsilon)
        _normalize_rows(x, out, w_all, scale, rstd, i * PMAX, ftile, n_chunks)
    return out


@nki.jit
def rms_norm_kernel(x, weight, row_scale, epsilon):
    """Fused RMSNorm. x: (rows, hidden); weight: (1, hidden), same dtype as x; row_scale: (rows, 1) float32 powers
    of two (ones for ordinary inputs). Returns (rows, hidden) in x's dtype."""
    assert tuple(weight.shape) == (1, x.shape[1]), "weight must be (1, hidden)"
    return _fused(x, weight, row_scale, epsilon)


@nki.jit
def rms_norm_unweighted_kernel(x, row_scale, epsilon):
    """Fused RMSNorm without a weight: y = x * rsqrt(mean(x^2) + epsilon)."""
    return _fused(x, None, row_scale, epsilon)


@nki.jit
def rms_norm_pre_stats_kernel(x, row_scale):
    """Per-row float32 sum of squares of x * c_r over the local hidden slice. x: (rows, local_hidden); row_scale:
    (rows, 1), the same on every device. Returns (rows, 1)."""
    num_rows, hidden = x.shape
    out = nl.ndarray((num_rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ftile, n_chunks = _chunking(hidden)
    ip = nl.arange(PMAX)[:, None]
    i0 = nl.arange(1)[None, :]
    for i in nl.affine_range(math.ceil(num_rows / PMAX)):
        scale = _load_row_scale(row_scale, i * PMAX)
        sum_sq = _row_sum_of_squares(x, scale, i * PMAX, ftile, n_chunks)
        nl.store(out[i * PMAX + ip, i0], value=sum_sq, mask=(i * PMAX + ip < num_rows))
    return out


@nki.jit
def rms_norm_post_kernel(x, stats, weight, row_scale, epsilon, hidden_size):
    """Normalize the local slice x (rows, local_hidden) with the gathered stats (rows, devices), float32 partial sums
    of squares of x * c_r (the pre-stats of the same row_scale); hidden_size is the global hidden size. weight: this
    device's (1, local_hidden) slice."""
    assert tuple(weight.shape) == (1, x.shape[1]), "weight must be this device's (1, local_hidden) slice"
    return _post(x, stats, weight, row_scale, epsilon, hidden_size)


@nki.jit
def rms_norm_post_unweighted_kernel(x, stats, row_scale, epsilon, hidden_size):
    """As rms_norm_post_kernel, without a weight."""
    return _post(x, stats, None, row_scale, epsilon, hidden_size)
