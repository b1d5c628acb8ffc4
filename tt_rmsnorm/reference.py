"""Reference numerics: a float64 golden RMSNorm, and a model of the values the two TT stages really produce.

`golden_rms_norm` is the mathematical answer (float64 everywhere). The rest models ttnn 0.81.1's distributed RMSNorm
(`rms_norm_pre_all_gather` -> `all_gather(dim=3)` -> `rms_norm_post_all_gather`) and the single-device `ttnn.rms_norm`,
value for value, so tests, the demo and the parity runner can say what a Tenstorrent mesh should return without one.
Only torch (and numpy through it) is needed at import; ttnn is imported lazily, for bfloat8_b only.

Modelled (sources: tt-metal's op sources and the 0.81.1 wheel's kernels):
- Inputs are what the device holds: `quantize` rounds to bfloat16 exactly as `ttnn.from_torch` does (round to nearest
  even, identical to torch's cast), keeps float32, and packs bfloat8_b with ttnn's own host conversion (16 consecutive
  values of a tile-face row share one exponent; 7-bit mantissas; round to nearest). A bf16 host tensor packed to
  bfloat8_b differs from the float32 one packed directly (double rounding), as on the device. Gamma and beta are bf16.
- Residual: x + residual is rounded to the input's dtype before it is squared. On the sharded layout the kernel writes
  the sum back over the input's shard (in the input's format) and the post normalises that; on the interleaved layout
  the post's input is the caller's x + residual. The format of the interleaved pre's fused-add buffer is not confirmed;
  it is modelled as the input's.
- Interleaved pre: sum(x^2) over the local width in column 0 of one 32-wide tile per row, columns 1..31 exactly zero,
  rounded to the stats dtype (bf16 by default; float32 and bfloat8_b too). Tile padding is zero-filled by ttnn, so a
  non-tile-aligned width sums its logical elements.
- Sharded pre: the local MEAN E[x^2] instead of the sum, same tile layout, bfloat16 stats only (ttnn rejects others).
- fp32 overflow (`overflow_rows`): the kernels square x in fp32 (or bf16: the same exponent range), so an element with
  x^2 above the fp32 maximum (|x| > 1.8e19) makes that device's stats +Inf, and so does an interleaved sum of squares
  above it (the fp32 accumulation). The sharded pre scales each square by 1/W before accumulating, so only the
  squares overflow there. The post's rsqrt(Inf) is 0: such a row comes out as x * 0 (+-0; beta where gamma and beta
  are given) on every device, where the float64 golden is finite. The package cannot change ttnn's kernels: this is
  a limit of the hardware path, which the parity runner reports as such.
- NaN and Inf inputs: a NaN in a row makes its stats NaN and the whole row NaN on every device; an Inf makes the
  stats +Inf, so the row is +-0 with NaN (Inf * 0) where x is Inf, which is also the float64 golden's answer.
- Post: the kernel reduces all 32*N stats columns of a row (the zero columns add nothing) times a scaler of
  1/(W_local_padded * N) (interleaved) or 1/N (sharded, averaging the per-device means). The reader writes the scaler
  into a bf16 tile by dropping the low 16 bits of the float (`float_to_scaler_bits`), so it is TRUNCATED to bf16: exact
  for powers of two (every Llama width), up to 2^-8 relative otherwise (e.g. H=3072 on 8 devices: 1/3072 is 0.39 %
  low, output 0.2 % high). Then + epsilon, exact rsqrt, x * rsqrt, * gamma (row broadcast), + beta ONLY when gamma is
  given (the post kernel applies beta inside its gamma branch, so bias without weight is silently dropped), and one
  rounding to the output dtype (default: the input's).
- N devices: the hidden dim is cut into N equal contiguous slices, as ShardTensorToMesh(dim=-1) or ShardTensor2dMesh
  (dims=(None, -1)) do; on a Galaxy (8x4) only the 4 columns split the hidden dim (the 8 rows hold replicas), so N=4.
- `single_device_rms_norm` (ttnn.rms_norm): fp32 variance and fp32 rsqrt of the device's input, gamma and beta (beta
  applies without gamma there: the kernel's FUSE_BETA is independent of FUSE_GAMMA), one rounding to the output dtype.

Not modelled (all intermediates above are exact, which is what `fp32_dest_acc_en=True` approaches):
- ttnn's default compute config for these ops has fp32_dest_acc_en=False. Then (a) the pre packs x^2 into a bf16
  buffer (2^-9 per element; averages out over a row) and accumulates the row's Wt = W_local/32 tile partial sums in a
  bf16 destination register: Wt-1 roundings of 2^-9 relative each, so sum(x^2) is off by up to (Wt-1)*2^-9 (W_local
  1024: 6 %, i.e. 3 % or 4-8 bf16 ULPs on the output) in the worst case and about sqrt(Wt)*2^-9 typically; (b) the post
  packs E[x^2], rsqrt and x*rsqrt to bf16 before the gamma product: up to about two more bf16 ULPs on the output.
  A host simulation of (a)+(b) with round-to-nearest, randn rows [1,1,128,8192], gamma ~ 1+0.1*randn, against the
  float64 golden: N=8 (W_local 1024) sum(x^2) off by up to 0.7 %, output max 2.7 bf16 ULP, mean 0.43, PCC 0.999996;
  N=1 (Wt=256 bf16 additions) 4.5 %, 6.5 ULP, mean 1.26. (b) alone gives 2.65-2.73 ULP. This model, like a device
  with fp32_dest_acc_en=True, stays under 1 ULP (max 0.98, mean 0.28 at N=1; 0.75 / 0.25 at N=8).
- FPU operand truncation to TF32 with fp32 buffers (2^-11 per element, averages out); the packer's rounding mode for
  the stats (modelled as round to nearest even); the format of the epsilon tile (epsilon is used exactly); the sharded
  pre's two-level per-core averaging (1/block_w then 1/num_blocks; exact for power-of-two block counts, modelled as
  one exact mean); LayerNorm stats, Welford, the 2-D core grid and fused_rms_minimal.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
from pathlib import Path

import torch

from tt_rmsnorm.accuracy import dtype_name
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.hardware import MOCK_ENV, tt_hardware_present

TILE_WIDTH = 32
# "fused" is fused_rms_minimal: the sharded layout's local means, gathered in the compute accumulation format (float32
# stats with fp32_dest_acc_en, else bfloat16) instead of always bfloat16.
# The layouts the model computes as ttnn does: the interleaved and sharded pre/post, and the sharded layout of
# fused_rms_minimal, whose stats hold the accumulation format.
LAYOUTS = ("interleaved", "sharded", "fused")
DEVICE_DTYPES = ("bfloat16", "float32", "bfloat8_b")
_TORCH_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64"}
# The cluster bfloat8_b host packing is done against when no hardware or mock is set (any Wormhole will do).
HOST_CONVERSION_DESCRIPTOR = Path(__file__).with_name("testing") / "cluster_descriptors" / "n150.yaml"


def golden_rms_norm(x, weight=None, bias=None, *, epsilon, residual=None) -> torch.Tensor:
    """y = h * rsqrt(mean(h^2) + epsilon) * weight + bias with h = x + residual, all in float64.

    The mathematical answer: bias is applied with or without weight (unlike the TT post kernel)."""
    h = _f64(x)
    if residual is not None:
        h = h + _f64(_same_shape(residual, h, "residual"))
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + epsilon)
    if weight is not None:
        y = y * _row(weight, h.shape[-1], "weight")
    if bias is not None:
        y = y + _row(bias, h.shape[-1], "bias")
    return y


def quantize(x, dtype) -> torch.Tensor:
    """The values a device tensor of `dtype` holds for the host tensor `x` (bfloat16, float32 or bfloat8_b).

    Returns torch.bfloat16 for bfloat16, else torch.float32 (bfloat8_b values are exact in float32 and in bf16).
    float64 input is cast to float32 first for bfloat8_b, as ttnn's host conversion does."""
    name = dtype_name(dtype)
    x = torch.as_tensor(x)
    if name == "bfloat16":
        return x.to(torch.bfloat16)
    if name == "float32":
        return x.to(torch.float32)
    if name == "bfloat8_b":
        return _bfloat8_b(x)
    raise RuleError("reference.dtype", "quantize takes a TT device dtype", repr(name), f"one of {DEVICE_DTYPES}")


def _layout_keyword(fn):
    """Accepts `path=` for `layout=`: callers that name the interleaved/sharded choice by the keyword's other name
    keep working (in the package a path is how a call reaches ttnn; the layout is this choice)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "path" in kwargs:
            if "layout" in kwargs:
                raise TypeError(f"{fn.__name__}: pass layout= (path= is the same keyword under another name)")
            kwargs["layout"] = kwargs.pop("path")
        return fn(*args, **kwargs)

    return call


@_layout_keyword
def pre_all_gather(x_local, *, layout="interleaved", stats_dtype="bfloat16", residual=None) -> torch.Tensor:
    """Per-device stats of `rms_norm_pre_all_gather`: [..., S, 32] for x_local [..., S, W_local].

    `x_local` holds the device's values (pass `quantize(x, dtype)`). Interleaved: sum(x^2) in column 0; sharded: the
    local mean E[x^2] in column 0. Columns 1..31 are zero. Rounded to `stats_dtype`."""
    _check_layout(layout)
    stats_name = dtype_name(stats_dtype)
    if stats_name not in DEVICE_DTYPES:
        raise RuleError(
            "reference.stats_dtype", "stats_dtype is a TT device dtype", repr(stats_name), f"one of {DEVICE_DTYPES}"
        )
    if layout == "fused" and stats_name not in ("bfloat16", "float32"):
        raise RuleError(
            "reference.stats_dtype",
            "fused_rms_minimal's stats are in the accumulation format, bfloat16 or float32",
            repr(stats_name),
            "stats_dtype='float32' (fp32 accumulation) or 'bfloat16'",
        )
    if layout == "sharded" and stats_name != "bfloat16":
        raise RuleError(
            "reference.stats_dtype",
            "the sharded layout supports bfloat16 stats only (ttnn: 'Only bfloat16 is supported for stats')",
            f"stats_dtype={stats_name!r}",
            "stats_dtype='bfloat16', or the interleaved layout",
        )
    h = _with_residual(x_local, residual)
    squares = h.pow(2)
    total = squares.sum(-1)
    value = total if layout == "interleaved" else total / h.shape[-1]
    overflow = squares.to(torch.float32).isinf().any(-1)  # x^2 rounded to fp32, as the kernel squares
    if layout == "interleaved":  # and the fp32 running sum; the sharded pre accumulates x^2 / W
        overflow |= total.to(torch.float32).isinf()
    stats = torch.zeros((*h.shape[:-1], TILE_WIDTH), dtype=torch.float64)
    stats[..., 0] = torch.where(overflow & ~value.isnan(), torch.inf, value)
    return quantize(stats, stats_name)


def all_gather_stats(per_device_stats: list) -> torch.Tensor:
    """`all_gather(stats, dim=3)`: device d's tile lands at columns [32d, 32d+32)."""
    if not per_device_stats:
        raise RuleError(
            "reference.stats",
            "all_gather_stats gathers per-device stats",
            "no stats",
            "one [..., S, 32] tensor a device",
        )
    lead = per_device_stats[0].shape[:-1]
    for d, s in enumerate(per_device_stats):
        if s.shape[:-1] != lead or s.shape[-1] % TILE_WIDTH:
            raise RuleError(
                "reference.stats",
                "every device's stats have the first device's leading dims and a width of 32 * k",
                f"device {d} stats of shape {tuple(s.shape)}",
                f"[{', '.join(map(str, lead))}, 32*k] on every device",
            )
    return torch.cat(list(per_device_stats), dim=-1)


@_layout_keyword
def post_all_gather(
    x_local, stats, *, layout="interleaved", epsilon, weight=None, bias=None, dtype=None
) -> torch.Tensor:
    """`rms_norm_post_all_gather` on one device: x_local [..., S, W_local] normalised with the gathered stats
    [..., S, 32*N]. `weight`/`bias` are this device's W_local slice. Output rounded to `dtype`; None keeps x_local's
    torch dtype (bfloat16, float32, or float64 = unrounded), so bfloat8_b inputs, held as float32, need dtype given."""
    _check_layout(layout)
    x = _f64(x_local)
    s = _f64(stats)
    if s.shape[-1] == 0 or s.shape[-1] % TILE_WIDTH:
        raise RuleError(
            "reference.stats",
            "the gathered stats are 32 * num_devices wide (ttnn: 'Stats inner dimension must be divisible by "
            "tile_width')",
            f"stats last dim {s.shape[-1]}",
            "gather one 32-wide tile per device",
        )
    if s.shape[:-1] != x.shape[:-1]:
        raise RuleError(
            "reference.stats",
            "stats and input agree on every dim but the last (ttnn: 'Stats and input ... must match')",
            f"stats {tuple(s.shape)}, input {tuple(x.shape)}",
            "gather the stats of this same input",
        )
    num_devices = s.shape[-1] // TILE_WIDTH
    w_local = x.shape[-1]
    padded = -(-w_local // TILE_WIDTH) * TILE_WIDTH
    scaler = _bf16_truncate(1.0 / (padded * num_devices) if layout == "interleaved" else 1.0 / num_devices)
    ex2 = s.sum(-1, keepdim=True) * scaler
    y = x * torch.rsqrt(ex2 + epsilon)
    if weight is not None:
        y = y * _row(weight, w_local, "weight")
        if bias is not None:
            y = y + _row(bias, w_local, "bias")
    out = _TORCH_NAMES.get(torch.as_tensor(x_local).dtype, "float32") if dtype is None else dtype_name(dtype)
    return y if out == "float64" else quantize(y, out)


@_layout_keyword
def distributed_rms_norm(
    x,
    weight=None,
    bias=None,
    *,
    num_devices,
    epsilon,
    layout="interleaved",
    dtype="bfloat16",
    stats_dtype="bfloat16",
    residual=None,
):
    """Emulates pre -> all_gather -> post over `num_devices` slices of the hidden dim. Returns (output, gathered stats).

    x [..., H] and weight/bias [H] are host tensors: x (and residual) are quantized to `dtype`, weight and bias to bf16.
    The output is in `dtype`, concatenated over the devices."""
    name = dtype_name(dtype)
    x = torch.as_tensor(x)
    hidden = x.shape[-1]
    if not isinstance(num_devices, int) or num_devices < 1 or hidden % num_devices:
        raise RuleError(
            "reference.num_devices",
            f"num_devices is a positive int dividing the hidden dim {hidden} (each device an equal contiguous slice)",
            f"num_devices={num_devices!r}",
            f"a divisor of {hidden}",
        )
    w_local = hidden // num_devices
    h = _device_input(x, residual, name)
    w = None if weight is None else quantize(_row(weight, hidden, "weight"), "bfloat16")
    b = None if bias is None else quantize(_row(bias, hidden, "bias"), "bfloat16")
    slices = [s.contiguous() for s in h.split(w_local, dim=-1)]
    gathered = all_gather_stats([pre_all_gather(s, layout=layout, stats_dtype=stats_dtype) for s in slices])
    outs = [
        post_all_gather(
            s,
            gathered,
            layout=layout,
            epsilon=epsilon,
            weight=None if w is None else w[d * w_local : (d + 1) * w_local],
            bias=None if b is None else b[d * w_local : (d + 1) * w_local],
            dtype=name,
        )
        for d, s in enumerate(slices)
    ]
    return torch.cat(outs, dim=-1), gathered


@_layout_keyword
def overflow_rows(x, *, num_devices, layout="interleaved", dtype="bfloat16", residual=None) -> torch.Tensor:
    """Rows [...] (bool) whose stats overflow fp32 on the TT devices although every input is finite: the rows the
    distributed ops return as x * 0 (see the module docstring), where the float64 golden is finite."""
    name = dtype_name(dtype)
    x = torch.as_tensor(x)
    h = _device_input(x, residual, name)
    slices = h.split(x.shape[-1] // num_devices, dim=-1)
    stats = all_gather_stats([pre_all_gather(s, layout=layout) for s in slices])
    return stats.isinf().any(-1) & _f64(h).isfinite().all(-1)


def single_device_rms_norm(x, weight=None, bias=None, *, epsilon, dtype, residual=None) -> torch.Tensor:
    """`ttnn.rms_norm` on one device: fp32 variance and rsqrt of the quantized input (computed as ttnn's golden
    computes them), the products exact, output rounded to `dtype`."""
    name = dtype_name(dtype)
    h = _device_input(torch.as_tensor(x), residual, name)
    var = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
    y = _f64(h) * torch.rsqrt(var + epsilon).to(torch.float64)
    if weight is not None:
        y = y * _f64(quantize(_row(weight, y.shape[-1], "weight"), "bfloat16"))
    if bias is not None:
        y = y + _f64(quantize(_row(bias, y.shape[-1], "bias"), "bfloat16"))
    return quantize(y, name)


def _device_input(x, residual, name):
    """What the post normalises: x quantized, or x + residual (each quantized) rounded once more to the dtype."""
    xq = quantize(x, name)
    if residual is None:
        return xq
    rq = quantize(_same_shape(residual, xq, "residual"), name)
    return quantize(_f64(xq) + _f64(rq), name)


def _with_residual(x_local, residual):
    h = _f64(x_local)
    if residual is None:
        return h
    h = h + _f64(_same_shape(residual, h, "residual"))
    dtype = torch.as_tensor(x_local).dtype
    return h.to(dtype).to(torch.float64) if dtype in (torch.bfloat16, torch.float32) else h


def _bfloat8_b(x):
    import ttnn  # lazily: this module must import on machines without ttnn

    if x.dtype not in (torch.float32, torch.bfloat16):
        x = x.to(torch.float32)
    with _conversion_cluster():
        packed = ttnn.from_torch(x.detach().cpu().contiguous(), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
        return ttnn.to_torch(packed).to(torch.float32)


@contextlib.contextmanager
def _conversion_cluster():
    """bfloat8_b host packing needs a cluster: with no Tenstorrent hardware and no mock asked for, point ttnn at the
    packaged N150 descriptor for the conversion, then restore the environment so `mock_cluster_active()` still tells
    the truth. (ttnn keeps the cluster it built for the rest of the process.)"""
    if os.environ.get(MOCK_ENV) or tt_hardware_present():
        yield
        return
    os.environ[MOCK_ENV] = str(HOST_CONVERSION_DESCRIPTOR)
    try:
        yield
    finally:
        os.environ.pop(MOCK_ENV, None)


def _bf16_truncate(value: float) -> float:
    """A float32 value with its low 16 bits dropped, as the reduce-scaler reader packs it into a bf16 tile."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0] & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise RuleError(
            "reference.layout",
            "the layout is one the TT ops run",
            f"layout={layout!r}",
            "'interleaved' (DRAM, prefill), 'sharded' (L1 width/block, decode) or 'fused' (fused_rms_minimal, decode)",
        )


def _row(t, width, what):
    v = _f64(t).reshape(-1)
    if v.numel() != width:
        raise RuleError(
            f"reference.{what}",
            f"the {what} scales a width of {width}",
            f"{v.numel()} elements",
            f"a [{width}] vector (or any shape of {width} elements, e.g. [1, 1, {width} // 32, 32])",
        )
    return v


def _same_shape(t, like, what):
    t = torch.as_tensor(t)
    if t.shape != like.shape:
        raise RuleError(
            f"reference.{what}",
            f"the {what}'s shape equals the input's (ttnn: 'Input and residual logical and padded shapes must match')",
            f"{what} {tuple(t.shape)}, input {tuple(like.shape)}",
            f"a {what} of shape {tuple(like.shape)}",
        )
    return t


def _f64(t) -> torch.Tensor:
    return torch.as_tensor(t).detach().to("cpu", torch.float64)
