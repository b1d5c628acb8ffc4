"""`run(system)`: `tt_rmsnorm.distributed_rms_norm` by every path on a mock mesh, and what ttnn accepted."""

from __future__ import annotations

from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES
from tt_rmsnorm.testing.workers import run_isolated

# Llama-70B hidden 8192: 1024 per device on T3000, 2048 per Galaxy column (Wormhole or Blackhole), 4096 on N300 and
# P300. One chip holds a full activation of a smaller model: 4096 on an N150, 5120 on a P150 (its larger L1 takes the
# row with a ROW_MAJOR weight); plain rms_norm with the weight does not fit 8192 in one core's L1 on either.
HIDDEN = {"n150": 4096, "n300": 8192, "t3k": 8192, "galaxy": 8192, "p150": 5120, "p300": 8192, "bh-galaxy": 8192}


MODES = (("decode", 32), ("prefill", 128))


PATHS = {
    "n150": ("local",),
    "n300": ("classic", "async", "fused"),
    "t3k": ("classic", "async", "fused"),
    "galaxy": ("classic", "async", "fused"),
    "p150": ("local",),
    "p300": ("classic", "async", "fused"),
    "bh-galaxy": ("classic", "async", "fused"),
}


def memory_config_text(mc) -> str:
    text = f"{str(mc.memory_layout).rsplit('.', 1)[-1]} {str(mc.buffer_type).rsplit('.', 1)[-1]}"
    if mc.shard_spec is not None:
        box = mc.shard_spec.grid.bounding_box()
        text += (
            f" shard {list(mc.shard_spec.shape)} on {mc.shard_spec.grid.num_cores()} cores "
            f"({box.start.x},{box.start.y})-({box.end.x},{box.end.y})"
        )
    return text


def _run_in_worker(mesh, system: str) -> list[dict]:
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm import devices, distributed

    rows_out = []
    shape = MESH_SHAPES[system]
    cluster_axis = 1 if shape[0] > 1 else None
    n = shape[1]
    hidden = HIDDEN[system]
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=cluster_axis) if n > 1 else None
    for mode, tokens in MODES:
        torch.manual_seed(0)
        x = devices.shard_activation(torch.randn(1, 1, tokens, hidden), mesh, cluster_axis=cluster_axis)
        r = devices.shard_activation(torch.randn(1, 1, tokens, hidden), mesh, cluster_axis=cluster_axis)
        w = devices.prepare_weight(torch.randn(hidden), mesh, cluster_axis=cluster_axis)
        for path in PATHS[system]:
            if path == "fused" and mode != "decode":
                continue
            row = {"system": system, "mesh": "x".join(map(str, shape)), "mode": mode, "tokens": tokens, "path": path}
            try:
                # decode asks for the sharded layout (a DRAM decode input otherwise stays interleaved)
                sharded = True if mode == "decode" else None
                y, _ = distributed.distributed_rms_norm(
                    x, w, mesh, epsilon=1e-5, cluster_axis=cluster_axis, residual=r, path=path, ccl=ccl, sharded=sharded
                )
            except Exception as e:  # a verdict, reported: what ttnn (or a rule) refused
                rows_out.append({**row, "verdict": "REJECTED", "message": f"{type(e).__name__}: {e}".splitlines()[0]})
                continue
            outs = ttnn.get_device_tensors(y)
            facts = {
                (tuple(t.shape), str(t.dtype).rsplit(".", 1)[-1], memory_config_text(t.memory_config())) for t in outs
            }
            rows_out.append(
                {
                    **row,
                    "verdict": "ACCEPTED",
                    "input_shape": (1, 1, tokens, hidden),
                    "devices": len(outs),
                    "outputs": sorted(facts),
                }
            )
    return rows_out


def run(system: str, timeout: float = 300.0) -> list[dict]:
    """Run `distributed_rms_norm` with a residual through real ttnn on the mock `system` (a key of `HIDDEN`) by every
    path that applies there, decode (32 tokens) and prefill (128). One row per (mode, path): the
    verdict and, where accepted, every distinct (shape, dtype, memory config) of the per-device outputs."""
    return run_isolated(system, _run_in_worker, system, timeout=timeout)
