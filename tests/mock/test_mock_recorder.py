"""The recorder of ttnn calls (`tt_rmsnorm.testing.recorder`) on a mock T3000: the ops in order by their own names,
semaphore handles, persistent buffers and tensor arguments by identity, allocations with what they made, a call that
raises still recorded, ttnn's own nested calls folded into the outer one, and ttnn's entry points restored after the
block."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster


def _record(mesh):
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.testing.recorder import recording

    originals = (ttnn.rms_norm, ttnn.experimental.all_gather_async, ttnn.from_torch)
    with recording() as made:
        ccl = tt_rmsnorm.CCLResources(mesh)
        x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, 8192), mesh)
        ttnn.as_tensor(  # ttnn.from_torch inside
            torch.randn(1, 1, 32, 32), layout=ttnn.TILE_LAYOUT, device=mesh, memory_config=ttnn.DRAM_MEMORY_CONFIG
        )
    w = tt_rmsnorm.prepare_weight(torch.randn(8192), mesh)
    with recording() as rec:
        tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, ccl=ccl)
        try:
            ttnn.rms_norm(ttnn.from_torch(torch.randn(1, 1, 32, 32)), epsilon=1e-5)  # a host tensor: ttnn refuses
        except RuntimeError:
            pass
    gather = rec.calls_of("all_gather_async")[0]
    created = [c.made for c in made.calls_of("create_global_semaphore")]
    uploads = [c for c in made.allocations if c.name == "from_torch"]
    return {
        "ops": rec.ops,
        "allocations": [c.name for c in rec.allocations],
        "semaphores_created_first": set(gather.semaphore_ids) <= set(created),
        "gather_arguments": sorted(gather.semaphores),
        "buffer_is_the_allocation": gather.buffers["persistent_output_tensor"] == rec.allocations[0].made,
        "x_upload_seen": len(uploads) == 1 and uploads[0].made == id(x),
        "restored": (ttnn.rms_norm, ttnn.experimental.all_gather_async, ttnn.from_torch) == originals,
        "semaphores_created": len(created),
        "post_tensors": sorted(rec.calls_of("rms_norm_post_all_gather")[0].tensors),
        "post_weight": rec.calls_of("rms_norm_post_all_gather")[0].tensors["weight"] == id(w),
        "pre_input": rec.calls_of("rms_norm_pre_all_gather")[0].tensors == {"input_tensor": id(x)},
        "uploads": [c.name for c in made.allocations if c.name != "create_global_semaphore"],
    }


def test_the_recorder_lists_ops_handles_buffers_and_allocations():
    got = workers.run_isolated("t3k", _record)
    assert got["ops"] == ["rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather", "rms_norm"]
    # the planning call allocates the persistent gather buffer once; the refused rms_norm's host tensor is an upload
    assert got["allocations"] == ["from_torch", "from_torch"]
    assert got["buffer_is_the_allocation"] and got["semaphores_created_first"] and got["x_upload_seen"]
    assert got["gather_arguments"] == ["barrier_semaphore", "multi_device_global_semaphore"]
    assert got["semaphores_created"] == 2 * (2 + 1 + 1)  # two sets of (2 gather, barrier, fused)
    assert got["uploads"] == ["from_torch", "as_tensor"]  # as_tensor's own from_torch is part of it
    # tensor arguments by ttnn's names: the post's input, the gathered stats and the weight
    assert got["post_tensors"] == ["input_tensor", "stats", "weight"] and got["post_weight"] and got["pre_input"]
    assert got["restored"]
