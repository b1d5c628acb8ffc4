"""What a launch needs from the device and from Triton, shared by the forward, backward and fused all-reduce
launchers: SM count and DRAM bandwidth per SM, programmatic dependent launch (PDL), cooperative launch and register
caps as launch options, the grid of a split launch, and whether rows can be read as 32-bit words."""

from __future__ import annotations

import torch
import triton

from tt_rmsnorm.errors import RuleError


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device; 4 under the interpreter, so persistent loops and partial buffers
    see several programs."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def dram_gbps_per_sm(device) -> float | None:
    """Nominal DRAM bandwidth per SM (GB/s) from the device's memory bus (None off CUDA or where torch does not report
    it): how many bytes each SM must keep in flight, so which launch shapes keep up (H100 SXM 25.4, H200 36.5)."""
    if device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device)
    bus, clock_khz = getattr(p, "memory_bus_width", 0), getattr(p, "memory_clock_rate", 0)
    if not bus or not clock_khz:
        return None
    return 2 * bus / 8 * clock_khz * 1e3 / p.multi_processor_count / 1e9


def _launch_option(name: str) -> bool:
    """Whether this Triton's CUDA launcher takes the launch option `name`."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return name in getattr(CUDAOptions, "__dataclass_fields__", {})


_COOPERATIVE = _launch_option("launch_cooperative_grid")
_PDL = _launch_option("launch_pdl")


def pdl_supported(device) -> bool:
    """Programmatic dependent launch: a CUDA device of compute capability 9+ (griddepcontrol) and a Triton whose
    launcher sets the attribute."""
    return _PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def resolve_pdl(device, enable_pdl: bool | None) -> bool:
    """Whether to launch with PDL: enable_pdl, or (None) wherever it runs; True where it cannot run is refused."""
    supported = pdl_supported(device)
    if enable_pdl and not supported:
        raise RuleError(
            "enable_pdl.device",
            "programmatic dependent launch needs a CUDA device of compute capability >= 9 and a Triton whose "
            "launcher has launch_pdl",
            f"device {device}, Triton launch_pdl {_PDL}",
            "enable_pdl=None (on where supported) or False",
        )
    return supported if enable_pdl is None else bool(enable_pdl)


def split_shape(
    m: int, n: int, chunk: int, block_m: int, programs: int, device, exchange: bool = True
) -> tuple[int, int, int]:
    """(splits, exchange row width, lanes) of a split launch: splits programs per row block, lanes row blocks in
    flight, splits * lanes <= programs (all resident together, or the exchange would wait forever)."""
    if chunk <= 0 or chunk & (chunk - 1):
        raise RuleError("config.chunk", "config.chunk of a split launch must be a power of two", chunk, "config=None")
    cap = programs or sm_count(device)
    splits = triton.cdiv(n, chunk)
    if splits > cap:
        raise RuleError(
            "config.chunk",
            f"a row of {n} in chunks of {chunk} needs {splits} programs resident together, more than {cap}",
            chunk,
            f"chunk >= {triton.next_power_of_2(triton.cdiv(n, cap))}",
        )
    if exchange and splits > 1 and device.type != "cuda":
        raise RuleError(
            "config.split_interpreter",
            "the interpreter runs programs one after another, so programs exchanging row partials would wait forever",
            f"{splits} splits on {device.type}",
            f"chunk >= {triton.next_power_of_2(n)} (one program per row)",
        )
    lanes = max(1, min(triton.cdiv(m, block_m), cap // splits))
    return splits, triton.next_power_of_2(splits), lanes


def launch_options(device, splits: int = 1, maxnreg: int = 0, pdl: bool = False) -> dict:
    """Cooperative launch of a split grid where Triton offers it: the driver then refuses a grid that cannot be
    resident at once instead of letting the exchange spin forever. maxnreg: a register cap (compiled code only).
    pdl: programmatic dependent launch (the kernel waits with dependent_launch)."""
    opts = {"launch_cooperative_grid": True} if device.type == "cuda" and splits > 1 and _COOPERATIVE else {}
    if maxnreg and device.type == "cuda":
        opts["maxnreg"] = maxnreg
    if pdl and device.type == "cuda":
        opts["launch_pdl"] = True
    return opts


def wordable_weight(weight) -> bool:
    """Whether a weight vector can be held as 32-bit words beside wordable rows: absent, or 16-bit on a 4-byte
    boundary (contiguous and of an even length, as the rows' N, by check_vector and wordable_rows)."""
    return weight is None or (weight.element_size() == 2 and weight.data_ptr() % 4 == 0)


def wordable_rows(x2: torch.Tensor) -> bool:
    """Whether the rows of x2 [M, N] can be read as 32-bit words: 16-bit values, N, the row stride and the base even."""
    return x2.element_size() == 2 and x2.shape[1] % 2 == 0 and x2.stride(0) % 2 == 0 and x2.data_ptr() % 4 == 0
