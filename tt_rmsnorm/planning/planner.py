"""From a call's tensors and arguments to a checked path plan (`tt_rmsnorm.planning.paths`), with no device work until
every rule of every op on the path has passed.

`plan_call` works on device-free `TensorDesc`s: `plan_distributed_rms_norm` uses it with no device at all, and
`distributed_rms_norm` once per call signature, after which only the plan's ttnn calls run. The persistent buffers a
path needs are allocated from the call's `CCLResources` after the checks pass.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import ttnn

from tt_rmsnorm import op_outputs
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import layouts, paths
from tt_rmsnorm.rules import ccl_checks
from tt_rmsnorm.tensors import TensorDesc

_PATH_CLASSES = {
    "classic": paths.ClassicPath,
    "async": paths.AsyncPath,
    "fused": paths.FusedPath,
    "local": paths.LocalPath,
}


def copy_config(cfg):
    """A fresh ttnn config with `cfg`'s fields: ttnn's config objects are mutable, and a plan must keep what was
    checked."""
    if cfg is None:
        return None
    if isinstance(cfg, ttnn.LayerNormShardedMultiCoreProgramConfig):
        g = cfg.compute_with_storage_grid_size
        return ttnn.LayerNormShardedMultiCoreProgramConfig(
            compute_with_storage_grid_size=ttnn.CoreCoord(g.x, g.y),
            subblock_w=cfg.subblock_w,
            block_h=cfg.block_h,
            block_w=cfg.block_w,
            inplace=cfg.inplace,
            use_welford=cfg.use_welford,
        )
    if isinstance(cfg, ttnn.LayerNormDefaultProgramConfig):
        return ttnn.LayerNormDefaultProgramConfig(legacy_reduction=cfg.legacy_reduction, use_welford=cfg.use_welford)
    if isinstance(cfg, ttnn.WormholeComputeKernelConfig):
        return ttnn.WormholeComputeKernelConfig(
            math_fidelity=cfg.math_fidelity,
            math_approx_mode=cfg.math_approx_mode,
            fp32_dest_acc_en=cfg.fp32_dest_acc_en,
            packer_l1_acc=cfg.packer_l1_acc,
            dst_full_sync_en=cfg.dst_full_sync_en,
        )
    return cfg


def _layout(name: str, x: TensorDesc, sharded):
    """Whether the layout plan is sharded: the local path keeps x where it is, the fused path is sharded by contract."""
    if x.is_sharded and sharded is False:
        raise RuleError(
            "mesh.sharded_override",
            "x is already sharded; the interleaved layout needs an interleaved input",
            "sharded=False",
            "ttnn.to_memory_config(x, ttnn.DRAM_MEMORY_CONFIG) first",
        )
    if name == "local":
        return x.is_sharded
    if name == "fused":
        return True
    # an interleaved input stays interleaved unless the caller asks for the sharded layout (no reshard round trip)
    return True if x.is_sharded else bool(sharded)


def _norm_plan(
    name, x: TensorDesc, num_devices, compute_grid, sharded, program_config, compute_kernel_config, fp32_accumulation
):
    norm = layouts.plan(
        x.shape,
        num_devices,
        compute_grid=compute_grid,
        arch=x.arch,
        dtype=x.dtype,
        sharded=_layout(name, x, sharded),
        program_config=program_config,
        compute_kernel_config=compute_kernel_config,
        fp32_accumulation=fp32_accumulation,
    )
    if norm.layout == "sharded" and x.is_sharded:
        # The caller's sharding is honoured: x stays where it is, and the rules judge the caller's program config (or
        # the one its shard spec implies) against x's own shards.
        pc = program_config or layouts.program_config_from_shard_spec(x.shard_spec, norm.compute_kernel_config)
        norm = replace(norm, program_config=pc, input_memory_config=None)
    return norm


def hosts_of(mesh_device) -> int:
    """How many hosts hold the mesh: its devices over the ones this process opened (1 for a mesh on one host)."""
    local = len(mesh_device.get_device_ids())
    return -(-mesh_device.get_num_devices() // local) if local else 1


def _fused_on_one_host(path: str, reason: str, x: TensorDesc, mesh_device, mesh_shape) -> tuple[str, str]:
    """The fused path on a mesh on one host; on a mesh that spans hosts the decode takes async when the path is the
    planner's choice, and an asked-for fused path is refused (fused.one_host) before any device work."""
    hosts = hosts_of(mesh_device) if mesh_device is not None else None
    try:
        ccl_checks.check_fused_one_host(x.arch, mesh_shape, hosts)
    except RuleError:
        if path != "auto":
            raise
        return "async", "decode on a mesh that spans hosts: fused_rms_minimal runs on one host's devices"
    return "fused", reason


def _check_path_fits(name: str, num_devices: int, ccl) -> None:
    if name == "local" and num_devices != 1:
        raise RuleError(
            "path.local_one_device",
            "the local path normalizes one device's slice by itself: it needs one device on the gather axis",
            f"{num_devices} devices on the gather axis",
            "a per-head norm (each device normalizing its own heads over their own width): "
            "tt_rmsnorm.DistributedRMSNorm(mesh_device, head_dim, ..., is_distributed=False), which runs rms_norm on "
            'every device with the replicated weight; a hidden dim sharded over the axis: path="auto"',
        )
    if name in ("async", "fused") and ccl is None:
        raise RuleError(
            "path.needs_ccl",
            f"the {name} path signals through global semaphores created once, before the call",
            "ccl=None",
            "create ccl = tt_rmsnorm.CCLResources(mesh_device, cluster_axis=...) once; pass ccl=ccl",
        )


def _buffers(name: str, plan: paths.PathPlan, x: TensorDesc) -> dict[str, TensorDesc]:
    """Descriptions of the persistent buffers a path passes to ttnn, by plan field."""
    if name == "async":
        return {"gathered": plan.stats_desc(x)}
    if name == "fused":
        return {
            "fused_stats": op_outputs.fused_stats_desc(
                plan.input_desc(x), plan.call.num_devices, plan.norm.compute_kernel_config
            )
        }
    return {}


def allocate(desc: TensorDesc, mesh_device):
    """A zero-filled tensor of `desc` replicated on every device of the mesh (a persistent buffer)."""
    return ttnn.from_torch(
        torch.zeros(desc.shape),
        dtype=desc.dtype,
        layout=ttnn.TILE_LAYOUT,
        device=mesh_device,
        memory_config=desc.memory_config,
        mesh_mapper=ttnn.ReplicateTensorToMesh(mesh_device),
    )


def _output_placement(name: str, norm, x: TensorDesc, target):
    """(where the sharded op writes its output, where it is moved afterwards or None). The sharded post writes into
    its input's shards; fused_rms_minimal writes any width-sharded L1 config itself (a fused reshard, as tt-metal's
    decode hands the next matmul its input), so only other targets cost a move. Interleaved layouts pass the target to
    the op."""
    if name == "local" or norm.layout != "sharded":
        return None, None
    h_memory_config = norm.input_memory_config or x.memory_config
    want = target or x.memory_config
    written = h_memory_config
    if name == "fused" and _width_sharded_l1(want):
        written = want
    return written, None if want == written else want


def _width_sharded_l1(mc) -> bool:
    return (
        mc.memory_layout == ttnn.TensorMemoryLayout.WIDTH_SHARDED
        and mc.buffer_type == ttnn.BufferType.L1
        and mc.shard_spec is not None
        and mc.shard_spec.orientation == ttnn.ShardOrientation.ROW_MAJOR
    )


def plan_call(
    x: TensorDesc,
    w: TensorDesc | None,
    residual: TensorDesc | None,
    *,
    mesh_device,
    compute_grid,
    num_devices: int,
    call: paths.Call,
    path: str = "auto",
    sharded=None,
    program_config=None,
    compute_kernel_config=None,
    ccl=None,
    stats_memory_config=None,
) -> paths.PathPlan | paths.RankView:
    """The checked plan for one call signature. With a `mesh_device` the path's persistent buffers are allocated from
    `ccl` once every check has passed; without one (planning only) the plan carries their descriptions.

    Without a `compute_kernel_config` the plan takes fp32 accumulation (`layouts.compute_kernel_config`), and where
    that does not fit (`FP32_BOUND_RULES`) ttnn's own default, as ttnn would run the call: the plan's reason says so."""
    if x.rank == 3 and not (num_devices == 1 and path in ("auto", "local")):  # rms_norm takes rank 3 as it is
        viewed = plan_call(
            paths.rank4(x),
            w,
            paths.rank4(residual),
            mesh_device=mesh_device,
            compute_grid=compute_grid,
            num_devices=num_devices,
            call=call,
            path=path,
            sharded=sharded,
            program_config=program_config,
            compute_kernel_config=compute_kernel_config,
            ccl=ccl,
            stats_memory_config=stats_memory_config,
        )
        return paths.RankView(viewed, x.shape)
    arguments = (x, w, residual, mesh_device, compute_grid, num_devices, call, path, sharded, program_config)
    try:
        return _plan_call(*arguments, compute_kernel_config, ccl, stats_memory_config, fp32_accumulation=True)
    except RuleError as e:
        if compute_kernel_config is not None or e.rule not in FP32_BOUND_RULES:
            raise
        plan = _plan_call(*arguments, None, ccl, stats_memory_config, fp32_accumulation=False)
        why = f"ttnn's default compute config: fp32 accumulation does not fit ({e.rule})"
        return replace(plan, reason=f"{plan.reason}; {why}")


# The rules a plan can break only because it took fp32 accumulation, which the caller did not ask for: the L1 the
# accumulation's buffers take and the dst-register limit on subblock_w.
FP32_BOUND_RULES = frozenset(
    {
        "pre.l1_budget",
        "post.l1_budget",
        "rms_norm.l1_budget",
        "sharded.l1_budget",
        "fused.l1_budget",
        "program_config.subblock_w_limit",
        "fused.subblock_w_limit",
    }
)


def _plan_call(
    x,
    w,
    residual,
    mesh_device,
    compute_grid,
    num_devices,
    call,
    path,
    sharded,
    program_config,
    compute_kernel_config,
    ccl,
    stats_memory_config,
    *,
    fp32_accumulation,
) -> paths.PathPlan:
    name, reason = paths.choose(
        x.shape, num_devices, ccl=ccl, has_weight=w is not None, path=path, in_l1=x.is_sharded or bool(sharded)
    )
    if name == "fused":
        name, reason = _fused_on_one_host(path, reason, x, mesh_device, call.mesh_shape)
    _check_path_fits(name, num_devices, ccl)
    norm = _norm_plan(
        name, x, num_devices, compute_grid, sharded, program_config, compute_kernel_config, fp32_accumulation
    )
    if stats_memory_config is not None:  # the caller's: the gather and the post's rules judge it
        norm = replace(norm, stats_memory_config=stats_memory_config)
    written, move = _output_placement(name, norm, x, call.memory_config)
    plan = _PATH_CLASSES[name](
        name=name,
        reason=reason,
        norm=norm,
        call=call,
        mesh_device=mesh_device,
        compute_grid=tuple(compute_grid),
        ccl=ccl if ccl is not True else None,
        x_memory_config=x.memory_config,
        written_memory_config=written,
        move_output=move,
    )
    buffers = _buffers(name, plan, x)
    plan = replace(plan, **buffers)
    plan.check(x, w, residual)
    if mesh_device is not None and buffers:
        made = {
            k: ccl.buffer((k, d.shape, d.dtype, d.memory_config), lambda d=d: allocate(d, mesh_device))
            for k, d in buffers.items()
        }
        plan = replace(plan, **made)
    return plan
