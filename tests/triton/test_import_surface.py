"""The import surface: public names are the functions they document (never a submodule of the same name), and
importing a package or any module of the Triton port changes no environment variable (each checked in a fresh
interpreter, since this test session sets TRITON_INTERPRET itself)."""

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
