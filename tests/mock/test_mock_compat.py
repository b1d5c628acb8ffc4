"""tt-metal's decoder norms through `tt_rmsnorm.compat`, on mock T3000, Galaxy and N150 and on their Blackhole
counterparts P300 and Blackhole Galaxy: the module classes and calls of tt_transformers (RMSNorm with a model CCL
object and its ModelArgs, DistributedNorm around it) at Llama-70B's H = 8192, decode T = 32 and prefill T = 128. Each
case returns what a decoder layer gets back per device."""

import pytest

from tt_rmsnorm.testing import tt_metal_stand_ins as stand_ins
from tt_rmsnorm.testing import workers
from tt_rmsnorm.testing.tt_metal_stand_ins import DIM

pytestmark = pytest.mark.mock_cluster


GALAXIES = ("galaxy", "bh-galaxy")
LINES = {"t3k": 8, "p300": 2}  # 1xN meshes and their devices


def _expect(system, mode):
    devices = LINES.get(system, 32)
    width = DIM // 4 if system in GALAXIES else DIM
    if mode == "decode":
        return {"devices": devices, "shape": (1, 1, 32, width), "layout": "WIDTH_SHARDED", "buffer": "L1"}
    return {"devices": devices, "shape": (1, 1, 128, width), "layout": "INTERLEAVED", "buffer": "DRAM"}


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("system", ["t3k", "galaxy", "p300", "bh-galaxy"])
def test_tt_transformers_decoder_norm(system, mode):
    tg = system in GALAXIES
    first, second, calls = workers.run_isolated(system, stand_ins.decoder_norm, mode, tg, timeout=600)
    expect = _expect(system, mode)
    assert {k: first[k] for k in expect} == expect, first
    assert second == first
    # the model CCL object's own cycling serves every gather: a 1xN mesh gathers the decode input and the prefill
    # output over its line (slot 2), a Galaxy's stats gather runs on axis 1
    assert calls["ag"] and len(calls["ag"]) == len(calls["barrier"])
    assert set(calls["ag"]) == ({1} if tg else {2})


def _one_device(mesh, mode):
    """N150: a replicated Llama-70B-sized norm (H = 8192) on one chip, is_distributed None as tt-metal's default."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.compat import RMSNorm

    norm = RMSNorm(mesh, DIM, {"norm.weight": torch.randn(DIM)}, "norm")
    out_mc, pc = stand_ins.decode_configs(mesh, DIM)
    norm.sharded_program_config, norm.sharded_output_config = pc, out_mc
    tokens = 32 if mode == "decode" else 128
    x = tt_rmsnorm.shard_activation(
        torch.randn(1, 1, tokens, DIM), mesh, memory_config=out_mc if mode == "decode" else None
    )
    decode = mode == "decode"
    y = norm(x, mode, in_sharded=decode, out_sharded=decode)
    return stand_ins.facts(y), str(norm.weight.layout), str(norm._weight_interleaved().layout)


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_one_device_at_8192_takes_a_tile_weight_where_row_major_does_not_fit(mode):
    facts, layout, interleaved_layout = workers.run_isolated("n150", _one_device, mode, timeout=600)
    assert facts["shape"] == (1, 1, 32 if mode == "decode" else 128, DIM)
    assert facts["layout"] == ("WIDTH_SHARDED" if mode == "decode" else "INTERLEAVED")
    # the model reads a ROW_MAJOR weight; an interleaved input takes the TILE copy
    assert "ROW_MAJOR" in layout and "TILE" in interleaved_layout


def _bad_ccl(mesh):
    import torch

    from tt_rmsnorm.compat import RMSNorm
    from tt_rmsnorm.errors import RuleError

    class NoCycling:
        mesh_device = mesh

        def get_num_links(self, cluster_axis=None):
            return 1

    try:
        RMSNorm(mesh, DIM, {"n.weight": torch.randn(DIM)}, "n", is_distributed=lambda m: True, tt_ccl=NoCycling())
    except RuleError as e:
        return e.rule, str(e)
    return None, ""


def test_a_ccl_object_without_the_cycling_methods_is_refused_by_name():
    rule, message = workers.run_isolated("t3k", _bad_ccl)
    assert rule == "ccl.interface" and "get_and_cycle_ag_semaphore_handles" in message


def _distributed_decode_on_t3k(mesh):
    from tt_rmsnorm.errors import RuleError

    try:
        stand_ins.decoder_norm(mesh, "decode", False, ("decode", "prefill"))
    except RuleError as e:
        return e.rule, str(e)
    return None, ""


def test_gathering_a_sharded_decode_output_to_full_width_is_a_rule_not_a_tt_fatal():
    """A distributed decode on T3000 through DistributedNorm (tt-metal's RMSNorm asserts on its sharded input): the
    output gather into the per-device shard spec cannot hold 8192 columns; the rules say so before the norm runs."""
    rule, message = workers.run_isolated("t3k", _distributed_decode_on_t3k, timeout=600)
    assert rule is not None and rule.startswith(("memory_config.", "all_gather")), message


@pytest.mark.parametrize("system, mode", [("t3k", "prefill"), ("galaxy", "decode"), ("galaxy", "prefill")])
def test_bfloat8_b_activations(system, mode):
    """tt-metal's decoders feed the norms bfloat8_b activations where the previous matmul writes them: the output
    keeps the activation's dtype, per device as with bfloat16."""
    first, _, _ = workers.run_isolated(
        system, stand_ins.decoder_norm, mode, system == "galaxy", None, "bfloat8_b", timeout=600
    )
    n = 4 if system == "galaxy" else 1
    assert first["dtype"] == "BFLOAT8_B" and first["shape"] == (1, 1, 32 if mode == "decode" else 128, DIM // n)


@pytest.mark.parametrize("with_residual", [False, True], ids=["no-residual", "residual"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("system", GALAXIES)
def test_galaxy_decoder_norm_gives_the_pair_back(system, mode, with_residual):
    """llama3_70b_galaxy's DistributedNorm: `norm(x, res, mode)` returns (output, res) with x + res written into the
    caller's res, or (output, None); the output stays fractured (2048 a device) where the decoder reads it."""
    out, back, same, stable, calls = workers.run_isolated(
        system, stand_ins.galaxy_decoder_norm, mode, with_residual, timeout=600
    )
    layout = "WIDTH_SHARDED" if mode == "decode" else "INTERLEAVED"
    assert out["shape"] == (1, 1, 32 if mode == "decode" else 128, DIM // 4) and out["layout"] == layout, out
    assert out["devices"] == 32 and stable
    if with_residual:
        assert same and back["shape"] == out["shape"]
    else:
        assert back is None
    assert calls["ag"] and set(calls["ag"]) == {1}  # the model CCL's axis-1 semaphores serve the stats gather


def _refused_before_any_op(mesh, case):
    """A call whose input or residual cannot be moved where the norm reads it: (the rule, the ops and allocations the
    refused call made). Every op the compat module issues, moves included, is checked before the first runs."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.testing.recorder import recording

    def activation(rows, axis):  # a DRAM activation two tile rows high: the decode grid's shards hold one
        return tt_rmsnorm.shard_activation(torch.randn(1, 1, rows, DIM), mesh, cluster_axis=axis)

    if case == "tt_transformers_t3k":
        layer, _, _, _ = stand_ins.decoder_norm_module(mesh, False, distributed_modes=("decode", "prefill"))
        x = activation(64, None)

        def call():
            return layer(x, "decode")

    elif case == "tt_transformers_tg":
        layer, _, _, _ = stand_ins.decoder_norm_module(mesh, True)
        x = activation(64, 1)

        def call():
            return layer(x, "decode")

    else:  # the Galaxy decoder's norm: x moves to the decode grid, its residual cannot
        layer = stand_ins.galaxy_norm_module(mesh, stand_ins.ModelCCL(mesh))
        x, res = activation(32, 1), activation(64, 1)

        def call():
            return layer(x, res, "decode")

    with recording() as rec:
        try:
            call()
            rule = None
        except tt_rmsnorm.RuleError as e:
            rule = e.rule
    return rule, rec.ops, [c.name for c in rec.allocations]


@pytest.mark.parametrize(
    "system, case",
    [("t3k", "tt_transformers_t3k"), ("galaxy", "tt_transformers_tg"), ("galaxy", "galaxy_decoder_residual")],
    ids=["t3k-distributed-decode-move", "galaxy-tg-decode-move", "galaxy-decoder-residual-move"],
)
def test_a_refused_compat_call_issues_no_ttnn_op(system, case):
    rule, ops, allocations = workers.run_isolated(system, _refused_before_any_op, case, timeout=600)
    assert rule == "memory_config.shard_fits" and ops == [] and allocations == [], (rule, ops, allocations)
