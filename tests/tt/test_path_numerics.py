"""Every path's numbers from the reference model agree with the float64 golden and with single-device `ttnn.rms_norm`
within the bf16 tolerance policy: classic and async share the interleaved (prefill) or sharded (decode) stats; the
fused decode op gathers its stats in the accumulation format (float32 with fp32_dest_acc_en)."""

import pytest
import torch

from tt_rmsnorm import accuracy, reference

EPS = 1e-5
CASES = [
    ("classic/async prefill", "interleaved", "bfloat16", 128),
    ("classic/async decode", "sharded", "bfloat16", 32),
    ("fused decode, fp32 accumulation", "fused", "float32", 32),
    ("fused decode, bf16 accumulation", "fused", "bfloat16", 32),
]


@pytest.mark.parametrize("num_devices", [8, 4], ids=["t3k", "galaxy"])
@pytest.mark.parametrize("name, layout, stats_dtype, tokens", CASES, ids=[c[0].replace(" ", "_") for c in CASES])
def test_path_matches_golden_and_single_device(name, layout, stats_dtype, tokens, num_devices):
    g = torch.Generator().manual_seed(tokens + num_devices)
    x = torch.randn(1, 1, tokens, 8192, generator=g) * 2
    w = 1 + 0.1 * torch.randn(8192, generator=g)
    r = torch.randn(1, 1, tokens, 8192, generator=g)
    out, stats = reference.distributed_rms_norm(
        x, w, num_devices=num_devices, epsilon=EPS, layout=layout, stats_dtype=stats_dtype, residual=r
    )
    assert stats.dtype == getattr(torch, stats_dtype) and stats.shape[-1] == 32 * num_devices
    summed = reference.quantize(
        reference.quantize(x, "bfloat16").double() + reference.quantize(r, "bfloat16"), "bfloat16"
    )
    golden = reference.golden_rms_norm(
        summed, reference.quantize(w, "bfloat16"), epsilon=EPS
    )  # of what the device holds
    accuracy.assert_close(out, golden, "bfloat16", context=f"{name} vs float64")
    single = reference.single_device_rms_norm(x, w, epsilon=EPS, dtype="bfloat16", residual=r)
    accuracy.assert_close(out, single.double(), "bfloat16", context=f"{name} vs single-device rms_norm")


def test_fused_float32_stats_are_exact_where_bf16_stats_round():
    g = torch.Generator().manual_seed(0)
    x = reference.quantize(torch.randn(1, 1, 32, 1024, generator=g) * 3, "bfloat16")
    f32 = reference.pre_all_gather(x, layout="fused", stats_dtype="float32")
    bf16 = reference.pre_all_gather(x, layout="fused", stats_dtype="bfloat16")
    mean = x.double().pow(2).mean(-1)
    assert torch.allclose(f32[..., 0].double(), mean, rtol=2**-23)
    assert torch.equal(bf16[..., 0], mean.to(torch.bfloat16))  # one rounding of the local mean to bf16
    assert (bf16[..., 0].double() != mean).any()


def test_fused_rejects_stats_outside_the_accumulation_formats():
    with pytest.raises(ValueError, match="accumulation format"):
        reference.pre_all_gather(torch.ones(1, 1, 32, 64), layout="fused", stats_dtype="bfloat8_b")
