"""Fused tensor-parallel all-reduce + residual + RMSNorm + per-row FP8 (MAX's allreduce_rmsnorm_fp8) for GPUs.

Semantics (every rank gets the same result): the per-rank partial activations x_r [T, H] are summed in fp32 in rank
order, h = sum; with a residual, h = residual_dtype(h + residual) is returned as residual_out and normalized;
v = h * rsqrt(mean(h^2) + epsilon) * (weight + weight_offset); scale = min(max|v|, scale_ub) / fp8_max per row;
y = fp8(clamp(v / scale)) (0 where scale is 0). Returns RMSNormOutput(y, None, residual_out, scale [T]).

Extreme values: given h, every row equals v evaluated in IEEE float64 and cast (the scale and codes as float64 gives
them from that v), within tt_rmsnorm.accuracy's policy: rows whose fp32 sum of squares overflows (values near the
bf16 maximum) and, with epsilon == 0, rows whose squares underflow take a second pass scaled by a power of two
(allreduce/row_math.py); with epsilon > 0 a tiny row is epsilon-dominated and exact as it is. A row holding +-inf
gives NaN there and +-0 elsewhere (rsqrt(inf) = 0), a NaN anywhere makes the row NaN; such rows get a NaN scale and
NaN codes. Epsilon between 0 and the smallest normal fp32 takes the plain formula. The one departure from float64:
h itself is the fp32 sum, so partials whose sum leaves the fp32 range (two bf16 values near 3.4e38) give +-inf in h
and the row follows the +-inf rule where the float64 sum would be finite.

    comm = AllReduceRMSNormFP8(group, hidden_size=H, max_tokens=T_max)       # once: symmetric workspace, rendezvous
    out  = comm(x, weight, epsilon=1e-6, residual=r)                          # per call; CUDA-graph capturable
    comm.close()                                                              # collective: the workspace released
    out  = reference_allreduce_rmsnorm_fp8(x, weight, group, epsilon=1e-6, residual=r)   # any backend, CPU too

Strategies (`strategy`, a Strategy or its name; default from `choose_strategy`, which reads the measured table
DISPATCH). One shot: every rank gets every row and normalizes all of them; two shots: reduce-scatter to the rows'
owners, who normalize them, then all-gather of the results.
  one_shot_flags    pushed as flag words: every rank writes its rows into every peer's receive buffer as 8-byte words
                    of two 16-bit activations plus a 4-byte flag (the call number); receivers poll their own memory for
                    the flag: no barrier and no atomics (a fixed grid of PUSH_PROGRAMS programs, each counting its
                    calls). Twice the bytes on NVLink, the least latency: for a row or a few.
  one_shot_lamport  pushed with the flags in the data (TensorRT-LLM's Lamport one-shot): every 16-bit word is stored
                    (inverted) into every peer's receive buffer, where 0x8000 marks an empty word; receivers poll until
                    no word of the row is empty, then empty it again. Half of one_shot_flags' bytes, one program per
                    SM: tens of rows.
  two_shot_lamport  two shots pushed with the flags in the data (TensorRT-LLM's two-shot with Lamport buffers): rows
                    pushed to their owners (reduce-scatter), normalized and quantized there, the FP8 rows and scales
                    (with a residual: residual_out) pushed to every peer (all-gather). (W-1)/W of one_shot_lamport's
                    bytes in the first push, no barrier: from tens to a thousand rows.
  two_shot_pulled   two shots in one kernel between barriers: rank r owns rows [r*ceil(T/W), ...); every rank
                    publishes its partial rows, the owners pull, sum, normalize and quantize them and post the FP8 rows
                    and scales (with a residual: residual_out alone, which every rank normalizes itself), which the
                    peers pull in turn. Thousands of rows.
  nccl              NCCL as the transport (nccl_allreduce_rmsnorm_fp8): reduce-scatter, the fused norm on the owned
                    rows, all-gather of FP8 rows and scales; with a residual reduce-scatter + all-gather, then the fused
                    norm (its sums are NCCL's, rounded to the activation dtype). With reuse_x=True (the caller's x is
                    dead after the call, as a row-parallel layer's output is) and a residual: NCCL's all_reduce in
                    place on x, then the fused norm, which is the unfused path itself: the dispatch takes it where no
                    fused strategy beats that path (4 ranks, a residual, 1025-4096 rows). torch's all_reduce works only
                    in place, so without reuse_x it would cost a copy of x, and the dispatch takes two_shot_pulled
                    there instead.

Peer buffers come from PyTorch symmetric memory (torch.distributed._symmetric_memory: empty + rendezvous +
get_buffer); NVLink multicast is never used (no multicast pointer, no multimem instructions). The kernels, their
barriers, the workspace, the dispatch table and the launches live beside this module in programs/triton/allreduce/
(its kernels.py says which module holds what); this module is the API. The reference path (fp32 all_reduce through
torch.distributed, then the forward kernel rmsnorm_fwd) defines the same numbers and runs on CPU with gloo under the
Triton interpreter.
"""

from __future__ import annotations

import math
import os
import warnings

import torch
import torch.distributed as dist
import triton

from programs.triton import fp8 as fp8mod
from programs.triton.allreduce import kernels
from programs.triton.allreduce.dispatch import MAX_WORLD, Strategy, choose_strategy
from programs.triton.allreduce.launch import STALLED_BY, launch
from programs.triton.allreduce.validation import as_strategy, check_call, int32_view_ok
from programs.triton.allreduce.workspace import (
    PUSH_PROGRAMS,
    carve,
    fitting_strategy,
    init_workspace,
    rows_held,
    workspace_bytes,
)
from programs.triton.checks import as_rows, check_activation
from programs.triton.forward import RMSNormOutput, rmsnorm_fwd
from tt_rmsnorm.errors import RuleError

__all__ = [
    "AllReduceRMSNormFP8",
    "CollectiveStall",
    "RMSNormOutput",
    "Strategy",
    "choose_strategy",
    "nccl_allreduce_rmsnorm_fp8",
    "reference_allreduce_rmsnorm_fp8",
]


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
    """The unfused definition: fp32 all_reduce (torch.distributed, any backend) then rmsnorm_fwd with FP8 row scales;
    collective (every rank of the group, the same shapes and options).

    Parameters
    ----------
    x: torch.Tensor
        This rank's partial activations [..., H], bf16, fp16 or fp32.
    weight: torch.Tensor | None
        [H] on x's device, or None.
    group: ProcessGroup | None
        The ranks whose partials are summed (None: the default group).
    epsilon: float
        Added to mean(h^2) under the square root; >= 0.
    weight_offset: float
        Added to the weight (1.0: a zero-centered gamma); 0.0 without a weight.
    residual: torch.Tensor | None
        x's shape: h = sum + residual, rounded to residual.dtype, is normalized and returned as residual_out.
    scale_ub: float
        The bound on the max|v| a row's scale is taken from; > 0 (inf: none).
    dtype: torch.dtype
        The FP8 output dtype, torch.float8_e4m3fn or torch.float8_e5m2.

    Returns
    -------
    RMSNormOutput
        y: x's shape, in `dtype`.
        rsigma: None.
        residual_out: h, x's shape, or None without a residual.
        scale: float32 [T], a scale per row.
    """
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


def _symm_mem():
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem


class CollectiveStall(RuntimeError):
    """A fused call's polling gave up (stall_timeout_s): a peer never sent what this rank waited for. The call's outputs
    are garbage and the workspace's buffers are in an unknown state, so the communicator refuses every later call."""


DEFAULT_STALL_TIMEOUT_S = 60.0


class AllReduceRMSNormFP8:
    """A group's fused all-reduce + RMSNorm + FP8 for activations up to [max_tokens, hidden_size] of `dtype`.

    Construction is collective (every rank of `group`, same arguments): it allocates the symmetric workspace
    (workspace_bytes: ~ 2*max_tokens*hidden*(2*itemsize + 1) bytes per rank), zeroes the flags and exchanges handles.

    Parameters
    ----------
    group: ProcessGroup | None
        2 to 8 ranks of one NVLink domain (None: the default group).
    hidden_size: int
        H, the activations' last dimension; <= 32768.
    max_tokens: int
        The most rows a call takes, T.
    dtype: torch.dtype
        The activations' dtype: bf16, fp16 or fp32.
    device: torch.device | None
        This rank's GPU (None: the current CUDA device).
    push_programs: int
        The programs of a one_shot_flags launch, 1 to kernels.MAX_PROGRAMS.
    lamport_programs: int
        The programs of a Lamport launch, 1 to kernels.MAX_PROGRAMS.
    stall_timeout_s: float | None
        A launch of a fused strategy (all but nccl) whose polling still waits this long after its start gives up and
        records the stall in pinned host memory; the next call (or check_stall(), which CUDA-graph replays need, as
        they skip the host) raises CollectiveStall naming the strategy, the call and the program. The bound is at
        least 2.1 s, and should exceed the longest host-side gap between ranks reaching the same call (a first call's
        compile on a slower rank). None: unbounded.
    """

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
        stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S,
    ):
        group = group or dist.group.WORLD
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if not 2 <= self.world <= MAX_WORLD:
            raise RuleError(
                "group.size",
                f"the fused path serves 2..{MAX_WORLD} ranks of one NVLink domain",
                self.world,
                "use reference_allreduce_rmsnorm_fp8 for other group sizes",
            )
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise RuleError(
                "dtype.activation", "activations must be bfloat16, float16 or float32", dtype, "dtype=torch.bfloat16"
            )
        if hidden_size < 1 or max_tokens < 1:
            raise RuleError(
                "workspace.shape",
                "hidden_size and max_tokens must be >= 1",
                (hidden_size, max_tokens),
                "pass the model's sizes",
            )
        if triton.next_power_of_2(hidden_size) > 32768:
            raise RuleError(
                "hidden_size.range",
                "rows are held in registers: hidden_size <= 32768",
                hidden_size,
                "use reference_allreduce_rmsnorm_fp8 for wider rows",
            )
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        self.hidden, self.max_tokens, self.dtype = hidden_size, max_tokens, dtype
        for name, grid in (("push_programs", push_programs), ("lamport_programs", lamport_programs)):
            if not 1 <= grid <= kernels.MAX_PROGRAMS:
                raise RuleError(
                    f"{name}.range",
                    f"one_shot_flags and the Lamport strategies run 1..{kernels.MAX_PROGRAMS} programs",
                    grid,
                    f"{name}=None (the default)",
                )
        self.push_programs, self.lamport_programs = push_programs, lamport_programs
        if stall_timeout_s is not None and not stall_timeout_s > 0:
            raise RuleError(
                "stall_timeout_s.range", "stall_timeout_s must be > 0 or None", stall_timeout_s, "stall_timeout_s=60.0"
            )
        self.stall_ns = kernels.NO_STALL_NS if stall_timeout_s is None else int(stall_timeout_s * 1e9)
        self.stall_record = torch.zeros(4, dtype=torch.int32, pin_memory=True)  # the kernels write it over PCIe
        self._stall_words = self.stall_record.numpy()
        self._stall_seen = None
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
        strategy: Strategy | str | None = None,
        config: tuple[int, int] | None = None,
        reuse_x: bool = False,
    ) -> RMSNormOutput:
        """The fused call on this rank's partial; collective (every rank of the group, the same shapes and options)
        and CUDA-graph capturable. The numbers are reference_allreduce_rmsnorm_fp8's (the module docstring says where
        the nccl strategy's differ).

        Parameters
        ----------
        x: torch.Tensor
            This rank's partial activations [..., H] of the communicator's dtype and device, at most max_tokens rows.
        weight: torch.Tensor | None
            [H] on x's device, or None.
        epsilon: float
            Added to mean(h^2) under the square root; >= 0.
        weight_offset: float
            Added to the weight (1.0: a zero-centered gamma); 0.0 without a weight.
        residual: torch.Tensor | None
            x's shape, dtype and device: h = sum + residual is normalized and returned as residual_out.
        scale_ub: float
            The bound on the max|v| a row's scale is taken from; > 0 (inf: none).
        dtype: torch.dtype
            The FP8 output dtype, torch.float8_e4m3fn or torch.float8_e5m2.
        strategy: Strategy | str | None
            A Strategy or its name ("one_shot_lamport"); None: choose_strategy's measured choice for this call, moved
            to a strategy whose buffers hold the rows where they do not.
        config: tuple[int, int] | None
            The launch shape (rows a program, warps) in place of the strategy's default; the pushed strategies take
            one row a program.
        reuse_x: bool
            Whether x may be overwritten (its values after the call unspecified), which lets the nccl strategy
            all-reduce in place where that is the fastest path; x is never written otherwise.

        Returns
        -------
        RMSNormOutput
            y: x's shape, in `dtype`.
            rsigma: None.
            residual_out: h, x's shape, or None without a residual.
            scale: float32 [T], a scale per row.
        """
        strategy = as_strategy(strategy)
        x2 = check_call(
            x,
            weight,
            residual=residual,
            epsilon=epsilon,
            weight_offset=weight_offset,
            scale_ub=scale_ub,
            dtype=dtype,
            strategy=strategy,
            hidden=self.hidden,
            max_tokens=self.max_tokens,
            act_dtype=self.dtype,
            device=self.device,
        )
        self.check_stall()
        if self.bufs is None:
            raise RuleError("communicator.closed", "this communicator was closed", self.rank, "a new communicator")
        t = x2.shape[0]
        if strategy is None:
            strategy = choose_strategy(
                t, self.hidden, self.dtype.itemsize, self.world, residual=residual is not None, reuse_x=reuse_x
            )
            strategy = fitting_strategy(strategy, t, self.bufs, self.hidden, int32_view_ok(x2))
        if strategy == Strategy.NCCL:
            out = nccl_allreduce_rmsnorm_fp8(
                x2,
                weight,
                self.group,
                epsilon=epsilon,
                weight_offset=weight_offset,
                residual=as_rows(residual, "residual") if residual is not None else None,
                scale_ub=scale_ub,
                dtype=dtype,
                reuse_x=reuse_x,
            )
            ro = out.residual_out.view(x.shape) if out.residual_out is not None else None
            return RMSNormOutput(out.y.view(x.shape), None, ro, out.scale)
        y = torch.empty(x.shape, dtype=dtype, device=x.device)
        scale = torch.empty(t, dtype=torch.float32, device=x.device)
        res_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device) if residual is not None else None
        launch(
            strategy,
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
            stall=self.stall_record,
            stall_ns=self.stall_ns,
        )
        return RMSNormOutput(y, None, res_out, scale)

    def check_stall(self) -> None:
        """Raise CollectiveStall if a launch so far gave up polling (a plain read of pinned host memory, no sync)."""
        if self._stall_seen is None and self._stall_words[0]:
            code, call, program = (int(v) for v in self._stall_words[:3])
            self._stall_seen = (
                f"rank {self.rank}: fused all-reduce strategy {STALLED_BY[code].value} gave up polling after "
                f"{self.stall_ns / 1e9:.1f} s in its call #{call + 1} of that strategy on this communicator (program "
                f"{program}): a peer did not send its rows (a rank left out of a collective call, or a stall)"
            )
        if self._stall_seen is not None:
            raise CollectiveStall(self._stall_seen)

    def close(self) -> None:
        """Collective (every rank of the group): release the symmetric workspace; later calls are refused. A peer may
        still be reading this rank's buffers for a call this rank has finished (no call ends with a barrier), so each
        rank waits for its own device's work and then for every rank before any buffer goes."""
        if self.bufs is None:
            return
        torch.cuda.synchronize(self.device)
        dist.barrier(group=self.group)
        self.bufs = self._handle = self._raw = None

    def push_rows(self) -> int:
        """Rows one_shot_flags' receive buffers hold."""
        return rows_held(self.bufs, self.hidden)[Strategy.ONE_SHOT_FLAGS]

    def lamport_rows(self) -> int:
        """Rows one_shot_lamport's receive buffers hold."""
        return rows_held(self.bufs, self.hidden)[Strategy.ONE_SHOT_LAMPORT]

    def lamport2_rows(self) -> int:
        """Rows two_shot_lamport's all-gather buffers hold."""
        return rows_held(self.bufs, self.hidden)[Strategy.TWO_SHOT_LAMPORT]


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
    reuse_x: bool = False,
) -> RMSNormOutput:
    """The nccl strategy, NCCL as the transport; collective. Without a residual and with T a multiple of the world
    size: reduce-scatter the rows, normalize and quantize the owned T/W rows with rmsnorm_fwd, all-gather the FP8 rows
    and the scales: the norm runs on 1/W of the rows and the all-gather moves 1 byte an element instead of 2. With a
    residual every rank needs the whole sum (residual_out): all_reduce in place on x where reuse_x allows it, else
    reduce-scatter + all-gather in the activation dtype (NCCL's all_reduce is in place only; this leaves x as it is),
    then rmsnorm_fwd on every row. NCCL sums in the activation dtype in its own order, so this strategy's numbers are
    those of NCCL all_reduce + rmsnorm_fwd (sums rounded to bf16), not the fp32 rank-order sums of the fused strategies.

    Parameters
    ----------
    x: torch.Tensor
        This rank's partial activations as [T, H] rows, already checked (AllReduceRMSNormFP8's call checks them).
    weight: torch.Tensor | None
        [H] on x's device, or None.
    group: ProcessGroup | None
        The ranks whose partials are summed (None: the default group).
    epsilon: float
        As AllReduceRMSNormFP8's call takes it.
    weight_offset: float
        As AllReduceRMSNormFP8's call takes it.
    residual: torch.Tensor | None
        [T, H] rows, or None.
    scale_ub: float
        As AllReduceRMSNormFP8's call takes it.
    dtype: torch.dtype
        The FP8 output dtype.
    reuse_x: bool
        Whether x may be overwritten: with a residual, the all_reduce runs in place on it.

    Returns
    -------
    RMSNormOutput
        y: [T, H] in `dtype`.
        rsigma: None.
        residual_out: [T, H], or None without a residual.
        scale: float32 [T], a scale per row.
    """
    world = dist.get_world_size(group)
    t, h = x.shape
    norm = dict(epsilon=epsilon, weight_offset=weight_offset, dtype=dtype, scale_mode="row", scale_ub=scale_ub)
    if reuse_x and residual is not None:
        dist.all_reduce(x, group=group)
        return rmsnorm_fwd(x, weight, residual=residual, **norm)
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
