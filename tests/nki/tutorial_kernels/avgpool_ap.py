"""2-D average pooling in the standalone nki form, with the API set of the current NKI average_pool2d tutorial:
nki.typing's tensor annotation, nisa.dma_copy of the whole input into a 3-D SBUF tensor, a strided .ap() view of
(channels, out_rows, out_cols, k, k) windows, nl.sum over the last two axes, nisa.tensor_scalar into a dst, and
nisa.dma_copy back to HBM."""

import nki
import nki.isa as nisa
import nki.language as nl
from nki.typing import tensor


@nki.jit
def avg_pool_ap(x: tensor, k):
    channels, height, width = x.shape
    x_t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_t, src=x)
    windows = x_t.ap(
        [
            [height * width, channels],
            [k * width, height // k],
            [k, width // k],
            [width, k],
            [1, k],
        ]
    )
    total = nl.sum(windows, axis=[3, 4])
    scaled = nl.ndarray(total.shape, dtype=total.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=total, op0=nl.multiply, operand0=1.0 / (k * k))
    y = nl.ndarray(total.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=y, src=scaled)
    return y
