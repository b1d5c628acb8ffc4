"""Instruction counts and SBUF footprint of the fused NKI RMSNorm kernel per free-axis chunk width, on the emulator.

    python -m programs.nki.chunk_widths

Wall time on the emulator says nothing about Trainium, so the table reports what the kernel issues: DMA and compute
instructions per launch, the SBUF peak per partition, the streaming part of it (peak minus the resident weight) and
the largest per-device hidden slice that leaves room for that streaming footprint.
"""

from __future__ import annotations

import numpy as np

from programs.nki import driver
from programs.nki.emulator import nki

WIDTHS = (512, 1024, 2048, 4096)
CASES = ((256, 4096, "bfloat16"), (256, 8192, "bfloat16"), (256, 8192, "float32"), (256, 16384, "float32"))


def measure(width: int, rows: int, hidden: int, dtype: str) -> dict:
    k = driver.kernels()
    saved = k.FREE_TILE
    k.FREE_TILE = width
    try:
        rng = np.random.default_rng(0)
        np_dtype = driver.DTYPES[dtype]
        x = rng.standard_normal((rows, hidden), dtype=np.float32).astype(np_dtype)
        w = rng.standard_normal((1, hidden), dtype=np.float32).astype(np_dtype)
        nki.simulate_kernel(k.rms_norm_kernel, x, w, driver.row_scale(x, hidden), 1e-5)
    finally:
        k.FREE_TILE = saved
    stats = dict(nki.last_launch)
    ftile = min(hidden, width)
    resident = -(-hidden // ftile) * ftile * np_dtype.itemsize
    stats["streaming"] = stats["sbuf_peak_bytes_per_partition"] - resident
    stats["max_slice"] = (driver.SBUF_BYTES_PER_PARTITION - stats["streaming"]) // np_dtype.itemsize // width * width
    return stats


def main() -> None:
    print(
        f"{'rows x hidden':>16} {'dtype':>9} {'width':>6} {'dma':>6} {'compute':>8} {'sbuf peak B':>12} "
        f"{'streaming B':>12} {'max slice':>10}"
    )
    for rows, hidden, dtype in CASES:
        for width in WIDTHS:
            s = measure(width, rows, hidden, dtype)
            print(
                f"{rows:>6} x {hidden:<7} {dtype:>9} {width:>6} {s['dma_instructions']:>6} "
                f"{s['compute_instructions']:>8} {s['sbuf_peak_bytes_per_partition']:>12} {s['streaming']:>12} "
                f"{s['max_slice']:>10}"
            )


if __name__ == "__main__":
    main()
