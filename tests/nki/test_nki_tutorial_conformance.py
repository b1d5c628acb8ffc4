"""Conformance of the emulator with the NKI API of AWS's public tutorial kernels, through both spellings.

The kernels in tests/nki/tutorial_kernels/ are the project's own code: the tutorials' algorithms (rmsnorm, layernorm
in both versions, softmax, SPMD tensor_add, transpose2d, average_pool2d in both generations, matmul in both
generations) written from the API documentation, calling the same APIs the tutorials call. AWS's files are read for
API usage only and are not part of the repository. Each kernel runs unchanged under the emulator and is checked
against NumPy (float64) within the project's tolerance for its dtype; the nki.language-only kernels run in both the
`neuronxcc.nki` and the standalone `nki` spelling (only their import lines differ).
"""

import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from programs.nki.emulator import MODULE_NAMES, NkiConstraintError, nki, nki_modules
from tt_rmsnorm.accuracy import assert_close

KERNELS = Path(__file__).with_name("tutorial_kernels")
BOTH = ["neuronxcc.nki", "nki"]
BF16 = np.dtype(ml_dtypes.bfloat16)


def load(name: str, spelling: str = "neuronxcc.nki") -> types.ModuleType:
    """Execute tutorial_kernels/<name>.py with its imports bound to the emulator, in the given spelling."""
    source = (KERNELS / f"{name}.py").read_text()
    if spelling == "nki" and "neuronxcc.nki" in source:
        changed = [line for line in source.splitlines() if "neuronxcc.nki" in line]
        assert all(line.startswith(("import ", "from ")) for line in changed), "only import lines may change"
        source = source.replace("import neuronxcc.nki as nki", "import nki").replace("neuronxcc.nki", "nki")
    module = types.ModuleType(f"tutorial_kernels.{name}")
    with nki_modules():
        exec(compile(source, str(KERNELS / f"{name}.py"), "exec"), module.__dict__)  # noqa: S102 - project file
    return module


def _close(actual, expected, dtype, context, cancelling=False):
    actual = torch.from_numpy(np.asarray(actual).astype(np.float64))
    assert_close(actual, torch.from_numpy(expected), dtype, context=context, cancelling=cancelling)


def _rng(seed):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("spelling", BOTH)
@pytest.mark.parametrize("rows,cols,dtype", [(200, 4096, "float32"), (128, 128, "float32"), (130, 1024, "float16")])
def test_rmsnorm_rows(spelling, rows, cols, dtype):
    """Whole-row tiles up to 4096 columns (the 512-column broadcast limit rejected them); 128 x 128 is the F == P case
    where a trailing-axis broadcast of the (P,) statistic gives wrong numbers without an error. In float16 every
    intermediate is rounded to float16 (the APIs' default output dtype is the input's), as the tutorial's code does."""
    k = load("rmsnorm_rows", spelling)
    x = (_rng(1).standard_normal((rows, cols)) * 3).astype(np.float32).astype(dtype)
    g = (1 + _rng(2).standard_normal(cols) * 0.5).astype(np.float32).astype(dtype)
    y = k.rms_norm_rows(x, g, 1e-5)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    ref = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5) * g64
    _close(y, ref, dtype, f"rmsnorm rows {rows}x{cols} {dtype} via {spelling}")


def _layer_norm(x, g, b, eps=1e-5):
    """float64 LayerNorm. x - mean subtracts O(1) terms, so results are judged with the policy's cancelling rule (no
    per-element ULP bound near zero)."""
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    return (x64 - mu) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("spelling", BOTH)
@pytest.mark.parametrize("rows,cols", [(300, 1024), (128, 128)])
def test_layernorm_rows(spelling, rows, cols):
    k = load("layernorm_rows", spelling)
    x = (_rng(3).standard_normal((rows, cols)) + 0.5).astype(np.float32)
    g, b = _rng(4).standard_normal(cols).astype(np.float32), _rng(5).standard_normal(cols).astype(np.float32)
    y = k.layer_norm_rows(x, 1e-5, g, b)
    _close(y, _layer_norm(x, g, b), "float32", f"layernorm {rows}x{cols} via {spelling}", cancelling=True)


@pytest.mark.parametrize("rows,cols", [(150, 1000), (128, 512)])
def test_layernorm_bn_stats(rows, cols):
    """The isa version (neuronxcc.nki generation: instructions return tiles and take mask=/dtype=)."""
    k = load("layernorm_bn")
    x = (_rng(6).standard_normal((rows, cols)) * 2 - 1).astype(np.float32)
    g, b = _rng(7).standard_normal(cols).astype(np.float32), _rng(8).standard_normal(cols).astype(np.float32)
    y = k.layer_norm_bn(x, 1e-5, g, b)
    _close(y, _layer_norm(x, g, b), "float32", f"layernorm bn_stats {rows}x{cols}", cancelling=True)


@pytest.mark.parametrize("spelling", BOTH)
@pytest.mark.parametrize("rows,cols", [(129, 640), (128, 128)])
def test_softmax_rows(spelling, rows, cols):
    k = load("softmax_rows", spelling)
    x = (_rng(9).standard_normal((rows, cols)) * 4).astype(np.float32)
    y = k.softmax_rows(x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    _close(y, e / e.sum(axis=1, keepdims=True), "float32", f"softmax {rows}x{cols} via {spelling}")


@pytest.mark.parametrize("spelling", BOTH)
def test_tensor_add_spmd_grid(spelling):
    k = load("tensor_add_spmd", spelling)
    a = _rng(10).random((256, 1024)).astype(np.float16)
    b = _rng(11).random((256, 1024)).astype(np.float16)
    np.testing.assert_array_equal(k.add(a, b), a + b)  # one float32 add rounded to float16, as NumPy's
    assert nki.last_launch["grid"] == (2, 2)
    assert nki.last_launch["dma_instructions"] == 4 * 3


@pytest.mark.parametrize("spelling", BOTH)
@pytest.mark.parametrize("parts,m,n", [(5, 3, 4), (128, 16, 32)])
def test_transpose_in_rows(spelling, parts, m, n):
    k = load("transpose_rows", spelling)
    x = np.arange(parts * m * n).astype(np.int8).reshape(parts, m * n)
    expected = x.reshape(parts, m, n).transpose(0, 2, 1).reshape(parts, m * n)
    np.testing.assert_array_equal(k.transpose_in_rows(x, (m, n)), expected)


def _avg_pool_reference(x, k):
    c, h, w = x.shape
    return x.astype(np.float64).reshape(c, h // k, k, w // k, k).mean(axis=(2, 4))


@pytest.mark.parametrize("spelling", BOTH)
def test_avg_pool_with_index_grids(spelling):
    k = load("avgpool_grid", spelling)
    x = _rng(12).standard_normal((8, 12, 18)).astype(np.float32)
    _close(k.avg_pool(x, 3), _avg_pool_reference(x, 3), "float32", f"avg pool grid via {spelling}")


def test_avg_pool_with_access_patterns():
    k = load("avgpool_ap", "nki")
    x = np.arange(2 * 6 * 6, dtype=np.float16).reshape(2, 6, 6)
    np.testing.assert_array_equal(k.avg_pool_ap(x, 2), _avg_pool_reference(x, 2).astype(np.float16))


@pytest.mark.parametrize("name,spelling", [("matmul_psum", "neuronxcc.nki"), ("matmul_dst", "nki")])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiled_matmul(name, spelling, dtype):
    k = load(name, spelling)
    a_t = _rng(13).standard_normal((384, 256)).astype(np.float32).astype(dtype)
    b = _rng(14).standard_normal((384, 1024)).astype(np.float32).astype(dtype)
    y = k.matmul_tiles(a_t, b)
    assert y.dtype == np.dtype(dtype) if dtype == "float32" else y.dtype == BF16
    # dot products of signed values cancel: judged with the policy's cancelling rule
    _close(y, a_t.astype(np.float64).T @ b.astype(np.float64), dtype, f"{name} {dtype}", cancelling=True)


def test_the_standalone_isa_takes_no_mask_or_dtype():
    """NKI release notes: every nki.isa instruction writes a dst and takes no mask= or dtype=."""
    with nki_modules():
        import nki as standalone
        import nki.isa as nisa
        import nki.language as nl

        @standalone.jit
        def kernel(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=t, dtype=nl.float32)
            return None

        with pytest.raises(NkiConstraintError, match="standalone nki.isa takes no dtype argument"):
            kernel(np.ones((4, 8), np.float32))
        assert not hasattr(standalone, "baremetal") and hasattr(standalone, "simulate")


def test_typing_annotations_declare_the_expected_shape():
    with nki_modules():
        import neuronxcc.nki as legacy
        import neuronxcc.nki.language as nl
        from neuronxcc.nki.typing import tensor

        @legacy.baremetal
        def kernel(x: tensor[(4, 8), nl.float32]):
            y = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(y, value=nl.load(x))
            return y

        np.testing.assert_array_equal(kernel(np.ones((4, 8), np.float32)), 1.0)
        with pytest.raises(NkiConstraintError, match=r"argument shape differs .* \(4, 9\) vs \(4, 8\)"):
            kernel(np.ones((4, 9), np.float32))


def test_spellings_leave_no_modules_behind():
    load("softmax_rows", "nki")
    assert not [name for name in MODULE_NAMES if name in sys.modules]
