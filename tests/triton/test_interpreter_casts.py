"""bf16 <-> fp32 casts inside a kernel agree bit for bit with torch's (exact widening, round-to-nearest-even
narrowing), subnormals, infinities and ties included: on the GPU that is the hardware's cvt, under the CPU interpreter
the casts the launchers install (programs/triton/interpreter.py: use_exact_casts)."""

import pytest
import torch
import triton
import triton.language as tl

from programs.triton.interpreter import use_exact_casts

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _round_trip_kernel(B, F, WIDE, NARROW, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    tl.store(WIDE + i, tl.load(B + i, mask=ok).to(tl.float32), mask=ok)
    tl.store(NARROW + i, tl.load(F + i, mask=ok).to(tl.bfloat16), mask=ok)


def _fp32_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """float32 values from unsigned 32-bit patterns held in int64."""
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def test_every_bf16_widens_exactly_and_fp32_narrows_to_nearest_even():
    every_bf16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    edges = [
        0x00000001,
        0x00007FFF,
        0x00008000,
        0x00018000,
        0x0000FFFF,
        0x007FFFFF,
        0x00800000,
        0x3F808000,
        0x3F818000,
        0x3F80FFFF,
        0x7F7FFFFF,
        0x7F7F8000,
        0x7F800000,
        0x80000001,
        0x80008000,
        0xFF7FFFFF,
    ]
    rand = torch.randint(0, 2**32, (every_bf16.numel() - len(edges),), generator=g, dtype=torch.int64)
    fp32 = _fp32_from_bits(torch.cat([torch.tensor(edges, dtype=torch.int64), rand]))
    n = every_bf16.numel()
    b, f = every_bf16.to(DEV), fp32.to(DEV)
    wide = torch.empty(n, dtype=torch.float32, device=DEV)
    narrow = torch.empty(n, dtype=torch.bfloat16, device=DEV)
    use_exact_casts(b.device)  # what every launcher does before it launches
    _round_trip_kernel[(triton.cdiv(n, 4096),)](b, f, wide, narrow, n, BLOCK=4096)
    want_wide, want_narrow = every_bf16.float(), fp32.to(torch.bfloat16)
    wide, narrow = wide.cpu(), narrow.cpu()
    nan_w, nan_n = want_wide.isnan(), want_narrow.isnan()
    assert torch.equal(wide.isnan(), nan_w) and torch.equal(narrow.isnan(), nan_n)
    bad_w = (wide.view(torch.int32) != want_wide.view(torch.int32)) & ~nan_w
    bad_n = (narrow.view(torch.int16) != want_narrow.view(torch.int16)) & ~nan_n
    assert not bad_w.any(), f"{int(bad_w.sum())} bf16 -> fp32 casts differ, first {every_bf16[bad_w][:4].tolist()}"
    assert not bad_n.any(), f"{int(bad_n.sum())} fp32 -> bf16 casts differ, first {fp32[bad_n][:4].tolist()}"
    subnormal = (want_wide != 0) & (want_wide.abs() < torch.finfo(torch.float32).smallest_normal)
    assert int(subnormal.sum()) == 2 * 127  # the test covers every nonzero bf16 subnormal


@pytest.mark.skipif(DEV == "cuda", reason="the interpreter's casts only exist without a GPU")
def test_interpreter_casts_are_installed_once():
    from triton.runtime import interpreter

    from programs.triton.interpreter import install

    use_exact_casts(torch.device("cpu"))
    before = interpreter._convert_float
    install()
    assert interpreter._convert_float is before and getattr(before, "exact_bf16", False)
