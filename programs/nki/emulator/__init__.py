"""A NumPy functional emulator of the `neuronxcc.nki` subset that programs/nki/kernels.py uses.

It is a stand-in for CI machines without the Neuron compiler: it runs the unmodified kernels, enforces the NKI limits
listed in programs/nki/LIMITS.md (partition size, SBUF/PSUM capacity, PSUM and gemm free sizes, masks, dtypes) and
raises `NkiConstraintError` when a kernel breaks one. Results from it are labelled "nki-emulated"; they say nothing
about Trainium's own numerics or performance.

`neuronxcc_modules()` temporarily registers the emulator under the `neuronxcc` module names, so that the kernel file's
real imports (`import neuronxcc.nki.language as nl`) bind to it; nothing stays in sys.modules afterwards.
"""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager

from programs.nki.emulator import isa, language, limits, nki
from programs.nki.emulator.tensors import NkiConstraintError

__all__ = ["NkiConstraintError", "isa", "language", "limits", "neuronxcc_modules", "nki"]

MODULE_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa")


@contextmanager
def neuronxcc_modules():
    """Expose the emulator as `neuronxcc`, `neuronxcc.nki`, `.language`, `.isa` inside the block only."""
    present = [n for n in MODULE_NAMES if n in sys.modules]
    if present:
        raise RuntimeError(f"{present} already imported: the emulator must not shadow the real NKI toolchain")
    package = types.ModuleType("neuronxcc", "emulated neuronxcc (programs.nki.emulator)")
    package.__path__ = []
    package.nki = nki
    modules = {
        "neuronxcc": package,
        "neuronxcc.nki": nki,
        "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": isa,
    }
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in MODULE_NAMES:
            sys.modules.pop(name, None)
