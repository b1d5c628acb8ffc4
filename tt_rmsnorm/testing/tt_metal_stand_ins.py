"""Stand-ins for what a tt-metal model hands its norms: its CCL object (as tt_transformers' TT_CCL is used) and the
ModelArgs fields DistributedNorm reads, and one decoder norm built and called as tt_transformers does, through
`tt_rmsnorm.compat`. The compat tests and the demo run it on mock meshes."""

DIM = 8192  # Llama-70B


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


def facts(t):
    """What a decoder layer gets back per device: devices, shape, memory layout, buffer, dtype."""
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


def decode_configs(mesh, width):
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


def decoder_layer(mesh, mode, tg, distributed_modes=None, activation_dtype="bfloat16", tt_ccl=None):
    """One decoder norm as tt_transformers builds it, and an input for `mode` that arrives fractured over the mesh
    columns, in `activation_dtype`: (DistributedNorm, x, the model CCL object)."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

    axis = 1 if tg else None
    distributed_modes = distributed_modes or (("decode", "prefill") if tg else ("prefill",))
    args = ModelArgs(mesh, distributed_modes)
    tt_ccl = tt_ccl or ModelCCL(mesh)
    n = mesh.get_num_devices() if not tg else 4
    out_mc, pc = decode_configs(mesh, DIM // n if "decode" in distributed_modes else DIM)
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
    x = tt_rmsnorm.shard_activation(
        torch.randn(1, 1, tokens, DIM), mesh, cluster_axis=axis, dtype=getattr(ttnn, activation_dtype)
    )
    return layer, x, tt_ccl


def decoder_norm(mesh, mode, tg, distributed_modes=None, activation_dtype="bfloat16"):
    """One decoder norm as tt_transformers builds and calls it, twice; the input arrives fractured over the mesh
    columns, in `activation_dtype`. Returns what the layer gives back each time and the model CCL object's calls."""
    layer, x, tt_ccl = decoder_layer(mesh, mode, tg, distributed_modes, activation_dtype)
    first = facts(layer(x, mode))
    second = facts(layer(x, mode))  # planned once: the second call runs the same plan
    return first, second, tt_ccl.calls
