"""Stand-ins for what a tt-metal model hands its norms: its CCL object (as tt_transformers' TT_CCL is used) and the
ModelArgs fields DistributedNorm reads, and one decoder norm built and called as tt_transformers does, through
`tt_rmsnorm.compat`. The compat tests and the demo run it on mock meshes."""

DIM = 8192  # Llama-70B


class ModelCCL:
    """A model's CCL object as tt_transformers' TT_CCL is used: semaphores created once on the worker grid, two sets
    cycled per axis slot, links per axis from its system table (Wormhole), else as ttnn counts them
    (`ttnn.get_num_links`, what newer model code asks on Blackhole)."""

    LINKS = {
        ("wormhole_b0", (1, 8)): (1, 1),
        ("wormhole_b0", (8, 4)): (4, 3),
        ("wormhole_b0", (1, 1)): (0, 0),
        ("wormhole_b0", (1, 2)): (1, 1),
    }

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
        import ttnn

        arch = str(self.mesh_device.arch()).rsplit(".", 1)[-1].lower()
        links = self.LINKS.get((arch, tuple(self.mesh_device.shape)))
        if links is None:
            return ttnn.get_num_links(self.mesh_device, cluster_axis)
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

    def __init__(self, mesh_device, distributed_modes, dim=DIM):
        import ttnn

        self.dim = dim
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


def decoder_norm_module(mesh, tg, distributed_modes=None, dim=DIM, weight_dtype="bfloat16"):
    """tt_transformers' decoder norm as a model builds it, through `tt_rmsnorm.compat`: the layer (DistributedNorm),
    its RMSNorm, the ModelArgs and the model's CCL object. `distributed_modes` defaults to tt_transformers' choice:
    both modes on a Galaxy (TG), prefill on a multichip mesh, none on one chip."""
    import torch
    import ttnn

    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

    multichip = mesh.get_num_devices() > 1
    if distributed_modes is None:
        distributed_modes = ("decode", "prefill") if tg else ("prefill",) if multichip else ()
    args = ModelArgs(mesh, distributed_modes, dim)
    tt_ccl = ModelCCL(mesh)
    n = 4 if tg else mesh.get_num_devices()
    out_mc, pc = decode_configs(mesh, dim // n if "decode" in distributed_modes else dim)
    norm = RMSNorm(
        device=mesh,
        dim=dim,
        state_dict={"layers.0.attention_norm.weight": torch.randn(dim)},
        weight_key="attention_norm",
        layer_num=0,
        weight_dtype=getattr(ttnn, weight_dtype),
        is_distributed=args.is_distributed_norm,
        sharded_program_config=pc,
        sharded_output_config=out_mc,
        ccl_topology=args.ccl_topology(),
        tt_ccl=tt_ccl,
    )
    return DistributedNorm(norm, args, tt_ccl, TG=tg), norm, args, tt_ccl


def decoder_input(mesh, mode, tg, dim=DIM, activation_dtype="bfloat16"):
    """The activation a decoder norm receives: fractured over the mesh columns (replicated on one chip), DRAM."""
    import torch
    import ttnn

    import tt_rmsnorm

    tokens = 32 if mode == "decode" else 128
    return tt_rmsnorm.shard_activation(
        torch.randn(1, 1, tokens, dim), mesh, cluster_axis=1 if tg else None, dtype=getattr(ttnn, activation_dtype)
    )


def decoder_norm(mesh, mode, tg, distributed_modes=None, activation_dtype="bfloat16"):
    """One decoder norm as tt_transformers builds and calls it; the input arrives fractured over the mesh columns, in
    `activation_dtype`."""
    layer, _, _, tt_ccl = decoder_norm_module(mesh, tg, distributed_modes)
    x = decoder_input(mesh, mode, tg, activation_dtype=activation_dtype)
    first = facts(layer(x, mode))
    second = facts(layer(x, mode))  # planned once: the second call runs the same plan
    return first, second, tt_ccl.calls


def galaxy_norm_module(mesh, tt_ccl, key="attention_norm"):
    """The Llama-70B Galaxy decoder's norm as its decoder builds it (llama3_70b_galaxy's DistributedNorm around
    tt-metal's RMSNorm, TG), through `tt_rmsnorm.compat.llama_galaxy`, with the model's CCL object."""
    import torch
    import ttnn

    from tt_rmsnorm.compat import RMSNorm
    from tt_rmsnorm.compat.llama_galaxy import DistributedNorm

    args = ModelArgs(mesh, ("decode", "prefill"))
    norm = RMSNorm(
        device=mesh,
        dim=DIM,
        state_dict={f"layers.0.{key}.weight": torch.randn(DIM)},
        weight_key=key,
        state_dict_prefix="layers.0.",
        weight_dtype=ttnn.bfloat16,
        is_distributed=args.is_distributed_norm,
    )
    return DistributedNorm(norm, args, TG=True, tt_ccl=tt_ccl, ccl_topology=ttnn.Topology.Linear)


def galaxy_input(mesh, mode, layer, activation_dtype="bfloat16"):
    """An activation of the Galaxy decoder: fractured over the mesh columns, decode already on the norm's width-sharded
    grid, prefill in DRAM."""
    import torch
    import ttnn

    import tt_rmsnorm

    tokens = 32 if mode == "decode" else 128
    return tt_rmsnorm.shard_activation(
        torch.randn(1, 1, tokens, DIM),
        mesh,
        cluster_axis=1,
        dtype=getattr(ttnn, activation_dtype),
        memory_config=layer.gather_in_mem_cfg if mode == "decode" else None,
    )


def galaxy_decoder_norm(mesh, mode, with_residual):
    """The Galaxy decoder's norm called as its decoder calls it: `norm(x, res, mode)`. Returns the facts of the output
    and of the second element of the pair, whether that element is the caller's residual itself, whether a second
    call gives the same facts, and the model CCL object's calls."""
    tt_ccl = ModelCCL(mesh)
    layer = galaxy_norm_module(mesh, tt_ccl)
    x = galaxy_input(mesh, mode, layer)
    res = galaxy_input(mesh, mode, layer) if with_residual else None
    out, back = layer(x, res, mode)
    again, _ = layer(x, res, mode)  # planned once: the second call runs the same plan
    return facts(out), None if back is None else facts(back), back is res, facts(again) == facts(out), tt_ccl.calls


def decoder_layer(mesh, mode, system):
    """One decoder layer's two norms as tt-metal's decoders run them, through `tt_rmsnorm.compat`, with stand-ins for
    the attention output between them: tt_transformers' (T3000) `h = x + attn_out; ff_norm(h, mode)`, and the Galaxy
    decoder's `attention_norm(x, None, mode)` then `ff_norm(attn_out, h, mode)` with the residual stream h updated in
    place. The layer runs once to plan, then once recorded. Returns (facts of the attention norm's output, facts of
    the ff norm's output, the ops the recorded layer issued, the allocations it made)."""
    import ttnn

    from tt_rmsnorm.testing import recorder

    tg = system in ("galaxy", "bh-galaxy")
    if not tg:
        attention_norm, _, _, tt_ccl = decoder_norm_module(mesh, False)
        ff_norm, _, _, _ = decoder_norm_module(mesh, False)
        ff_norm.tt_ccl = attention_norm.tt_ccl = tt_ccl
        x, attn_out = decoder_input(mesh, mode, False), decoder_input(mesh, mode, False)

        def layer():
            attn_in = attention_norm(x, mode)
            h = ttnn.add(x, attn_out)
            return attn_in, ff_norm(h, mode)

    else:
        tt_ccl = ModelCCL(mesh)
        attention_norm, ff_norm = galaxy_norm_module(mesh, tt_ccl), galaxy_norm_module(mesh, tt_ccl, "ffn_norm")
        x, attn_out = galaxy_input(mesh, mode, attention_norm), galaxy_input(mesh, mode, attention_norm)

        def layer():
            attn_in, _ = attention_norm(x, None, mode)
            ff_in, _ = ff_norm(attn_out, x, mode)  # x is the residual stream h of the first layer
            return attn_in, ff_in

    layer()
    with recorder.recording() as rec:
        attn_in, ff_in = layer()
    return facts(attn_in), facts(ff_in), rec.ops, [c.name for c in rec.allocations]
