"""Forward kernels (register-resident rows, the looped and the split long-row kernels) against a float64 reference."""

import math
from dataclasses import replace

import pytest
import torch

from programs.triton.forward import rmsnorm_fwd
from programs.triton.forward_config import FwdConfig
from programs.triton.launch import pdl_supported
from tests.triton.ref64 import fp8_expected, norm64
from tests.triton.support import DEV, FWD_KERNELS, SPLIT_CHUNK, rand
from tt_rmsnorm.accuracy import assert_close
from tt_rmsnorm.errors import RuleError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@pytest.mark.parametrize("kernel", list(FWD_KERNELS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(5, 37), (3, 100), (6, 3)], ids=["5x37_odd", "3x100", "6x3"])
def test_forward_matches_float64(kernel, dtype, shape):
    dt = DTYPES[dtype]
    x, w = rand(*shape, dtype=dt, seed=1), rand(shape[-1], dtype=dt, seed=2)
    if FWD_KERNELS[kernel] is not None and FWD_KERNELS[kernel].head > shape[-1]:
        with pytest.raises(RuleError, match=r"\[config.head\]"):
            rmsnorm_fwd(x, w, config=FWD_KERNELS[kernel])
        return
    o = rmsnorm_fwd(x, w, epsilon=1e-5, return_rsigma=True, config=FWD_KERNELS[kernel])
    v, rs, _ = norm64(x, w, epsilon=1e-5)
    assert o.y.dtype == dt and o.y.shape == x.shape
    assert_close(o.y, v, dt, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")


CASES = {
    "residual": dict(residual=True),
    "residual_fp32_into_bf16": dict(residual=True, residual_dtype=torch.float32),
    "bias_zero_centered": dict(bias=True, weight_offset=1.0),
    "no_weight": dict(weight=False),
    "strided_rows": dict(strided=True),
    "3d_input": dict(shape=(2, 3, 45)),
    "fp32_out_of_bf16": dict(out=torch.float32),
}


@pytest.mark.parametrize("kernel", list(FWD_KERNELS))
@pytest.mark.parametrize("case", list(CASES))
def test_forward_options(kernel, case):
    c = CASES[case]
    shape = c.get("shape", (4, 70))
    n = shape[-1]
    if c.get("strided"):
        x = rand(shape[0], n + 13, dtype=torch.bfloat16, seed=3)[:, 5 : 5 + n]
        assert x.stride(0) == n + 13
    else:
        x = rand(*shape, dtype=torch.bfloat16, seed=3)
    w = rand(n, dtype=torch.bfloat16, seed=4) if c.get("weight", True) else None
    b = rand(n, dtype=torch.float32, seed=5) if c.get("bias") else None
    r = rand(*shape, dtype=c.get("residual_dtype", torch.bfloat16), seed=6) if c.get("residual") else None
    off = c.get("weight_offset", 0.0)
    out_dt = c.get("out", torch.bfloat16)
    o = rmsnorm_fwd(
        x,
        w,
        epsilon=1e-6,
        weight_offset=off,
        bias=b,
        residual=r,
        dtype=out_dt,
        return_rsigma=True,
        config=FWD_KERNELS[kernel],
    )
    v, rs, h = norm64(x, w, epsilon=1e-6, weight_offset=off, bias=b, residual=r)
    assert o.y.dtype == out_dt
    assert_close(o.y, v, out_dt, context=case)
    assert_close(o.rsigma, rs.reshape(-1), torch.float32, context="rsigma")
    if r is not None:
        assert o.residual_out.dtype == r.dtype
        assert torch.equal(o.residual_out, (x.float() + r.float()).to(r.dtype)), "residual_out must be x + residual"
    else:
        assert o.residual_out is None


FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
SCALES = ["row", "row_ub", "tensor_dynamic", "tensor_static", "tensor_residual"]


@pytest.mark.parametrize("kernel", list(FWD_KERNELS))
@pytest.mark.parametrize("fmt", list(FP8))
@pytest.mark.parametrize("scaling", SCALES)
def test_forward_fp8(kernel, fmt, scaling):
    dt = FP8[fmt]
    x = rand(6, 75, dtype=torch.bfloat16, seed=7) * torch.linspace(0.1, 3.0, 6).to(DEV)[:, None].to(torch.bfloat16)
    w = rand(75, dtype=torch.bfloat16, seed=8)
    r = rand(6, 75, dtype=torch.bfloat16, seed=9) if scaling == "tensor_residual" else None
    mode = "row" if scaling.startswith("row") else "tensor"
    v, _, _ = norm64(x, w, epsilon=1e-5, residual=r)
    # scale_ub between the smallest and largest row max: some rows are clamped, some not
    ub = float(v.abs().amax(-1).median()) if scaling == "row_ub" else math.inf
    static = torch.tensor([0.004], dtype=torch.float32, device=DEV) if scaling == "tensor_static" else None
    o = rmsnorm_fwd(
        x, w, epsilon=1e-5, dtype=dt, scale_mode=mode, scale=static, scale_ub=ub, residual=r, config=FWD_KERNELS[kernel]
    )
    q_exp, s_exp = fp8_expected(v, dt, mode, ub, static)
    assert o.y.dtype == dt
    assert_close(o.y.float(), q_exp, dt, context="fp8 values")
    # the scale and the quantized values together must give back v, up to FP8 rounding and saturation
    sc = o.scale[:, None] if mode == "row" else o.scale
    assert_close(
        o.y.double() * sc.double(),
        (q_exp * (s_exp[:, None] if mode == "row" and static is None else s_exp)),
        dt,
        context="dequantized",
    )
    if mode == "row":
        assert o.scale.shape == (6,)
        assert_close(o.scale, s_exp, torch.float32, context="row scales")
        if ub < math.inf:
            assert bool((o.scale <= ub / (448.0 if fmt == "e4m3" else 57344.0) * (1 + 1e-6)).all())
            fmax = 448.0 if fmt == "e4m3" else 57344.0
            clamped = v.abs().amax(-1) > ub
            assert bool((o.y.float().abs().amax(-1)[clamped] == fmax).all()), "rows above scale_ub saturate"
            assert bool((o.y.float().abs().amax(-1)[~clamped] <= fmax).all())
    else:
        assert o.scale.shape == (1,)
        if static is not None:
            assert o.scale.item() == static.item()
        else:  # one number: compare it through the row-mode scale of the same rows, whose max it is
            rows = rmsnorm_fwd(
                x, w, epsilon=1e-5, dtype=dt, scale_mode="row", residual=r, config=FWD_KERNELS[kernel]
            ).scale
            assert o.scale.item() == rows.max().item()


def test_decode_default_cuts_rows_into_slices():
    """The default launch at a decode shape: 5000 columns in 2048-column programs (the last one partial), each summing
    its whole row; a bias and rsigma ride along, and a residual falls back to whole rows."""
    from programs.triton.forward_config import fwd_config

    x, w, b, r = (
        rand(*s, dtype=torch.bfloat16, seed=k) for k, s in enumerate([(3, 5000), (5000,), (5000,), (3, 5000)], 30)
    )
    assert fwd_config(3, 5000, x.device).chunk == 2048
    o = rmsnorm_fwd(x, w, bias=b, epsilon=1e-6, return_rsigma=True)
    v, rs, _ = norm64(x, w, epsilon=1e-6, bias=b)
    assert_close(o.y, v, torch.bfloat16, context="sliced y")
    assert_close(o.rsigma, rs.reshape(-1), torch.float32, context="sliced rsigma")
    o = rmsnorm_fwd(x, w, residual=r, epsilon=1e-6)
    assert_close(o.y, norm64(x, w, epsilon=1e-6, residual=r)[0], torch.bfloat16, context="residual, whole rows")


def test_fp8_zero_row_gets_zero_scale():
    x = rand(3, 40, dtype=torch.float32, seed=10)
    x[1] = 0
    o = rmsnorm_fwd(x, None, dtype=torch.float8_e4m3fn)
    assert o.scale[1].item() == 0.0 and bool((o.y[1].float() == 0).all())
    assert bool(torch.isfinite(o.y.float()).all())


BAD = {
    "int_input": (lambda: rmsnorm_fwd(torch.ones(2, 4, dtype=torch.int32, device=DEV)), "x.dtype"),
    "column_strided": (lambda: rmsnorm_fwd(torch.ones(4, 2, device=DEV).t()), "x.last_dim_stride"),
    "weight_shape": (lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), torch.ones(5, device=DEV)), "weight.shape"),
    "negative_eps": (lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), epsilon=-1.0), "epsilon.range"),
    "bad_fp8": (lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), dtype=torch.int8), "dtype.fp8"),
    "bad_scale_mode": (
        lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), dtype=torch.float8_e4m3fn, scale_mode="col"),
        "scale_mode.value",
    ),
    "scale_in_row_mode": (
        lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), dtype=torch.float8_e4m3fn, scale=torch.ones(1, device=DEV)),
        "scale.row_mode",
    ),
    "offset_without_weight": (
        lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), weight_offset=1.0),
        "weight_offset.no_weight",
    ),
    "residual_shape": (
        lambda: rmsnorm_fwd(torch.ones(2, 4, device=DEV), residual=torch.ones(2, 5, device=DEV)),
        "residual.shape",
    ),
}


def test_pdl_asked_for_where_it_cannot_run_names_the_rule():
    """enable_pdl=True on a CPU tensor (no griddepcontrol) is refused before any work; None (the default) runs."""
    x = torch.ones(2, 8)
    with pytest.raises(RuleError, match=r"\[enable_pdl.device\].*device cpu.*enable_pdl=None"):
        rmsnorm_fwd(x, enable_pdl=True)
    assert not pdl_supported(x.device)
    assert torch.equal(rmsnorm_fwd(x, enable_pdl=False).y, rmsnorm_fwd(x).y)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_the_rule(case):
    fn, rule = BAD[case]
    with pytest.raises(RuleError, match=rf"\[{rule}\]"):
        fn()


def test_long_row_launch_shape_plain_vs_fused():
    """Wide chunks only for the plain forward they were measured faster on (H200); a residual add,
    distributed stats or FP8 output keep chunk 8192 with the register head, as do rows past 65536 columns."""
    from programs.triton.forward_config import fwd_config

    cpu = torch.device("cpu")
    plain = fwd_config(2048, 65536, cpu)
    assert (plain.kernel, plain.chunk, plain.head, plain.words) == ("looped", 32768, 0, False)
    # rows readable as 32-bit words: the stats pass loads each whole row at once, FP8 output too
    # (fused, words_ok); a residual or distributed stats (words_ok False) keep the head
    words = fwd_config(2048, 65536, cpu, words_ok=True)
    assert (words.kernel, words.chunk, words.head, words.words) == ("looped", 16384, 0, True)
    assert fwd_config(2048, 65536, cpu, fused=True, words_ok=True) == words
    assert fwd_config(2048, 65536, cpu, fused=True).head == 16384
    assert (
        not fwd_config(4096, 16384, cpu, words_ok=True).words and not fwd_config(1024, 262144, cpu, words_ok=True).words
    )
    for cfg in (fwd_config(2048, 65536, cpu, fused=True), fwd_config(1024, 262144, cpu)):
        assert (cfg.kernel, cfg.chunk, cfg.head) == ("looped", 8192, 16384)


@pytest.mark.parametrize("programs", [2, 1 << 20], ids=["persistent", "row_a_program"])
def test_looped_normalize_order_changes_no_bit(programs):
    """The looped kernel's normalize pass walks the chunks last to first (reverse, long rows) or in order: each output
    column is computed the same way either way, so y, rsigma and the FP8 row scales match bit for bit."""
    x, w = rand(5, 100, dtype=torch.bfloat16, seed=30), rand(100, dtype=torch.bfloat16, seed=31)
    for dtype in (None, torch.float8_e4m3fn):
        a, b = (
            rmsnorm_fwd(
                x,
                w,
                epsilon=1e-5,
                dtype=dtype,
                return_rsigma=True,
                config=FwdConfig("looped", 4, chunk=32, programs=programs, reverse=rev),
            )
            for rev in (True, False)
        )
        assert torch.equal(a.y.view(torch.uint8), b.y.view(torch.uint8)) and torch.equal(a.rsigma, b.rsigma)
        if dtype is not None:
            assert torch.equal(a.scale, b.scale)


WORDS = FwdConfig("looped", 4, chunk=32, programs=3, words=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(5, 38), (3, 100), (4, 2), (2, 256)], ids=["5x38", "3x100", "4x2", "2x256"])
def test_words_stats_pass_matches_float64(dtype, shape):
    """The looped kernel's stats pass reading each whole row as 32-bit words (two 16-bit values a word, the row in
    one load; N / 2 words rounded up to a power of two, the rest masked) normalizes as the float64 reference does, and
    as the chunked stats pass of the same launch within the dtype's tolerance (the sums run in another order)."""
    m, n = shape
    x, w, b = rand(m, n, dtype=dtype, seed=20), rand(n, dtype=dtype, seed=21), rand(n, seed=22)
    o = rmsnorm_fwd(x, w, epsilon=1e-5, bias=b, return_rsigma=True, config=WORDS)
    v, rs, _ = norm64(x, w, epsilon=1e-5, bias=b)
    assert_close(o.y, v, dtype, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")
    chunked = rmsnorm_fwd(
        x, w, epsilon=1e-5, bias=b, return_rsigma=True, config=FwdConfig("looped", 4, chunk=32, programs=3)
    )
    assert_close(o.rsigma, chunked.rsigma.double(), torch.float32, context="rsigma vs chunked")


def test_words_stats_pass_reads_strided_rows():
    """Rows with an even stride (a view into wider rows, starting at an even column) are read as words too."""
    x = rand(6, 90, dtype=torch.bfloat16, seed=23)[:, 4:74]
    w = rand(70, dtype=torch.bfloat16, seed=24)
    assert x.stride(0) == 90 and x.data_ptr() % 4 == 0
    o = rmsnorm_fwd(x, w, epsilon=1e-5, config=WORDS)
    v, _, _ = norm64(x, w, epsilon=1e-5)
    assert_close(o.y, v, torch.bfloat16, context="y")


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("scaling", ["row", "tensor_dynamic", "tensor_static"])
def test_words_stats_pass_with_fp8_output(fmt, scaling):
    """FP8 output through the words stats pass: the row max takes a pass of its own (the weight is not in registers
    beside the whole row), scales and codes as the float64 reference gives them."""
    x, w = rand(5, 100, dtype=torch.bfloat16, seed=25), rand(100, dtype=torch.bfloat16, seed=26)
    mode = "row" if scaling == "row" else "tensor"
    static = torch.tensor([0.02], device=DEV) if scaling == "tensor_static" else None
    o = rmsnorm_fwd(x, w, epsilon=1e-5, dtype=fmt, scale_mode=mode, scale=static, config=WORDS)
    v, _, _ = norm64(x, w, epsilon=1e-5)
    q_exp, s_exp = fp8_expected(v, fmt, mode, scale=static)
    assert_close(o.y.float(), q_exp, fmt, context="codes")
    if static is not None:
        assert o.scale.item() == static.item()
    else:
        assert_close(o.scale, s_exp, torch.float32, context="scale")


WORDS_REFUSED = {
    "fp32_values": (lambda: (rand(3, 64), {}), "float32"),
    "odd_n": (lambda: (rand(3, 63, dtype=torch.bfloat16), {}), "N 63"),
    "odd_stride": (lambda: (rand(3, 65, dtype=torch.bfloat16)[:, :64], {}), "row stride 65"),
    "odd_base": (lambda: (rand(3, 66, dtype=torch.bfloat16)[:, 1:65], {}), "base 2 bytes"),
    "longer_than_a_row_in_registers": (
        lambda: (torch.zeros(1, 65538, dtype=torch.bfloat16, device=DEV), {}),
        "N 65538",
    ),
    "residual": (
        lambda: (rand(3, 64, dtype=torch.bfloat16), {"residual": rand(3, 64, dtype=torch.bfloat16)}),
        "residual True",
    ),
    "distributed_stats": (
        lambda: (rand(3, 64, dtype=torch.bfloat16), {"stats": torch.ones(2, 3, device=DEV), "hidden_size": 128}),
        "stats True",
    ),
}


@pytest.mark.parametrize("case", list(WORDS_REFUSED))
def test_words_stats_pass_refuses_what_it_cannot_read(case):
    """An explicit words launch where the rows are not 16-bit word pairs, or what is normalized is not x itself (a
    residual sum, distributed stats), is refused by name before any launch (the default does not choose it there)."""
    make, seen = WORDS_REFUSED[case]
    x, kw = make()
    with pytest.raises(RuleError, match=rf"\[config.words\].*{seen}"):
        rmsnorm_fwd(x, config=WORDS, **kw)
    rmsnorm_fwd(x, **kw)  # the default launch serves the same call


def split_words(stages: int) -> FwdConfig:
    return FwdConfig("split", 4, block_m=2, chunk=SPLIT_CHUNK, programs=8, words=True, stages=stages)


SPLIT_WORDS_CASES = {
    "plain": dict(),
    "weight_offset": dict(weight_offset=1.0),
    "no_weight": dict(weight=False),
    "strided_rows": dict(strided=True),  # row stride 106, rows 4 bytes past the base: still word-aligned
}


@pytest.mark.parametrize("stages", [3, 4], ids=["3_stages", "4_stages"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", list(SPLIT_WORDS_CASES))
def test_split_words_kernel_matches_float64_and_the_element_kernel(case, dtype, stages):
    """The split forward holding x, y and the weight as 32-bit words (the default for plain 16-bit rows past 65536
    columns): y as float64 gives it and as the element split kernel does (the same products; the sum of squares
    pairs columns, so rsigma within a rounding), rsigma stored by each row's first chunk."""
    c = SPLIT_WORDS_CASES[case]
    x = rand(41, 106, dtype=dtype, seed=50)[:, 2:102] if c.get("strided") else rand(41, 100, dtype=dtype, seed=50)
    w = rand(100, dtype=dtype, seed=51) if c.get("weight", True) else None
    off = c.get("weight_offset", 0.0)
    o = rmsnorm_fwd(x, w, epsilon=1e-5, weight_offset=off, return_rsigma=True, config=split_words(stages))
    v, rs, _ = norm64(x, w, epsilon=1e-5, weight_offset=off)
    assert o.y.dtype == dtype
    assert_close(o.y, v, dtype, context="y")
    assert_close(o.rsigma, rs, torch.float32, context="rsigma")
    el = rmsnorm_fwd(
        x,
        w,
        epsilon=1e-5,
        weight_offset=off,
        return_rsigma=True,
        config=replace(split_words(stages), words=False, stages=3),
    )
    assert (o.y.float() - el.y.float()).abs().max() <= 2 * torch.finfo(dtype).eps * el.y.float().abs().max()
    assert torch.allclose(o.rsigma, el.rsigma, rtol=4 * torch.finfo(torch.float32).eps, atol=0)


SPLIT_WORDS_REFUSED = {
    "fp32_values": (lambda: (rand(3, 64), {}), "x torch.float32"),
    "fp32_output": (lambda: (rand(3, 64, dtype=torch.bfloat16), {"dtype": torch.float32}), "y torch.float32"),
    "fp8_output": (
        lambda: (rand(3, 64, dtype=torch.bfloat16), {"dtype": torch.float8_e4m3fn}),
        "y torch.float8_e4m3fn",
    ),
    "odd_n": (lambda: (rand(3, 63, dtype=torch.bfloat16), {}), "N 63"),
    "fp32_weight": (lambda: (rand(3, 64, dtype=torch.bfloat16), {"weight": rand(64)}), "weight torch.float32"),
    "bias": (lambda: (rand(3, 64, dtype=torch.bfloat16), {"bias": rand(64, dtype=torch.bfloat16)}), "bias True"),
    "residual": (
        lambda: (rand(3, 64, dtype=torch.bfloat16), {"residual": rand(3, 64, dtype=torch.bfloat16)}),
        "residual True",
    ),
    "distributed_stats": (
        lambda: (rand(3, 64, dtype=torch.bfloat16), {"stats": torch.ones(2, 3, device=DEV), "hidden_size": 128}),
        "stats True",
    ),
}


@pytest.mark.parametrize("case", list(SPLIT_WORDS_REFUSED))
def test_split_words_refuses_what_it_cannot_hold(case):
    make, seen = SPLIT_WORDS_REFUSED[case]
    x, kw = make()
    with pytest.raises(RuleError, match=rf"\[config.words\].*{seen}"):
        rmsnorm_fwd(x, config=split_words(3), **kw)


def test_stages_other_than_3_are_the_words_split_kernels():
    x = rand(3, 64, dtype=torch.bfloat16)
    for cfg in (
        replace(split_words(4), words=False),
        FwdConfig("looped", 4, chunk=32, programs=3, words=True, stages=4),
        split_words(5),
    ):
        with pytest.raises(RuleError, match=r"\[config.stages\]"):
            rmsnorm_fwd(x, config=cfg)


def test_split_with_distributed_stats_spans_programs_bitwise_as_rows():
    """Given the gathered stats there is no exchange, so even the interpreter runs rows cut into 32-wide chunks over
    several programs (the last chunk partial); the result is the rows kernel's, bit for bit."""
    x, w = rand(9, 100, dtype=torch.bfloat16, seed=11), rand(100, dtype=torch.bfloat16, seed=12)
    stats = torch.stack([(x[:, :40].float() ** 2).sum(1), (x[:, 40:].float() ** 2).sum(1)]).contiguous()
    split = FwdConfig("split", 4, block_m=2, chunk=32, programs=8)
    a = rmsnorm_fwd(x, w, stats=stats, hidden_size=100, return_rsigma=True, config=split)
    b = rmsnorm_fwd(x, w, stats=stats, hidden_size=100, return_rsigma=True)
    assert torch.equal(a.y, b.y) and torch.equal(a.rsigma, b.rsigma)
    v, rs, _ = norm64(x, w, epsilon=1e-5)  # and both right, not just equal
    assert_close(a.y, v, torch.bfloat16, context="y vs float64")
    assert_close(a.rsigma, rs, torch.float32, context="rsigma vs float64")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8_row"])
def test_sliced_rows_with_distributed_stats_match_whole_rows(dtype):
    """Given the gathered stats, slices need the whole row only for an FP8 row max; either way they give the whole-row
    launch's bits (the sum is the stats', a max has no order)."""
    x, w = rand(9, 100, dtype=torch.bfloat16, seed=18), rand(100, dtype=torch.bfloat16, seed=19)
    stats = torch.stack([(x[:, :60].float() ** 2).sum(1), (x[:, 60:].float() ** 2).sum(1)]).contiguous()
    kw = dict(stats=stats, hidden_size=100, return_rsigma=True, dtype=dtype)
    a = rmsnorm_fwd(x, w, config=FwdConfig("rows", 4, block_m=2, chunk=32), **kw)
    b = rmsnorm_fwd(x, w, config=FwdConfig("rows", 4, block_m=2), **kw)
    assert torch.equal(a.y.view(torch.uint8), b.y.view(torch.uint8)) and torch.equal(a.rsigma, b.rsigma)
    v, rs, _ = norm64(x, w, epsilon=1e-5)  # and both right, not just equal
    assert_close(a.rsigma, rs, torch.float32, context="rsigma vs float64")
    if dtype == torch.bfloat16:
        assert_close(a.y, v, torch.bfloat16, context="y vs float64")
    else:
        assert torch.equal(a.scale, b.scale)
        q_exp, s_exp = fp8_expected(v, dtype, "row")
        assert_close(a.y.float(), q_exp, dtype, context="fp8 values vs float64")
        assert_close(a.scale, s_exp, torch.float32, context="row scales vs float64")


@pytest.mark.skipif(DEV == "cuda", reason="the guard is for the interpreter, which runs programs one after another")
def test_split_exchange_across_programs_is_refused_by_the_interpreter():
    x = rand(4, 100, dtype=torch.bfloat16, seed=13)
    with pytest.raises(RuleError, match=r"\[config.split_interpreter\]"):
        rmsnorm_fwd(x, config=FwdConfig("split", 4, chunk=32, programs=8))


def test_split_refuses_a_bias_with_a_row_max():
    x, w, b = rand(4, 64, dtype=torch.bfloat16, seed=14), rand(64, seed=15), rand(64, seed=16)
    with pytest.raises(RuleError, match=r"\[config.split_bias_rowmax\]"):
        rmsnorm_fwd(x, w, bias=b, dtype=torch.float8_e4m3fn, config=FwdConfig("split", 4, chunk=64, programs=8))


def test_split_needs_its_programs_resident_together():
    x = rand(4, 100, dtype=torch.bfloat16, seed=17)
    with pytest.raises(RuleError, match=r"\[config.chunk\].*needs 4 programs"):
        rmsnorm_fwd(x, config=FwdConfig("split", 4, chunk=32, programs=2))
