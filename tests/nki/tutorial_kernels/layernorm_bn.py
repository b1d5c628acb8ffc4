"""LayerNorm statistics on the Vector Engine, with the API set of the NKI LayerNorm tutorial (second version):
nisa.bn_stats over chunks of nl.tile_size.bn_stats_fmax columns (the last chunk masked, indexing a loaded tile with
mgrid expressions), the stats written into an SBUF tensor at per-chunk offsets, nisa.bn_aggr, integer indexing of the
(mean, variance) pair, and nisa.tensor_scalar with NumPy ufuncs as operators."""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def layer_norm_bn(x, eps, gamma, beta):
    rows, cols = x.shape
    tile_rows = nl.tile_size.pmax
    chunk = nl.tile_size.bn_stats_fmax
    n_chunks = math.ceil(cols / chunk)
    y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf, i_param = nl.mgrid[0:tile_rows, 0:cols, 0:1]
    g = nl.load(gamma.reshape((1, cols))[i_param, jf]).broadcast_to((tile_rows, cols))
    b = nl.load(beta.reshape((1, cols))[i_param, jf]).broadcast_to((tile_rows, cols))
    kc, ks = nl.mgrid[0:chunk, 0:6]
    for t in nl.affine_range(math.ceil(rows / tile_rows)):
        r = t * tile_rows + ip
        x_t = nl.load(x[r, jf], mask=(r < rows))
        stats = nl.ndarray((tile_rows, 6 * n_chunks), dtype=np.float32)
        for c in nl.affine_range(n_chunks):
            stats[ip, c * 6 + ks] = nisa.bn_stats(
                x_t[ip, c * chunk + kc], mask=(c * chunk + kc < cols), dtype=np.float32
            )
        mean_var = nisa.bn_aggr(stats[ip, nl.arange(6 * n_chunks)[None, :]])
        scale = nl.rsqrt(mean_var[ip, 1] + eps)
        x_hat = nisa.tensor_scalar(data=x_t, op0=np.subtract, operand0=mean_var[ip, 0], op1=np.multiply, operand1=scale)
        nl.store(y[r, jf], value=x_hat * g + b, mask=(r < rows))
    return y
