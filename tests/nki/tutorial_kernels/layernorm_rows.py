"""LayerNorm with nki.language only, with the API set of the NKI LayerNorm tutorial (first version): a 3-D nl.mgrid
whose size-1 axis indexes the parameter rows, nl.mean over axis 1 ((P,) results), nl.square, tile arithmetic
operators (-, *, +) mixing (P, F) and (P,) tiles, nl.rsqrt, parameters broadcast across partitions at full width."""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def layer_norm_rows(x, eps, gamma, beta):
    rows, cols = x.shape
    tile_rows = nl.tile_size.pmax
    y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf, i_param = nl.mgrid[0:tile_rows, 0:cols, 0:1]
    g = nl.load(gamma.reshape((1, cols))[i_param, jf]).broadcast_to((tile_rows, cols))
    b = nl.load(beta.reshape((1, cols))[i_param, jf]).broadcast_to((tile_rows, cols))
    for t in nl.affine_range(math.ceil(rows / tile_rows)):
        r = t * tile_rows + ip
        x_t = nl.load(x[r, jf], mask=(r < rows))
        mu = nl.mean(x_t, axis=1)
        var = nl.mean(nl.square(x_t), axis=1) - mu * mu
        y_t = (x_t - mu) * nl.rsqrt(var + eps) * g + b
        nl.store(y[r, jf], value=y_t, mask=(r < rows))
    return y
