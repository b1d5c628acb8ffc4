"""programs/nki/kernels.py is plain NKI: real imports only, no emulator-only paths, and the emulator leaves no trace.

The same file runs on the Neuron toolchain and on the emulator; these tests keep it that way.
"""

import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from programs.nki import driver
from programs.nki.emulator import MODULE_NAMES, nki_modules

KERNELS = Path(driver.__file__).with_name("kernels.py")
TREE = ast.parse(KERNELS.read_text())
PUBLIC_KERNELS = {
    "rms_norm_kernel",
    "rms_norm_unweighted_kernel",
    "rms_norm_pre_stats_kernel",
    "rms_norm_post_kernel",
    "rms_norm_post_unweighted_kernel",
}
NEURON_PRESENT = importlib.util.find_spec("neuronxcc") is not None


def test_kernels_import_only_nki_and_math():
    imported = set()
    for node in ast.walk(TREE):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported == {"math", "neuronxcc.nki", "neuronxcc.nki.isa", "neuronxcc.nki.language"}


def test_kernels_never_mention_the_emulator_or_host_libraries():
    source = KERNELS.read_text().lower()
    for word in ("emulat", "programs", "numpy", "ml_dtypes", "torch", "sys.modules", "importlib"):
        assert word not in source, f"kernels.py mentions {word!r}"


def test_every_public_kernel_is_nki_jit():
    jitted = {
        f.name
        for f in TREE.body
        if isinstance(f, ast.FunctionDef) and any(ast.unparse(d) == "nki.jit" for d in f.decorator_list)
    }
    assert jitted == PUBLIC_KERNELS


def test_kernels_module_needs_the_real_toolchain():
    """Imported normally, kernels.py needs neuronxcc: without it the import fails instead of falling back."""
    sys.modules.pop("programs.nki.kernels", None)
    if NEURON_PRESENT:
        import programs.nki.kernels as k

        assert PUBLIC_KERNELS <= set(dir(k))
    else:
        with pytest.raises(ModuleNotFoundError, match="neuronxcc"):
            import programs.nki.kernels  # noqa: F401


def test_emulated_kernels_leave_no_neuronxcc_in_sys_modules():
    module = driver.kernels()
    assert PUBLIC_KERNELS <= set(dir(module))
    if not NEURON_PRESENT:
        assert driver.toolchain() == driver.EMULATED
        assert not any(name in sys.modules for name in MODULE_NAMES)
        assert importlib.util.find_spec("neuronxcc") is None  # the root conftest's requires_neuron check stays honest


def test_emulator_refuses_to_shadow_an_imported_neuronxcc(monkeypatch):
    monkeypatch.setitem(sys.modules, "neuronxcc", types.ModuleType("neuronxcc"))
    with pytest.raises(RuntimeError, match="must not shadow the real NKI toolchain"):
        with nki_modules():
            pass
