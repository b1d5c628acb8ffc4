"""Tiled matrix multiplication in the neuronxcc.nki form, with the API set of the NKI matmul tutorial's earlier
generation: tiles loaded with nl.load at nl.arange offsets, nisa.nc_matmul returning a PSUM tile accumulated with
`+=` into an nl.zeros PSUM tile over the contraction loop, nl.copy to SBUF in the output dtype, nl.store."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiles(a_t, b):
    k_dim, m_dim = a_t.shape
    _, n_dim = b.shape
    tm, tk, tn = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((m_dim, n_dim), dtype=a_t.dtype, buffer=nl.shared_hbm)
    ik, im = nl.arange(tk)[:, None], nl.arange(tm)[None, :]
    jn = nl.arange(tn)[None, :]
    om = nl.arange(tm)[:, None]
    for m in nl.affine_range(m_dim // tm):
        for n in nl.affine_range(n_dim // tn):
            acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // tk):
                lhs = nl.load(a_t[k * tk + ik, m * tm + im])
                rhs = nl.load(b[k * tk + ik, n * tn + jn])
                acc += nisa.nc_matmul(lhs, rhs)
            nl.store(out[m * tm + om, n * tn + jn], value=nl.copy(acc, dtype=a_t.dtype))
    return out
