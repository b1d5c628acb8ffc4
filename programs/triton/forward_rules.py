"""The forward call's rules, checked before any device work: the arguments (output dtype, FP8 scale, hidden size,
distributed stats) and a launch shape against what its kernel can hold (check_launch). Each refusal is a RuleError
naming the rule id, the value seen and the fix; forward.py calls these before it allocates or launches anything."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from programs.triton import fp8 as fp8mod
from programs.triton.forward_config import KERNELS, WIDE_CHUNK_N, FwdConfig
from programs.triton.fp8 import OUT_AMAX, OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC
from programs.triton.kernels import cluster_staging, forward_async, forward_cluster
from programs.triton.launch import sm_count, split_shape, wordable_rows
from tt_rmsnorm.errors import RuleError


def out_mode(dtype, scale_mode, scale) -> int:
    if not fp8mod.is_fp8(dtype):
        return OUT_CAST
    if scale_mode == "row":
        if scale is not None:
            raise RuleError(
                "scale.row_mode",
                "a given scale applies to scale_mode='tensor' only",
                "scale with scale_mode='row'",
                "scale_mode='tensor'",
            )
        return OUT_FP8_ROW
    return OUT_FP8_STATIC


def check_output(x, weight, weight_offset, dtype, scale_mode, scale, scale_ub, hidden_size) -> tuple[torch.dtype, int]:
    """(output dtype, hidden size) of a call, its weight offset, FP8 scale arguments and hidden size checked."""
    n = x.shape[-1]
    if weight is None and weight_offset != 0.0:
        raise RuleError(
            "weight_offset.no_weight",
            "weight_offset shifts a weight, but weight is None",
            weight_offset,
            "pass weight or weight_offset=0.0",
        )
    out_dtype = x.dtype if dtype is None else dtype
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32) and not fp8mod.is_fp8(out_dtype):
        fp8mod.fp8_format(out_dtype)  # raises with the FP8 rule
    if scale_mode not in fp8mod.SCALE_MODES:
        raise RuleError(
            "scale_mode.value", f"scale_mode must be one of {fp8mod.SCALE_MODES}", scale_mode, "scale_mode='row'"
        )
    if not (scale_ub > 0):
        raise RuleError("scale_ub.range", "scale_ub must be > 0 (inf: no bound)", scale_ub, "scale_ub=math.inf")
    if scale is not None:
        if not fp8mod.is_fp8(out_dtype):
            raise RuleError(
                "scale.dtype", "a scale is only used for FP8 output", out_dtype, "dtype=torch.float8_e4m3fn"
            )
        if scale.numel() != 1 or scale.dtype != torch.float32 or scale.device != x.device:
            raise RuleError(
                "scale.shape",
                "scale must be one float32 element on x's device",
                (tuple(scale.shape), scale.dtype, scale.device),
                "torch.tensor([s], dtype=torch.float32, device=x.device)",
            )
    hidden = n if hidden_size is None else int(hidden_size)
    if hidden < n:
        raise RuleError(
            "hidden_size.range",
            f"hidden_size must be >= the local width {n}",
            hidden_size,
            "hidden_size = the global hidden dim",
        )
    return out_dtype, hidden


def check_stats(stats, residual, m: int, device) -> None:
    if stats is None:
        return
    if (
        stats.dim() != 2
        or stats.shape[1] != m
        or stats.dtype not in (torch.float64, torch.float32)
        or stats.stride(1) != 1
        or stats.device != device
    ):
        raise RuleError(
            "stats.shape",
            f"stats must be float64 (pre_stats) or float32 [world, {m}] with contiguous rows on x's device",
            (tuple(stats.shape), stats.dtype),
            "stack the gathered pre_stats outputs",
        )
    if residual is not None:
        raise RuleError(
            "stats.residual",
            "stats from pre_stats already include any residual",
            "residual and stats",
            "add the residual before pre_stats",
        )


@dataclass(frozen=True)
class Call:
    """What a forward call's checks of a launch shape need to know about it."""

    x2: torch.Tensor
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    residual: torch.Tensor | None
    stats: torch.Tensor | None
    out_dtype: torch.dtype
    mode: int
    scale_given: bool
    split_words_ok: bool

    @property
    def n(self) -> int:
        return self.x2.shape[1]

    @property
    def of_x(self) -> bool:  # x itself is normalized: no residual, no distributed stats
        return self.residual is None and self.stats is None

    @property
    def dynamic_tensor_scale(self) -> bool:  # FP8 with one scale taken from a first pass over the rows
        return self.mode == OUT_FP8_STATIC and not self.scale_given

    @property
    def fused(self) -> bool:
        return self.mode != OUT_CAST or self.residual is not None or self.stats is not None

    @property
    def row_max_with_bias(self) -> bool:
        return self.bias is not None and (self.mode == OUT_FP8_ROW or self.dynamic_tensor_scale)

    @property
    def split_exchange(self) -> bool:
        """Whether a split launch's programs exchange row partials in some pass: the sum of squares (no distributed
        stats) or a row max (FP8 row scales, the dynamic tensor scale's first pass)."""
        return self.stats is None or self.mode == OUT_FP8_ROW or self.dynamic_tensor_scale


def check_launch(cfg: FwdConfig, c: Call) -> bool:
    """Every rule of a launch shape, which the call checks before it allocates anything: the words kernels', the Gluon
    kernels', the shape against the row (check_shape) and a cluster CTA's shared memory. Returns cluster_busy's answer
    for a cluster launch, False for the others."""
    check_words(cfg, c)
    check_gluon(cfg, c)
    check_shape(cfg, c)
    return cluster_busy(cfg, c) if cfg.kernel == "cluster" else False


def check_shape(cfg: FwdConfig, c: Call) -> None:
    """The kernel's name, and the rows, looped and split kernels' shape against the row: a rows launch's column slices
    and a looped launch's head are powers of two, a split launch's programs can all be resident (launch.split_shape)."""
    if cfg.kernel not in KERNELS:
        raise RuleError(
            "config.kernel",
            "config.kernel must be 'rows', 'looped', 'split', 'cluster' or 'async'",
            cfg.kernel,
            "config=None",
        )
    m, n = c.x2.shape
    if cfg.kernel == "rows" and 0 < cfg.chunk < triton.next_power_of_2(n) and cfg.chunk & (cfg.chunk - 1):
        raise RuleError(
            "config.chunk",
            "config.chunk of a rows launch (columns per program) must be a power of two",
            cfg.chunk,
            "chunk=0 (whole rows)",
        )
    if cfg.kernel == "looped" and cfg.head and (cfg.head > n or cfg.head & (cfg.head - 1)):
        raise RuleError("config.head", f"config.head must be a power of two <= N={n}", cfg.head, "head=0")
    if cfg.kernel == "split":
        split_shape(m, n, cfg.chunk, cfg.block_m, cfg.programs, c.x2.device, exchange=c.split_exchange)


def check_words(cfg: FwdConfig, c: Call) -> None:
    x2, n = c.x2, c.n
    if cfg.words and cfg.kernel == "split":
        if not c.split_words_ok or cfg.chunk < 2:
            raise RuleError(
                "config.words",
                "the words split kernel holds x, y and the weight as 32-bit words: 16-bit x with N, the row stride "
                "and the base even, output in x's dtype, a 16-bit weight on a 4-byte boundary or none, no bias, "
                "residual, stats or FP8 (chunk >= 2)",
                f"x {x2.dtype}, y {c.out_dtype}, weight {None if c.weight is None else c.weight.dtype}, N {n}, "
                f"row stride {x2.stride(0)}, bias {c.bias is not None}, residual {c.residual is not None}, "
                f"stats {c.stats is not None}, chunk {cfg.chunk}",
                "words=False",
            )
    elif cfg.words:
        if cfg.kernel != "looped" or cfg.head or not c.of_x:
            raise RuleError(
                "config.words",
                "the words stats pass is the looped kernel's, for x itself: no head, residual or stats",
                f"kernel {cfg.kernel}, head {cfg.head}, residual {c.residual is not None}, stats {c.stats is not None}",
                "words=False",
            )
        if not wordable_rows(x2) or n > WIDE_CHUNK_N:
            raise RuleError(
                "config.words",
                "the words stats pass reads 16-bit rows with an even base and stride as 32-bit words, "
                f"N <= {WIDE_CHUNK_N} (one row in registers)",
                f"dtype {x2.dtype}, N {n}, row stride {x2.stride(0)}, base {x2.data_ptr() % 4} bytes past a 4-byte "
                "boundary",
                "words=False",
            )
    if cfg.stages != 3 and not (cfg.words and cfg.kernel == "split" and cfg.stages == 4):
        raise RuleError(
            "config.stages",
            "the element split kernel holds 3 row blocks; the words split kernel 3 or 4",
            (cfg.kernel, cfg.words, cfg.stages),
            "stages=3",
        )


def check_gluon(cfg: FwdConfig, c: Call) -> None:
    """The Gluon kernels' rules: what they normalize, and their launch shape on this device."""
    if cfg.kernel == "async" and c.fused:
        raise RuleError(
            "config.async",
            "the async kernel (Gluon) normalizes x itself into x's or another float dtype: no residual, distributed "
            "stats or FP8 output",
            f"residual {c.residual is not None}, stats {c.stats is not None}, dtype {c.out_dtype}",
            "config=None",
        )
    if cfg.kernel == "cluster" and not c.of_x:
        raise RuleError(
            "config.cluster",
            "the cluster kernel (Gluon) normalizes x itself, into a float or FP8 output: no residual or distributed "
            "stats",
            f"residual {c.residual is not None}, stats {c.stats is not None}",
            "config=None",
        )
    if cfg.kernel in ("split", "cluster") and c.row_max_with_bias:
        raise RuleError(
            f"config.{cfg.kernel}_bias_rowmax",
            f"the {cfg.kernel} kernel takes the row max from max|x*w| before the bias is added, so it cannot give "
            "FP8 row or dynamic tensor scales with a bias",
            cfg.kernel,
            "config=None (the looped kernel serves this case)",
        )
    if cfg.kernel == "async":
        forward_async.check(c.n, cfg.block_m, cfg.num_warps, c.x2, c.x2.device)


def cluster_busy(cfg: FwdConfig, c: Call) -> bool:
    """Whether a cluster launch fills the device at least twice over (forward_cluster stages x then); its shared
    memory checked for the widest of the call's passes (a dynamic tensor scale: the row max, then the FP8 output)."""
    m, n = c.x2.shape
    sizes = [cluster_staging.element_size(v) for v in (c.weight, c.bias)]
    busy = m * cluster_staging.cluster_size(n, cfg.chunk) >= 2 * sm_count(c.x2.device)
    modes = (OUT_AMAX, OUT_FP8_STATIC) if c.dynamic_tensor_scale else (c.mode,)
    staged = max(
        cluster_staging.shared_bytes(n, cfg.chunk, cfg.num_warps, c.x2.element_size(), *sizes, busy, om) for om in modes
    )
    forward_cluster.check(n, cfg.chunk, cfg.num_warps, c.x2.device, staged)
    return busy
