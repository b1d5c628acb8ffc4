"""The compat layer held to tt-metal's decoder norms (tests/mock/tt_metal_decoders.py): on mock T3000, Galaxy and N150
each scenario's module, built and called as tt-metal's decoder does, gives back what tt-metal's gives back (width
per device, memory layout, buffer, dtype) and issues the ops the data names; where those are not tt-metal's ops, the
data names why the result is the same, and the reference model holds both sequences' numbers to the float64 golden
within the bf16 policy."""

import pytest
import torch

from tests.mock.tt_metal_decoders import FUSED, NORM, PRE, SCENARIOS
from tt_rmsnorm import accuracy, reference
from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

BY_ID = {s.id: s for s in SCENARIOS}


def _module(mesh, s):
    """The scenario's module and its input (and residual), as tt-metal's decoder builds and feeds them."""
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    tg = s.system == "galaxy"
    if s.module == "tt_transformers":
        layer, _, _, _ = stand_ins.decoder_norm_module(mesh, tg, weight_dtype=s.weight_dtype)
        x = stand_ins.decoder_input(mesh, s.mode, tg, activation_dtype=s.activation_dtype)
        return (lambda x, res: layer(x, s.mode)), x, None
    layer = stand_ins.galaxy_norm_module(mesh, stand_ins.ModelCCL(mesh), "ffn_norm")

    def activation():
        return stand_ins.galaxy_input(mesh, s.mode, layer, s.activation_dtype)

    return (lambda x, res: layer(x, res, s.mode)), activation(), activation() if s.residual else None


def _run(mesh, scenario_id):
    """Warm up (planning, persistent buffers), then record the second call's ops: what the model pays per call."""
    from tests.mock.tt_metal_decoders import SCENARIOS
    from tt_rmsnorm.testing import recorder
    from tt_rmsnorm.testing.tt_metal_stand_ins import facts

    s = next(s for s in SCENARIOS if s.id == scenario_id)
    call, x, res = _module(mesh, s)
    call(x, res)
    with recorder.recording(ops=(*recorder.OPS, "reshape")) as rec:
        out = call(x, res)
    y, back = out if isinstance(out, tuple) else (out, None)
    return facts(y), rec.ops, back is res, [c.name for c in rec.allocations]


@pytest.mark.parametrize("scenario_id", list(BY_ID))
def test_compat_gives_back_what_tt_metal_gives_back(scenario_id):
    s = BY_ID[scenario_id]
    got, ops, residual_is_the_callers, allocations = workers.run_isolated(s.system, _run, s.id, timeout=600)
    devices = {"t3k": 8, "galaxy": 32, "n150": 1}[s.system]
    assert got == {
        "devices": devices,
        "shape": (1, 1, s.tokens, s.width),
        "layout": s.memory_layout,
        "buffer": s.buffer,
        "dtype": s.dtype,
    }
    assert tuple(ops) == s.ops, ops
    assert (s.tt_metal_ops == s.ops) or s.why, "ops other than tt-metal's need the reason the result is equal"
    assert not s.tt_metal_fails or s.tt_metal_ops is None
    assert allocations == []  # a planned call allocates nothing (trace)
    if s.residual:
        assert residual_is_the_callers


def _numbers(ops, memory_layout, x, w, residual, num_devices):
    """What an op sequence computes, from the reference model."""
    if FUSED in ops or PRE in ops:
        layout = "fused" if FUSED in ops else ("sharded" if memory_layout == "WIDTH_SHARDED" else "interleaved")
        y, _ = reference.distributed_rms_norm(
            x, w, num_devices=num_devices, epsilon=1e-5, layout=layout, residual=residual
        )
        return y
    assert NORM in ops
    return reference.single_device_rms_norm(x, w, epsilon=1e-5, dtype="bfloat16", residual=residual)


@pytest.mark.parametrize("scenario_id", [s.id for s in SCENARIOS if s.activation_dtype == "bfloat16"])
def test_both_sequences_compute_the_norm_within_the_bf16_policy(scenario_id):
    s = BY_ID[scenario_id]
    g = torch.Generator().manual_seed(0)
    # what the devices hold: bfloat16 activations, residual and weight
    x = reference.quantize(
        torch.randn(1, 1, s.tokens, s.width * (4 if s.width != 8192 else 1), generator=g), "bfloat16"
    )
    w = reference.quantize(1 + 0.1 * torch.randn(x.shape[-1], generator=g), "bfloat16")
    residual = reference.quantize(torch.randn(x.shape, generator=g), "bfloat16") if s.residual else None
    golden = reference.golden_rms_norm(x, w, epsilon=1e-5, residual=residual)
    n = 4 if s.system == "galaxy" else 8 if s.system == "t3k" else 1
    sequences = [s.ops] + ([s.tt_metal_ops] if s.tt_metal_ops is not None else [])
    for ops in sequences:
        distributed = FUSED in ops or PRE in ops
        y = _numbers(ops, s.memory_layout, x, w, residual, n if distributed else 1)
        accuracy.assert_close(y, golden, "bfloat16", context=f"{s.id} {ops}")
