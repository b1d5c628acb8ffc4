"""`DistributedRMSNorm` on mock T3000 and Galaxy meshes: built from a state_dict named like a Llama checkpoint, its
weight cache (a second construction converts nothing), the unit offset, decode and prefill with and without a
residual, the output memory config for the next matmul, the output gather, and replicated activations."""

import pytest

from tt_rmsnorm.testing import mock_cluster, workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192
AXIS = {"t3k": None, "galaxy": 1}


def _state_dict(layers=2):
    import torch

    torch.manual_seed(0)
    sd = {"norm.weight": 1 + 0.1 * torch.randn(DIM)}
    for i in range(layers):
        sd[f"layers.{i}.attention_norm.weight"] = 1 + 0.1 * torch.randn(DIM)
        sd[f"layers.{i}.ffn_norm.weight"] = 1 + 0.1 * torch.randn(DIM)
    return sd


def _cache_reuse(mesh, cache_dir, add_unit_offset):
    """First construction writes the cache; the second, with ttnn.from_torch refusing to run, reads it. Returns the
    cached replicated weight as the host reads it back, and the state_dict's weight."""
    from pathlib import Path

    import ttnn

    import tt_rmsnorm

    sd = _state_dict(1)
    kw = dict(layer_num=0, weight_cache_path=cache_dir, add_unit_offset=add_unit_offset, cluster_axis=None)
    tt_rmsnorm.DistributedRMSNorm(mesh, DIM, sd, "attention_norm", **kw)
    files = sorted(p.name for p in Path(cache_dir).iterdir())
    saved = ttnn.from_torch

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    ttnn.from_torch = refuse
    try:
        tt_rmsnorm.DistributedRMSNorm(mesh, DIM, sd, "attention_norm", **kw)
    finally:
        ttnn.from_torch = saved
    replicated = next(p for p in Path(cache_dir).iterdir() if "_distributed" not in p.name)
    host = ttnn.to_torch(ttnn._ttnn.tensor.load_tensor_flatbuffer(str(replicated)))
    return files, host.float().reshape(-1), sd["layers.0.attention_norm.weight"]


@pytest.mark.parametrize("add_unit_offset", [False, True], ids=["plain", "unit_offset"])
def test_weight_cache_is_reused_and_holds_the_offset_weight(tmp_path, add_unit_offset):
    import torch

    files, cached, weight = workers.run_isolated("t3k", _cache_reuse, str(tmp_path), add_unit_offset)
    assert len(files) == 2 and any("_distributed" in f for f in files), files
    expect = (weight + (1.0 if add_unit_offset else 0.0)).to(torch.bfloat16).float()
    assert torch.equal(cached, expect)  # offset added before tilizing, then rounded once to bf16


def _forward(mesh, system, mode, residual, output, gather):
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import devices
    from tt_rmsnorm.planning import layouts

    axis = AXIS[system]
    n = tuple(mesh.shape)[1]
    tokens = 32 if mode == "decode" else 128
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis)
    out_mc = None
    if output == "sharded":
        grid = mesh.compute_with_storage_grid_size()
        plan = layouts.plan((1, 1, tokens, DIM // n), n, compute_grid=(grid.x, grid.y))
        out_mc = plan.input_memory_config  # width-sharded L1, as the next matmul takes it
    norm = tt_rmsnorm.DistributedRMSNorm(
        mesh,
        DIM,
        _state_dict(),
        "ffn_norm",
        layer_num=1,
        cluster_axis=axis,
        ccl=ccl,
        output_memory_config={mode: out_mc},
        gather_output=gather,
    )
    x = devices.shard_activation(torch.randn(1, 1, tokens, DIM), mesh, cluster_axis=axis)
    r = devices.shard_activation(torch.randn(1, 1, tokens, DIM), mesh, cluster_axis=axis)
    result = norm(x, mode, residual=r) if residual else norm(x, mode)
    y, summed = result if residual else (result, None)
    first = ttnn.get_device_tensors(y)[0]
    return {
        "shape": tuple(first.shape),
        "devices": len(ttnn.get_device_tensors(y)),
        "matches_out_mc": out_mc is not None and first.memory_config() == out_mc,
        "layout": str(first.memory_config().memory_layout).rsplit(".", 1)[-1],
        "summed": None if summed is None else tuple(ttnn.get_device_tensors(summed)[0].shape),
    }


FORWARD = [
    ("t3k", "decode", False, None, False),
    ("t3k", "decode", True, "sharded", False),
    ("t3k", "prefill", True, None, False),
    ("t3k", "prefill", False, None, True),
    ("galaxy", "decode", True, "sharded", False),
    ("galaxy", "prefill", False, None, True),
    # a width-sharded decode output gathered to full width: the gather keeps the cores with wider shards
    ("t3k", "decode", False, "sharded", True),
    ("galaxy", "decode", True, "sharded", True),
]


@pytest.mark.parametrize(
    "system, mode, residual, output, gather",
    FORWARD,
    ids=[
        f"{s}-{m}{'-residual' if r else ''}{'-sharded_out' if o else ''}{'-gathered' if g else ''}"
        for s, m, r, o, g in FORWARD
    ],
)
def test_forward(system, mode, residual, output, gather):
    got = workers.run_isolated(system, _forward, system, mode, residual, output, gather)
    mesh = mock_cluster.MESH_SHAPES[system]
    tokens = 32 if mode == "decode" else 128
    width = DIM if gather else DIM // mesh[1]
    assert got["shape"] == (1, 1, tokens, width) and got["devices"] == mesh[0] * mesh[1]
    if output == "sharded":
        assert got["layout"] == "WIDTH_SHARDED" and got["matches_out_mc"] == (not gather)
    else:
        assert got["layout"] == "INTERLEAVED"
    assert got["summed"] == ((1, 1, tokens, DIM // mesh[1]) if residual else None)


def _replicated(mesh, mode):
    """is_distributed(mode) False: full-width replicated activations, plain rms_norm with the replicated weight."""
    import torch
    import ttnn

    import tt_rmsnorm

    dim = 4096  # the interleaved rms_norm holds a full row of a core's L1: 8192 with a weight does not fit
    sd = {"norm.weight": torch.randn(dim)}
    norm = tt_rmsnorm.DistributedRMSNorm(mesh, dim, sd, "norm", is_distributed=lambda m: m == "prefill")
    tokens = 32 if mode == "decode" else 128
    x = ttnn.from_torch(
        torch.randn(1, 1, tokens, dim),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=mesh,
        mesh_mapper=ttnn.ReplicateTensorToMesh(mesh)
        if mode == "decode"
        else ttnn.ShardTensor2dMesh(mesh, mesh_shape=tuple(mesh.shape), dims=(None, 3)),
    )
    from tt_rmsnorm.plan_cache import PLANS

    y = norm(x, mode)
    norm(x, mode)
    local = [call for _, held, call in PLANS.items() if norm in held.modules and call.plan.name == "local"]
    return tuple(ttnn.get_device_tensors(y)[0].shape), len(local)


@pytest.mark.parametrize(
    "mode, width, local_plans", [("decode", 4096, 1), ("prefill", 512, 0)], ids=["decode", "prefill"]
)
def test_is_distributed_policy_picks_the_weight_and_path(mode, width, local_plans):
    shape, plans = workers.run_isolated("t3k", _replicated, mode)
    assert shape == (1, 1, 32 if mode == "decode" else 128, width) and plans == local_plans


def _replicated_both_modes(mesh):
    """A never-distributed norm called in decode and prefill, twice each: one plan per signature, each output the
    shape of its own input."""
    import torch
    import ttnn

    import tt_rmsnorm

    dim = 4096
    norm = tt_rmsnorm.DistributedRMSNorm(mesh, dim, {"norm.weight": torch.randn(dim)}, "norm", is_distributed=False)
    shapes = []
    for mode, tokens in (("decode", 32), ("prefill", 128), ("decode", 32), ("prefill", 128)):
        x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, dim), mesh, cluster_axis=0)
        shapes.append(tuple(ttnn.get_device_tensors(norm(x, mode))[0].shape))
    from tt_rmsnorm.plan_cache import PLANS

    return shapes, [call.plan.call.epsilon for _, held, call in PLANS.items() if norm in held.modules]


def test_a_replicated_norm_keeps_a_plan_per_signature():
    shapes, epsilons = workers.run_isolated("t3k", _replicated_both_modes)
    assert shapes == [(1, 1, 32, 4096), (1, 1, 128, 4096)] * 2
    assert epsilons == [1e-5, 1e-5]  # two plans, with tt-metal's default epsilon where none is given


def _one_device_on_the_axis(mesh, mode, weight_dtype):
    """Llama-70B's H = 8192 with one device on the gather axis: a T3000 1x8 gathering over axis 0."""
    import torch
    import ttnn

    import tt_rmsnorm

    norm = tt_rmsnorm.DistributedRMSNorm(
        mesh, DIM, _state_dict(), "ffn_norm", layer_num=1, cluster_axis=0, weight_dtype=getattr(ttnn, weight_dtype)
    )
    # axis 0 of a 1x8 mesh holds one device: the activation is full width on every device
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32 if mode == "decode" else 128, DIM), mesh, cluster_axis=0)
    y = norm(x, mode)
    return tuple(ttnn.get_device_tensors(y)[0].shape), str(norm.weight.layout), str(norm._weight_interleaved().layout)


@pytest.mark.parametrize("weight_dtype", ["bfloat16", "bfloat8_b"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_one_device_on_the_axis_at_8192_runs(mode, weight_dtype):
    """rms_norm of an 8192-wide row cannot hold a ROW_MAJOR weight in L1 (1,772,896 B): the interleaved call takes
    a TILE copy; a bfloat8_b weight (which ttnn cannot hold ROW_MAJOR) is TILE throughout."""
    shape, layout, interleaved = workers.run_isolated("t3k", _one_device_on_the_axis, mode, weight_dtype)
    assert shape == (1, 1, 32 if mode == "decode" else 128, DIM)
    assert "TILE" in interleaved
    assert ("TILE" if weight_dtype == "bfloat8_b" else "ROW_MAJOR") in layout


def _distributed_bf8_weight(mesh):
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.errors import RuleError

    try:
        tt_rmsnorm.DistributedRMSNorm(mesh, DIM, _state_dict(), "ffn_norm", layer_num=1, weight_dtype=ttnn.bfloat8_b)
    except RuleError as e:
        return e.rule
    return None


def test_a_bfloat8_b_weight_for_a_distributed_norm_is_a_rule_at_construction():
    assert workers.run_isolated("t3k", _distributed_bf8_weight) == "weight.dtype"


def _wrong_width(mesh, distributed):
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.errors import RuleError

    norm = tt_rmsnorm.DistributedRMSNorm(mesh, DIM, _state_dict(), "ffn_norm", layer_num=1, is_distributed=distributed)
    # a full-width x (8192 a device) to a distributed norm, a fractured x (1024 a device) to a replicated one
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, DIM * 8 if distributed else DIM), mesh)
    try:
        norm(x, "decode")
    except RuleError as e:
        return e.rule, str(e)
    return None, ""


@pytest.mark.parametrize("distributed", [True, False], ids=["full-width-to-distributed", "fractured-to-replicated"])
def test_an_input_of_the_wrong_width_is_named_as_such(distributed):
    rule, message = workers.run_isolated("t3k", _wrong_width, distributed)
    assert rule == "module.input_width", message
    assert ("width 8192" if distributed else "width 1024") in message


def _planned_then_changed(mesh):
    """A warm module meets a call of another signature, and an attribute set after its first call."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.errors import RuleError
    from tt_rmsnorm.plan_cache import PLANS

    def counts():  # (the function's plans, the module's own planned calls)
        helds = [held for _, held, _ in PLANS.items()]
        return sum(not h.modules for h in helds), sum(norm in h.modules for h in helds)

    norm = tt_rmsnorm.DistributedRMSNorm(mesh, DIM, _state_dict(), "ffn_norm", layer_num=1)
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, DIM), mesh)
    norm(x, "prefill")
    norm(x, "prefill")
    before = counts()
    wide = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, DIM * 8), mesh)
    try:
        norm(wide, "prefill")
        rule = None
    except RuleError as e:
        rule = e.rule
    norm.eps = 1e-3  # an attribute the planned call bound: the next call plans with the new one
    forgotten = counts()
    norm(x, "prefill")
    epsilons = sorted(s.epsilon for s, held, _ in PLANS.items() if not held.modules)
    return rule, before, forgotten, counts(), epsilons


def test_a_planned_module_call_checks_a_new_signature_and_plans_again_after_an_attribute_is_set():
    rule, before, forgotten, after, epsilons = workers.run_isolated("t3k", _planned_then_changed)
    assert rule == "module.input_width"
    assert before == (1, 1) and forgotten == (1, 0) and after == (2, 1) and epsilons == [1e-5, 1e-3]


def _residual_after_none(mesh):
    """A module called without a residual, then with one of the same x: the second call is another signature."""
    import torch

    import tt_rmsnorm

    norm = tt_rmsnorm.DistributedRMSNorm(mesh, DIM, _state_dict(), "ffn_norm", layer_num=1)
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, DIM), mesh)
    h = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, DIM), mesh)
    first = norm(x, "prefill")
    second = norm(x, "prefill", residual=h)
    short = tt_rmsnorm.shard_activation(torch.randn(1, 1, 64, DIM), mesh)
    norm(x, "prefill")
    try:  # the residual's rules are checked: the last residual-free call is not reused for it
        norm(x, "prefill", residual=short)
        rule = None
    except tt_rmsnorm.RuleError as e:
        rule = e.rule
    return isinstance(first, tuple), isinstance(second, tuple) and second[1] is h, rule


def test_a_call_with_a_residual_after_one_without_runs_the_residual_plan():
    assert workers.run_isolated("t3k", _residual_after_none) == (False, True, "residual.shape")
