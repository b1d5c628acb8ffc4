"""tt_rmsnorm: distributed RMSNorm over Tenstorrent meshes, one call.

    import tt_rmsnorm
    y = tt_rmsnorm.distributed_rms_norm(x, w, mesh_device, epsilon=1e-5, cluster_axis=1)

Attributes load lazily so that the ttnn-free modules (`accuracy`, `reference`) import on machines without ttnn
(the GPU and Trainium hosts the ports run on).
"""

from importlib import import_module

_EXPORTS = {
    "RuleError": "errors",
    "TensorDesc": "tensors",
    "mark_stats": "tensors",
    "rms_norm_pre_all_gather": "ops",
    "rms_norm_post_all_gather": "ops",
    "rms_norm": "ops",
    "all_gather": "ops",
    "distributed_rms_norm": "distributed",
    "prepare_weight": "devices",
    "shard_activation": "devices",
    "gather_output": "devices",
    "open_mesh": "devices",
    "close_mesh": "devices",
    "plan_distributed_rms_norm": "distributed",
    "CCLResources": "ccl",
    "DistributedRMSNorm": "module",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
