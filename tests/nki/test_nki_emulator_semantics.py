"""Semantics the emulator gives NKI's documented APIs where NumPy's own rules would differ: partition-first
broadcasting of per-partition statistics, the tile shape an index tuple selects, masked on-chip views, SPMD programs
sharing one output, PSUM accumulation. Each test fails on the behaviour it replaces."""

import numpy as np
import pytest

from programs.nki.emulator import NkiConstraintError, nki
from programs.nki.emulator import isa as nisa
from programs.nki.emulator import language as nl

P = 128


def _per_partition_product(use_operator):
    @nki.jit
    def kernel(x):
        ip, jf = nl.arange(P)[:, None], nl.arange(P)[None, :]
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x[ip, jf])
        s = nisa.tensor_reduce(nl.add, t, axis=[1], dtype=nl.float32, keepdims=False)  # one value per partition: (P,)
        y = t * s if use_operator else nl.multiply(t, s, dtype=nl.float32)
        nl.store(out[ip, jf], value=y)
        return out

    return kernel


@pytest.mark.parametrize("use_operator", [False, True], ids=["nl.multiply", "operator"])
def test_a_P_statistic_scales_its_own_partition_when_F_equals_P(use_operator):
    """(P,) x (P, F) with F == P: NumPy's trailing-axis rule would multiply column j by row j's sum, silently."""
    x = np.arange(P * P, dtype=np.float32).reshape(P, P) / (P * P)
    per_partition = x * x.sum(axis=1, keepdims=True)
    along_free = x * x.sum(axis=1)[None, :]
    assert not np.allclose(per_partition, along_free)
    np.testing.assert_allclose(_per_partition_product(use_operator)(x), per_partition, rtol=1e-6)


def test_reductions_return_P_tiles_by_default_and_P1_with_keepdims():
    @nki.jit
    def kernel(x):
        ip, jf = nl.mgrid[0:4, 0:8]
        t = nl.load(x[ip, jf])
        assert nl.sum(t, axis=[1]).shape == (4,)
        assert nl.max(t, axis=1, keepdims=True).shape == (4, 1)
        out = nl.ndarray((4, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[ip, nl.arange(1)[None, :]], value=nl.mean(t, axis=[1], keepdims=True))
        return out

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_allclose(kernel(x)[:, 0], x.mean(axis=1))


def test_index_tuples_select_partition_first_tiles():
    """With a 3-D mgrid, x[ip, jf] is (P, F) and w[iw, jf] is (1, F): size-1 grid axes no index uses are dropped."""

    @nki.jit
    def kernel(x, w):
        ip, iw, jf = nl.mgrid[0:4, 0:1, 0:8]
        assert nl.load(x[ip, jf]).shape == (4, 8)
        assert nl.load(w[iw, jf]).shape == (1, 8)
        jf2, ip2 = nl.mgrid[0:8, 0:4]
        assert nl.load(x[ip2, jf2]).shape == (4, 8)  # the partition index's axis comes first
        return None

    kernel(np.ones((4, 8), np.float32), np.ones((1, 8), np.float32))


def test_out_of_bounds_on_chip_view_must_be_masked():
    def make(masked):
        @nki.jit
        def kernel(x):
            ip, jf = nl.mgrid[0:4, 0:8]
            t = nl.load(x[ip, jf])
            out = nl.ndarray((4, 1), dtype=x.dtype, buffer=nl.shared_hbm)
            j = nl.arange(6)[None, :]
            s = nl.sum(t[ip, 4 + j], axis=[1], keepdims=True, mask=(4 + j < 8) if masked else None)
            nl.store(out[ip, nl.arange(1)[None, :]], value=s)
            return out

        return kernel

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(make(True)(x)[:, 0], x[:, 4:].sum(axis=1))
    with pytest.raises(NkiConstraintError, match="out-of-bounds on-chip access: nl.sum reads 8 elements"):
        make(False)(x)


def test_spmd_programs_share_one_output_and_each_covers_its_tile():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        r = nl.program_id(0) * 2 + nl.arange(2)[:, None]
        c = nl.arange(4)[None, :]
        nl.store(out[r, c], value=nl.multiply(nl.load(x[r, c]), float(nl.num_programs())))
        return out

    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(kernel[3](x), 3 * x)
    with pytest.raises(NkiConstraintError, match="16 of 24 elements .* were never stored"):
        kernel[1](x)


def test_psum_accumulates_with_inplace_add():
    @nki.jit
    def kernel(a_t, b):
        ik, im, jn = nl.arange(4)[:, None], nl.arange(3)[None, :], nl.arange(5)[None, :]
        acc = nl.zeros((3, 5), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            acc += nisa.nc_matmul(nl.load(a_t[k * 4 + ik, im]), nl.load(b[k * 4 + ik, jn]))
        out = nl.ndarray((3, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[nl.arange(3)[:, None], jn], value=nl.copy(acc))
        return out

    a_t = np.arange(24, dtype=np.float32).reshape(8, 3)
    b = np.arange(40, dtype=np.float32).reshape(8, 5)
    np.testing.assert_array_equal(kernel(a_t, b), a_t.T @ b)


@pytest.mark.parametrize("stationary_free,moving_free", [(129, 8), (8, 513)])
def test_nc_matmul_free_sizes_are_bounded(stationary_free, moving_free):
    @nki.jit
    def kernel(a_t, b):
        s = nl.load(a_t[nl.arange(4)[:, None], nl.arange(stationary_free)[None, :]])
        m = nl.load(b[nl.arange(4)[:, None], nl.arange(moving_free)[None, :]])
        nisa.nc_matmul(s, m)
        return None

    with pytest.raises(NkiConstraintError, match="gemm_stationary_fmax .* gemm_moving_fmax"):
        kernel(np.ones((4, stationary_free), np.float32), np.ones((4, moving_free), np.float32))


def _matmul_kernel(transpose_x, x_buffer="sbuf"):
    """nl.matmul(x, y, transpose_x=...) on whole-tensor tiles, copied to a float32 HBM output."""

    @nki.jit
    def kernel(x, y):
        xt = nl.load(x)
        if x_buffer == "psum":
            xt = nl.zeros(x.shape, nl.float32, buffer=nl.psum)
        res = nl.matmul(xt, nl.load(y), transpose_x=transpose_x)
        out = nl.ndarray(res.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(res))
        return out

    return kernel


def test_nl_matmul_is_x_at_y_or_x_transposed_at_y():
    """[MATMUL]: x @ y; with transpose_x=True x is already transposed (x.T @ y). Without it the compiler inserts a
    transpose instruction: one compute instruction more for the same product."""
    x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) - 10
    y = np.arange(4 * 5, dtype=np.float32).reshape(4, 5) / 7
    np.testing.assert_allclose(_matmul_kernel(False)(x, y), x @ y, rtol=1e-6)
    plain = nki.last_launch["compute_instructions"]
    np.testing.assert_allclose(_matmul_kernel(True)(np.ascontiguousarray(x.T), y), x @ y, rtol=1e-6)
    assert nki.last_launch["compute_instructions"] == plain - 1
