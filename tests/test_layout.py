"""The layout holds: no import cycle in the packages (module level or inside functions), nothing on the call path
imports the test harness, no module reaches into another's underscore names, the library imports no benchmark, tool or
test, the error class imports without ttnn, and importing the TT package pulls in no GPU or NKI code."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tt_rmsnorm", "programs")
# What a call of distributed_rms_norm, the module, the CCL resources or a checked op runs through.
CALL_PATH = (
    "tt_rmsnorm.distributed",
    "tt_rmsnorm.rmsnorm_module",
    "tt_rmsnorm.planned_module",
    "tt_rmsnorm.weights",
    "tt_rmsnorm.ccl",
    "tt_rmsnorm.ops",
    "tt_rmsnorm.devices",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(*packages: str) -> dict[str, Path]:
    return {_module_name(f): f for p in packages for f in sorted((ROOT / p).rglob("*.py"))}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every absolute import statement in the file, at module level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [a.name for a in node.names]))
    return found


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports. `from pkg import sub` counts as importing `pkg.sub`; a module's
    own parent packages are not edges (Python imports them first, whatever the module says)."""
    graph = {}
    for name, path in modules.items():
        edges = set()
        for module, names in _imports(path):
            if module not in modules:
                continue
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            edges |= set(subs) or {module}
            if len(subs) < len(names):
                edges.add(module)
        graph[name] = edges - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state, stack, cycles = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == "open":
                cycles.append(stack[stack.index(v) :] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in sorted(graph):
        if u not in state:
            visit(u)
    return cycles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo += graph.get(u, ())
    return seen


def test_the_packages_have_no_import_cycle():
    assert _cycles(_graph(_modules(*PACKAGES))) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("entry", CALL_PATH)
def test_the_call_path_never_imports_the_test_harness(entry):
    graph = _graph(_modules("tt_rmsnorm"))
    harness = sorted(m for m in _reachable(graph, entry) if m.startswith("tt_rmsnorm.testing"))
    assert harness == [], f"{entry} reaches {harness}"


def _underscore_uses(path: Path, modules: dict[str, Path], own: str) -> list[str]:
    """`from m import _x` and `alias._x` where `m` / `alias` is another module of the packages."""
    tree = ast.parse(path.read_text())
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if f"{node.module}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif node.module in modules and a.name.startswith("_") and node.module != own:
                    found.append(f"from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and aliases[node.value.id] != own
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_imports_another_modules_underscore_names():
    modules = _modules(*PACKAGES)
    offenders = [f"{name}: {use}" for name, path in modules.items() for use in _underscore_uses(path, modules, name)]
    assert offenders == []


def test_the_underscore_finder_sees_both_forms(tmp_path):
    modules = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    modules["pkg.b"].write_text("from pkg import a\nfrom pkg.a import _x\nimport pkg.a as alias\na._y()\nalias._z\n")
    assert sorted(_underscore_uses(modules["pkg.b"], modules, "pkg.b")) == [
        "from pkg.a import _x",
        "pkg.a._y",
        "pkg.a._z",
    ]


def test_the_library_imports_no_benchmark_tool_or_test():
    """Measurement, tooling and test code lives outside the packages: tests, benchmarks and tools may import it, the
    library never does (inside functions neither)."""
    imports = [
        (name, module)
        for name, path in sorted(_modules(*PACKAGES).items())
        for module, _ in _imports(path)
        if module.split(".")[0] in ("benchmarks", "tools", "tests")
    ]
    assert imports == []


_NO_TTNN = """
import importlib.abc, sys
class NoTtnn(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ttnn" or name.startswith("ttnn."):
            raise ImportError("ttnn is absent here")
sys.meta_path.insert(0, NoTtnn())
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm import accuracy, reference
import tt_rmsnorm
assert tt_rmsnorm.RuleError is RuleError and "ttnn" not in sys.modules
assert not hasattr(tt_rmsnorm, "distributed_rms_norm")
names = {}
exec("from tt_rmsnorm import *", names)
assert set(tt_rmsnorm.__all__) <= set(names) and "ttnn" not in sys.modules, tt_rmsnorm.__all__
print("ok")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_error_class_and_the_reference_import_without_ttnn():
    out = _run(_NO_TTNN)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_importing_the_tt_package_pulls_no_gpu_or_nki_code():
    out = _run(
        "import sys, tt_rmsnorm\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'programs', 'neuronxcc', 'nki')))"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_public_names_are_bound_at_import():
    """`tt_rmsnorm.distributed_rms_norm` is an attribute of the package, not a lookup through a module __getattr__."""
    import tt_rmsnorm

    assert not hasattr(tt_rmsnorm, "__getattr__")
    for name in tt_rmsnorm.__all__:
        assert name in vars(tt_rmsnorm), name
    assert {"open_mesh", "close_mesh", "ops"} <= set(tt_rmsnorm.__all__)
    assert not {"rms_norm", "all_gather", "rms_norm_pre_all_gather"} & set(vars(tt_rmsnorm)), "op wrappers under ops"
