"""Row softmax, with the API set of the NKI softmax tutorial: nl.max with keepdims and a mask, nl.subtract,
nl.exp, nl.sum returning a (P,) tile, and a (P, F) / (P,) division (one divisor per partition)."""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def softmax_rows(x):
    rows, cols = x.shape
    y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:cols]
    for t in nl.affine_range(math.ceil(rows / 128)):
        r = t * 128 + ip
        x_t = nl.load(x[r, jf], mask=(r < rows))
        top = nl.max(x_t, axis=[1], keepdims=True, mask=(r < rows))
        e = nl.exp(nl.subtract(x_t, top, mask=(r < rows)))
        total = nl.sum(e, axis=[1])
        nl.store(y[r, jf], value=e / total, mask=(r < rows))
    return y
