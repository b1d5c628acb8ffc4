"""Every way model code calls a norm, on mock meshes: tt-metal's current module keywords (the Mode enum, the gather-only
norm, the output gather switched off, the decode gather's model config, the fused decode with a residual, the
Galaxy decoder's current signature and its DRAM decode), SimpleRMSNorm, a norm built from a torch module, the calls
ttnn runs that the package once refused, per-head norms and rank-3 activations."""

import enum

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192


class Mode(enum.Enum):
    """tt_transformers' Mode enum (models/tt_transformers/tt/common.py)."""

    DECODE = "decode"
    PREFILL = "prefill"


def _layer(mesh, **keywords):
    """tt_transformers' DistributedNorm through compat, with keywords of its current signature."""
    from tt_rmsnorm.compat import DistributedNorm
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    _, norm, args, tt_ccl = stand_ins.decoder_norm_module(mesh, False)
    return DistributedNorm(norm, args, tt_ccl, **keywords), norm, args, tt_ccl


def _current_keywords(mesh, case):
    """(the ops of a planned call, the gathers' chunks_per_sync, the output's width per device) for one keyword of
    tt_transformers' current DistributedNorm."""
    import ttnn

    from tt_rmsnorm.testing import recorder
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    mode = {"enum": Mode.DECODE, "gather_only": "prefill", "no_output_gather": "prefill", "ag_config": "decode"}[case]
    name = mode if isinstance(mode, str) else mode.value
    if case == "gather_only":
        from tt_rmsnorm.compat import DistributedNorm

        _, _, args, tt_ccl = stand_ins.decoder_norm_module(mesh, False)
        layer = DistributedNorm(None, args, tt_ccl)
    elif case == "no_output_gather":
        layer, *_ = _layer(mesh, enable_all_gather=False)
    elif case == "ag_config":
        layer, _, args, _ = _layer(mesh, ag_config_key="DECODE_LN_AG_CONFIG")
        args.model_config = {"DECODE_LN_AG_CONFIG": {"num_links": 1, "chunks_per_sync": 4, "num_workers_per_link": 1}}
    else:
        layer, *_ = _layer(mesh)
    x = stand_ins.decoder_input(mesh, name, False)
    layer(x, mode)
    gather, syncs = ttnn.experimental.all_gather_async, []

    def seen(*args, **kwargs):  # the gathers' sync, which the recording does not keep
        syncs.append(kwargs.get("chunks_per_sync"))
        return gather(*args, **kwargs)

    ttnn.experimental.all_gather_async = seen
    try:
        with recorder.recording() as rec:
            y = layer(x, mode)
    finally:
        ttnn.experimental.all_gather_async = gather
    return rec.ops, syncs, ttnn.get_device_tensors(y)[0].shape[-1]


@pytest.mark.parametrize(
    "case, ops, syncs, width",
    [
        ("enum", ["all_gather_async", "rms_norm"], [10], DIM),  # Mode.DECODE: the decode flow (replicated on T3000)
        ("gather_only", ["all_gather_async"], [10], DIM),  # prefill distributed: no norm, the output gathered
        # the distributed norm's own stats gather (ttnn's default sync), no output gather
        ("no_output_gather", ["rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"], [None], 1024),
        ("ag_config", ["all_gather_async", "rms_norm"], [4], DIM),  # the decode gather's model config
    ],
)
def test_tt_transformers_current_keywords_are_honoured(case, ops, syncs, width):
    got_ops, got_syncs, last = workers.run_isolated("t3k", _current_keywords, case, timeout=600)
    assert got_ops == ops and got_syncs == syncs and last == width


def _refused_keywords(mesh, case):
    from tt_rmsnorm.compat import DistributedNorm
    from tt_rmsnorm.errors import RuleError
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins

    layer, norm, args, tt_ccl = _layer(mesh)
    try:
        if case == "prefetcher":
            DistributedNorm(norm, args, tt_ccl, prefetcher=object())
        elif case == "old_positional_tg":
            DistributedNorm(norm, args, tt_ccl, True)
        elif case == "gather_only_tg":
            DistributedNorm(None, args, tt_ccl, TG=True)
        elif case == "residual_without_fused":
            x = stand_ins.decoder_input(mesh, "decode", False)
            layer(x, "decode", residual=stand_ins.decoder_input(mesh, "decode", False))
    except RuleError as e:
        return e.rule, e.fix
    return None, None


@pytest.mark.parametrize(
    "case, rule, fix",
    [
        ("prefetcher", "compat.prefetcher", "prefetcher=None"),
        ("old_positional_tg", "compat.prefetcher", "TG=True by keyword"),
        ("gather_only_tg", "compat.norm", "TG=False"),
        ("residual_without_fused", "compat.residual", "use_fused_rms=True"),
    ],
)
def test_what_compat_cannot_honour_is_a_rule_that_says_why(case, rule, fix):
    got_rule, got_fix = workers.run_isolated("t3k", _refused_keywords, case, timeout=600)
    assert got_rule == rule and fix in got_fix


def _fused_decode_with_residual(mesh):
    """use_fused_rms on T3000: a decode call with the residual stream runs as one fused_rms_minimal, the sum written
    into the caller's residual."""
    from tt_rmsnorm.testing import recorder
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins
    from tt_rmsnorm.testing.tt_metal_stand_ins import facts

    layer, _, _, _ = _layer(mesh, use_fused_rms=True)
    x = stand_ins.decoder_input(mesh, "decode", True)
    res = stand_ins.decoder_input(mesh, "decode", True)
    layer(x, Mode.DECODE, residual=res)
    with recorder.recording() as rec:
        y = layer(x, Mode.DECODE, residual=res)
    fused = rec.calls_of("fused_rms_minimal")
    return rec.ops, facts(y), bool(fused) and "residual_input_tensor" in fused[0].tensors, rec.allocations


def test_use_fused_rms_decodes_with_the_residual_in_one_fused_op():
    ops, got, with_residual, allocations = workers.run_isolated("t3k", _fused_decode_with_residual, timeout=600)
    assert "fused_rms_minimal" in ops and "rms_norm_pre_all_gather" not in ops and with_residual
    assert got["shape"] == (1, 1, 32, DIM // 8) and allocations == []


def _galaxy_current(mesh, case):
    """The Galaxy decoder's current DistributedNorm (norm, args, tt_ccl, ccl_topology, use_sharded_decode), called by
    position, on the Galaxy."""
    import ttnn

    from tt_rmsnorm.compat import RMSNorm
    from tt_rmsnorm.compat.llama_galaxy import DistributedNorm
    from tt_rmsnorm.testing import recorder
    from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins
    from tt_rmsnorm.testing.tt_metal_stand_ins import facts

    tt_ccl = stand_ins.ModelCCL(mesh)
    old = stand_ins.galaxy_norm_module(mesh, tt_ccl)
    norm = old.norm
    assert isinstance(norm, RMSNorm)
    layer = DistributedNorm(norm, old.args, tt_ccl, ttnn.Topology.Linear, case == "sharded")
    x = stand_ins.decoder_input(mesh, "decode", True)
    res = stand_ins.decoder_input(mesh, "decode", True)
    layer(x, res, "decode")
    with recorder.recording() as rec:
        y, back = layer(x, res, "decode")
    return layer.TG, rec.ops, facts(y), back is None, [c.name for c in rec.allocations]


@pytest.mark.parametrize(
    "case, ops",
    [
        ("sharded", ["to_memory_config", "to_memory_config", "fused_rms_minimal", "to_memory_config", "copy"]),
        ("dram", ["add", "rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"]),
    ],
    ids=["use_sharded_decode", "dram_decode"],
)
def test_the_galaxy_decoder_s_current_signature_and_its_dram_decode(case, ops):
    tg, got_ops, got, no_residual_back, allocations = workers.run_isolated("galaxy", _galaxy_current, case, timeout=600)
    assert tg and got_ops == ops and got["shape"] == (1, 1, 32, DIM // 4) and allocations == []
    assert no_residual_back == (case == "dram")


def _simple(mesh, width, tokens):
    """tt-metal's SimpleRMSNorm on one chip at a width that is not a multiple of 32."""
    import torch
    import ttnn

    from tt_rmsnorm.compat import SimpleRMSNorm
    from tt_rmsnorm.testing import recorder

    norm = SimpleRMSNorm(mesh, width, {"layers.0.norm.weight": torch.randn(width)}, "norm", layer_num=0)
    x = ttnn.from_torch(torch.randn(1, 1, tokens, width), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh)
    norm(x)
    with recorder.recording() as rec:
        y = norm(x, mode="decode")
    return tuple(y.shape), rec.ops, norm.weight.layout == ttnn.TILE_LAYOUT


@pytest.mark.parametrize("width", [2576, 4080, 8192])
def test_simple_rmsnorm_pads_its_weight_and_runs_one_rms_norm(width):
    shape, ops, tiled = workers.run_isolated("n150", _simple, width, 128)
    assert shape == (1, 1, 128, width) and ops == ["rms_norm"] and tiled


def _false_refusal(mesh, case):
    """Calls ttnn runs as given, which the package refused: each now runs. Returns what the plan says of its compute
    config where that is the point."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    if case in ("n150_5120_32", "n150_5120_128"):
        tokens = 32 if case.endswith("_32") else 128
        w = tt_rmsnorm.prepare_weight(torch.randn(5120), mesh, layout=ttnn.ROW_MAJOR_LAYOUT)
        x = ttnn.from_torch(torch.randn(1, 1, tokens, 5120), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh)
        tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5)
        return tt_rmsnorm.plan_distributed_rms_norm((1, 1, tokens, 5120), (1, 1), compute_grid=(8, 8)).describe()
    if case == "subblock_8":
        shape, grid = (1, 1, 32, 1024), (4, 1)
        pc = ttnn.LayerNormShardedMultiCoreProgramConfig(
            compute_with_storage_grid_size=grid, subblock_w=8, block_h=1, block_w=8, inplace=False
        )
        x = tt_rmsnorm.shard_activation(
            torch.randn(1, 1, 32, DIM), mesh, memory_config=layouts.sharded_memory_config(shape, grid)
        )
        w = tt_rmsnorm.prepare_weight(torch.randn(DIM), mesh)
        tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, program_config=pc)
        return "ran"
    if case == "head_dim_replicated":
        sd = {"q_norm.weight": torch.randn(128)}
        norm = tt_rmsnorm.DistributedRMSNorm(mesh, 128, sd, "q_norm", is_distributed=False)
        q = ttnn.from_torch(  # the heads split over the devices: one head of 128 a device
            torch.randn(1, 8, 32, 128),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=mesh,
            mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=1),
        )
        y = norm(q, "prefill")
        return tuple(ttnn.get_device_tensors(y)[0].shape), norm.weight_distributed is None
    width = int(case.split("_")[1])  # one chip, a width that is not a multiple of 32, or 8192
    w = tt_rmsnorm.prepare_weight(torch.randn(width), mesh)
    x = ttnn.from_torch(torch.randn(1, 1, 128, width), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh)
    y = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5)
    norm = tt_rmsnorm.DistributedRMSNorm(mesh, width, {"norm.weight": torch.randn(width)}, "norm")
    norm(x, "prefill")
    return tuple(y.shape), w.layout == ttnn.TILE_LAYOUT


@pytest.mark.parametrize(
    "system, case, expect",
    [
        ("n150", "n150_5120_32", "ttnn's default compute config"),
        ("n150", "n150_5120_128", "ttnn's default compute config"),
        ("t3k", "subblock_8", "ran"),
        ("t3k", "head_dim_replicated", ((1, 1, 32, 128), True)),
        ("n150", "width_2576", ((1, 1, 128, 2576), True)),
        ("n150", "width_4080", ((1, 1, 128, 4080), True)),
        ("n150", "width_8192", ((1, 1, 128, 8192), True)),
    ],
)
def test_calls_ttnn_runs_as_given_now_run(system, case, expect):
    got = workers.run_isolated(system, _false_refusal, case, timeout=600)
    assert expect in got if isinstance(expect, str) else got == expect


def _rank3(mesh, path, mode):
    """A rank-3 activation [B, S, H/n] on each path: viewed as rank 4 and back, the residual stream the caller's."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    tokens = 32 if mode == "decode" else 128
    mc = layouts.sharded_memory_config((1, 1, tokens, DIM // 8), (8, 4)) if path == "fused" else None
    x, r = (tt_rmsnorm.shard_activation(torch.randn(1, tokens, DIM), mesh, memory_config=mc) for _ in range(2))
    w = tt_rmsnorm.prepare_weight(torch.randn(DIM), mesh)
    ccl = None if path == "classic" else tt_rmsnorm.CCLResources(mesh)
    y, back = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, residual=r, ccl=ccl, path=path)
    return tuple(y.shape), back is r


@pytest.mark.parametrize("path, mode", [("classic", "prefill"), ("async", "prefill"), ("fused", "decode")])
def test_a_rank_3_activation_runs_on_every_distributed_path(path, mode):
    shape, residual_is_the_callers = workers.run_isolated("t3k", _rank3, path, mode, timeout=600)
    assert shape == (1, 32 if mode == "decode" else 128, DIM // 8) and residual_is_the_callers


def _from_torch(mesh, convention):
    """DistributedRMSNorm built from a torch module on T3000: its epsilon and weight as the module holds them."""
    import torch
    from torch import nn

    import tt_rmsnorm
    from tests.tt.test_torch_norms import GemmaRMSNorm, LlamaRMSNorm

    module = {
        "nn": lambda: nn.RMSNorm(DIM, eps=1e-5),
        "llama": lambda: LlamaRMSNorm(DIM, eps=1e-6),
        "gemma": lambda: GemmaRMSNorm(DIM, eps=1e-6),
        "no_weight": lambda: nn.RMSNorm(DIM, elementwise_affine=False),
    }[convention]()
    norm = tt_rmsnorm.DistributedRMSNorm.from_torch(module, mesh, layer_num=3)
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, DIM), mesh)
    y = norm(x, "prefill")
    return norm.eps, tuple(y.shape)


@pytest.mark.parametrize("convention, eps", [("nn", 1e-5), ("llama", 1e-6), ("gemma", 1e-6), ("no_weight", 0.0078125)])
def test_from_torch_builds_the_module_with_the_torch_module_s_epsilon(convention, eps):
    got_eps, shape = workers.run_isolated("t3k", _from_torch, convention, timeout=600)
    assert got_eps == eps and shape == (1, 1, 128, DIM // 8)
