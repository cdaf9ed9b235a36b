"""The package's layering, checked on the source with ``ast``.

    neuroncc/ir -> passes -> codegen -> runtime -> frontend -> device -> cli

Each layer imports only itself and the layers before it (any import statement, also inside functions).
``neuroncc/errors.py`` imports nothing from neuroncc and may be imported by every layer; ``neuroncc/testing``
(test helpers) may import errors, ir and passes at import time (anything inside functions), and no library
module imports it. Nothing below the front end
imports torch at module level: the only torch imports allowed there are lazy ones inside functions (the extern
kernels the launcher calls). A subprocess confirms that importing the core does not load torch.
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

#: Layer rank by the module's first component below ``neuroncc``; a module may import ranks <= its own.
#: ``nki`` is the NKI API (``import neuroncc.nki as nki``): a re-export of the runtime's simulator, in the
#: runtime's layer (the simulator's own kernels are written against it).
LAYERS = {"ir": 0, "passes": 1, "codegen": 2, "runtime": 3, "nki": 3, "frontend": 4, "examples": 4, "device": 5,
          "cli": 6}
#: Importable from everywhere, and importing nothing from neuroncc.
BASE = {"errors"}
#: Test helpers: may import these, and are imported by no library module.
TESTING_MAY_IMPORT = {"errors", "ir", "passes"}
#: The layers that must not import torch at module level.
TORCH_FREE = {"errors", "ir", "passes", "codegen", "runtime"}


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
        elif here == "testing":  # its lazy imports (say, the lit format running `neuroncc opt`) are free
            if imp.top_level and target not in TESTING_MAY_IMPORT:
                problems.append(f"{where}: neuroncc.testing may import only {sorted(TESTING_MAY_IMPORT)}")
        elif here is None:
            if imp.top_level:
                problems.append(f"{where}: the package root imports only errors at import time")
        elif target in LAYERS and here in LAYERS and LAYERS[target] > LAYERS[here]:
            problems.append(f"{where}: layer '{here}' must not import the later layer '{target}'")
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
    ("ir/bad.py", "def f():\n    import neuroncc.runtime.launcher\n", "later layer 'runtime'"),
    ("ir/ops/bad.py", "from ...passes import x\n", "later layer 'passes'"),
    ("ir/bad.py", "from neuroncc import frontend\n", "later layer 'frontend'"),
    ("runtime/bad.py", "import torch\n", "at module level"),
    ("passes/bad.py", "from torch.fx import GraphModule\n", "at module level"),
    ("errors.py", "from neuroncc.ir import Function\n", "errors.py must not import"),
    ("passes/bad.py", "from neuroncc.testing import helpers\n", "must not import the test helpers"),
    ("testing/bad.py", "from neuroncc.runtime import driver\n", "may import only"),
    ("nki/bad.py", "from neuroncc.frontend import backend\n", "layer 'nki' must not import the later layer"),
    ("frontend/bad.py", "from neuroncc.device import dispatch\n", "layer 'frontend' must not import the later layer"),
    ("__init__.py", "from neuroncc.frontend import backend\n", "package root imports only errors"),
])
def test_the_checker_catches(tmp_path, relative, source, fragment):
    problems = _check_source(tmp_path, relative, source)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("relative, source", [
    ("runtime/ok.py", "def matmul(a, b):\n    import torch\n    return torch.mm(a, b)\n"),
    ("runtime/ok.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"),
    ("frontend/ok.py", "import torch\nfrom neuroncc.runtime import driver\n"),
    ("cli/ok.py", "from neuroncc.frontend import backend\nfrom ..ir import parse\n"),
    ("device/ok.py", "import torch\nfrom neuroncc.frontend.importer import import_graph\n"),
    ("passes/ok.py", "from neuroncc.errors import PassError\nfrom neuroncc.ir import Function\n"),
    ("__init__.py", "from neuroncc.errors import NeuronccError\ndef f():\n    import neuroncc.frontend.stats\n"),
    ("testing/ok.py", "from neuroncc.ir import parse\ndef f():\n    from neuroncc.cli.opt import run_opt\n"),
])
def test_the_checker_allows(tmp_path, relative, source):
    assert _check_source(tmp_path, relative, source) == []


def test_importing_the_core_does_not_load_torch():
    code = "import sys, neuroncc, neuroncc.ir, neuroncc.passes; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
