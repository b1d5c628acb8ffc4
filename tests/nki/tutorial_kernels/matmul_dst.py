"""Tiled matrix multiplication in the standalone nki form, with the API set of the current NKI matmul tutorial:
uninitialised nl.ndarray tiles in SBUF and PSUM, nisa.dma_copy between HBM slices and tiles, nisa.nc_matmul
writing (and, over the contraction loop, accumulating into) a PSUM dst, nisa.tensor_copy to SBUF in the output dtype."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_tiles(a_t, b):
    k_dim, m_dim = a_t.shape
    _, n_dim = b.shape
    tm, tk, tn = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((m_dim, n_dim), dtype=a_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // tm):
        for n in nl.affine_range(n_dim // tn):
            acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // tk):
                lhs = nl.ndarray((tk, tm), dtype=a_t.dtype, buffer=nl.sbuf)
                rhs = nl.ndarray((tk, tn), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs, src=a_t[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm])
                nisa.dma_copy(dst=rhs, src=b[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
                nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)
            res = nl.ndarray((tm, tn), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * tm : (m + 1) * tm, n * tn : (n + 1) * tn], src=res)
    return out
