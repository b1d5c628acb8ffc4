"""FlashInfer's all-reduce fusion (flashinfer.comm.allreduce_fusion on its TensorRT-LLM workspace: the one-shot
Lamport and two-shot kernels that vLLM's and SGLang's fusion passes put after every tensor-parallel block), timed by
benchmarks/triton/allreduce.py beside ours on the same inputs, when flashinfer imports.

Three patterns are timed, each one-shot and two-shot (use_oneshot=True / False; its two-shot needs T > W):
  norm     kARResidualRMSNorm: the norm in bf16 (norm_out), nothing quantized
  fp8      kARResidualRMSNormFP8Quant: FP8 with one static per-tensor scale the caller gives (scale_factor, a
           float32 device tensor; the kernel multiplies by its reciprocal and saturates): here max|v| of the whole
           tensor / 448 from the call's own numbers, the best a calibrated static scale can be
  fp8_row  kARResidualRMSNormDynamicFP8Quant: FP8 with a scale per row, max|v| / 448 into scale_out [T, 1], as ours
Every pattern adds a residual and writes residual_out: a call without one passes a zeroed residual, as vLLM's fusion
pass does, and residual_out goes to a scratch buffer (vLLM writes it over the input; a graph replaying that would
sum its own output again). PDL where the device has it, the completion trigger at the end (its safe default) and
fp32 accumulation, as vLLM launches it.

What it computes, held to float64 under its own definition (benchmarks/triton/reference.py's check_allreduce): the
fp32 sum of the ranks' partials is rounded to bf16 before the residual is added (ours adds the residual to the fp32
sum; without a residual ours normalizes the fp32 sum itself), h = bf16(sum + residual), and the FP8 patterns quantize
the norm after rounding it to bf16, so their row scales are held to the bf16 policy (ours to fp32's).

The workspace is FlashInfer's TensorRT-LLM one (create_allreduce_fusion_workspace(backend="trtllm")): the "auto"
backend picks MNNVL wherever NVLink multicast is supported, which this project never uses. It is built once per
(world, max tokens, H, dtype), collectively over the default group, and holds ~4 W * T_max * H * 2 bytes per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


@dataclass(frozen=True)
class Pattern:
    """One FlashInfer fusion pattern: its flashinfer.comm.AllReduceFusionPattern member and code, and its output."""

    key: str
    member: str
    code: int  # the member's value, recorded so that the call's arguments can be built and tested without flashinfer
    quant: str | None  # None: bf16 norm_out; "tensor": FP8 with a static per-tensor scale; "row": FP8, a scale a row


PATTERNS = {
    p.key: p
    for p in (
        Pattern("norm", "kARResidualRMSNorm", 1, None),
        Pattern("fp8", "kARResidualRMSNormFP8Quant", 2, "tensor"),
        Pattern("fp8_row", "kARResidualRMSNormDynamicFP8Quant", 10, "row"),
    )
}
SHOTS = {True: "1-shot", False: "2-shot"}
# the flashinfer.comm names this module calls
USED = ("allreduce_fusion", "create_allreduce_fusion_workspace", "trtllm_destroy_ipc_workspace_for_all_reduce_fusion")


def shots(t: int, world: int) -> list[bool]:
    """The use_oneshot values FlashInfer runs at T = t: its two-shot asserts token_num > world_size."""
    return [True, False] if t > world else [True]


def buffers(pattern: Pattern, x: torch.Tensor, with_residual: bool) -> dict[str, torch.Tensor]:
    """The outputs one pattern writes for an input like x (and the zeroed residual of a call without one), allocated
    once and reused by every replay."""
    t, h = x.shape
    bufs = {"residual_out": torch.empty_like(x)}
    if not with_residual:
        bufs["zero_residual"] = torch.zeros_like(x)
    if pattern.quant is None:
        bufs["norm_out"] = torch.empty_like(x)
    else:
        bufs["quant_out"] = torch.empty((t, h), dtype=FP8, device=x.device)
    if pattern.quant == "tensor":
        bufs["scale_factor"] = torch.ones(1, dtype=torch.float32, device=x.device)
    if pattern.quant == "row":
        bufs["scale_out"] = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    return bufs


def fusion_kwargs(
    pattern: Pattern,
    x: torch.Tensor,
    weight: torch.Tensor,
    residual: torch.Tensor | None,
    eps: float,
    bufs: dict[str, torch.Tensor],
    *,
    workspace,
    use_oneshot: bool,
    pdl: bool,
) -> dict:
    """flashinfer.comm.allreduce_fusion's keyword arguments for our call (x, residual, weight, eps) in `pattern`.
    Without a residual the zeroed one is passed; the outputs are bufs' (buffers)."""
    kw = {
        "input": x,
        "workspace": workspace,
        "pattern": pattern.code,
        "launch_with_pdl": pdl,
        "trigger_completion_at_end": True,
        "residual_out": bufs["residual_out"],
        "residual_in": bufs["zero_residual"] if residual is None else residual,
        "rms_gamma": weight,
        "rms_eps": eps,
        "use_oneshot": use_oneshot,
        "fp32_acc": True,
    }
    if pattern.quant is None:
        kw["norm_out"] = bufs["norm_out"]
    else:
        kw["quant_out"] = bufs["quant_out"]
    if pattern.quant == "tensor":
        kw["scale_factor"] = bufs["scale_factor"]
    if pattern.quant == "row":
        kw["scale_out"] = bufs["scale_out"]
    return kw


def outputs(pattern: Pattern, bufs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(y, its scale or None, residual_out) of a call that wrote `bufs`: y the bf16 norm or the FP8 codes; the scale
    the per-tensor one given (1 element) or the rows' [T]."""
    if pattern.quant is None:
        return bufs["norm_out"], None, bufs["residual_out"]
    scale = bufs["scale_factor"] if pattern.quant == "tensor" else bufs["scale_out"].flatten()
    return bufs["quant_out"], scale, bufs["residual_out"]


def tensor_scale(sums: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The static per-tensor scale given to the fp8 pattern: max|v| over every row / 448, v the fp32 norm of h as
    FlashInfer forms it (the sum rounded to bf16, plus the residual, rounded). sums: the fp32 all-reduced partials."""
    h = sums.to(weight.dtype)
    if residual is not None:
        h = (h.float() + residual.float()).to(residual.dtype)
    v = torch.nn.functional.rms_norm(h.float(), (h.shape[-1],), weight.float(), eps)
    return (v.abs().amax() / FP8_MAX).reshape(1).clamp_min(torch.finfo(torch.float32).tiny)


def unusable(fi_comm, world: int) -> str | None:
    """Why the imported flashinfer.comm cannot be timed here (a name missing, a pattern code other than the one
    recorded, a world size its kernels do not serve), or None."""
    missing = [n for n in USED if not hasattr(fi_comm, n)]
    if missing:
        return f"flashinfer.comm lacks {', '.join(missing)}"
    for p in PATTERNS.values():
        code = getattr(fi_comm.AllReduceFusionPattern, p.member, None)
        if code != p.code:
            return f"flashinfer.comm.AllReduceFusionPattern.{p.member} is {code}, not {p.code}"
    if world not in (2, 4, 8, 16):
        return f"FlashInfer's all-reduce fusion runs 2, 4, 8 or 16 ranks, not {world}"
    return None


class FlashInferFusion:
    """FlashInfer's TensorRT-LLM workspace for one (world, max tokens, H, dtype), and a call per pattern on it.
    Construction and close are collective (every rank of the default group)."""

    def __init__(self, fi_comm, world: int, rank: int, max_tokens: int, hidden: int, dtype, device):
        self.fi, self.device = fi_comm, device
        self.key = (world, max_tokens, hidden, dtype)
        self.workspace = fi_comm.create_allreduce_fusion_workspace(
            backend="trtllm",
            world_size=world,
            rank=rank,
            max_token_num=max_tokens,
            hidden_dim=hidden,
            dtype=dtype,
        )
        self.pdl = torch.cuda.get_device_capability(device)[0] >= 9

    def call(self, pattern: Pattern, x, weight, residual, eps, bufs, use_oneshot: bool):
        """One fused call writing bufs (buffers(pattern, x))."""
        kw = fusion_kwargs(
            pattern, x, weight, residual, eps, bufs, workspace=self.workspace, use_oneshot=use_oneshot, pdl=self.pdl
        )
        return self.fi.allreduce_fusion(**kw)

    def close(self) -> None:
        """Every rank's work done, then the workspace's buffers released: the TensorRT-LLM workspace's destroy() drops
        its own attributes only, and trtllm_destroy_ipc_workspace_for_all_reduce_fusion drops the references that
        flashinfer.comm keeps to its symmetric buffers."""
        if self.workspace is None:
            return
        torch.cuda.synchronize(self.device)
        torch.distributed.barrier()
        self.fi.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(self.workspace.ipc_handles)
        self.workspace.destroy()
        self.workspace = None


_WORKSPACES: dict[tuple, FlashInferFusion] = {}


def workspace(fi_comm, world: int, rank: int, max_tokens: int, hidden: int, dtype, device) -> FlashInferFusion:
    """The FlashInferFusion of this (world, max tokens, H, dtype), built on first use (collective)."""
    key = (world, max_tokens, hidden, dtype)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = FlashInferFusion(fi_comm, world, rank, max_tokens, hidden, dtype, device)
    return _WORKSPACES[key]


def close_all() -> None:
    """Release every workspace built (collective)."""
    while _WORKSPACES:
        _WORKSPACES.popitem()[1].close()
