"""The NKI RMSNorm kernels against the float64 reference: fused, pre-stats, post, and the distributed composition.

Without `neuronxcc` (CI) they run on the NumPy emulator and every result is labelled "nki-emulated"; with it, on the
Neuron simulator or a Trainium device. Inputs are rounded to the kernel dtype first; the reference evaluates the
same rounded inputs in float64.
"""

import importlib.util
import warnings
from functools import lru_cache

import numpy as np
import pytest
import torch

from programs.nki.driver import (
    DEVICE,
    DTYPES,
    EMULATED,
    SBUF_BYTES_PER_PARTITION,
    SIMULATOR,
    kernels,
    launch,
    max_local_hidden,
    row_scale,
    run_post,
    run_pre_stats,
    run_rms_norm,
    toolchain,
)
from programs.nki.emulator import NkiSpillWarning, nki
from tt_rmsnorm.accuracy import assert_close
from tt_rmsnorm.errors import RuleError

EPSILON = 1e-5
ROWS = [1, 127, 128, 129, 1000]
HIDDEN = [64, 4096, 8192, 16384]


@lru_cache(maxsize=4)
def _inputs(rows, hidden, dtype, seed=0):
    rng = np.random.default_rng(seed + 7919 * rows + hidden)
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    x *= 2.0
    x += 0.25
    w = 1.0 + 0.5 * rng.standard_normal(hidden, dtype=np.float32)
    x, w = x.astype(DTYPES[dtype]), w.astype(DTYPES[dtype])
    x.flags.writeable = w.flags.writeable = False  # shared between cases
    return x, w


def _f64(a):
    return np.asarray(a).astype(np.float64)


def reference(x, w, epsilon, hidden_size=None):
    x64 = _f64(x)
    n = x64.shape[-1] if hidden_size is None else hidden_size
    y = x64 / np.sqrt((x64 * x64).sum(axis=-1, keepdims=True) / n + epsilon)
    return y if w is None else y * _f64(w)


# tt_rmsnorm.accuracy.compare costs ~2.5 s per 16M elements on an idle 2-core machine (over 10 s when loaded), so an
# output above FULL_COMPARE_ELEMENTS is judged on a row sample: 16 rows of each 128-row tile, rotating so that every
# partition index is covered across 8 tiles, plus the whole last (partial) tile. Every element is still checked to be
# finite.
FULL_COMPARE_ELEMENTS = 1 << 20


def _rows_to_compare(rows, hidden):
    r = np.arange(rows)
    if rows * hidden <= FULL_COMPARE_ELEMENTS:
        return r
    return r[((r % 128) % 8 == (r // 128) % 8) | (r >= (rows - 1) // 128 * 128)]


def _check(actual, expected, dtype, context):
    assert_close(torch.from_numpy(_f64(actual)), torch.from_numpy(expected), dtype, context=context)


def _check_rms_norm(y, x, weight, dtype, context):
    """y against the float64 RMSNorm of the same (already rounded) x and weight."""
    assert np.isfinite(y).all(), f"{context}: non-finite outputs"
    keep = _rows_to_compare(*x.shape)
    _check(y[keep], reference(x[keep], weight, EPSILON), dtype, context)


def test_label_names_the_toolchain():
    expected = EMULATED if importlib.util.find_spec("neuronxcc") is None else (SIMULATOR, DEVICE)
    x, w = _inputs(3, 64, "float32")
    _, label = run_rms_norm(x, w, epsilon=EPSILON, dtype="float32")
    assert label == toolchain()
    assert label in (expected if isinstance(expected, tuple) else (expected,))


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("hidden", HIDDEN, ids=lambda n: f"N{n}")
@pytest.mark.parametrize("rows", ROWS, ids=lambda m: f"M{m}")
def test_fused_matches_float64_reference(rows, hidden, dtype, weighted):
    x, w = _inputs(rows, hidden, dtype)
    weight = w if weighted else None
    y, label = run_rms_norm(x, weight, epsilon=EPSILON, dtype=dtype)
    assert y.shape == x.shape and y.dtype == DTYPES[dtype]
    _check_rms_norm(y, x, weight, dtype, f"{label} fused M={rows} N={hidden} {dtype}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("rows,hidden", [(2, 64), (129, 8192), (1000, 16384)], ids=lambda v: str(v))
def test_pre_stats_is_fp32_sum_of_squares_of_the_local_slice(rows, hidden, dtype):
    x, _ = _inputs(rows, hidden, dtype, seed=1)
    stats = run_pre_stats(x)
    assert stats.shape == (rows, 1) and stats.dtype == np.float32
    expected = (_f64(x) ** 2).sum(axis=1, keepdims=True)  # (rows, 1): small enough to compare whole
    _check(stats, expected, "float32", f"pre-stats M={rows} N={hidden} {dtype}")


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_post_divides_by_the_global_hidden_size(dtype, weighted):
    rows, hidden, devices = 129, 8192, 4
    local = hidden // devices
    x, w = _inputs(rows, hidden, dtype, seed=2)
    stats = np.concatenate(
        [run_pre_stats(np.ascontiguousarray(x[:, d * local : (d + 1) * local])) for d in range(devices)], 1
    )
    d = 1
    x_local = np.ascontiguousarray(x[:, d * local : (d + 1) * local])
    w_local = np.ascontiguousarray(w[d * local : (d + 1) * local]).reshape(1, -1) if weighted else None
    y_local = run_post(x_local, stats, w_local, epsilon=EPSILON, hidden_size=hidden)
    full = reference(x, w if weighted else None, EPSILON)
    _check(y_local, full[:, d * local : (d + 1) * local], dtype, f"post slice {d} of {devices}")
    # the local hidden size would scale every output by sqrt(devices): far outside any tolerance
    wrong = run_post(x_local, stats, w_local, epsilon=EPSILON, hidden_size=local)
    with pytest.raises(AssertionError):
        _check(wrong, full[:, d * local : (d + 1) * local], dtype, "post with the local hidden size")


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(
    "rows,hidden,devices",
    [(1, 64, 2), (127, 4096, 4), (129, 16384, 2), (1000, 8192, 8)],
    ids=lambda v: str(v),
)
def test_distributed_matches_float64_reference(rows, hidden, devices, dtype, weighted):
    x, w = _inputs(rows, hidden, dtype, seed=3)
    weight = w if weighted else None
    y, label = run_rms_norm(x, weight, epsilon=EPSILON, num_devices=devices, dtype=dtype)
    assert y.shape == x.shape and y.dtype == DTYPES[dtype]
    _check_rms_norm(y, x, weight, dtype, f"{label} {devices} devices M={rows} N={hidden} {dtype}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_torch_in_torch_out_with_leading_dims(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 65, 4096).to(getattr(torch, dtype))
    w = torch.randn(4096).to(getattr(torch, dtype))
    y, label = run_rms_norm(x, w, epsilon=EPSILON, num_devices=2, dtype=dtype)
    assert isinstance(y, torch.Tensor) and y.dtype == getattr(torch, dtype) and y.shape == x.shape
    expected = reference(x.float().numpy(), w.float().numpy(), EPSILON)
    assert_close(y, torch.from_numpy(expected), dtype, context=label)


def test_inputs_are_rounded_to_the_kernel_dtype():
    x = np.random.default_rng(4).standard_normal((5, 64))  # float64 in: rounded to bf16 before the kernel
    y, _ = run_rms_norm(x, None, epsilon=EPSILON, dtype="bfloat16")
    _check_rms_norm(y, x.astype(np.float32).astype(DTYPES["bfloat16"]), None, "bfloat16", "rounded inputs")


@pytest.mark.parametrize(
    "kwargs,rule,match",
    [
        (dict(dtype="float16"), "dtype", "dtype must be one of"),
        (dict(num_devices=3), "num_devices.split", "split evenly"),
        (dict(num_devices=0), "num_devices.range", "positive int"),
        (dict(epsilon=0.0), "epsilon.range", "epsilon must be a positive"),
        (dict(weight=np.ones(63, np.float32)), "weight.shape", r"weight must have shape \(64,\)"),
    ],
    ids=["dtype", "uneven_split", "zero_devices", "epsilon", "weight_shape"],
)
def test_bad_arguments_are_rejected_with_the_rule(kwargs, rule, match):
    args = dict(weight=None, epsilon=EPSILON, num_devices=1, dtype="float32") | kwargs
    x = np.ones((2, 64), np.float32)
    with pytest.raises(RuleError, match=match) as err:
        run_rms_norm(x, args.pop("weight"), **args)
    assert err.value.rule == rule and err.value.fix


def test_integer_input_is_rejected_with_the_rule():
    with pytest.raises(RuleError) as err:
        run_rms_norm(np.ones((2, 64), np.int32), None, epsilon=EPSILON, dtype="float32")
    assert err.value.rule == "x.dtype" and err.value.seen == np.int32


def test_hidden_slice_too_large_for_sbuf_is_rejected_before_launch():
    x = np.random.default_rng(5).standard_normal((1, 65536), dtype=np.float32)
    with pytest.raises(RuleError, match=r"exceeds .* for float32.*num_devices >= 2") as err:
        run_rms_norm(x, None, epsilon=EPSILON, dtype="float32")
    assert err.value.rule == "hidden.sbuf" and err.value.seen == 65536
    y, _ = run_rms_norm(x, None, epsilon=EPSILON, num_devices=2, dtype="float32")  # the suggested fix works
    _check_rms_norm(y, x, None, "float32", "65536 over 2 devices")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_driver_limit_fits_the_emulated_sbuf(dtype):
    """At max_local_hidden the fused kernel fits SBUF without a spill; one more chunk is refused by the driver."""
    hidden = max_local_hidden(dtype)
    x, w = _inputs(3, hidden, dtype, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NkiSpillWarning)
        y, label = run_rms_norm(x, w, epsilon=EPSILON, dtype=dtype)
    if label == EMULATED:
        assert nki.last_launch["sbuf_spill_bytes_per_partition"] == 0
        assert nki.last_launch["sbuf_peak_bytes_per_partition"] <= SBUF_BYTES_PER_PARTITION
    _check_rms_norm(y, x, w, dtype, f"hidden {hidden} at the limit")
    x, w = _inputs(3, hidden + 512, dtype, seed=6)
    with pytest.raises(RuleError, match="would not fit SBUF"):
        run_rms_norm(x, w, epsilon=EPSILON, dtype=dtype)


def _extreme_rows(dtype, hidden, seed):
    """Rows 0-1 near the dtype's maximum (2^126..2^127.5: x^2 overflows float32), rows 2-3 subnormal (2^-140..2^-133
    in float32, 2^-133..2^-127 in bfloat16), rows 4-6 ordinary."""
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=(7, hidden))
    mags = np.empty((7, hidden))
    mags[:2] = 2.0 ** rng.uniform(126, 127.5, (2, hidden))
    low = (-140, -133) if dtype == "float32" else (-133, -127)
    mags[2:4] = 2.0 ** rng.uniform(*low, (2, hidden))
    mags[4:] = np.abs(rng.standard_normal((3, hidden))) + 0.1
    return (signs * mags).astype(np.float32).astype(DTYPES[dtype])


@pytest.mark.parametrize("devices", [1, 4], ids=["fused", "4_devices"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_overflowing_and_subnormal_rows_match_the_reference(dtype, devices):
    """Without the row scale the huge rows' float32 sum of squares is inf and their outputs 0; with it every row
    matches the float64 formula. Subnormal rows need no scale: mean(x^2) << epsilon, y ~ x / sqrt(epsilon)."""
    hidden = 2048
    x = _extreme_rows(dtype, hidden, seed=11)
    with np.errstate(over="ignore"):
        assert np.isinf((x[:2].astype(np.float32) ** 2).sum(axis=1)).all()
    w = (1.0 + 0.25 * np.random.default_rng(12).standard_normal(hidden)).astype(np.float32).astype(DTYPES[dtype])
    if devices == 1:  # the unscaled kernel: the overflowing rows come out as zeros
        unscaled = launch(kernels().rms_norm_kernel, x, w.reshape(1, -1), np.ones((7, 1), np.float32), EPSILON)
        np.testing.assert_array_equal(unscaled[:2].astype(np.float32), 0.0)
    y, label = run_rms_norm(x, w, epsilon=EPSILON, num_devices=devices, dtype=dtype)
    assert np.isfinite(y.astype(np.float32)).all()
    _check(y, reference(x, w, EPSILON), dtype, f"{label} extreme rows {dtype} devices={devices}")


def test_row_scale_is_one_except_for_rows_that_could_overflow():
    x = np.array([[1.0, -3.0], [2.0**100, 1.0], [np.inf, 1.0], [np.nan, 1.0], [2.0**62, 0.0]], np.float32)
    scale = row_scale(x, hidden_size=2)
    assert scale.dtype == np.float32 and scale.shape == (5, 1)
    np.testing.assert_array_equal(scale[[0, 2, 3, 4], 0], 1.0)
    assert scale[1, 0] == 2.0**-101 and abs(x[1, 0] * scale[1, 0]) < 1.0
    np.testing.assert_array_equal(row_scale(np.full((1, 4), 2.0**62, np.float32), hidden_size=2**20), 2.0**-63)


@pytest.mark.parametrize("devices", [1, 2], ids=["fused", "2_devices"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_nan_and_inf_follow_the_formula_row_by_row(dtype, devices):
    """A NaN makes its whole row NaN; an infinite element becomes NaN and the rest of its row 0 (x / inf); the other
    rows are untouched. The same as evaluating x / sqrt(mean(x^2) + eps) * w in float64."""
    x = np.random.default_rng(13).standard_normal((4, 256)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 9] = np.inf
    x[3, 0] = -np.inf
    x = x.astype(DTYPES[dtype])
    w = np.full(256, 0.5, np.float32).astype(DTYPES[dtype])
    y, _ = run_rms_norm(x, w, epsilon=EPSILON, num_devices=devices, dtype=dtype)
    y = y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        expected = reference(x, w, EPSILON)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    assert np.isnan(y[1]).all() and np.isnan(y[2, 9]) and np.isnan(y[3, 0])
    np.testing.assert_array_equal(np.delete(y[2], 9), 0.0)
    np.testing.assert_array_equal(y[3, 1:], 0.0)
    _check(y[:1], expected[:1], dtype, "the finite row")


@pytest.mark.requires_neuron
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_real_toolchain_matches_reference(dtype):
    x, w = _inputs(129, 4096, dtype)
    y, label = run_rms_norm(x, w, epsilon=EPSILON, num_devices=2, dtype=dtype)
    assert label in (SIMULATOR, DEVICE)
    _check_rms_norm(y, x, w, dtype, label)
