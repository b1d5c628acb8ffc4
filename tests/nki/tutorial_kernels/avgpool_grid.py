"""2-D average pooling with nki.language only, in the shape of the NKI average_pool2d tutorial's first version: the
channels on the partitions, a 3-D tile, five nl.arange index expressions that view it as
(channels, out_rows, out_cols, k, k) windows, nl.sum over the last two axes, and a multiply by 1 / k^2."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def avg_pool(x, k):
    channels, height, width = x.shape
    rows_out, cols_out = height // k, width // k
    y = nl.ndarray((channels, rows_out, cols_out), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    ic = nl.arange(channels)[:, None, None, None, None]
    ir = nl.arange(rows_out)[None, :, None, None, None]
    jc = nl.arange(cols_out)[None, None, :, None, None]
    wr = nl.arange(k)[None, None, None, :, None]
    wc = nl.arange(k)[None, None, None, None, :]
    windows = x_t[ic, ir * k + wr, jc * k + wc]
    total = nl.sum(windows, axis=[3, 4])
    nl.store(y, value=nl.multiply(total, 1.0 / (k * k)))
    return y
