"""Fused tensor-parallel all-reduce + residual + RMSNorm + per-row FP8 (MAX's allreduce_rmsnorm_fp8) for GPUs.

Semantics (every rank gets the same result): the per-rank partial activations x_r [T, H] are summed in fp32 in rank
order, h = sum; with a residual, h = residual_dtype(h + residual) is returned as residual_out and normalized;
v = h * rsqrt(mean(h^2) + epsilon) * (weight + weight_offset); scale = min(max|v|, scale_ub) / fp8_max per row;
y = fp8(clamp(v / scale)) (0 where scale is 0). Returns RMSNormOutput(y, None, residual_out, scale [T]).

    comm = AllReduceRMSNormFP8(group, hidden_size=H, max_tokens=T_max)       # once: symmetric workspace, rendezvous
    out  = comm(x, weight, epsilon=1e-6, residual=r)                          # per call; CUDA-graph capturable
    out  = reference_allreduce_rmsnorm_fp8(x, weight, group, epsilon=1e-6, residual=r)   # any backend, CPU too

Paths (`stage`, default from `choose_stage`, which reads the measured table DISPATCH):
  0  one stage, pushed as flag words: every rank writes its rows into every peer's receive buffer as 8-byte words of
     two 16-bit activations plus a 4-byte flag (the call number); receivers poll their own memory for the flag: no
     barrier and no atomics (a fixed grid of PUSH_PROGRAMS programs, each counting its calls). Twice the bytes on
     NVLink, the least latency: for a few rows.
  1  one stage, pulled: every rank reads all peers' rows over NVLink and computes every row (T*H*(W-1) elements read
     from peers per rank): for small payloads on 2 ranks, where latency rules.
  2  two stages in one kernel: reduce-scatter into row blocks (rank r owns rows [r*ceil(T/W), ...)), normalize and
     quantize the owned rows, all-gather the FP8 rows and scales from their owners (with a residual: residual_out
     alone, which every rank normalizes itself).
  3  one stage, pushed with the flags in the data (TensorRT-LLM's Lamport one-shot): every 16-bit word is stored
     (inverted) into every peer's receive buffer, where 0x8000 marks an empty word; receivers poll until no word of
     the row is empty, then empty it again. Half of stage 0's bytes, one program per SM: tens of rows on 4 ranks.
  4  NCCL as the transport (nccl_allreduce_rmsnorm_fp8): reduce-scatter, the fused norm on the owned rows, all-gather
     of FP8 rows and scales; with a residual reduce-scatter + all-gather, then the fused norm (its sums are NCCL's,
     rounded to the activation dtype). The path for sizes where no fused stage beats NCCL all_reduce + the fused
     norm; on 4 x H100 none was measured (torch's all_reduce works in place, so the plain unfused path costs a copy of
     x here, and this variant was slower than stage 2 at every T), so no DISPATCH row takes it.
  5  two stages pushed with the flags in the data (TensorRT-LLM's two-shot with Lamport buffers): rows pushed to their
     owners (reduce-scatter), normalized and quantized there, the FP8 rows and scales (with a residual: residual_out)
     pushed to every peer (all-gather). (W-1)/W of stage 3's bytes in the first push, no barrier: from tens to
     hundreds of rows on 4 ranks.

Peer buffers come from PyTorch symmetric memory (torch.distributed._symmetric_memory: empty + rendezvous +
get_buffer); NVLink multicast is never used (no multicast pointer, no multimem instructions). The kernels and their
barriers are described in programs/triton/allreduce/kernels.py. The reference path (fp32 all_reduce through
torch.distributed, then the forward kernel rmsnorm_fwd) defines the same numbers and runs on CPU with gloo under the
Triton interpreter.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import triton

from programs.triton import fp8 as fp8mod
from programs.triton import interpreter
from programs.triton.allreduce import kernels
from programs.triton.checks import TritonRuleError, as_rows, check_activation, check_epsilon, check_vector
from programs.triton.forward import RMSNormOutput, rmsnorm_fwd
from programs.triton.launch import sm_count

MAX_WORLD = 8
PUSH, PULL, TWO_STAGE, LAMPORT, NCCL, LAMPORT2 = 0, 1, 2, 3, 4, 5  # the values of `stage`
STAGE_NAMES = {
    PUSH: "1-stage pushed, flag words",
    PULL: "1-stage pulled",
    TWO_STAGE: "2-stage pulled",
    LAMPORT: "1-stage pushed, flags in the data",
    NCCL: "NCCL reduce-scatter/all-gather + fused norm",
    LAMPORT2: "2-stage pushed, flags in the data",
}

# Stage 0 (rows pushed as flag words): its receive buffers hold PUSH_MAX_TOKENS rows. Stage 3 (rows pushed as they are,
# -0.0 marking an empty word): LAMPORT_MAX_TOKENS rows.
PUSH_MAX_TOKENS = 128
LAMPORT_MAX_TOKENS = 512
LAMPORT2_MAX_TOKENS = 2048  # stage 5's all-gather buffers hold this many rows, its reduce-scatter buffers 1/W of them
# Stage 0 runs the same grid in every call of a workspace (its per-program call counters need that): at most this many
# programs push the rows' words in pieces of at most PUSH_PIECE words (a row in at least 4 pieces), and program
# r % grid normalizes row r. Stage 3 likewise, with one program per SM (up to MAX_PROGRAMS).
PUSH_PROGRAMS = 32
PUSH_PIECE = 1024
_ALIGN = 256

# The dispatch, per world size: rows (largest payload T * H * itemsize per rank, stage, stage with a residual), the
# first row whose payload bound holds is taken. Bounds are in rows of H = 8192 bf16 (16 KiB), the shape every number
# was measured at with programs/triton/bench_allreduce.py (slowest rank, CUDA-graph replays, ratios against NCCL
# all_reduce + our fused norm/FP8 in the same run); a payload between two measured T goes to the smaller T's stage.
ROW = 8192 * 2
_DISPATCH_2 = (
    # 2 x H100 and 2 x H200: stage 0 led stage 1 at T = 1..32 in every same-run pair on 2 x H100 (7.9-8.9 against
    # 8.9-10.0 us at T = 32) and tied at T = 32 on 2 x H200 (8.6 / 8.5)
    (32 * ROW, PUSH, PUSH),
    # stage 1 up to 1 MiB per rank (T = 128: 12.4 against stage 2's 14.4 us, 2 x H200); stage 2 from T = 256 (a tie
    # there, 21.0 / 20.7 us on 2 x H100), 1.55x at T = 8192. With a residual stage 1 led at every T up to 8192 (1.18x
    # there) while stage 2 all-gathered FP8 + bf16 rows; stages 3 and 5 and the residual_out-only all-gather of stage
    # 2 are not measured on 2 ranks
    (254 * ROW, PULL, PULL),
    (None, TWO_STAGE, PULL),
)
_DISPATCH_4 = (
    # 4 x H100 (NV18 between every pair), three runs. T = 1: stage 0 7.7-7.9 us against stage 3 7.9-9.5 (1.82-1.88x);
    # T = 8: stage 0 10.1-10.4 against stage 3 9.3-11.2, a tie (1.38-1.47x); with a residual T = 1 2.11x, T = 8 1.40x
    (8 * ROW, PUSH, PUSH),
    # T = 32: stage 3 12.7-14.1 us against stage 5 12.4 and stage 0 16.6-17.0 (1.36x dispatched); with a residual
    # stage 3 13.1 against stage 5 14.4 (1.43x)
    (32 * ROW, LAMPORT, LAMPORT),
    # stage 5 from T = 64: 13.3 us against stage 3 18.0 (1.67x), T = 128 17.2-18.8 against stage 3 25.6-27.9 and
    # stage 2 33.3-35.2 (1.84-2.03x), T = 256 25.9 (1.72x), T = 512 46.8 against stage 2 63.5 (1.40x); with a
    # residual (it all-gathers residual_out) T = 64 1.32x, 128 1.41x, 256 1.34x, 512 1.24x. Stage 5 is measured
    # up to 512 rows in CUDA graphs (the benchmark stopped at T = 1024, see bench_allreduce.py), so it ends here
    (512 * ROW, LAMPORT2, LAMPORT2),
    # stage 2 (2 rows x 16 warps from 512 rows a rank): T = 2048 170.2 us (1.14x), 8192 592.6 (1.15x, stage 4's
    # NCCL reduce-scatter + all-gather 592.5, a tie); with a residual 223.8 (1.00x against 223.0) and 736.9 (1.05x)
    (None, TWO_STAGE, TWO_STAGE),
)
# 3 ranks and 5-8 ranks take the 4-rank rows (not measured: 8-GPU machines were not available)
DISPATCH = {2: _DISPATCH_2, 4: _DISPATCH_4}


def dispatch_rows(world: int) -> tuple:
    return DISPATCH[2] if world == 2 else DISPATCH[4]


def choose_stage(tokens: int, hidden: int, itemsize: int, world: int, *, residual: bool = False) -> int:
    """The measured stage (DISPATCH) for a call of [tokens, hidden] elements of `itemsize` bytes over `world` ranks.
    Stages 0 and 3 carry 16-bit words: other activations (or an odd hidden size) take stage 1 there."""
    payload = tokens * hidden * itemsize
    for bound, stage, stage_res in dispatch_rows(world):
        if bound is None or payload <= bound:
            chosen = stage_res if residual else stage
            break
    if chosen in (PUSH, LAMPORT, LAMPORT2) and not push_capable(hidden, itemsize):
        return PULL
    return chosen


def reference_allreduce_rmsnorm_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    group=None,
    *,
    epsilon: float = 1e-5,
    weight_offset: float = 0.0,
    residual: torch.Tensor | None = None,
    scale_ub: float = math.inf,
    dtype: torch.dtype = torch.float8_e4m3fn,
) -> RMSNormOutput:
    """The unfused definition: fp32 all_reduce (torch.distributed, any backend) then rmsnorm_fwd with FP8 row scales."""
    check_activation(x)
    fp8mod.fp8_format(dtype)
    total = x.float()  # a copy: the caller's partial stays as it was
    dist.all_reduce(total, group=group)
    return rmsnorm_fwd(
        total,
        weight,
        epsilon=epsilon,
        weight_offset=weight_offset,
        residual=residual,
        dtype=dtype,
        scale_mode="row",
        scale_ub=scale_ub,
    )


def push_capable(hidden: int, itemsize: int) -> bool:
    """Stage 0 packs two 16-bit activations per 8-byte word (with a 4-byte flag): 16-bit dtypes, even hidden size."""
    return itemsize == 2 and hidden % 2 == 0


@dataclass
class RankBuffers:
    """One rank's symmetric workspace as typed views (seen from the local GPU: a peer's are NVLink mappings)."""

    inp: torch.Tensor  # [2 * T_max, H] x dtype: the published partial rows (two halves, alternate calls)
    q: torch.Tensor  # [2 * T_max, H] uint8: two-stage FP8 rows of the owner
    s: torch.Tensor  # [2 * T_max] float32: two-stage scales of the owner
    o: torch.Tensor  # [2 * T_max, H] x dtype: two-stage residual_out rows of the owner
    flags: torch.Tensor  # [N_SLOTS * 1024 * W] int32: barrier flags, written by the peers
    recv: torch.Tensor  # [2 * W * min(T_max, PUSH_MAX_TOKENS) * H/2] int64: stage 0 words pushed by the peers
    lamport: torch.Tensor  # [2 * W * min(T_max, LAMPORT_MAX_TOKENS) * H] int16: stage 3 rows pushed by the peers
    rs: torch.Tensor  # [2 * W * ceil(TL / W) * H] int16, TL = min(T_max, LAMPORT2_MAX_TOKENS): stage 5 reduce-scatter
    ag: torch.Tensor  # [2 * TL * H] int16: stage 5 all-gather rows (FP8 byte pairs or residual_out)
    ag_scale: torch.Tensor  # [2 * TL] int32: stage 5 all-gather scales


def workspace_bytes(max_tokens: int, hidden: int, itemsize: int, world: int) -> int:
    sizes = _region_sizes(max_tokens, hidden, itemsize, world)
    return sum(_round_up(s) for s in sizes)


def _round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _region_sizes(max_tokens, hidden, itemsize, world):
    t2 = 2 * max_tokens  # double-buffered: call k uses half k % 2 (kernels.py says why)
    ok = push_capable(hidden, itemsize)
    push = 2 * world * min(max_tokens, PUSH_MAX_TOKENS) * (hidden // 2) * 8 if ok else 0
    lamport = 2 * world * min(max_tokens, LAMPORT_MAX_TOKENS) * hidden * 2 if ok else 0
    tl2 = min(max_tokens, LAMPORT2_MAX_TOKENS) if ok else 0
    return (
        kernels.N_SLOTS * kernels.MAX_PROGRAMS * world * 4,
        t2 * hidden * itemsize,
        t2 * hidden,
        t2 * 4,
        t2 * hidden * itemsize,
        push,
        lamport,
        2 * world * math.ceil(tl2 / world) * hidden * 2,
        2 * tl2 * hidden * 2,
        2 * tl2 * 4,
    )


def carve(raw: torch.Tensor, max_tokens: int, hidden: int, dtype: torch.dtype, world: int) -> RankBuffers:
    """Typed views of one rank's uint8 workspace (same layout on every rank)."""
    sizes = _region_sizes(max_tokens, hidden, dtype.itemsize, world)
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + _round_up(s))

    def region(i, dt, shape):
        return raw[offs[i] : offs[i] + sizes[i]].view(dt).view(shape)

    return RankBuffers(
        flags=region(0, torch.int32, (-1,)),
        inp=region(1, dtype, (2 * max_tokens, hidden)),
        q=region(2, torch.uint8, (2 * max_tokens, hidden)),
        s=region(3, torch.float32, (2 * max_tokens,)),
        o=region(4, dtype, (2 * max_tokens, hidden)),
        recv=region(5, torch.int64, (-1,)),
        lamport=region(6, torch.int16, (-1,)),
        rs=region(7, torch.int16, (-1,)),
        ag=region(8, torch.int16, (-1,)),
        ag_scale=region(9, torch.int32, (-1,)),
    )


def init_workspace(raw: torch.Tensor, max_tokens: int, hidden: int, dtype: torch.dtype, world: int) -> RankBuffers:
    """A rank's workspace as it must be before its first call: flags and counters zero, stage 3's buffer empty."""
    raw.zero_()
    bufs = carve(raw, max_tokens, hidden, dtype, world)
    for words in (bufs.lamport, bufs.rs, bufs.ag):
        words.fill_(kernels.LAMPORT_EMPTY)
    bufs.ag_scale.fill_(kernels.LAMPORT_EMPTY32)
    return bufs


def launch_config(stage: int, rows: int, hidden: int, device) -> tuple[int, int, int]:
    """(block_m, num_warps, grid) of stages 1 and 2. Measured at H=8192 (bench_allreduce.py sweeps): one row per
    program below 512 rows a rank, with 8 warps in stage 1 (its best shape at every T from 1 to 512 on 2 x H200) and
    16 in stage 2; from 512 rows 2 rows x 16 warps (best at T = 2048 and 8192 in both stages on 2 x H200, and stage 2's
    best at T = 2048 (512 rows a rank) and 8192 on 4 x H100; 4 rows x 32 warps spill registers, ptx_report). The grid
    is one program per SM whatever T: all programs of a launch are resident together (the barriers need that) and
    every program counts every call (kernels.py: the buffer half is the program's own barrier epoch)."""
    block_h = triton.next_power_of_2(hidden)
    n_sm = sm_count(device)
    block_m = 1 if rows < 512 else 2
    block_m = max(1, min(block_m, 32768 // block_h))
    num_warps = min(32, max(4, block_m * block_h // 1024) * (2 if block_m == 1 and stage == 2 else 1))
    return block_m, num_warps, min(n_sm, kernels.MAX_PROGRAMS)


def launch(
    stage: int,
    rank: int,
    bufs: list[RankBuffers],
    epoch: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    residual: torch.Tensor | None,
    y: torch.Tensor,
    scale: torch.Tensor,
    residual_out: torch.Tensor | None,
    *,
    epsilon: float,
    weight_offset: float,
    scale_ub: float,
    sync: bool = True,
    phases: int = 7,
    config: tuple[int, int] | None = None,
    push_programs: int = PUSH_PROGRAMS,
    lamport_programs: int = kernels.MAX_PROGRAMS,
) -> None:
    """One kernel launch of fused stage 0-3 or 5 for `rank`, given every rank's buffers (already validated). sync=False
    and a subset of phases let one process play all ranks in turn (the interpreter tests). push_programs,
    lamport_programs: the grids of stages 0 and 3 (capped at the SM count), which must stay the same for every call of
    that stage on these buffers."""
    world = len(bufs)
    t, h = x.shape
    if t == 0:
        return
    interpreter.use_exact_casts(x.device)  # exact bf16 casts where the kernels are interpreted
    if stage in (PUSH, LAMPORT, LAMPORT2) and config is not None and config[0] != 1:
        raise TritonRuleError(
            "config.push_rows",
            f"stage {stage} takes one row per program: config must be (1, num_warps)",
            config,
            "config=(1, 16) or config=None",
        )
    if stage in (PUSH, LAMPORT, LAMPORT2):
        _launch_pushed(
            stage,
            rank,
            bufs,
            epoch,
            x,
            weight,
            residual,
            y,
            scale,
            residual_out,
            epsilon=epsilon,
            weight_offset=weight_offset,
            scale_ub=scale_ub,
            sync=sync,
            phases=phases,
            num_warps=config[1] if config is not None else None,
            programs=push_programs if stage == PUSH else lamport_programs,
        )
        return
    tw = math.ceil(t / world)
    rows = t if stage == 1 else tw
    block_m, num_warps, grid = launch_config(stage, rows, h, x.device)
    if config is not None:
        block_m, num_warps = config
    fmax = fp8mod.fp8_format(y.dtype).max
    y_drop, y_min, y_sub = fp8mod.downcast_consts(y.dtype)

    def eight(views):
        return [v for v in views] + [None] * (MAX_WORLD - world)

    q_views = [b.q.view(y.dtype) for b in bufs]
    common_head = (
        x,
        x.stride(0),
        residual if residual is not None else x,
        residual.stride(0) if residual is not None else 0,
        residual_out if residual_out is not None else x,
        residual_out.stride(0) if residual_out is not None else 0,
        y,
        y.stride(0),
        scale,
        weight if weight is not None else x,
        *eight([b.inp for b in bufs]),
    )
    flags = (*eight([b.flags for b in bufs]), epoch)
    scalars = (
        bufs[0].inp.shape[0] // 2,
        h,
        1.0 / h,
        float(epsilon),
        float(weight_offset),
        float(min(scale_ub, 3.0e38)),
        float(fmax),
    )
    meta = dict(
        RANK=rank,
        WORLD=world,
        BLOCK_M=block_m,
        BLOCK_H=triton.next_power_of_2(h),
        HAS_W=weight is not None,
        HAS_RES=residual is not None,
        SYNC=sync,
        PHASES=phases,
        Y_DROP=y_drop,
        Y_MIN_NORMAL=y_min,
        Y_SUB=y_sub,
        num_warps=num_warps,
    )
    if stage == 1:
        kernels.one_stage_kernel[(grid,)](*common_head, *flags, t, *scalars, **meta)
    else:
        kernels.two_stage_kernel[(grid,)](
            *common_head,
            *eight(q_views),
            *eight([b.s for b in bufs]),
            *eight([b.o for b in bufs]),
            *flags,
            t,
            tw,
            *scalars,
            **meta,
        )


def _launch_pushed(
    stage,
    rank,
    bufs,
    epoch,
    x,
    weight,
    residual,
    y,
    scale,
    residual_out,
    *,
    epsilon,
    weight_offset,
    scale_ub,
    sync,
    phases,
    num_warps,
    programs,
):
    """Stages 0, 3 and 5: one program per row, a fixed grid of `programs` (capped at the SM count)."""
    world = len(bufs)
    t, h = x.shape
    fmax = fp8mod.fp8_format(y.dtype).max
    y_drop, y_min, y_sub = fp8mod.downcast_consts(y.dtype)
    block_h = triton.next_power_of_2(h)
    none = [None] * (MAX_WORLD - world)
    if stage == PUSH:
        kernel = kernels.push_one_stage_kernel
        xv = x.view(torch.int32)  # two activations per int32 (check_call verified that this view exists)
        tll = bufs[0].recv.numel() // (2 * world * (h // 2))
        middle = (*[b.recv for b in bufs], *none, epoch[kernels.PUSH_CALLS :], t, tll, h, h // 2)
        num_warps = num_warps or min(32, max(4, block_h // 512))
        piece = max(16, min(PUSH_PIECE, block_h // 8))
    elif stage == LAMPORT:
        kernel = kernels.lamport_one_stage_kernel
        xv = x.view(torch.int16)
        middle = (*[b.lamport for b in bufs], *none, epoch[kernels.LAMPORT_CALLS :], t, lamport_rows(bufs, h), h)
    else:
        kernel = kernels.lamport_two_stage_kernel
        xv = x.view(torch.int16)
        tl2 = bufs[0].ag.numel() // (2 * h)
        middle = (
            *[b.rs for b in bufs],
            *none,
            *[b.ag for b in bufs],
            *none,
            *[b.ag_scale for b in bufs],
            *none,
            epoch[kernels.LAMPORT2_CALLS :],
            t,
            math.ceil(t / world),
            math.ceil(tl2 / world),
            tl2,
            h,
        )
    if stage != PUSH:
        num_warps = num_warps or lamport_warps(h)
        piece = min(block_h, num_warps * 32 * 8)  # 8 words (16 bytes) a thread per store
    kernel[(max(1, min(programs, sm_count(x.device))),)](
        xv,
        xv.stride(0),
        residual if residual is not None else x,
        residual.stride(0) if residual is not None else 0,
        residual_out if residual_out is not None else x,
        residual_out.stride(0) if residual_out is not None else 0,
        y,
        y.stride(0),
        scale,
        weight if weight is not None else x,
        *middle,
        1.0 / h,
        float(epsilon),
        float(weight_offset),
        float(min(scale_ub, 3.0e38)),
        float(fmax),
        RANK=rank,
        WORLD=world,
        BLOCK_H=block_h,
        PIECE=piece,
        XDT=tl_dtype(x.dtype),
        HAS_W=weight is not None,
        HAS_RES=residual is not None,
        SYNC=sync,
        PHASES=phases,
        Y_DROP=y_drop,
        Y_MIN_NORMAL=y_min,
        Y_SUB=y_sub,
        num_warps=num_warps,
    )


def lamport_rows(bufs: list[RankBuffers], hidden: int) -> int:
    """Rows stage 3's receive buffers hold."""
    return bufs[0].lamport.numel() // (2 * len(bufs) * hidden)


def lamport_warps(hidden: int) -> int:
    """Stage 3's default warps: the whole row in registers at 16 fp32 values a thread (16 warps at H = 8192)."""
    return min(32, max(4, triton.next_power_of_2(hidden) // 512))


def tl_dtype(dtype):
    import triton.language as tl

    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]


def _symm_mem():
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem


class AllReduceRMSNormFP8:
    """A group's fused all-reduce + RMSNorm + FP8 for activations up to [max_tokens, hidden_size] of `dtype`.

    Construction is collective (every rank of `group`, same arguments): it allocates the symmetric workspace
    (workspace_bytes: ~ 2*max_tokens*hidden*(2*itemsize + 1) bytes per rank), zeroes the flags and exchanges handles."""

    def __init__(
        self,
        group=None,
        *,
        hidden_size: int,
        max_tokens: int,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | None = None,
        push_programs: int = PUSH_PROGRAMS,
        lamport_programs: int = kernels.MAX_PROGRAMS,
    ):
        group = group or dist.group.WORLD
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if not 2 <= self.world <= MAX_WORLD:
            raise TritonRuleError(
                "group.size",
                f"the fused path serves 2..{MAX_WORLD} ranks of one NVLink domain",
                self.world,
                "use reference_allreduce_rmsnorm_fp8 for other group sizes",
            )
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TritonRuleError(
                "dtype.activation", "activations must be bfloat16, float16 or float32", dtype, "dtype=torch.bfloat16"
            )
        if hidden_size < 1 or max_tokens < 1:
            raise TritonRuleError(
                "workspace.shape",
                "hidden_size and max_tokens must be >= 1",
                (hidden_size, max_tokens),
                "pass the model's sizes",
            )
        if triton.next_power_of_2(hidden_size) > 32768:
            raise TritonRuleError(
                "hidden_size.range",
                "rows are held in registers: hidden_size <= 32768",
                hidden_size,
                "use reference_allreduce_rmsnorm_fp8 for wider rows",
            )
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        self.hidden, self.max_tokens, self.dtype = hidden_size, max_tokens, dtype
        for name, grid in (("push_programs", push_programs), ("lamport_programs", lamport_programs)):
            if not 1 <= grid <= kernels.MAX_PROGRAMS:
                raise TritonRuleError(
                    f"{name}.range",
                    f"stages 0 and 3 run 1..{kernels.MAX_PROGRAMS} programs",
                    grid,
                    f"{name}=None (the default)",
                )
        self.push_programs, self.lamport_programs = push_programs, lamport_programs
        symm_mem = _symm_mem()
        nbytes = workspace_bytes(max_tokens, hidden_size, dtype.itemsize, self.world)
        raw = symm_mem.empty(nbytes, dtype=torch.uint8, device=self.device)
        init_workspace(raw, max_tokens, hidden_size, dtype, self.world)
        torch.cuda.synchronize(self.device)
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed by older torch, a deprecated no-op in newer
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(group.group_name)
        self._raw = raw
        self._handle = symm_mem.rendezvous(raw, group.group_name)
        # get_buffer counts from the start of the symmetric allocation; the tensor may sit at `offset` inside it
        base = int(getattr(self._handle, "offset", 0))
        views = [self._handle.get_buffer(r, (nbytes,), torch.uint8, base) for r in range(self.world)]
        if views[self.rank].data_ptr() != raw.data_ptr():
            raise RuntimeError(
                f"symmetric memory mapping mismatch: own buffer {views[self.rank].data_ptr():#x} != {raw.data_ptr():#x}"
            )
        self.bufs = [
            carve(raw if r == self.rank else views[r], max_tokens, hidden_size, dtype, self.world)
            for r in range(self.world)
        ]
        self.epoch = torch.zeros(kernels.N_COUNTERS, dtype=torch.int32, device=self.device)
        dist.barrier(group=group)  # every rank's flags are zero before any peer may raise them

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor | None = None,
        *,
        epsilon: float = 1e-5,
        weight_offset: float = 0.0,
        residual: torch.Tensor | None = None,
        scale_ub: float = math.inf,
        dtype: torch.dtype = torch.float8_e4m3fn,
        stage: int | None = None,
        config: tuple[int, int] | None = None,
    ) -> RMSNormOutput:
        """The fused call on this rank's partial x [..., H]; collective (all ranks, same shapes and options)."""
        x2 = check_call(
            x,
            weight,
            residual=residual,
            epsilon=epsilon,
            weight_offset=weight_offset,
            scale_ub=scale_ub,
            dtype=dtype,
            stage=stage,
            hidden=self.hidden,
            max_tokens=self.max_tokens,
            act_dtype=self.dtype,
            device=self.device,
        )
        t = x2.shape[0]
        if stage is None:
            stage = choose_stage(t, self.hidden, self.dtype.itemsize, self.world, residual=residual is not None)
            if stage == PUSH and not (t <= self.push_rows() and int32_view_ok(x2)):
                stage = PULL
            if stage == LAMPORT and t > self.lamport_rows():
                stage = LAMPORT2
            if stage == LAMPORT2 and t > self.lamport2_rows():
                stage = TWO_STAGE
        if stage == NCCL:
            out = nccl_allreduce_rmsnorm_fp8(
                x2,
                weight,
                self.group,
                epsilon=epsilon,
                weight_offset=weight_offset,
                residual=as_rows(residual, "residual") if residual is not None else None,
                scale_ub=scale_ub,
                dtype=dtype,
            )
            ro = out.residual_out.view(x.shape) if out.residual_out is not None else None
            return RMSNormOutput(out.y.view(x.shape), None, ro, out.scale)
        y = torch.empty(x.shape, dtype=dtype, device=x.device)
        scale = torch.empty(t, dtype=torch.float32, device=x.device)
        res_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device) if residual is not None else None
        launch(
            stage,
            self.rank,
            self.bufs,
            self.epoch,
            x2,
            weight,
            as_rows(residual, "residual") if residual is not None else None,
            y.view(-1, self.hidden),
            scale,
            res_out.view(-1, self.hidden) if res_out is not None else None,
            epsilon=epsilon,
            weight_offset=weight_offset,
            scale_ub=scale_ub,
            config=config,
            push_programs=self.push_programs,
            lamport_programs=self.lamport_programs,
        )
        return RMSNormOutput(y, None, res_out, scale)

    def push_rows(self) -> int:
        """Rows stage 0's receive buffers hold."""
        return self.bufs[0].recv.numel() // (2 * self.world * (self.hidden // 2)) if self.bufs[0].recv.numel() else 0

    def lamport_rows(self) -> int:
        """Rows stage 3's receive buffers hold."""
        return lamport_rows(self.bufs, self.hidden)

    def lamport2_rows(self) -> int:
        """Rows stage 5's all-gather buffers hold."""
        return self.bufs[0].ag.numel() // (2 * self.hidden)


def nccl_allreduce_rmsnorm_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    group,
    *,
    epsilon: float,
    weight_offset: float,
    residual: torch.Tensor | None,
    scale_ub: float,
    dtype: torch.dtype,
) -> RMSNormOutput:
    """Stage 4, NCCL as the transport (x: [T, H] rows, inputs already checked; x is not written). Without a residual
    and with T a multiple of the world size: reduce-scatter the rows, normalize and quantize the owned T/W rows with
    rmsnorm_fwd, all-gather the FP8 rows and the scales: the norm runs on 1/W of the rows and the all-gather moves
    1 byte an element instead of 2. With a residual every rank needs the whole sum (residual_out): reduce-scatter +
    all-gather in the activation dtype (NCCL's all_reduce is in place only, this leaves x as it is), then rmsnorm_fwd
    on every row. NCCL sums in the activation dtype in its own order, so this stage's numbers are those of NCCL
    all_reduce + rmsnorm_fwd (sums rounded to bf16), not the fp32 rank-order sums of stages 0-3."""
    world = dist.get_world_size(group)
    t, h = x.shape
    norm = dict(epsilon=epsilon, weight_offset=weight_offset, dtype=dtype, scale_mode="row", scale_ub=scale_ub)
    if t % world:
        total = x.clone()
        dist.all_reduce(total, group=group)
        return rmsnorm_fwd(total, weight, residual=residual, **norm)
    part = torch.empty(t // world, h, dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(part, x, group=group)
    if residual is None:
        own = rmsnorm_fwd(part, weight, **norm)
        y = torch.empty(t, h, dtype=dtype, device=x.device)
        scale = torch.empty(t, dtype=torch.float32, device=x.device)
        dist.all_gather_into_tensor(y.view(torch.uint8), own.y.view(torch.uint8), group=group)
        dist.all_gather_into_tensor(scale, own.scale, group=group)
        return RMSNormOutput(y, None, None, scale)
    total = torch.empty_like(x)
    dist.all_gather_into_tensor(total, part, group=group)
    return rmsnorm_fwd(total, weight, residual=residual, **norm)


def check_call(
    x, weight, *, residual, epsilon, weight_offset, scale_ub, dtype, stage, hidden, max_tokens, act_dtype, device
) -> torch.Tensor:
    """Every input rule of a fused call, before any device work; returns x as [T, H] rows."""
    check_activation(x)
    check_epsilon(epsilon)
    if x.dtype != act_dtype:
        raise TritonRuleError(
            "x.dtype",
            f"x must have the workspace dtype {act_dtype}",
            x.dtype,
            f"x.to({act_dtype}) or a workspace for {x.dtype}",
        )
    if x.device != device:
        raise TritonRuleError("x.device", f"x must be on this rank's device {device}", x.device, f"x.to('{device}')")
    if x.shape[-1] != hidden:
        raise TritonRuleError(
            "x.hidden",
            f"x's last dimension must be the workspace hidden_size {hidden}",
            tuple(x.shape),
            "a workspace for this hidden size",
        )
    x2 = as_rows(x)
    if x2.shape[0] > max_tokens:
        raise TritonRuleError(
            "x.tokens",
            f"at most max_tokens={max_tokens} rows per call",
            x2.shape[0],
            "split the call or a larger max_tokens",
        )
    check_vector(weight, hidden, "weight", x.device)
    if weight is None and weight_offset != 0.0:
        raise TritonRuleError(
            "weight_offset.no_weight",
            "weight_offset shifts a weight, but weight is None",
            weight_offset,
            "pass weight or weight_offset=0.0",
        )
    if residual is not None:
        if (
            not isinstance(residual, torch.Tensor)
            or residual.shape != x.shape
            or residual.dtype != x.dtype
            or residual.device != x.device
        ):
            seen = (
                (tuple(residual.shape), residual.dtype, str(residual.device))
                if isinstance(residual, torch.Tensor)
                else type(residual).__name__
            )
            raise TritonRuleError(
                "residual.shape",
                "residual must match x in shape, dtype and device",
                seen,
                "residual.to(x.dtype), shaped like x",
            )
        check_activation(residual, "residual")
    fp8mod.fp8_format(dtype)
    if not (scale_ub > 0):
        raise TritonRuleError("scale_ub.range", "scale_ub must be > 0 (inf: no bound)", scale_ub, "scale_ub=math.inf")
    if stage not in (None, *STAGE_NAMES):
        raise TritonRuleError(
            "stage.value", f"stage must be None (measured choice) or one of {sorted(STAGE_NAMES)}", stage, "stage=None"
        )
    if stage == PUSH and not (push_capable(hidden, x.dtype.itemsize) and int32_view_ok(x2)):
        raise TritonRuleError(
            "stage.push",
            "stage 0 needs 16-bit activations, an even hidden size and rows at even element offsets",
            (x.dtype, hidden, x2.stride(0), x2.storage_offset()),
            "stage=None or stage=1",
        )
    if stage in (LAMPORT, LAMPORT2) and not push_capable(hidden, x.dtype.itemsize):
        raise TritonRuleError(
            "stage.push",
            f"stage {stage} needs 16-bit activations and an even hidden size",
            (x.dtype, hidden),
            "stage=None or stage=1",
        )
    for st, cap in ((PUSH, PUSH_MAX_TOKENS), (LAMPORT, LAMPORT_MAX_TOKENS), (LAMPORT2, LAMPORT2_MAX_TOKENS)):
        if stage == st and x2.shape[0] > min(max_tokens, cap):
            raise TritonRuleError(
                "stage.push_tokens", f"stage {st} takes at most {min(max_tokens, cap)} rows", x2.shape[0], "stage=None"
            )
    return x2


def int32_view_ok(x2: torch.Tensor) -> bool:
    return x2.stride(0) % 2 == 0 and x2.storage_offset() % 2 == 0 and x2.shape[-1] % 2 == 0
