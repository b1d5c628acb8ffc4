"""tt-metal's decoder norms through `tt_rmsnorm.compat`, on mock T3000, Galaxy and N150: the module classes and calls
of tt_transformers (RMSNorm with a model CCL object and its ModelArgs, DistributedNorm around it) at Llama-70B's
H = 8192, decode T = 32 and prefill T = 128. Each case returns what a decoder layer gets back per device."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192


class ModelCCL:
    """A model's CCL object as tt_transformers' TT_CCL is used: semaphores created once on the worker grid, two sets
    cycled per axis slot, links per axis from a system table."""

    LINKS = {(1, 8): (1, 1), (8, 4): (4, 3), (1, 1): (0, 0), (1, 2): (1, 1)}

    def __init__(self, mesh_device):
        import ttnn

        self.mesh_device = mesh_device
        g = mesh_device.compute_with_storage_grid_size()
        cores = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(g.x - 1, g.y - 1))})

        def sem():
            return ttnn.create_global_semaphore(mesh_device, cores, 0)

        self.ag = [[[sem(), sem()] for _ in range(2)] for _ in range(3)]
        self.barrier = [[sem() for _ in range(2)] for _ in range(3)]
        self.calls = {"ag": [], "barrier": []}

    @staticmethod
    def _slot(cluster_axis):
        return 2 if cluster_axis is None else cluster_axis

    def get_num_links(self, cluster_axis=None):
        links = self.LINKS[tuple(self.mesh_device.shape)]
        return min(links) if cluster_axis is None else links[cluster_axis]

    def get_and_cycle_ag_semaphore_handles(self, cluster_axis=None):
        slot = self._slot(cluster_axis)
        self.calls["ag"].append(slot)
        self.ag[slot].append(self.ag[slot].pop(0))
        return self.ag[slot][-1]

    def get_and_cycle_barrier_semaphore_handle(self, cluster_axis=None):
        slot = self._slot(cluster_axis)
        self.calls["barrier"].append(slot)
        self.barrier[slot].append(self.barrier[slot].pop(0))
        return self.barrier[slot][-1]


class ModelArgs:
    """The ModelArgs fields DistributedNorm reads."""

    def __init__(self, mesh_device, distributed_modes):
        import ttnn

        self.dim = DIM
        self.mesh_device = mesh_device
        self.is_multichip = mesh_device.get_num_devices() > 1
        self._modes = distributed_modes
        self._topology = ttnn.Topology.Ring if mesh_device.get_num_devices() == 8 else ttnn.Topology.Linear

    def is_distributed_norm(self, mode):
        return mode in self._modes

    def ccl_topology(self):
        return self._topology


def _facts(t):
    import ttnn

    outs = ttnn.get_device_tensors(t)
    mc = outs[0].memory_config()
    return {
        "devices": len(outs),
        "shape": tuple(outs[0].shape),
        "layout": str(mc.memory_layout).rsplit(".", 1)[-1],
        "buffer": str(mc.buffer_type).rsplit(".", 1)[-1],
        "dtype": str(outs[0].dtype).rsplit(".", 1)[-1],
    }


def _decode_configs(mesh, width):
    """Width-sharded decode configs for the module's compute config (HiFi2, fp32 accumulation: subblock_w <= 4)."""
    import ttnn

    from tt_rmsnorm.planning import layouts

    grid = mesh.compute_with_storage_grid_size()
    g = layouts.width_shard_grid(width, (grid.x, grid.y), max_cores=32)
    shape = (1, 1, 32, width)
    ck = ttnn.WormholeComputeKernelConfig(
        math_fidelity=ttnn.MathFidelity.HiFi2, math_approx_mode=False, fp32_dest_acc_en=True, packer_l1_acc=True
    )
    return layouts.sharded_memory_config(shape, g), layouts.sharded_program_config(shape, g, compute_kernel_config=ck)


def _tt_transformers_layer(mesh, mode, tg, distributed_modes=None):
    """One decoder norm as tt_transformers builds and calls it; the input arrives fractured over the mesh columns."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

    axis = 1 if tg else None
    distributed_modes = distributed_modes or (("decode", "prefill") if tg else ("prefill",))
    args = ModelArgs(mesh, distributed_modes)
    tt_ccl = ModelCCL(mesh)
    n = mesh.get_num_devices() if not tg else 4
    out_mc, pc = _decode_configs(mesh, DIM // n if "decode" in distributed_modes else DIM)
    sd = {"layers.0.attention_norm.weight": torch.randn(DIM)}
    norm = RMSNorm(
        device=mesh,
        dim=DIM,
        state_dict=sd,
        weight_key="attention_norm",
        layer_num=0,
        weight_dtype=ttnn.bfloat16,
        is_distributed=args.is_distributed_norm,
        sharded_program_config=pc,
        sharded_output_config=out_mc,
        ccl_topology=args.ccl_topology(),
        tt_ccl=tt_ccl,
    )
    layer = DistributedNorm(norm, args, tt_ccl, TG=tg)
    tokens = 32 if mode == "decode" else 128
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, DIM), mesh, cluster_axis=axis)
    first = _facts(layer(x, mode))
    second = _facts(layer(x, mode))  # planned once: the second call runs the same plan
    return first, second, tt_ccl.calls


@pytest.mark.parametrize(
    "system, mode, expect",
    [
        ("t3k", "decode", {"devices": 8, "shape": (1, 1, 32, DIM), "layout": "WIDTH_SHARDED", "buffer": "L1"}),
        ("t3k", "prefill", {"devices": 8, "shape": (1, 1, 128, DIM), "layout": "INTERLEAVED", "buffer": "DRAM"}),
        ("galaxy", "decode", {"devices": 32, "shape": (1, 1, 32, DIM // 4), "layout": "WIDTH_SHARDED", "buffer": "L1"}),
        (
            "galaxy",
            "prefill",
            {"devices": 32, "shape": (1, 1, 128, DIM // 4), "layout": "INTERLEAVED", "buffer": "DRAM"},
        ),
    ],
    ids=["t3k-decode", "t3k-prefill", "galaxy-decode", "galaxy-prefill"],
)
def test_tt_transformers_decoder_norm(system, mode, expect):
    first, second, calls = workers.run_isolated(system, _tt_transformers_layer, mode, system == "galaxy", timeout=600)
    assert {k: first[k] for k in expect} == expect, first
    assert second == first
    # the model CCL object's own cycling serves every gather: T3000 gathers the decode input and the prefill output
    # over its line (slot 2), Galaxy's stats gather runs on axis 1
    assert calls["ag"] and len(calls["ag"]) == len(calls["barrier"])
    assert set(calls["ag"]) == ({1} if system == "galaxy" else {2})


def _one_device(mesh, mode):
    """N150: a replicated Llama-70B-sized norm (H = 8192) on one chip, is_distributed None as tt-metal's default."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.compat import RMSNorm

    norm = RMSNorm(mesh, DIM, {"norm.weight": torch.randn(DIM)}, "norm")
    out_mc, pc = _decode_configs(mesh, DIM)
    norm.sharded_program_config, norm.sharded_output_config = pc, out_mc
    tokens = 32 if mode == "decode" else 128
    x = tt_rmsnorm.shard_activation(
        torch.randn(1, 1, tokens, DIM), mesh, memory_config=out_mc if mode == "decode" else None
    )
    decode = mode == "decode"
    y = norm(x, mode, in_sharded=decode, out_sharded=decode)
    return _facts(y), str(norm.weight.layout), str(norm._weight_interleaved().layout)


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
        _tt_transformers_layer(mesh, "decode", False, ("decode", "prefill"))
    except RuleError as e:
        return e.rule, str(e)
    return None, ""


def test_gathering_a_sharded_decode_output_to_full_width_is_a_rule_not_a_tt_fatal():
    """A distributed decode on T3000 through DistributedNorm (tt-metal's RMSNorm asserts on its sharded input): the
    output gather into the per-device shard spec cannot hold 8192 columns; the rules say so before the norm runs."""
    rule, message = workers.run_isolated("t3k", _distributed_decode_on_t3k, timeout=600)
    assert rule is not None and rule.startswith(("memory_config.", "all_gather")), message
