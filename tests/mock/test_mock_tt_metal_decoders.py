"""The compat layer held to tt-metal's decoder norms (tests/mock/tt_metal_decoders.py): on mock T3000, Galaxy and N150
each scenario's module, built and called as tt-metal's decoder does, gives back what tt-metal's gives back (width
per device, memory layout, buffer, dtype) and issues the ops the data names; where those are not tt-metal's ops, the
data names why the result is the same, and the reference model holds both sequences' numbers to the float64 golden
within the bf16 policy."""

import pytest
import torch

from tests.mock.tt_metal_decoders import FUNCTION_SCENARIOS, FUSED, NORM, PRE, SCENARIOS
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


FUNCTIONS_BY_ID = {s.id: s for s in FUNCTION_SCENARIOS}


def _function_call(mesh, s):
    """The scenario's call of tt_transformers' function, by its signature, on the model CCL stand-in and the configs a
    decoder hands it (the TG decode grid of tt_transformers' DistributedNorm)."""
    import ttnn

    from tt_rmsnorm.compat import tt_distributed_rmsnorm, tt_sharded_distributed_rmsnorm
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    tg = s.system == "galaxy"
    layer, norm, _, tt_ccl = stand_ins.decoder_norm_module(mesh, tg, distributed_modes=("decode", "prefill"))
    x = stand_ins.decoder_input(mesh, s.mode, True)
    gamma, eps = norm.weight_distributed, norm.eps
    if s.function == "tt_distributed_rmsnorm":
        ck = ttnn.WormholeComputeKernelConfig(
            math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False, fp32_dest_acc_en=False, packer_l1_acc=False
        )
        calls = {
            "current": lambda: tt_distributed_rmsnorm(x, eps, gamma, mesh, tt_ccl, ck, None),
            "with_ccl": lambda: tt_distributed_rmsnorm(x, eps, gamma, mesh, tt_ccl, ck),
            "without_ccl": lambda: tt_distributed_rmsnorm(x, eps, gamma, mesh, ck),
            "keywords": lambda: tt_distributed_rmsnorm(
                inp=x, epsilon=eps, gamma=gamma, mesh_device=mesh, tt_ccl=tt_ccl, compute_kernel_config=ck, num_links=1
            ),
        }
        return calls[s.signature], x
    stats = ttnn.create_sharded_memory_config(
        shape=[1, 1, 32, 32 * 4], core_grid=ttnn.CoreGrid(y=1, x=1), strategy=ttnn.ShardStrategy.WIDTH
    )
    configs = (layer.gather_in_mem_cfg, layer.ln_prg_cfg, stats)
    calls = {
        "current": lambda: tt_sharded_distributed_rmsnorm(x, eps, gamma, mesh, tt_ccl, *configs, None),
        "with_ccl": lambda: tt_sharded_distributed_rmsnorm(x, eps, gamma, mesh, tt_ccl, *configs),
        "without_ccl": lambda: tt_sharded_distributed_rmsnorm(x, eps, gamma, mesh, *configs),
        "keywords": lambda: tt_sharded_distributed_rmsnorm(
            inp=x,
            epsilon=eps,
            gamma=gamma,
            mesh_device=mesh,
            tt_ccl=tt_ccl,
            ln_sharded_input_memcfg=configs[0],
            ln_sharded_progcfg=configs[1],
            ln_sharded_stats_memcfg=configs[2],
            num_links=1,
        ),
    }
    return calls[s.signature], x


def _run_function(mesh, scenario_id):
    """Warm up, then record the second call: its ops, its allocations, and which CCL slots served its gathers."""
    from tests.mock.tt_metal_decoders import FUNCTION_SCENARIOS
    from tt_rmsnorm.testing import recorder
    from tt_rmsnorm.testing.tt_metal_stand_ins import facts

    s = next(s for s in FUNCTION_SCENARIOS if s.id == scenario_id)
    call, _ = _function_call(mesh, s)
    call()
    with recorder.recording() as rec:
        y = call()
    return facts(y), rec.ops, [c.name for c in rec.allocations]


@pytest.mark.parametrize("scenario_id", list(FUNCTIONS_BY_ID))
def test_tt_transformers_ccl_functions_run_by_each_signature(scenario_id):
    s = FUNCTIONS_BY_ID[scenario_id]
    got, ops, allocations = workers.run_isolated(s.system, _run_function, s.id, timeout=600)
    devices = {"t3k": 8, "galaxy": 32}[s.system]
    assert got == {
        "devices": devices,
        "shape": (1, 1, s.tokens, s.width),
        "layout": s.memory_layout,
        "buffer": "L1" if s.memory_layout == "WIDTH_SHARDED" else "DRAM",
        "dtype": "BFLOAT16",
    }
    assert tuple(ops) == s.ops, ops
    assert s.tt_metal_ops == s.ops or s.why
    assert allocations == []
