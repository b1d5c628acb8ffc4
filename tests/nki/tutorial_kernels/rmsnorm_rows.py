"""RMSNorm of whole rows per tile, with the API set of the NKI RMSNorm tutorial: nl.mgrid indices, a (1, N) view of a
1-D weight through reshape, nl.square, nl.sum returning a (P,) tile, division by a Python number, nl.rsqrt, a (P, F)
by (P,) product, tile.broadcast_to across the partitions, a masked assignment into a tile, masked load and store."""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rms_norm_rows(x, gamma, eps):
    rows, cols = x.shape
    tile_rows = nl.tile_size.pmax
    y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, i_one, jf = nl.mgrid[0:tile_rows, 0:1, 0:cols]
    g_row = nl.load(gamma.reshape((1, cols))[i_one, jf])
    g_all = g_row.broadcast_to((tile_rows, cols))
    for t in nl.affine_range(math.ceil(rows / tile_rows)):
        r = t * tile_rows + ip
        x_t = nl.load(x[r, jf], mask=(r < rows))
        mean_sq = nl.sum(nl.square(x_t), axis=[1]) / cols
        y_t = nl.multiply(x_t, nl.rsqrt(mean_sq + eps))
        y_t[...] = nl.multiply(y_t, g_all, mask=(r < rows))
        nl.store(y[r, jf], value=y_t, mask=(r < rows))
    return y
