"""The package's layering, checked on the source with ``ast`` (docs/architecture.md draws it).

    errors, hardware -> ir, nki -> passes -> codegen -> executors -> driver -> frontend -> examples, device
        -> distributed, evaluation -> cli

A module imports only its own package and packages of a lower rank (any import statement, also inside
functions); packages of one rank do not import each other (``ir`` and the simulator ``nki`` are independent).
``neuroncc/errors.py`` imports nothing from neuroncc and may be imported by every layer; ``neuroncc/testing``
(test helpers) sits above everything and no library module imports it; its IR-level helpers (graph strategies,
semantic checks) do not load torch. Nothing below the front end imports torch at module level: the only torch imports allowed
there are lazy ones inside functions (the extern kernels the launcher calls). A subprocess confirms that
importing the core does not load torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "neuroncc"

#: Layer rank by the module's first component below ``neuroncc``: a module may import its own component and
#: components of a lower rank, never one of the same rank (``ir`` and ``nki`` are independent of each other).
LAYERS = {
    "hardware": 0,  # hardware descriptions: NeuronCore generations and the host CPU (a leaf)
    "ir": 1, "nki": 1,  # the IR; the NKI simulator and cost model (``import neuroncc.nki as nki``)
    "passes": 2, "codegen": 3, "executors": 4, "driver": 5,
    "frontend": 6, "examples": 7, "device": 7, "distributed": 8, "evaluation": 8, "cli": 9,
}
#: Importable from everywhere, and importing nothing from neuroncc.
BASE = {"errors"}
#: The layers that must not import torch at module level.
TORCH_FREE = {"errors", "hardware", "ir", "nki", "passes", "codegen", "executors", "driver"}


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name of the imported module
    line: int
    top_level: bool  # executed when the importing module is imported (not inside a function or TYPE_CHECKING)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path) -> list[Import]:
    """Every import in ``path``, resolved to absolute module names, with whether it runs at import time."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, False)
            elif isinstance(child, ast.Import):
                found.extend(Import(alias.name, child.lineno, top_level) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append(Import(target, child.lineno, top_level))
                # "from neuroncc import ir" imports the subpackage neuroncc.ir
                found.extend(Import(f"{target}.{alias.name}", child.lineno, top_level) for alias in child.names
                             if target == "neuroncc" and alias.name != "*")
            else:
                visit(child, top_level)

    visit(tree, True)
    return found


def _component(module: str) -> str | None:
    """The layer-deciding component of a neuroncc module (``neuroncc.ir.ops`` -> ``ir``); None for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_layer():
    unknown = [str(p.relative_to(ROOT)) for p in SOURCES
               if (c := _component(module_name(p))) is not None and c not in {*LAYERS, *BASE, "testing"}]
    assert not unknown, f"modules outside every layer (add them to LAYERS in {Path(__file__).name}): {unknown}"


def _violations(path: Path) -> list[str]:
    here = _component(module_name(path))
    problems = []
    for imp in imports_of(path):
        where = f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module}"
        top = imp.module.split(".")[0]
        if top in ("torch", "functorch") and imp.top_level and (here in TORCH_FREE or here is None):
            problems.append(f"{where} at module level (below the front end: import torch inside the function)")
        if top != "neuroncc" or imp.module == "neuroncc":
            continue
        target = _component(imp.module)
        if target in BASE or target == here:
            continue
        if here in BASE:
            problems.append(f"{where}: errors.py must not import the rest of neuroncc")
        elif target == "testing":
            problems.append(f"{where}: library code must not import the test helpers")
        elif here == "testing":  # test support sits above every layer
            pass
        elif here is None:
            if imp.top_level:
                problems.append(f"{where}: the package root imports only errors at import time")
        elif target in LAYERS and here in LAYERS and LAYERS[target] > LAYERS[here]:
            problems.append(f"{where}: layer '{here}' must not import the later layer '{target}'")
        elif target in LAYERS and here in LAYERS and LAYERS[target] == LAYERS[here]:
            problems.append(f"{where}: layer '{here}' must not import '{target}' (same rank: independent)")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_the_layering(path):
    assert not _violations(path)


# ---- the checker itself --------------------------------------------------------------------------------


def _check_source(tmp_path: Path, relative: str, source: str) -> list[str]:
    """Run the checker on a fake module placed at ``neuroncc/<relative>`` (ROOT is patched to tmp_path)."""
    global ROOT
    path = tmp_path / "neuroncc" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    saved, ROOT = ROOT, tmp_path
    try:
        return _violations(path)
    finally:
        ROOT = saved


@pytest.mark.parametrize("relative, source, fragment", [
    ("ir/bad.py", "from neuroncc.passes import x\n", "layer 'ir' must not import the later layer 'passes'"),
    ("ir/bad.py", "def f():\n    import neuroncc.executors.cpu.launcher\n", "later layer 'executors'"),
    ("ir/ops/bad.py", "from ...passes import x\n", "later layer 'passes'"),
    ("ir/bad.py", "from neuroncc import frontend\n", "later layer 'frontend'"),
    ("executors/bad.py", "import torch\n", "at module level"),
    ("passes/bad.py", "from torch.fx import GraphModule\n", "at module level"),
    ("errors.py", "from neuroncc.ir import Function\n", "errors.py must not import"),
    ("passes/bad.py", "from neuroncc.testing import helpers\n", "must not import the test helpers"),
    ("nki/bad.py", "from neuroncc.ir import Function\n", "same rank"),
    ("nki/bad.py", "from neuroncc.frontend import backend\n", "layer 'nki' must not import the later layer"),
    ("frontend/bad.py", "from neuroncc.device import dispatch\n", "layer 'frontend' must not import the later layer"),
    ("__init__.py", "from neuroncc.frontend import backend\n", "package root imports only errors"),
])
def test_the_checker_catches(tmp_path, relative, source, fragment):
    problems = _check_source(tmp_path, relative, source)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("relative, source", [
    ("executors/ok.py", "def matmul(a, b):\n    import torch\n    return torch.mm(a, b)\n"),
    ("executors/ok.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"),
    ("frontend/ok.py", "import torch\nfrom neuroncc.driver import compile_graph\n"),
    ("cli/ok.py", "from neuroncc.frontend import backend\nfrom ..ir import parse\n"),
    ("device/ok.py", "import torch\nfrom neuroncc.frontend.importer import import_graph\n"),
    ("passes/ok.py", "from neuroncc.errors import PassError\nfrom neuroncc.ir import Function\n"),
    ("__init__.py", "from neuroncc.errors import NeuronccError\ndef f():\n    import neuroncc.frontend.stats\n"),
    ("testing/ok.py", "from neuroncc.ir import parse\nfrom neuroncc.cli.opt import run_opt\n"),
])
def test_the_checker_allows(tmp_path, relative, source):
    assert _check_source(tmp_path, relative, source) == []


def test_importing_the_core_does_not_load_torch():
    code = ("import sys, neuroncc, neuroncc.ir, neuroncc.passes, neuroncc.codegen.nki, neuroncc.nki, neuroncc.driver, "
            "neuroncc.testing.random_graphs, neuroncc.testing.semantics; print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# ---- no import cycles; imports inside functions only where they keep a heavy import lazy -------------------

#: Third-party packages heavy or optional enough that the core imports them inside the functions that need them.
HEAVY = {"torch", "functorch", "llvmlite", "matplotlib", "redis",
         "networkx"}  # ~0.1-0.2 s; the fusion planner imports it when it runs (session 31 nir31: not with the passes)
#: neuroncc's own modules that cost as much: each target's machinery is imported when that target is used, so
#: that a process running cpu code (a warm start loading its artifacts) does not load the NKI simulator.
HEAVY_MODULES = {
    "neuroncc.executors.nki_sim.executable",  # the NKI simulator and its code generator: ~60 ms
    "neuroncc.executors.cpu.launcher",  # the cpu launcher and its step runners: ~30 ms (LLVM only for a build)
}
#: neuroncc's modules that only some paths of a compile cache need, imported inside the functions on those paths so
#: that a graph cache hit (a warm start's first call) does not load them: tests/frontend/test_warm_imports.py
#: checks that a hit does not. Each costs a few ms, mostly creating its dataclasses.
OFF_THE_HIT_PATH = {
    "neuroncc.driver.remote",  # the remote tier's client, for a process with $NEURONCC_REMOTE_CACHE only
    "neuroncc.driver.bundle",  # signed bundles: the remote tier, save/load_cache_artifacts() (driver.portable)
    "neuroncc.driver.miss_explanation",  # why a compile missed, asked for with INFO logging on
    "neuroncc.driver.records",  # what a compile did: frontend/stats.py names its type (TYPE_CHECKING) only
    "neuroncc.driver.compile_request",  # a compile's request and result: the cache's compile path imports it
    "neuroncc.hardware.neuron",  # the NeuronCore tables: read for an NKI target only (hardware.neuron_core)
    "neuroncc.driver.cache_entry",  # the entries the cache CLI lists (CompileCache.list_entries)
    "neuroncc.executors.interpreter_executable",  # the interp target's executable: built or loaded for it only
    "neuroncc.frontend.compiled_graph_record",  # what the front end keeps of a compile (stats.record_compile)
    "neuroncc.passes.pipeline",  # every pass (~20 ms): to key a compile (driver/cache_key.py), never a graph cache
    # hit (tests/frontend/test_warm_imports.py's COMPILE_ONLY); heavy while it imported networkx (before session 31)
}

#: Packages whose modules still import each other in a cycle (none left: keep it empty).
KNOWN_CYCLES: set[str] = set()

#: Modules that ``import torch`` itself imports (through the ``torch.backends`` entry point, neuroncc's
#: ``_autoload_device``): they import the compiler (the driver: ~0.8 s) only in the functions that use it, so
#: that every ``import torch`` stays fast.
IMPORTED_BY_IMPORT_TORCH = {"neuroncc.frontend.cache_artifacts"}


def _module_of(path: Path) -> str:
    return module_name(path)


def _resolve(module: str, known: set[str]) -> str | None:
    """The neuroncc module an import names (``from neuroncc.ir import Function`` -> ``neuroncc.ir``)."""
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def _import_graph(top_level_only: bool) -> dict[str, set[str]]:
    known = {_module_of(p) for p in SOURCES}
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in SOURCES:
        here = _module_of(path)
        for imp in imports_of(path):
            if top_level_only and not imp.top_level:
                continue
            target = _resolve(imp.module, known) if imp.module.startswith("neuroncc") else None
            # a package's __init__ importing its own children is its face, not a dependency back
            if target and target != here and not (path.name == "__init__.py" and target.startswith(here + ".")):
                graph[here].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_between_modules():
    cycles = [c for c in _cycles(_import_graph(top_level_only=False))
              if not all(any(m == k or m.startswith(k + ".") for k in KNOWN_CYCLES) for m in c)]
    assert not cycles, "modules importing each other in a cycle (imports inside functions count): " + "; ".join(
        ", ".join(c) for c in cycles)


def _loads_heavy(module: str, graph: dict[str, set[str]], direct: dict[str, bool]) -> bool:
    """Whether importing ``module`` imports a :data:`HEAVY` package (through its top-level imports)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if direct.get(current):
            return True
        todo.extend(graph.get(current, ()))
    return False


def test_imports_inside_functions_only_keep_heavy_imports_lazy():
    """An import inside a function is for a heavy optional package (torch, llvmlite), for a neuroncc module
    that imports one, or for a module kept off a graph cache hit's path; anything else belongs at the top of the
    module, where a reader sees what it depends on."""
    graph = _import_graph(top_level_only=True)
    known = set(graph)
    direct = {_module_of(p): _module_of(p) in HEAVY_MODULES | OFF_THE_HIT_PATH or any(
        imp.top_level and imp.module.split(".")[0] in HEAVY for imp in imports_of(p)) for p in SOURCES}
    problems = []
    for path in SOURCES:
        here = _module_of(path)
        if any(here == k or here.startswith(k + ".") for k in KNOWN_CYCLES) or here in IMPORTED_BY_IMPORT_TORCH:
            continue
        for imp in imports_of(path):
            if imp.top_level or imp.module.split(".")[0] in HEAVY:
                continue
            target = _resolve(imp.module, known) if imp.module.startswith("neuroncc") else None
            if target is not None and _loads_heavy(target, graph, direct):
                continue
            problems.append(f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module} inside a function")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_package_says_what_it_owns_and_may_import(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, f"{path.relative_to(ROOT)} opens with no docstring saying what the package owns"
    if path.parent != PACKAGE:
        assert "May import" in doc, f"{path.relative_to(ROOT)}'s docstring does not say what the package may import"
