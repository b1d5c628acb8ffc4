"""L1 of the CCL ops, as ttnn 0.81.1 allocates it on a Tensix core: `ttnn.all_gather` and
`ttnn.experimental.all_gather_async` (`check_gather_l1`, which `tt_rmsnorm.rules.op_checks.check_all_gather` calls) and
`ttnn.fused_rms_minimal` (`check_fused_l1`).

Circular buffers are allocated statically from the allocator base up; tensors, shards and global semaphores from the top
of L1 down (both addresses from the input's architecture, `tt_rmsnorm.architecture`), at the same address on every core.
ttnn rejects a program whose circular buffers pass the end of L1 or reach the lowest L1 buffer ("Statically allocated
circular buffers ... clash with L1 buffers"). The rules assume an L1 holding only the call's own tensors and semaphores.
"""

from __future__ import annotations

import math

import ttnn

from tt_rmsnorm.rules import l1_budget
from tt_rmsnorm.rules.common import bbox_extent, compute_flags, fail
from tt_rmsnorm.systems import l1_banks
from tt_rmsnorm.tensors import DTYPE_BYTES, TILE_BYTES, TensorDesc, describe
from tt_rmsnorm.tiles import TILE

# ---------------------------------------------------------------------------------------------------------------------
# The gathers
#
# The gather's worker cores hold a circular buffer from the allocator base up: three fabric packets of the input's
# pages (3 * max(1, fabric packet // page) pages). Every L1 buffer sits at the top of every bank, below the ones
# allocated before it: the input, the gather's global semaphores, the output (interleaved: its pages dealt over the
# banks; sharded: its shard). ttnn rejects the program when the circular buffer reaches the lowest of them ("Statically
# allocated circular buffers ... clash with L1 buffers"), and an output that does not fit a bank at all. Measured on
# mock N300, T3000 and Galaxy byte-exact for the native gather (tests/tt/test_ccl_rules.py).
#
# ttnn's composite gather (takes_composite_gather) stages
# its work in the input's memory: with an L1 input that is every device's copy of the input, their row-major forms for
# the concat and the concatenated output. GATHER_COMPOSITE_STAGES bounds that from above (the measured needs lie
# 6-75% below it), so the rule never accepts a composite gather ttnn rejects.

GATHER_OWN_SEMAPHORES = 2  # ttnn.all_gather creates its pair for every call
# L1 banks: one per core of the compute grid each system's mesh opens with (tt_rmsnorm.systems.l1_banks)


def _page_bytes(t: TensorDesc) -> int:
    if t.layout == ttnn.TILE_LAYOUT:
        return t.tile_bytes()
    row = t.padded_width * DTYPE_BYTES.get(t.dtype, 2)
    align = t.arch.l1_alignment if t.memory_config.buffer_type == ttnn.BufferType.L1 else t.arch.dram_alignment
    return -(-row // align) * align


def _bank_bytes(t: TensorDesc, banks: int) -> int:
    """Bytes `t` takes at the top of a bank: an L1 shard, or its share of an L1-interleaved buffer, 0 elsewhere."""
    if not t.on_device or t.memory_config.buffer_type != ttnn.BufferType.L1:
        return 0
    if t.is_sharded:
        return l1_budget.shard_bytes(t)
    rows = math.prod(t.padded_shape[:-1])
    pages = rows * t.padded_width // (TILE * TILE) if t.layout == ttnn.TILE_LAYOUT else rows
    return -(-pages // banks) * _page_bytes(t)


def _row_major(t: TensorDesc) -> TensorDesc:
    return TensorDesc(
        t.shape,
        ttnn.bfloat16 if t.dtype == ttnn.bfloat8_b else t.dtype,
        ttnn.ROW_MAJOR_LAYOUT,
        t.memory_config,
        arch=t.arch,
    )


def takes_composite_gather(x, dim: int) -> bool:
    """ttnn gathers through all_broadcast + concat (its composite gather) when the gather dim is padded: the last dim
    off the tile grid, or (TILE only) the rows off it on a gather of dim -2. The composite gather needs no cluster_axis
    on a 2-D mesh."""
    x = describe(x)
    dim %= x.rank
    if dim == x.rank - 1:
        return x.shape[-1] % TILE != 0
    return x.layout == ttnn.TILE_LAYOUT and dim == x.rank - 2 and x.shape[-2] % TILE != 0


def gather_l1_need(x, dim: int, out, num_devices: int, mesh_shape, semaphores: int = GATHER_OWN_SEMAPHORES) -> int:
    """Bytes per bank above the allocator base that gathering `x` on `dim` into `out` needs: the circular buffer, the
    semaphores, the input and output where they are in L1 and, for the composite gather, what it stages in the input's
    memory."""
    x, out = describe(x), describe(out)
    banks = l1_banks(x.arch, mesh_shape)
    page = _page_bytes(x)
    cb = 3 * max(1, x.arch.fabric_packet_bytes // page) * page
    held = semaphores * x.arch.global_semaphore_bytes + _bank_bytes(x, banks)
    if not takes_composite_gather(x, dim):
        return cb + held + _bank_bytes(out, banks)
    # the concat's circular buffer holds two row-major pages; it runs while the copies and semaphores are alive
    cb = max(cb, 2 * _page_bytes(_row_major(x)))
    staged = TensorDesc(out.shape, x.dtype, x.layout, x.memory_config, arch=x.arch)
    copies = num_devices * (_bank_bytes(x, banks) + _bank_bytes(_row_major(x), banks))
    resharded = _bank_bytes(out, banks) if out.is_sharded else 0  # an interleaved output stays where it was staged
    return cb + held + copies + _bank_bytes(_row_major(staged), banks) + _bank_bytes(staged, banks) + resharded


def check_gather_l1(x, dim: int, out, num_devices: int, mesh_shape, semaphores: int = GATHER_OWN_SEMAPHORES):
    """The gather's buffers fit one bank of L1 above its circular buffer (see gather_l1_need). Where the need is an
    upper bound (the composite gather of an L1 input) the refusal is a package-only guard."""
    x = describe(x)
    need = gather_l1_need(x, dim, out, num_devices, mesh_shape, semaphores)
    if need <= x.arch.l1_span:
        return
    l1_budget.check_l1_model_version()
    bounded = takes_composite_gather(x, dim) and _bank_bytes(x, 1) > 0
    fail(
        "all_gather.composite_l1_bound" if bounded else "all_gather.l1_budget",
        "the gather's circular buffer, semaphores, and its L1 input, output"
        + (" and staged copies (an upper bound)" if bounded else "")
        + f" must fit one L1 bank ({x.arch.l1_span} B per core on {x.arch})",
        f"{need} B per bank for input {x.shape} x {num_devices} devices",
        "gather into DRAM (memory_config=ttnn.DRAM_MEMORY_CONFIG), keep the input in DRAM, or gather fewer rows",
    )


# ---------------------------------------------------------------------------------------------------------------------
# fused_rms_minimal (RMSAllGather's program factory)

SIGNALING_CB_BYTES = 2  # a 2-byte circular buffer ends the static region


def fused_l1_bytes(
    x, weight, residual, stats, out_config, dtype, compute_kernel_config, persistent, mesh_shape
) -> tuple[int, int]:
    """(end of the static circular buffers on the input grid's first core, lowest L1 buffer address) of
    `fused_rms_minimal`. The input, residual, stats and output buffers borrow their tensors' memory; the output is a
    new shard (or the persistent buffer), kept in the static region too when it is resharded."""
    x = describe(x)
    single = TILE_BYTES[ttnn.float32 if compute_flags(compute_kernel_config).fp32_dest_acc_en else ttnn.bfloat16]
    bf16 = TILE_BYTES[ttnn.bfloat16]
    out_tile = TILE_BYTES[dtype or x.dtype]
    block_wt = x.shard_spec.shape[1] // TILE
    gx, gy = bbox_extent(x.shard_spec)
    external = (gx + gy - 1) if gx > 1 and gy > 1 else math.ceil(x.padded_width // TILE / block_wt)
    static = 4 * bf16  # scalers and epsilon
    static += (5 + external) * single  # partial and global E[x^2], variance, reduced stats on the first core
    static += 2 * block_wt * single  # x for the pre and the post halves
    static += TILE_BYTES[stats.dtype] + 2 * 8 * x.arch.fabric_packet_header_bytes + SIGNALING_CB_BYTES  # 2 x 8 headers
    if weight is not None:
        static += block_wt * (TILE_BYTES[ttnn.float32] if weight.dtype == ttnn.float32 else bf16)
    if out_config != x.memory_config:  # resharded: the output is written from a block in the static region
        static += block_wt * out_tile
    out = persistent or TensorDesc(x.shape, dtype or x.dtype, memory_config=out_config, arch=x.arch)
    banks = l1_banks(x.arch, mesh_shape)
    held = sum(_bank_bytes(t, banks) for t in (x, residual, stats, out, weight) if t is not None)
    return x.arch.l1_base + static, x.arch.l1_size - held - x.arch.global_semaphore_bytes


def check_fused_l1(x, weight, residual, stats, out_config, dtype, compute_kernel_config, persistent, mesh_shape):
    """The fused op's static circular buffers end below its lowest L1 buffer (see fused_l1_bytes)."""
    x = describe(x)
    end, floor = fused_l1_bytes(
        x, weight, residual, stats, out_config, dtype, compute_kernel_config, persistent, mesh_shape
    )
    if end > min(floor, x.arch.l1_size):
        l1_budget.check_l1_model_version()
        fail(
            "fused.l1_budget",
            "fused_rms_minimal's circular buffers (two x blocks, the weight block, the resharded output) must end "
            "below its tensors' shards at the top of L1",
            f"buffers end at {end} B, shards from {floor} B (L1 ends at {x.arch.l1_size} B on {x.arch})",
            "shard the input over more cores (fewer tiles per core), or keep the output on the input's shard spec",
        )
