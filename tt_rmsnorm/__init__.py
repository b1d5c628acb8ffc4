"""tt_rmsnorm: distributed RMSNorm over Tenstorrent meshes, one call.

    import tt_rmsnorm
    y = tt_rmsnorm.distributed_rms_norm(x, w, mesh_device, epsilon=1e-5, cluster_axis=1)

ttnn's checked ops, with ttnn's names and keywords, are under `tt_rmsnorm.ops`. Where ttnn is not installed (the GPU
and Trainium hosts the other ports run on) only the ttnn-free modules import: `errors`, `accuracy`, `reference`.
"""

from tt_rmsnorm import accuracy, errors, reference
from tt_rmsnorm.errors import RuleError


def _ttnn_importable() -> bool:
    try:
        import ttnn  # noqa: F401
    except ImportError:
        return False
    return True


# What imports everywhere (the GPU and Trainium hosts included), and what needs ttnn.
__all__ = ["RuleError", "accuracy", "errors", "reference"]
if _ttnn_importable():
    from tt_rmsnorm import ops
    from tt_rmsnorm.ccl import CCLResources
    from tt_rmsnorm.devices import close_mesh, gather_output, open_mesh, prepare_weight, shard_activation
    from tt_rmsnorm.distributed import distributed_rms_norm, plan_distributed_rms_norm
    from tt_rmsnorm.rmsnorm_module import DistributedRMSNorm
    from tt_rmsnorm.tensors import TensorDesc, mark_stats

    __all__ += [
        "CCLResources",
        "DistributedRMSNorm",
        "TensorDesc",
        "close_mesh",
        "distributed_rms_norm",
        "gather_output",
        "mark_stats",
        "open_mesh",
        "ops",
        "plan_distributed_rms_norm",
        "prepare_weight",
        "shard_activation",
    ]
