"""Matrix multiplication out = lhs_t.T @ rhs in the stages of the NKI matrix multiplication tutorial
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/matrix_multiplication.html), written
for this project; each stage keeps the NKI constructs and tile limits of the tutorial's step:

- `mm_one_tile`: one nl.matmul(transpose_x=True) of operands that fit a single tile (K, M <= 128, N <= 512);
- `mm_tiled`: tiles sized by nl.tile_size (pmax for K, gemm_stationary_fmax for M, gemm_moving_fmax for N), both
  operand tiles loaded inside the contraction loop and accumulated with += into a float32 PSUM tile;
- `mm_hoisted`: the same product with each operand's K tiles loaded once per output row/column of tiles into a block
  tensor whose partition axis is marked with nl.par_dim;
- `mm_free_blocks`: the M and N (free) dimensions grouped into blocks of tiles, each operand block loaded once;
- `mm_blocked`: M, N and K all blocked; each PSUM tile (nisa.nc_matmul, float32) is added with += into result tiles
  held in SBUF in the output dtype (bfloat16 for bfloat16 operands), stored once per output block.

Arguments are annotated with nki.typing's tensor; `benchmarked` wraps a stage in nki.benchmark and `bf16_operands`
gives the nt.tensor placeholders the tutorial times its stages on. Every dimension must be a multiple of its tile
(and block) size."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


def _tiles():
    """(M, K, N) tile sizes: the stationary operand's free size, the partition (contraction) size, the moving
    operand's free size."""
    return nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax


def _output(lhs_t, rhs):
    return nl.ndarray((lhs_t.shape[1], rhs.shape[1]), dtype=lhs_t.dtype, buffer=nl.shared_hbm)


@nki.jit
def mm_one_tile(lhs_t: nt.tensor, rhs: nt.tensor):
    out = _output(lhs_t, rhs)
    product = nl.matmul(nl.load(lhs_t), nl.load(rhs), transpose_x=True)
    nl.store(out, value=nl.copy(product, dtype=out.dtype))
    return out


@nki.jit
def mm_tiled(lhs_t: nt.tensor, rhs: nt.tensor):
    tm, tk, tn = _tiles()
    k_dim, m_dim = lhs_t.shape
    out = _output(lhs_t, rhs)
    for m in nl.affine_range(m_dim // tm):
        cols = slice(m * tm, (m + 1) * tm)
        for n in nl.affine_range(rhs.shape[1] // tn):
            out_cols = slice(n * tn, (n + 1) * tn)
            acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // tk):
                rows = slice(k * tk, (k + 1) * tk)
                acc += nl.matmul(nl.load(lhs_t[rows, cols]), nl.load(rhs[rows, out_cols]), transpose_x=True)
            nl.store(out[cols, out_cols], value=nl.copy(acc, dtype=out.dtype))
    return out


def _load_k_tiles(src, cols, k_tiles, tk, first=0):
    """k_tiles consecutive (tk, width) tiles of src's rows from tile `first`, in one SBUF block tensor whose axis 1 is
    the partition axis."""
    width = cols.stop - cols.start
    block = nl.ndarray((k_tiles, nl.par_dim(tk), width), dtype=src.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(k_tiles):
        row = (first + k) * tk
        block[k] = nl.load(src[row : row + tk, cols])
    return block


@nki.jit
def mm_hoisted(lhs_t: nt.tensor, rhs: nt.tensor):
    tm, tk, tn = _tiles()
    k_dim, m_dim = lhs_t.shape
    k_tiles = k_dim // tk
    out = _output(lhs_t, rhs)
    for m in nl.affine_range(m_dim // tm):
        cols = slice(m * tm, (m + 1) * tm)
        lhs_col = _load_k_tiles(lhs_t, cols, k_tiles, tk)
        for n in nl.affine_range(rhs.shape[1] // tn):
            out_cols = slice(n * tn, (n + 1) * tn)
            rhs_col = _load_k_tiles(rhs, out_cols, k_tiles, tk)
            acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                acc += nl.matmul(lhs_col[k], rhs_col[k], transpose_x=True)
            nl.store(out[cols, out_cols], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def mm_free_blocks(lhs_t: nt.tensor, rhs: nt.tensor, m_tiles=2, n_tiles=2):
    tm, tk, tn = _tiles()
    k_dim, m_dim = lhs_t.shape
    k_tiles = k_dim // tk
    bm, bn = m_tiles * tm, n_tiles * tn
    out = _output(lhs_t, rhs)
    for mb in nl.affine_range(m_dim // bm):
        lhs_block = _load_k_tiles(lhs_t, slice(mb * bm, (mb + 1) * bm), k_tiles, tk)
        for nb in nl.affine_range(rhs.shape[1] // bn):
            rhs_block = _load_k_tiles(rhs, slice(nb * bn, (nb + 1) * bn), k_tiles, tk)
            for i in nl.affine_range(m_tiles):
                for j in nl.affine_range(n_tiles):
                    acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        acc += nl.matmul(
                            lhs_block[k, :, i * tm : (i + 1) * tm],
                            rhs_block[k, :, j * tn : (j + 1) * tn],
                            transpose_x=True,
                        )
                    row0, col0 = mb * bm + i * tm, nb * bn + j * tn
                    nl.store(out[row0 : row0 + tm, col0 : col0 + tn], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def mm_blocked(lhs_t: nt.tensor, rhs: nt.tensor, m_tiles=16, n_tiles=2, k_tiles=8):
    tm, tk, tn = _tiles()
    k_dim, m_dim = lhs_t.shape
    bm, bn, bk = m_tiles * tm, n_tiles * tn, k_tiles * tk
    out = _output(lhs_t, rhs)
    for mb in nl.affine_range(m_dim // bm):
        for nb in nl.affine_range(rhs.shape[1] // bn):
            # one (tm, bn) result tile per M tile of the block, in the output dtype
            result = nl.zeros((m_tiles, nl.par_dim(tm), bn), dtype=out.dtype, buffer=nl.sbuf)
            for kb in nl.sequential_range(k_dim // bk):
                lhs_block = _load_k_tiles(lhs_t, slice(mb * bm, (mb + 1) * bm), k_tiles, tk, kb * k_tiles)
                rhs_block = _load_k_tiles(rhs, slice(nb * bn, (nb + 1) * bn), k_tiles, tk, kb * k_tiles)
                for i in nl.affine_range(m_tiles):
                    for j in nl.affine_range(n_tiles):
                        partial = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(k_tiles):
                            partial += nisa.nc_matmul(
                                lhs_block[k, :, i * tm : (i + 1) * tm], rhs_block[k, :, j * tn : (j + 1) * tn]
                            )
                        result[i, :, j * tn : (j + 1) * tn] += partial
            for i in nl.affine_range(m_tiles):
                row0 = mb * bm + i * tm
                nl.store(out[row0 : row0 + tm, nb * bn : (nb + 1) * bn], value=result[i])
    return out


def benchmarked(kernel, warmup=5, iters=10):
    """A stage under nki.benchmark, as the tutorial times each of them."""
    return nki.benchmark(warmup=warmup, iters=iters)(kernel)


def bf16_operands(k_dim, m_dim, n_dim):
    """The (lhs_t, rhs) placeholders a benchmark runs on: nt.tensor types with a shape and bfloat16."""
    return nt.tensor[[k_dim, m_dim], nl.bfloat16], nt.tensor[[k_dim, n_dim], nl.bfloat16]
