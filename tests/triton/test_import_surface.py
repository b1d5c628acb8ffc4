"""The import surface: public names are the functions they document (never a submodule of the same name), and
importing a package or any module of the Triton port changes no environment variable (each checked in a fresh
interpreter, since this test session sets TRITON_INTERPRET itself)."""

import inspect
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import programs.triton

ROOT = Path(__file__).resolve().parents[2]
TRITON_MODULES = sorted(m.name for m in pkgutil.walk_packages(programs.triton.__path__, "programs.triton."))
PACKAGES = {
    "tt_rmsnorm": ["tt_rmsnorm"],
    "programs": ["programs"],
    "programs.nki": ["programs.nki"],
    "programs.parity": ["programs.parity"],
    "programs.triton": ["programs.triton", *TRITON_MODULES],
}

_SNIPPET = """
import importlib, json, os, sys
before = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
after = dict(os.environ)
changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
print(json.dumps(changed))
"""


@pytest.mark.parametrize("package", list(PACKAGES))
def test_importing_leaves_the_environment_unchanged(package):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", _SNIPPET, *PACKAGES[package]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"importing {package} changed these variables"


def test_the_triton_port_has_modules_to_check():
    assert {"programs.triton.forward", "programs.triton.backward", "programs.triton.autograd"} <= set(TRITON_MODULES)


@pytest.mark.parametrize("name", sorted(programs.triton.__all__))
def test_public_names_are_what_they_document_not_submodules(name):
    from types import ModuleType

    value = getattr(programs.triton, name)
    assert not isinstance(value, ModuleType), f"programs.triton.{name} is a module"
    assert callable(value)


def test_rmsnorm_fwd_is_the_launcher():
    from programs.triton import rmsnorm_fwd
    from programs.triton.forward import rmsnorm_fwd as launcher

    assert rmsnorm_fwd is launcher


def test_one_name_a_function_and_the_phases_under_distributed():
    """Every public name is a different object; the distributed call's phases are programs.triton.distributed's only
    (pre_stats is row_sum_of_squares, post is rmsnorm_fwd with stats=), RMSNormFunction autograd's (rms_norm applies
    it)."""
    from programs.triton import distributed

    values = [getattr(programs.triton, name) for name in programs.triton.__all__]
    assert len({id(v) for v in values}) == len(values)
    for name in ("post", "pre_stats"):
        assert name not in programs.triton.__all__ and not hasattr(programs.triton, name)
        assert callable(getattr(distributed, name))
    assert not hasattr(programs.triton, "RMSNormFunction")  # rms_norm is its one spelling here


def test_the_all_reduce_api_is_exported():
    from programs.triton.allreduce.api import AllReduceRMSNormFP8

    assert programs.triton.AllReduceRMSNormFP8 is AllReduceRMSNormFP8


def test_the_all_reduce_module_lists_its_api_only():
    """api's __all__ is what a caller of the fused all-reduce uses: the communicator and its stall, the reference and
    NCCL paths, the strategies and the default choice, the output. The workspace, dispatch table, launches and kernels
    are imported from their own modules."""
    from types import ModuleType

    from programs.triton.allreduce import api

    assert sorted(api.__all__) == [
        "AllReduceRMSNormFP8",
        "CollectiveStall",
        "RMSNormOutput",
        "Strategy",
        "choose_strategy",
        "nccl_allreduce_rmsnorm_fp8",
        "reference_allreduce_rmsnorm_fp8",
    ]
    assert not [name for name in api.__all__ if isinstance(getattr(api, name), ModuleType)]


def test_importing_the_package_imports_no_triton():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    code = "import sys, programs.triton; print(sorted(m for m in ('triton', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def _calls():
    from programs.triton import AllReduceRMSNormFP8, rmsnorm_bwd, rmsnorm_fwd
    from programs.triton.allreduce import api

    return {
        "rmsnorm_fwd": rmsnorm_fwd,
        "rmsnorm_bwd": rmsnorm_bwd,
        "AllReduceRMSNormFP8": AllReduceRMSNormFP8,
        "AllReduceRMSNormFP8.__call__": AllReduceRMSNormFP8.__call__,
        "reference_allreduce_rmsnorm_fp8": api.reference_allreduce_rmsnorm_fp8,
        "nccl_allreduce_rmsnorm_fp8": api.nccl_allreduce_rmsnorm_fp8,
    }


def _section(doc: str, title: str) -> list[str]:
    """The lines of a docstring's numpy-style section (`title`, a rule of dashes, then lines up to a blank one)."""
    lines = inspect.cleandoc(doc).splitlines()
    if title not in lines:
        return []
    start = lines.index(title) + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("name", list(_calls()))
def test_public_calls_document_each_parameter_and_the_result_on_its_own_line(name):
    """Each parameter an entry of its own (`name: type`, then what it is), in the signature's order, and the result
    (a constructor has none) with each of its fields on a line."""
    call = _calls()[name]
    params = [p for p in inspect.signature(call).parameters if p != "self"]
    entries = [line.split(":")[0] for line in _section(call.__doc__, "Parameters") if not line.startswith(" ")]
    assert entries == params
    if not isinstance(call, type):
        returns = _section(call.__doc__, "Returns")
        assert len(returns) >= 2 and not returns[0].startswith(" "), returns
