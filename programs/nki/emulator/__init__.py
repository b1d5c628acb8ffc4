"""A NumPy functional emulator of NKI, in both spellings: `neuronxcc.nki` (the kernels' generation, NeuronCore-v2)
and the standalone `nki` namespace (dst-style `nki.isa`).

It is a stand-in for CI machines without the Neuron compiler: it runs unmodified kernels, enforces the NKI limits
listed in programs/nki/LIMITS.md (each with its documentation source) and raises `NkiConstraintError` when a kernel
breaks one; live data over on-chip capacity is a spill (`NkiSpillWarning`), as in the compiler. Results from it are
labelled "nki-emulated"; they say nothing about Trainium's own numerics or performance.

`nki_modules()` temporarily registers the emulator under both spellings' module names, so that a kernel file's real
imports (`import neuronxcc.nki.language as nl`, `import nki.isa as nisa`) bind to it; nothing stays in sys.modules
afterwards, and it refuses to shadow a real toolchain that is already imported.
"""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager

from programs.nki.emulator import isa, isa_dst, language, limits, nki, nki_typing
from programs.nki.emulator.constraints import NkiConstraintError, NkiSpillWarning

__all__ = [
    "NkiConstraintError",
    "NkiSpillWarning",
    "isa",
    "isa_dst",
    "language",
    "limits",
    "nki",
    "nki_modules",
    "spelling_modules",
]

LEGACY_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa", "neuronxcc.nki.typing")
STANDALONE_NAMES = ("nki", "nki.language", "nki.isa", "nki.typing")
MODULE_NAMES = LEGACY_NAMES + STANDALONE_NAMES


def _module(name, doc, attrs, missing):
    m = types.ModuleType(name, doc)
    m.__dict__.update(attrs)

    def __getattr__(attr):
        raise AttributeError(f"{name}.{attr} is not emulated ({missing})")

    m.__getattr__ = __getattr__
    return m


def spelling_modules() -> dict:
    """The module objects of both spellings, by module name."""
    legacy = _module(
        "neuronxcc.nki",
        "emulated neuronxcc.nki (programs.nki.emulator)",
        dict(
            jit=nki.jit,
            baremetal=nki.baremetal,
            benchmark=nki.benchmark,
            simulate_kernel=nki.simulate_kernel,
            language=language,
            isa=isa,
            typing=nki_typing,
        ),
        "neuronxcc.nki entry points emulated: jit, baremetal, benchmark, simulate_kernel",
    )
    standalone = _module(
        "nki",
        "emulated standalone nki (programs.nki.emulator)",
        dict(
            jit=nki.jit,
            benchmark=nki.benchmark,
            simulate=nki.simulate,
            language=language,
            isa=isa_dst,
            typing=nki_typing,
        ),
        "standalone nki entry points emulated: jit, benchmark, simulate",
    )
    package = types.ModuleType("neuronxcc", "emulated neuronxcc (programs.nki.emulator)")
    package.__path__ = []
    package.nki = legacy
    legacy.__path__ = []
    standalone.__path__ = []
    return {
        "neuronxcc": package,
        "neuronxcc.nki": legacy,
        "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": isa,
        "neuronxcc.nki.typing": nki_typing,
        "nki": standalone,
        "nki.language": language,
        "nki.isa": isa_dst,
        "nki.typing": nki_typing,
    }


@contextmanager
def nki_modules():
    """Expose the emulator as `neuronxcc.nki[.language|.isa|.typing]` and `nki[.language|.isa|.typing]` inside the
    block only."""
    present = [n for n in MODULE_NAMES if n in sys.modules]
    if present:
        raise RuntimeError(f"{present} already imported: the emulator must not shadow the real NKI toolchain")
    sys.modules.update(spelling_modules())
    try:
        yield
    finally:
        for name in MODULE_NAMES:
            sys.modules.pop(name, None)
