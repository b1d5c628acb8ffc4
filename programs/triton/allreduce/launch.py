"""Kernel launches of the fused all-reduce strategies (all but NCCL): launch shapes, grids and argument lists."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from programs.triton import fp8 as fp8mod
from programs.triton import interpreter
from programs.triton.allreduce import kernels
from programs.triton.allreduce.dispatch import MAX_WORLD, PUSHED, Strategy
from programs.triton.allreduce.workspace import PUSH_PIECE, PUSH_PROGRAMS, RankBuffers, lamport_rows
from programs.triton.launch import sm_count
from tt_rmsnorm.errors import RuleError

# The strategy a stall record names (sync.py: its first word)
STALLED_BY = {
    kernels.STALLED_FLAGS.value: Strategy.ONE_SHOT_FLAGS,
    kernels.STALLED_PULLED.value: Strategy.TWO_SHOT_PULLED,
    kernels.STALLED_LAMPORT.value: Strategy.ONE_SHOT_LAMPORT,
    kernels.STALLED_LAMPORT2.value: Strategy.TWO_SHOT_LAMPORT,
}


def launch_config(rows: int, hidden: int, device) -> tuple[int, int, int]:
    """(block_m, num_warps, grid) of two-shot pulled for `rows` rows a rank. Measured at H=8192 (the sweeps of
    benchmarks/triton/allreduce.py): one row per program x 16 warps below 512 rows a rank; from 512 rows 2 rows x 16
    warps (best at T = 2048 and 8192 on 2 x H200, and at T = 2048 (512 rows a rank) and 8192 on 2 and 4 x H100;
    4 rows x 32 warps spill registers,
    ptx_report). The grid is one program per SM whatever T: all programs of a launch are resident together (the
    barriers need that) and every program counts every call (pulled.py: the buffer half is the program's own barrier
    epoch)."""
    block_h = triton.next_power_of_2(hidden)
    n_sm = sm_count(device)
    block_m = 1 if rows < 512 else 2
    block_m = max(1, min(block_m, 32768 // block_h))
    num_warps = min(32, max(4, block_m * block_h // 1024) * (2 if block_m == 1 else 1))
    return block_m, num_warps, min(n_sm, kernels.MAX_PROGRAMS)


@dataclass
class _Call:
    """One rank's tensors and scalars of a call, as every strategy's kernel takes them."""

    rank: int
    bufs: list[RankBuffers]
    x: torch.Tensor
    weight: torch.Tensor | None
    residual: torch.Tensor | None
    y: torch.Tensor
    scale: torch.Tensor
    residual_out: torch.Tensor | None
    epsilon: float
    weight_offset: float
    scale_ub: float
    sync: bool
    phases: int

    @property
    def world(self) -> int:
        return len(self.bufs)

    def head(self, xv: torch.Tensor) -> tuple:
        """The leading arguments: x (as the kernel views it), residual, residual_out, y, scale, weight (absent
        tensors: x as a placeholder the kernel never reads)."""
        x, res, ro = self.x, self.residual, self.residual_out
        return (
            xv,
            xv.stride(0),
            res if res is not None else x,
            res.stride(0) if res is not None else 0,
            ro if ro is not None else x,
            ro.stride(0) if ro is not None else 0,
            self.y,
            self.y.stride(0),
            self.scale,
            self.weight if self.weight is not None else x,
        )

    def eight(self, views) -> list:
        """Every rank's view of a region, padded with None to the kernels' MAX_WORLD pointers."""
        return [*views] + [None] * (MAX_WORLD - self.world)

    def norm_args(self) -> tuple:
        h = self.x.shape[1]
        fmax = fp8mod.fp8_format(self.y.dtype).max
        return 1.0 / h, float(self.epsilon), float(self.weight_offset), float(min(self.scale_ub, 3.0e38)), float(fmax)

    def meta(self, num_warps: int) -> dict:
        y_drop, y_min, y_sub = fp8mod.downcast_consts(self.y.dtype)
        return dict(
            RANK=self.rank,
            WORLD=self.world,
            BLOCK_H=triton.next_power_of_2(self.x.shape[1]),
            HAS_W=self.weight is not None,
            HAS_RES=self.residual is not None,
            SYNC=self.sync,
            PHASES=self.phases,
            Y_DROP=y_drop,
            Y_MIN_NORMAL=y_min,
            Y_SUB=y_sub,
            num_warps=num_warps,
        )


def launch(
    strategy: Strategy,
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
    stall: torch.Tensor | None = None,
    stall_ns: int = kernels.NO_STALL_NS,
) -> None:
    """One kernel launch of a fused strategy (not NCCL) for `rank`, given every rank's buffers (already validated).
    sync=False and a subset of phases let one process play all ranks in turn (the interpreter tests). push_programs,
    lamport_programs: the grids of one-shot flags and the Lamport strategies (capped at the SM count), which must stay
    the same for every call of that strategy on these buffers. stall, stall_ns: where a poll that gave up is recorded
    (4 int32 words the device can write; None: the counters' stall record) and after how many ns of a launch polls
    give up (sync.py)."""
    if x.shape[0] == 0:
        return
    interpreter.use_exact_casts(x.device)  # exact bf16 casts where the kernels are interpreted
    if strategy in PUSHED and config is not None and config[0] != 1:
        raise RuleError(
            "config.push_rows",
            f"{strategy.value} takes one row per program: config must be (1, num_warps)",
            config,
            "config=(1, 16) or config=None",
        )
    c = _Call(rank, bufs, x, weight, residual, y, scale, residual_out, epsilon, weight_offset, scale_ub, sync, phases)
    rec = stall if stall is not None else epoch[kernels.STALL :]
    watch = (rec, max(int(stall_ns), kernels.STALL_MIN_NS))
    if strategy in PUSHED:
        programs = push_programs if strategy == Strategy.ONE_SHOT_FLAGS else lamport_programs
        _launch_pushed(strategy, c, epoch, config[1] if config is not None else None, programs, watch)
    else:
        _launch_pulled(c, epoch, config, watch)


def _launch_pulled(c: _Call, epoch: torch.Tensor, config: tuple[int, int] | None, watch: tuple) -> None:
    """Two-shot pulled: one program per SM, block_m rows a program (launch_config, or `config`)."""
    t, h = c.x.shape
    tw = math.ceil(t / c.world)
    block_m, num_warps, grid = launch_config(tw, h, c.x.device)
    if config is not None:
        block_m, num_warps = config
    head = (*c.head(c.x), *c.eight([b.inp for b in c.bufs]))
    flags = (*c.eight([b.flags for b in c.bufs]), epoch, *watch)
    tmax = c.bufs[0].inp.shape[0] // 2
    meta = dict(c.meta(num_warps), BLOCK_M=block_m)
    q_views = [b.q.view(c.y.dtype) for b in c.bufs]
    scratch = (*c.eight(q_views), *c.eight([b.s for b in c.bufs]), *c.eight([b.o for b in c.bufs]))
    kernels.two_shot_pulled_kernel[(grid,)](*head, *scratch, *flags, t, tw, tmax, h, *c.norm_args(), **meta)


def _launch_pushed(
    strategy: Strategy, c: _Call, epoch: torch.Tensor, num_warps: int | None, programs: int, watch: tuple
) -> None:
    """The pushed strategies: one program per row, a fixed grid of `programs` (capped at the SM count)."""
    t, h = c.x.shape
    bufs, world = c.bufs, c.world
    block_h = triton.next_power_of_2(h)
    if strategy == Strategy.ONE_SHOT_FLAGS:
        kernel = kernels.one_shot_flags_kernel
        xv = c.x.view(torch.int32)  # two activations per int32 (check_call verified that this view exists)
        tll = bufs[0].recv.numel() // (2 * world * (h // 2))
        middle = (*c.eight([b.recv for b in bufs]), epoch[kernels.PUSH_CALLS :], *watch, t, tll, h, h // 2)
        num_warps = num_warps or min(32, max(4, block_h // 512))
        piece = max(16, min(PUSH_PIECE, block_h // 8))
    elif strategy == Strategy.ONE_SHOT_LAMPORT:
        kernel = kernels.one_shot_lamport_kernel
        xv = c.x.view(torch.int16)
        middle = (
            *c.eight([b.lamport for b in bufs]),
            epoch[kernels.LAMPORT_CALLS :],
            *watch,
            t,
            lamport_rows(bufs, h),
            h,
        )
    else:
        kernel = kernels.two_shot_lamport_kernel
        xv = c.x.view(torch.int16)
        tl2 = bufs[0].ag.numel() // (2 * h)
        middle = (
            *c.eight([b.rs for b in bufs]),
            *c.eight([b.ag for b in bufs]),
            *c.eight([b.ag_scale for b in bufs]),
            epoch[kernels.LAMPORT2_CALLS :],
            *watch,
            t,
            math.ceil(t / world),
            math.ceil(tl2 / world),
            tl2,
            h,
        )
    if strategy != Strategy.ONE_SHOT_FLAGS:
        num_warps = num_warps or lamport_warps(h)
        piece = min(block_h, num_warps * 32 * 8)  # 8 words (16 bytes) a thread per store
    meta = dict(c.meta(num_warps), PIECE=piece, XDT=tl_dtype(c.x.dtype))
    kernel[(max(1, min(programs, sm_count(c.x.device))),)](*c.head(xv), *middle, *c.norm_args(), **meta)


def lamport_warps(hidden: int) -> int:
    """The Lamport strategies' default warps: the whole row in registers at 16 fp32 values a thread (16 warps at
    H = 8192)."""
    return min(32, max(4, triton.next_power_of_2(hidden) // 512))


def tl_dtype(dtype):
    import triton.language as tl

    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]
