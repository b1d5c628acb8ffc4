"""The agreement battery's cases, described once as plain data and turned into ttnn objects on either side.

A case is a dict: `op` ("pre", "post", "rms_norm", "all_gather"), `system` (mock system it runs on), tensor specs for
`x` and optionally `stats`, `weight`, `bias`, `residual`, op keyword arguments `kw` (memory/program/compute configs as
specs), and `expect`: what real ttnn does with it ("accept" / "reject"), or "pkg:<rule>" for a package-only guard (ttnn
accepts or crashes, the package rejects on purpose with that rule id). Specs are plain tuples so cases pickle into the
worker process, where real device tensors are built; the package side builds `TensorDesc`s from the same specs.
"""

from __future__ import annotations

import warnings
import zlib

import ttnn

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.rules.op_checks import check_all_gather, check_post_all_gather, check_pre_all_gather, check_rms_norm
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.testing.mock_cluster import ARCHES, MESH_SHAPES

# compute_with_storage_grid_size of each mock as opened by tt_rmsnorm.testing.mock_cluster.open_mesh
GRIDS = {
    "n150": (8, 8),
    "n300": (8, 7),
    "t3k": (8, 7),
    "galaxy": (8, 9),
    "p150": (13, 10),
    "p300": (11, 10),
    "bh-galaxy": (12, 10),
}
DTYPES = {
    "bf16": ttnn.bfloat16,
    "bf8": ttnn.bfloat8_b,
    "fp32": ttnn.float32,
    "bf4": ttnn.bfloat4_b,
    "int32": ttnn.int32,
    "uint32": ttnn.uint32,
    "uint16": ttnn.uint16,
    "uint8": ttnn.uint8,
}
INTEGER_DTYPES = ("int32", "uint32", "uint16", "uint8")
BLOCK_FLOAT_DTYPES = ("bf8", "bf4")  # exist only in TILE layout
LAYOUTS = {"TILE": ttnn.TILE_LAYOUT, "RM": ttnn.ROW_MAJOR_LAYOUT}
SHARDING = {
    "WIDTH": ttnn.TensorMemoryLayout.WIDTH_SHARDED,
    "BLOCK": ttnn.TensorMemoryLayout.BLOCK_SHARDED,
    "HEIGHT": ttnn.TensorMemoryLayout.HEIGHT_SHARDED,
}
TENSOR_SLOTS = ("x", "stats", "weight", "bias", "residual")
A, R = "accept", "reject"  # what ttnn does with a case


# ---------------------------------------------------------------------------------------------------------------------
# Spec constructors (used by the table) and their ttnn materialization (used by both sides).


def T(shape, dtype="bf16", layout="TILE", mem="DRAM", host=False, kind=None):
    """A tensor spec: per-device shape, dtype, layout, memory config spec, host-resident?, stats kind (sums/means)."""
    return {"shape": tuple(shape), "dtype": dtype, "layout": layout, "mem": mem, "host": host, "kind": kind}


def S(strategy, grid, shard, orient="ROW"):
    """A sharded L1 memory config spec: strategy, core range (x0, y0, x1, y1) or a tuple of single cores ((x, y), ...),
    shard shape (h, w)."""
    return ("shard", strategy, tuple(grid), tuple(shard), orient)


def PC(grid, subblock_w, block_h, block_w, inplace=False, welford=False):
    return ("sharded_pc", tuple(grid), subblock_w, block_h, block_w, inplace, welford)


def DPC(welford=False, legacy_reduction=False):
    return ("default_pc", welford, legacy_reduction)


def CK(fp32=False, fidelity="HiFi4", approx=True, dst_sync=False, packer_l1_acc=False):
    return ("compute", fp32, fidelity, approx, dst_sync, packer_l1_acc)


def memory_config(spec):
    if spec is None:
        return None
    if spec == "DRAM":
        return ttnn.DRAM_MEMORY_CONFIG
    if spec == "L1":
        return ttnn.L1_MEMORY_CONFIG
    if spec[0] == "sharded_no_spec":  # ("sharded_no_spec", strategy): the op fills in the shard spec
        return ttnn.MemoryConfig(SHARDING[spec[1]], ttnn.BufferType.L1)
    _, strategy, cores, shard, orient = spec
    if isinstance(cores[0], tuple):  # a list of single cores (x, y), as model code's prefetcher grids
        grid = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(*c), ttnn.CoreCoord(*c)) for c in cores])
    else:
        x0, y0, x1, y1 = cores
        grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(x0, y0), ttnn.CoreCoord(x1, y1))})
    orientation = ttnn.ShardOrientation.ROW_MAJOR if orient == "ROW" else ttnn.ShardOrientation.COL_MAJOR
    return ttnn.MemoryConfig(SHARDING[strategy], ttnn.BufferType.L1, ttnn.ShardSpec(grid, list(shard), orientation))


def program_config(spec):
    if spec is None:
        return None
    if spec[0] == "default_pc":
        return ttnn.LayerNormDefaultProgramConfig(use_welford=spec[1], legacy_reduction=spec[2])
    _, grid, subblock_w, block_h, block_w, inplace, welford = spec
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*grid),
        subblock_w=subblock_w,
        block_h=block_h,
        block_w=block_w,
        inplace=inplace,
        use_welford=welford,
    )


def compute_kernel_config(spec):
    if spec is None:
        return None
    _, fp32, fidelity, approx, dst_sync, packer_l1_acc = spec
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=getattr(ttnn.MathFidelity, fidelity),
        math_approx_mode=approx,
        fp32_dest_acc_en=fp32,
        packer_l1_acc=packer_l1_acc,
        dst_full_sync_en=dst_sync,
    )


def op_kwargs(kw: dict) -> dict:
    out = {}
    for key, value in kw.items():
        if key == "memory_config":
            out[key] = memory_config(value)
        elif key == "program_config":
            out[key] = program_config(value)
        elif key == "compute_kernel_config":
            out[key] = compute_kernel_config(value)
        elif key == "dtype":
            out[key] = DTYPES[value] if value is not None else None
        else:
            out[key] = value
    return out


def tensor_desc(spec, system: str) -> TensorDesc:
    """The description of `spec` as a tensor on the mock `system` (its architecture included)."""
    return TensorDesc(
        spec["shape"],
        dtype=DTYPES[spec["dtype"]],
        layout=LAYOUTS[spec["layout"]],
        memory_config=memory_config(spec["mem"]) or ttnn.DRAM_MEMORY_CONFIG,
        on_device=not spec["host"],
        stats_kind=spec["kind"],
        arch=ARCHES[system],
    )


def package_verdict(case: dict, tensors: dict) -> dict:
    """Run the package's rule check for `case` on `tensors` (TensorDescs or real ttnn tensors)."""
    kw = op_kwargs(case["kw"])
    grid = case.get("grid") or GRIDS[case["system"]]
    x = tensors["x"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdict = _check(case, tensors, kw, grid, x)
    return {**verdict, "warnings": sorted({w.category.__name__ for w in caught})}


def _check(case, tensors, kw, grid, x) -> dict:
    try:
        if case["op"] == "pre":
            check_pre_all_gather(x, residual_input_tensor=tensors.get("residual"), compute_grid=grid, **kw)
        elif case["op"] == "post":
            check_post_all_gather(
                x, tensors.get("stats"), weight=tensors.get("weight"), bias=tensors.get("bias"), compute_grid=grid, **kw
            )
        elif case["op"] == "rms_norm":
            check_rms_norm(
                x,
                weight=tensors.get("weight"),
                bias=tensors.get("bias"),
                residual_input_tensor=tensors.get("residual"),
                compute_grid=grid,
                **kw,
            )
        else:
            dim = kw.pop("dim")
            check_all_gather(x, dim, mesh_shape=MESH_SHAPES[case["system"]], **kw)
    except RuleError as e:
        return {"verdict": "reject", "rule": e.rule, "message": str(e)}
    return {"verdict": "accept", "rule": None, "message": ""}


def package_side(case: dict) -> dict:
    return package_verdict(case, {k: tensor_desc(case[k], case["system"]) for k in TENSOR_SLOTS if case.get(k)})


# Where a battery repeats a whole table on the other architecture, `make test` runs a stable share of the repeats
# (every SAMPLE_EVERY-th by a hash of the case id) and `make battery` all of them (marker full_battery).
SAMPLE_EVERY = 8


def in_sample(case_id: str) -> bool:
    return zlib.crc32(case_id.encode()) % SAMPLE_EVERY == 0


def collector(cases: list):
    """The table's `case(id, op, x, expect, system=..., **slots_and_kw)`, adding each case to `cases`."""

    def case(id, op, x, expect, system="n150", **slots_and_kw):
        slots = {k: slots_and_kw.pop(k) for k in TENSOR_SLOTS if k in slots_and_kw}
        cases.append(
            {
                "id": f"{op}-{system}-{id}",
                "op": op,
                "system": system,
                "x": x,
                **slots,
                "kw": slots_and_kw,
                "expect": expect,
            }
        )

    return case
