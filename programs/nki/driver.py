"""Runs the NKI RMSNorm kernels: on a Trainium device or the Neuron CPU simulator when `neuronxcc` is importable,
otherwise on the NumPy emulator (programs/nki/emulator), and says which in a label.

    y, label = run_rms_norm(x, weight, epsilon=1e-5, num_devices=8, dtype="bfloat16")

label is "nki-device", "nki-simulator" or "nki-emulated". num_devices > 1 runs the distributed form on one host:
pre-stats on each hidden slice, the all-gather as a concatenation of the per-slice stats, post on each slice.

Extreme values: rows whose float32 sum of squares could overflow get a power-of-two row scale (`row_scale`), which
the kernels apply exactly, so they normalize like the float64 reference instead of returning zeros. NaN and Inf
inputs propagate as in the float64 formula x / sqrt(mean(x^2) + epsilon), row by row: a NaN makes its whole row NaN;
an infinite element becomes NaN and the rest of its row 0 (the limit x / inf); other rows are unaffected.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import ml_dtypes
import numpy as np
from loguru import logger

from tt_rmsnorm.errors import RuleError

DEVICE = "nki-device"
SIMULATOR = "nki-simulator"
EMULATED = "nki-emulated"

DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float32": np.dtype(np.float32)}

# The fused and post kernels keep the broadcast weight slice resident: hidden * itemsize bytes on every partition, next
# to the streaming tiles of one chunk: x and y in the input dtype, the square and x * rstd in float32, plus the
# (128, 1) statistics (LIMITS.md). SBUF holds 192 KiB per partition on NeuronCore-v2; a slice that fits leaves the
# kernel spill-free.
SBUF_BYTES_PER_PARTITION = 192 * 1024
STATISTICS_RESERVE_BYTES = 1024
# |x| above 2^63 / sqrt(hidden) can make the float32 sum of squares reach 2^126 and, with rounding, overflow.
OVERFLOW_SAFE_SQUARE_SUM = 2.0**126

KERNELS_FILE = Path(__file__).with_name("kernels.py")


def toolchain() -> str:
    """Where the kernels run: a Trainium device, the Neuron CPU simulator, or the NumPy emulator."""
    if importlib.util.find_spec("neuronxcc") is None:
        return EMULATED
    return DEVICE if Path("/dev/neuron0").exists() else SIMULATOR


@cache
def kernels():
    """The kernels module, bound to the real `neuronxcc` when importable, else to the emulator."""
    if toolchain() != EMULATED:
        import programs.nki.kernels as real

        return real
    from programs.nki.emulator import nki_modules

    # The kernel file is imported unchanged; its `import neuronxcc.nki...` lines bind to the emulator, which is
    # registered under those names only for the duration of this import.
    spec = importlib.util.spec_from_file_location("programs.nki._kernels_on_emulator", KERNELS_FILE)
    module = importlib.util.module_from_spec(spec)
    with nki_modules():
        spec.loader.exec_module(module)
    return module


def launch(kernel, *args):
    """Run one kernel on the selected toolchain with NumPy arguments; returns its NumPy output."""
    mode = toolchain()
    if mode == DEVICE:
        return kernel(*args)  # a jit kernel called with NumPy arrays runs on the NeuronCore
    if mode == SIMULATOR:
        import neuronxcc.nki as nki

        return nki.simulate_kernel(kernel, *args)
    from programs.nki.emulator import nki as emulated

    return emulated.simulate_kernel(kernel, *args)


def streaming_bytes(dtype: str) -> int:
    """SBUF bytes per partition of the tiles one chunk streams through (on top of the resident weight)."""
    chunk = kernels().FREE_TILE
    return chunk * (2 * DTYPES[dtype].itemsize + 2 * 4) + STATISTICS_RESERVE_BYTES


def max_local_hidden(dtype: str) -> int:
    itemsize = DTYPES[dtype].itemsize
    chunk = kernels().FREE_TILE
    return (SBUF_BYTES_PER_PARTITION - streaming_bytes(dtype)) // itemsize // chunk * chunk


def row_scale(x2: np.ndarray, hidden_size: int) -> np.ndarray:
    """(rows, 1) float32 powers of two: 2^-e for rows whose largest |x| = m * 2^e (0.5 <= m < 1) could overflow the
    float32 sum of squares over hidden_size elements, so that |x * c| < 1; 1 for every other row, and for rows whose
    largest |x| is not finite (their NaN/Inf semantics stay those of the formula)."""
    amax = np.abs(x2.astype(np.float32)).max(axis=1)
    with np.errstate(over="ignore"):
        risky = np.isfinite(amax) & (amax.astype(np.float64) ** 2 * hidden_size >= OVERFLOW_SAFE_SQUARE_SUM)
    _, exponent = np.frexp(amax.astype(np.float64))
    scale = np.where(risky, np.ldexp(1.0, -exponent), 1.0)
    return scale.astype(np.float32).reshape(-1, 1)


def _to_numpy(a, dtype: np.dtype, what: str) -> np.ndarray:
    if type(a).__module__.startswith("torch"):
        a = a.detach().to("cpu").float().numpy()  # bf16 -> fp32 is exact
    a = np.asarray(a)
    if a.dtype.kind != "f" and a.dtype not in DTYPES.values():
        raise RuleError(f"{what}.dtype", f"{what} must be a floating-point array", a.dtype, f"pass {what} as float32")
    return np.ascontiguousarray(a.astype(np.float32).astype(dtype) if a.dtype != dtype else a)


def _validate(x, weight, epsilon, num_devices, dtype):
    if dtype not in DTYPES:
        raise RuleError("dtype", f"dtype must be one of {sorted(DTYPES)}", repr(dtype), "dtype='bfloat16' or 'float32'")
    if x.ndim < 1 or x.shape[-1] == 0 or x.size == 0:
        raise RuleError(
            "x.shape",
            "x must have at least one row and a non-empty hidden axis",
            tuple(x.shape),
            "pass [..., N] with N >= 1 and at least one row",
        )
    hidden = x.shape[-1]
    if not (isinstance(epsilon, (int, float)) and epsilon > 0 and np.isfinite(epsilon)):
        raise RuleError("epsilon.range", "epsilon must be a positive finite number", repr(epsilon), "epsilon=1e-5")
    if not isinstance(num_devices, int) or num_devices < 1:
        raise RuleError("num_devices.range", "num_devices must be a positive int", repr(num_devices), "num_devices=1")
    if hidden % num_devices:
        raise RuleError(
            "num_devices.split",
            f"the hidden size {hidden} must split evenly over the devices",
            f"num_devices={num_devices}",
            "choose num_devices dividing the hidden size",
        )
    if weight is not None and tuple(weight.shape) != (hidden,):
        raise RuleError(
            "weight.shape",
            f"weight must have shape ({hidden},) (the hidden size)",
            tuple(weight.shape),
            f"pass weight of shape ({hidden},)",
        )
    local = hidden // num_devices
    limit = max_local_hidden(dtype)
    if local > limit:
        raise RuleError(
            "hidden.sbuf",
            f"the per-device hidden slice exceeds {limit} for {dtype}: the resident broadcast weight ({local} x "
            f"{DTYPES[dtype].itemsize} bytes per partition) would not fit SBUF's {SBUF_BYTES_PER_PARTITION} bytes per "
            "partition",
            local,
            f"use more devices (num_devices >= {-(-hidden // limit)})",
        )


def run_rms_norm(x, weight=None, *, epsilon: float, num_devices: int = 1, dtype: str = "bfloat16"):
    """RMSNorm of x (..., hidden) through the NKI kernels. Inputs are rounded to `dtype` first.

    Returns (y, label): y has x's shape, in `dtype`, as a torch tensor if x was one, else a NumPy array;
    label is "nki-device", "nki-simulator" or "nki-emulated"."""
    _validate(x, weight, epsilon, num_devices, dtype)
    np_dtype = DTYPES[dtype]
    shape = tuple(x.shape)
    x2 = _to_numpy(x, np_dtype, "x").reshape(-1, shape[-1])
    w2 = None if weight is None else _to_numpy(weight, np_dtype, "weight").reshape(1, -1)
    k = kernels()
    label = toolchain()
    scale = row_scale(x2, shape[-1])
    if num_devices == 1:
        y = (
            launch(k.rms_norm_kernel, x2, w2, scale, float(epsilon))
            if w2 is not None
            else launch(k.rms_norm_unweighted_kernel, x2, scale, float(epsilon))
        )
    else:
        y = _distributed(k, x2, w2, scale, float(epsilon), num_devices)
    logger.debug(f"NKI RMSNorm {x2.shape} {dtype} devices={num_devices} ran on {label}")
    y = y.reshape(shape)
    if type(x).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(y.astype(np.float32)).to(getattr(torch, dtype)), label
    return y, label


def _distributed(k, x2, w2, scale, epsilon, num_devices):
    """The row scale is the full row's, so every device scales a row alike and the partial sums add up."""
    hidden = x2.shape[1]
    local = hidden // num_devices
    slices = [np.ascontiguousarray(x2[:, d * local : (d + 1) * local]) for d in range(num_devices)]
    stats = np.concatenate([launch(k.rms_norm_pre_stats_kernel, s, scale) for s in slices], axis=1)  # the all-gather
    outs = []
    for d, s in enumerate(slices):
        if w2 is None:
            outs.append(launch(k.rms_norm_post_unweighted_kernel, s, stats, scale, epsilon, hidden))
        else:
            w_local = np.ascontiguousarray(w2[:, d * local : (d + 1) * local])
            outs.append(launch(k.rms_norm_post_kernel, s, stats, w_local, scale, epsilon, hidden))
    return np.concatenate(outs, axis=1)


def _unit_scale(x_local, scale):
    return np.ones((x_local.shape[0], 1), np.float32) if scale is None else scale


def run_pre_stats(x_local: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Per-row float32 sum of squares of one device's slice (rows, local_hidden) -> (rows, 1), of x * scale when a
    (rows, 1) row scale (`row_scale` of the full rows) is given."""
    return launch(kernels().rms_norm_pre_stats_kernel, x_local, _unit_scale(x_local, scale))


def run_post(x_local, stats, weight_local, *, epsilon: float, hidden_size: int, scale=None) -> np.ndarray:
    """Normalize one device's slice with the gathered (rows, devices) stats; weight_local (1, local_hidden) or None;
    scale: the row scale the stats were computed with (None: ones)."""
    k = kernels()
    scale = _unit_scale(x_local, scale)
    if weight_local is None:
        return launch(k.rms_norm_post_unweighted_kernel, x_local, stats, scale, float(epsilon), int(hidden_size))
    return launch(k.rms_norm_post_kernel, x_local, stats, weight_local, scale, float(epsilon), int(hidden_size))


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((129, 4096)).astype(np.float32)
    out, where = run_rms_norm(xs, rng.standard_normal(4096).astype(np.float32), epsilon=1e-5, num_devices=1)
    print(f"[{where}] y[0, :4] = {out[0, :4]}")
