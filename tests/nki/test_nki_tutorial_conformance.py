"""Conformance of the emulator with the NKI API of AWS's public tutorial kernels, through both spellings.

The kernels in tests/nki/tutorial_kernels/ are the project's own code: the tutorials' algorithms (rmsnorm, layernorm
in both versions, softmax, SPMD tensor_add, transpose2d, average_pool2d in both generations and with the mgrid pooling
view, matmul in both generations and in the tutorial's five stages) written from the API documentation, calling the
same APIs, with the same tile limits, the tutorials use. AWS's files are not part of the repository
(`python -m tools.nki_samples` runs them from a local checkout). Each kernel runs under the emulator and is checked
against NumPy (float64) within the project's tolerance for its dtype; the nki.language-only kernels run in both the
`neuronxcc.nki` and the standalone `nki` spelling (only their import lines differ), the others in the spelling they
import.
"""

import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from programs.nki.emulator import MODULE_NAMES, NkiConstraintError, language, nki, nki_modules
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


@pytest.mark.parametrize("shape,pool,dtype", [((2, 6, 6), 2, "float16"), ((128, 12, 18), 3, "float32")])
def test_avg_pool_with_an_mgrid_view(shape, pool, dtype):
    """The average_pool2d tutorial's technique: nl.sum over axes [2, 4] of the 5-d nl.mgrid view
    x[c, k * r + dr, k * q + dq], then a tile divided by a Python int. The tutorial's input (2 x 6 x 6 float16 arange)
    and a full 128-partition one."""
    k = load("avgpool_mgrid")
    x = (_rng(15).standard_normal(shape) * 4).astype(dtype) if shape[0] > 2 else np.arange(72, dtype=dtype)
    x = x.reshape(shape)
    y = k.pool_mean(x, pool)
    assert y.shape == (shape[0], shape[1] // pool, shape[2] // pool) and y.dtype == np.dtype(dtype)
    _close(y, _avg_pool_reference(x, pool), dtype, f"avgpool mgrid {shape} {dtype}")


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


MATMUL_STAGES = [
    # kernel, (K, M, N), meta-parameters: the tutorial's sizes, multiples of its tiles and blocks
    ("mm_one_tile", (128, 64, 512), {}),
    ("mm_tiled", (256, 256, 1024), {}),
    ("mm_hoisted", (256, 256, 1024), {}),
    ("mm_free_blocks", (256, 512, 2048), {}),
    ("mm_blocked", (256, 256, 1024), dict(m_tiles=2, n_tiles=2, k_tiles=2)),
    ("mm_blocked", (1024, 2048, 1024), {}),  # its default blocking: 16 x 2 x 8 tiles
]


@pytest.mark.parametrize("name,sizes,meta", MATMUL_STAGES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_tutorial_stages(name, sizes, meta, dtype):
    """The matmul tutorial's five stages: nl.matmul(transpose_x=True) into PSUM tiles accumulated with +=, block
    tensors with par_dim, nc_matmul into a PSUM tile accumulated into bfloat16/float32 SBUF result tiles."""
    k_dim, m_dim, n_dim = sizes
    lhs_t = _rng(16).standard_normal((k_dim, m_dim)).astype(np.float32).astype(dtype)
    rhs = _rng(17).standard_normal((k_dim, n_dim)).astype(np.float32).astype(dtype)
    y = getattr(load("matmul_stages"), name)(lhs_t, rhs, **meta)
    assert y.shape == (m_dim, n_dim) and y.dtype == np.dtype(dtype)
    expected = lhs_t.astype(np.float64).T @ rhs.astype(np.float64)
    _close(y, expected, dtype, f"{name} {sizes} {dtype}", cancelling=True)


@pytest.mark.parametrize(
    "constant,match",
    [
        ("pmax", "Size of partition dimension 256 .* exceeds architecture limitation of 128"),
        ("gemm_stationary_fmax", "Size of partition dimension 256 .* exceeds architecture limitation of 128"),
        ("gemm_moving_fmax", "PSUM tile free size exceeds nki.language.tile_size.psum_fmax"),
    ],
)
def test_tiled_matmul_tiles_sit_at_the_documented_limits(monkeypatch, constant, match):
    """mm_tiled sizes its tiles from nl.tile_size; with any of them doubled, the same unchanged kernel breaks a
    documented tile-size limit and is refused in the documentation's words."""
    k = load("matmul_stages")
    lhs_t, rhs = np.ones((256, 256), np.float32), np.ones((256, 1024), np.float32)
    np.testing.assert_array_equal(k.mm_tiled(lhs_t, rhs), 256.0)
    monkeypatch.setattr(language.tile_size, constant, 2 * getattr(language.tile_size, constant))
    with pytest.raises(NkiConstraintError, match=match):
        k.mm_tiled(lhs_t, rhs)


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


@pytest.mark.parametrize(
    "spelling,shape,dtype",
    [
        ("tensor[(4, 8), nl.float32]", (4, 8), np.float32),
        ("tensor[[4, 8], nl.bfloat16]", (4, 8), BF16),
        ("tensor[4, 8]", (4, 8), None),
        ("tensor[4, 8, nl.float16]", (4, 8), np.float16),
    ],
)
def test_typing_tensor_spellings(spelling, shape, dtype):
    """The nki.typing.tensor forms AWS's files write: a shape sequence and a dtype (tutorial benchmarks), the bare
    dimensions (average_pool2d's annotations), dimensions followed by a dtype."""
    with nki_modules():
        import neuronxcc.nki.language as nl
        from neuronxcc.nki.typing import tensor

        declared = eval(spelling, {"tensor": tensor, "nl": nl})  # noqa: S307 - the spellings above
    assert declared.shape == shape and declared.dtype == (None if dtype is None else np.dtype(dtype))


def test_benchmark_usage_runs_the_kernel_on_typed_placeholders():
    """The matmul tutorial benchmarks with `nki.benchmark(warmup=5, iters=10)(kernel)` called on
    `nt.tensor[[K, M], nl.bfloat16]` placeholders, then reads `benchmark_result.nc_latency`. The emulator runs the
    kernel (zeros for the placeholders' values) and has no device latency to give."""
    k = load("matmul_stages")
    bench_func = k.benchmarked(k.mm_tiled)
    y = bench_func(*k.bf16_operands(256, 256, 1024))
    assert y.shape == (256, 1024) and y.dtype == BF16 and not y.astype(np.float32).any()
    assert nki.last_launch["dma_instructions"] == (2 * 2) * (2 * 2 + 1)  # per (m, n) tile: two loads per k, one store
    with pytest.raises(AttributeError, match="measures no device latency"):
        _ = bench_func.benchmark_result.nc_latency
    a = _rng(18).standard_normal((256, 256)).astype(np.float32)
    b = _rng(19).standard_normal((256, 1024)).astype(np.float32)
    np.testing.assert_array_equal(bench_func(a, b), k.mm_tiled(a, b))
    with nki_modules():
        import neuronxcc.nki as legacy
        import nki as standalone

        assert legacy.benchmark is standalone.benchmark is nki.benchmark


def test_spellings_leave_no_modules_behind():
    load("softmax_rows", "nki")
    assert not [name for name in MODULE_NAMES if name in sys.modules]
