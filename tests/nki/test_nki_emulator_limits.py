"""The emulator rejects kernels that break an NKI rule, loudly, and accepts the same kernels within the limit.

Each negative kernel below is written as NKI code against the emulated modules; each has a positive twin (or a
parameter at the limit) so the test shows where the boundary is, not just that something raised.
"""

import warnings

import numpy as np
import pytest

from programs.nki.driver import kernels
from programs.nki.emulator import NkiConstraintError, NkiSpillWarning, nki
from programs.nki.emulator import isa as nisa
from programs.nki.emulator import language as nl

P = 128


def _copy_kernel(rows_per_tile, cols, mask_rows):
    """out = x, rows_per_tile rows per tile, optionally masking the last partial tile."""

    @nki.jit
    def kernel(x):
        num_rows, hidden = x.shape
        out = nl.ndarray((num_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(rows_per_tile)[:, None]
        jf = nl.arange(cols)[None, :]
        for i in nl.affine_range(-(-num_rows // rows_per_tile)):
            rows = i * rows_per_tile + ip
            m = (rows < num_rows) if mask_rows else None
            t = nl.load(x[rows, jf], mask=m)
            nl.store(out[rows, jf], value=t, mask=m)
        return out

    return kernel


def test_partition_dimension_over_128_is_rejected():
    x = np.ones((256, 64), np.float32)
    np.testing.assert_array_equal(_copy_kernel(128, 64, True)(x), x)
    with pytest.raises(
        NkiConstraintError, match="Size of partition dimension 256 .* exceeds architecture limitation of 128"
    ):
        _copy_kernel(256, 64, True)(x)


def test_unmasked_partial_tile_is_an_out_of_bounds_access():
    x = np.arange(129 * 8, dtype=np.float32).reshape(129, 8)
    np.testing.assert_array_equal(_copy_kernel(128, 8, True)(x), x)
    with pytest.raises(NkiConstraintError, match="out-of-bounds HBM access"):
        _copy_kernel(128, 8, False)(x)


def test_forgotten_partial_tile_leaves_output_unwritten():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.arange(P)[:, None], nl.arange(8)[None, :]
        for i in nl.affine_range(x.shape[0] // P):  # floor: drops the last, partial tile
            nl.store(out[i * P + ip, jf], value=nl.load(x[i * P + ip, jf]))
        return out

    np.testing.assert_array_equal(kernel(np.ones((256, 8), np.float32)), 1.0)
    with pytest.raises(NkiConstraintError, match="8 of 1032 elements .* were never stored"):
        kernel(np.ones((129, 8), np.float32))


def test_reducing_over_masked_out_columns_cannot_be_stored():
    """A masked load leaves the skipped elements undefined; a reduction that forgets the mask consumes them."""

    def make(mask_the_reduction):
        @nki.jit
        def kernel(x):
            num_rows, hidden = x.shape
            out = nl.ndarray((num_rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            ip, jf, i0 = nl.arange(P)[:, None], nl.arange(512)[None, :], nl.arange(1)[None, :]
            valid = (ip < num_rows) & (jf < hidden)
            t = nl.load(x[ip, jf], mask=valid)
            s = nisa.tensor_reduce(
                nl.add,
                t,
                axis=[1],
                dtype=nl.float32,
                keepdims=True,
                mask=valid if mask_the_reduction else (ip < num_rows),
            )
            nl.store(out[ip, i0], value=s, mask=(ip < num_rows))
            return out

        return kernel

    x = np.ones((4, 300), np.float32)
    np.testing.assert_array_equal(make(True)(x), 300.0)
    with pytest.raises(NkiConstraintError, match="stores elements that were never computed"):
        make(False)(x)


@pytest.mark.parametrize("free,ok", [(49152, True), (49153, False)], ids=["192KiB", "192KiB+4B"])
def test_single_sbuf_tile_larger_than_a_partition(free, ok):
    @nki.jit
    def kernel():
        t = nl.zeros((P, free), dtype=nl.float32, buffer=nl.sbuf)
        del t
        return None

    if ok:
        kernel()
    else:
        with pytest.raises(NkiConstraintError, match="SBUF tile larger than one partition: .* 196612 bytes"):
            kernel()


def test_live_sbuf_footprint_over_capacity_is_a_spill_not_an_error():
    """Three 64 KiB-per-partition tiles fill SBUF's 192 KiB per partition; a fourth small one makes the compiler spill
    (programming model, memory hierarchy): a warning with the overflow, and the kernel still runs."""

    @nki.jit
    def kernel(extra):
        held = [nl.zeros((P, 16384), dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]
        if extra:
            held.append(nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf))
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel(False)
    assert nki.last_launch["sbuf_peak_bytes_per_partition"] == 3 * 65536 == 196608
    assert nki.last_launch["sbuf_spill_bytes_per_partition"] == 0
    with pytest.warns(NkiSpillWarning, match="SBUF live data exceeds the 196608 bytes per partition by 4"):
        kernel(True)
    assert nki.last_launch["sbuf_spill_bytes_per_partition"] == 4


@pytest.mark.parametrize("free,ok", [(512, True), (513, False)])
def test_psum_tile_free_size(free, ok):
    @nki.jit
    def kernel():
        t = nl.zeros((P, free), dtype=nl.float32, buffer=nl.psum)
        del t
        return None

    if ok:
        kernel()
    else:
        with pytest.raises(NkiConstraintError, match="PSUM tile free size exceeds .*psum_fmax.*513 elements"):
            kernel()


@pytest.mark.parametrize("banks,ok", [(8, True), (9, False)])
def test_psum_capacity_is_16KiB_per_partition_then_it_spills(banks, ok):
    @nki.jit
    def kernel():
        held = [nl.zeros((P, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(banks)]
        assert len(held) == banks  # all alive at once
        return None

    if ok:
        kernel()
        assert nki.last_launch["psum_peak_bytes_per_partition"] == 16384
    else:
        with pytest.warns(NkiSpillWarning, match="PSUM live data exceeds the 16384 bytes per partition by 2048"):
            kernel()


@pytest.mark.parametrize("free", [512, 1024, 8192])
def test_partition_broadcast_has_no_512_column_limit(free):
    """nl.broadcast_to documents no free-size limit and returns an SBUF tile (AWS's layernorm broadcasts the whole
    hidden row); a gemm_moving_fmax bound would reject that kernel at 1024 columns."""

    @nki.jit
    def kernel(w):
        out = nl.ndarray((P, free), dtype=w.dtype, buffer=nl.shared_hbm)
        ip, iw, jf = nl.arange(P)[:, None], nl.arange(1)[:, None], nl.arange(free)[None, :]
        row = nl.load(w[iw, jf])
        nl.store(out[ip, jf], value=row.broadcast_to((P, free)))
        return out

    w = np.arange(free, dtype=np.float32).reshape(1, free)
    np.testing.assert_array_equal(kernel(w), np.broadcast_to(w, (P, free)))
    assert nki.last_launch["psum_peak_bytes_per_partition"] == 0


def test_broadcast_to_needs_size_one_axes_where_the_shape_grows():
    @nki.jit
    def kernel(w):
        row = nl.load(w[nl.arange(2)[:, None], nl.arange(8)[None, :]])
        row.broadcast_to((P, 8))
        return None

    with pytest.raises(NkiConstraintError, match=r"broadcast_to needs .* \(2, 8\) -> \(128, 8\)"):
        kernel(np.ones((2, 8), np.float32))


def test_reduction_over_the_partition_axis_is_rejected():
    @nki.jit
    def kernel(x):
        t = nl.load(x[nl.arange(4)[:, None], nl.arange(8)[None, :]])
        nisa.tensor_reduce(nl.add, t, axis=[0], dtype=nl.float32)
        return None

    with pytest.raises(NkiConstraintError, match="never the partition axis 0"):
        kernel(np.ones((4, 8), np.float32))


def test_reduction_axes_of_a_stored_tile_are_its_last_free_axes_those_of_an_index_view_any():
    """[SUM]/[TR]: a stored tile reduces its last contiguous free axes. A view selected by index expressions is an
    access pattern the compiler orders: AWS's average_pool2d reduces axes [2, 4] of its 5-d view, so any of its free
    axes reduce, and the partition axis never does."""
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)

    def make(axis, view):
        @nki.jit
        def kernel(a):
            t = nl.load(a)
            if view:
                i0, i1, i2 = nl.mgrid[0:2, 0:3, 0:4]
                t = t[i0, i1, i2]
            out = nl.ndarray((2, 3 if axis == [2] else 4), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.sum(t, axis=axis))
            return out

        return kernel

    np.testing.assert_array_equal(make([2], view=False)(x), x.sum(axis=2))
    np.testing.assert_array_equal(make([1], view=True)(x), x.sum(axis=1))
    with pytest.raises(NkiConstraintError, match=r"last contiguous free axes .* axis \[1\] of a stored 3-d tile"):
        make([1], view=False)(x)
    with pytest.raises(NkiConstraintError, match="never the partition axis 0"):
        make([0, 1], view=True)(x)


def test_a_reduction_reads_at_most_four_free_axes():
    """[AP]: an instruction's access pattern covers up to four free dimensions; a 5-free-axis view cannot be read by
    one reduction, the 4-free-axis one can."""

    def make(free):
        @nki.jit
        def kernel(a):
            grid = nl.mgrid[tuple(slice(0, 2) for _ in range(free + 1))]
            t = nl.load(a)
            flat = sum(g * 2 ** (free - 1 - i) for i, g in enumerate(grid[1:]))  # each grid axis one bit of the column
            out = nl.ndarray((2, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.sum(t[grid[0], flat], axis=list(range(1, free + 1)), keepdims=False))
            return out

        return kernel

    for free, fits in ((4, True), (5, False)):
        x = np.arange(2 * 2**free, dtype=np.float32).reshape(2, 2**free)
        if fits:
            np.testing.assert_array_equal(make(free)(x)[:, 0], x.sum(axis=1))
        else:
            with pytest.raises(NkiConstraintError, match="at most four free axes .* 5 free axes"):
                make(free)(x)


def test_float64_is_not_an_nki_dtype():
    x = np.ones((4, 64))
    with pytest.raises(NkiConstraintError, match="unsupported NKI data type: kernel argument 0 has dtype float64"):
        nki.simulate_kernel(kernels().rms_norm_pre_stats_kernel, x, np.ones((4, 1), np.float32))
    ones = np.ones((4, 1), np.float32)
    assert nki.simulate_kernel(kernels().rms_norm_pre_stats_kernel, x.astype(np.float32), ones)[0, 0] == 64.0


def test_mixed_dtypes_promote_to_the_higher_precision():
    def make(dtype):
        @nki.jit
        def kernel(a, b):
            ij = (nl.arange(4)[:, None], nl.arange(8)[None, :])
            out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out[ij], value=nl.add(nl.load(a[ij]), nl.load(b[ij]), dtype=dtype))
            return out

        return kernel

    a, b = np.ones((4, 8), np.float32), np.ones((4, 8), np.float32).astype(nl.bfloat16)
    np.testing.assert_array_equal(make(nl.float32)(a, b), 2.0)
    np.testing.assert_array_equal(make(None)(a, b), 2.0)  # float32 + bfloat16 -> float32 (NKI type promotion)
    with pytest.raises(NkiConstraintError, match="stored tile dtype differs"):
        make(nl.bfloat16)(a, b)


def test_store_dtype_must_match_the_hbm_tensor():
    @nki.jit
    def kernel(x):
        ij = (nl.arange(4)[:, None], nl.arange(8)[None, :])
        out = nl.ndarray((4, 8), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out[ij], value=nl.square(nl.load(x[ij]), dtype=nl.float32))
        return out

    with pytest.raises(NkiConstraintError, match="stored tile dtype differs"):
        kernel(np.ones((4, 8), np.float32))


def test_tile_assignment_casts_to_the_destination_dtype():
    """Assigning a float32 tile into a bfloat16 SBUF tensor rounds it to nearest even, as AWS's fully optimized matmul
    relies on (`result_tiles[...] += res_tile[...]`); nl.store keeps the stricter rule above."""

    @nki.jit
    def kernel(x):
        ij = (nl.arange(2)[:, None], nl.arange(3)[None, :])
        t = nl.ndarray((2, 3), dtype=nl.bfloat16, buffer=nl.sbuf)
        t[ij] = nl.load(x[ij])
        t[ij] += nl.load(x[ij])
        out = nl.ndarray((2, 3), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out[ij], value=t[ij])
        return out

    x = np.array([[1.00390625, 1.01171875, 3.0], [-1.00390625, 256.5, 0.5]], np.float32)  # halfway cases in bfloat16
    once = x.astype(nl.bfloat16)
    np.testing.assert_array_equal(kernel(x), (once.astype(np.float32) + x).astype(nl.bfloat16))
    assert kernel(x).dtype == nl.bfloat16 and once[0, 0] == 1.0 and once[0, 1] == 1.015625


def test_tensor_scalar_operand_is_one_value_per_partition():
    @nki.jit
    def kernel(x):
        t = nl.load(x[nl.arange(4)[:, None], nl.arange(8)[None, :]])
        nisa.tensor_scalar(t, op0=nl.multiply, operand0=t, dtype=nl.float32)
        return None

    with pytest.raises(NkiConstraintError, match=r"one value per partition: .* shape \(4, 8\)"):
        kernel(np.ones((4, 8), np.float32))


def test_partition_broadcast_is_implicit_in_language_ops_but_not_in_tensor_tensor():
    """nl.add's documentation broadcasts a [1, 512] tile to [128, 512]; nisa.tensor_tensor needs the same partition
    size on both inputs."""

    def make(isa_op):
        @nki.jit
        def kernel(x, w):
            ij = (nl.arange(4)[:, None], nl.arange(8)[None, :])
            out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x[ij])
            r = nl.load(w[nl.arange(1)[:, None], nl.arange(8)[None, :]])
            y = nisa.tensor_tensor(t, r, op=nl.multiply) if isa_op else nl.multiply(t, r)
            nl.store(out[ij], value=y)
            return out

        return kernel

    x, w = np.full((4, 8), 2.0, np.float32), np.arange(8, dtype=np.float32).reshape(1, 8)
    np.testing.assert_array_equal(make(False)(x, w), 2.0 * np.broadcast_to(w, (4, 8)))
    with pytest.raises(NkiConstraintError, match="same partition size"):
        make(True)(x, w)


def test_mixing_slices_and_arange_indexing_is_rejected():
    @nki.jit
    def kernel(x):
        nl.load(x[nl.arange(4)[:, None], 0:8])
        return None

    with pytest.raises(NkiConstraintError, match="basic .* and advanced .* indexing mixed"):
        kernel(np.ones((4, 8), np.float32))


def test_apis_outside_the_emulated_subset_fail_at_once():
    with pytest.raises(AttributeError, match="nki.language.gelu is not emulated"):
        nl.gelu  # noqa: B018
    with pytest.raises(AttributeError, match="nki.isa.iota is not emulated"):
        nisa.iota  # noqa: B018


def test_real_fused_kernel_over_the_sbuf_budget_is_rejected():
    """The project's own kernel, launched directly (bypassing the driver's check): its resident broadcast weight for
    65536 fp32 columns needs 256 KiB per partition, more than a partition holds (a spill cannot place it either)."""
    k = kernels()
    x = np.ones((1, 32768), np.float32)
    w = np.ones((1, 32768), np.float32)
    one = np.ones((1, 1), np.float32)
    assert nki.simulate_kernel(k.rms_norm_kernel, x, w, one, 1e-5).shape == (1, 32768)
    assert 131072 < nki.last_launch["sbuf_peak_bytes_per_partition"] <= 196608
    x, w = np.ones((1, 65536), np.float32), np.ones((1, 65536), np.float32)
    with pytest.raises(NkiConstraintError, match="SBUF tile larger than one partition: .* 262144 bytes"):
        nki.simulate_kernel(k.rms_norm_kernel, x, w, one, 1e-5)


def test_declared_on_chip_tensors_are_two_dimensional():
    """[TUT]: SBUF tensors have a partition and a free axis; a 1-D vector is loaded as (1, N). Results of reductions
    without keepdims are (P,) tiles and are accepted (test_nki_emulator_semantics)."""

    def make(two_d):
        @nki.jit
        def kernel(g):
            row = g.reshape((1, g.shape[0])) if two_d else g
            nl.load(row)
            return None

        return kernel

    make(True)(np.ones(8, np.float32))
    with pytest.raises(NkiConstraintError, match=r"at least two-dimensional .* \(8,\)"):
        make(False)(np.ones(8, np.float32))


def _nl_matmul(x_shape, y_shape, transpose_x, x_buffer=nl.sbuf):
    @nki.jit
    def kernel(x, y):
        xt = nl.load(x) if x_buffer == nl.sbuf else nl.zeros(x_shape, nl.float32, buffer=nl.psum)
        nl.matmul(xt, nl.load(y), transpose_x=transpose_x)
        return None

    return lambda: kernel(np.ones(x_shape, np.float32), np.ones(y_shape, np.float32))


@pytest.mark.parametrize(
    "x_shape,y_shape,transpose_x,match",
    [
        ((128, 128), (128, 512), True, None),  # every operand at its limit
        ((128, 128), (128, 512), False, None),
        ((128, 129), (128, 8), True, r"x must be a tile on SBUF \(partition dimension <= 128, free dimension <= 128\)"),
        ((8, 129), (128, 8), False, r"x must be a tile on SBUF \(partition dimension <= 128, free dimension <= 128\)"),
        ((128, 8), (128, 513), True, r"y must be a tile on SBUF \(partition dimension <= 128, free dimension <= 512\)"),
        ((8, 16), (8, 32), False, "x's free dimension must match y's partition dimension"),
        ((8, 16), (16, 32), True, "transpose_x=True x is treated as already transposed"),
    ],
)
def test_nl_matmul_tile_sizes(x_shape, y_shape, transpose_x, match):
    """[MATMUL]: x is a tile on SBUF (partition <= 128, free <= 128), y one with free <= 512, x's free dimension (its
    partition dimension with transpose_x=True) matching y's partition dimension."""
    run = _nl_matmul(x_shape, y_shape, transpose_x)
    if match is None:
        run()
        return
    with pytest.raises(NkiConstraintError, match=match):
        run()


def test_matmul_operands_are_read_from_sbuf():
    """[MATMUL], [MM]: the Tensor Engine reads SBUF; a PSUM operand is refused by both nl.matmul and nc_matmul."""
    with pytest.raises(NkiConstraintError, match=r"x must be a tile on SBUF .* is a PSUM tile"):
        _nl_matmul((8, 16), (8, 32), True, x_buffer=nl.psum)()

    @nki.jit
    def kernel(x):
        nisa.nc_matmul(nl.zeros((8, 16), nl.float32, buffer=nl.psum), nl.load(x))
        return None

    with pytest.raises(NkiConstraintError, match="must read inputs from SBUF: nisa.nc_matmul stationary"):
        kernel(np.ones((8, 32), np.float32))
