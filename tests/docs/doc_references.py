"""What README.md and docs/*.md name of the repository, and whether it is there: the docs' map kept true.

Two checks, each a function of a page's text (so that a made-up page can show it fails):

* :func:`architecture_problems`: docs/architecture.md names every package under ``neuroncc/`` (a top-level one as a
  row of its layer table, at the rank ``tests/test_layering.py`` gives it; a subpackage as ``parent/child/`` anywhere
  or ``child/`` in its top-level package's row) and every top-level module (``errors.py``, ``__init__.py``), and
  names no package that does not exist.
* :func:`problems_of` (each :func:`reference_problem`): every repository path a page names resolves:

  - ``neuroncc/...``, ``benchmarks/...``, ``tests/...``, ``examples/...``, ``tools/...``, ``docs/...``: the file
    or directory exists (``<placeholder>`` and ``*`` match any text); ``dir/module.name`` names a top-level name
    of ``dir/module.py``;
  - a path inside the package, ``codegen/llvm/emit.py`` or ``frontend/stats.compile_records``: the same, under
    ``neuroncc/``;
  - a bare ``name.py`` or ``page.md``: some file of the repository has that name (:data:`NOT_REPOSITORY_FILES`
    lists the user's, the tutorial's and the artifacts' own files the docs name);
  - a dotted ``neuroncc.x.y``: it imports and resolves, attribute by attribute (``neuroncc.stats`` through the
    package's lazy names), in this process (importing modules compiles nothing).

  ``torch.ops.neuroncc.philox_seed``, ``general/nki/test`` and URLs are none of these (what precedes them says so).

Checked pages: README.md and docs/*.md, not performance-history.md (a log: its old names are history) and, of
performance.md, not the measurement sections (the ``###`` sections of its "## Measurements": dated runs).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "neuroncc"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LAYERING = ROOT / "tests" / "test_layering.py"

#: The repository's top-level directories whose paths the docs name.
REPOSITORY_DIRS = ("neuroncc", "benchmarks", "tests", "examples", "tools", "docs")
#: Files the docs name that are not the repository's: the user's own script, the tutorial's, an artifact's.
NOT_REPOSITORY_FILES = {
    "model.py": "the user's model (docs/observability.md, torch-backend.md, ir.md)",
    "train.py": "the user's training script (docs/device.md, passes.md, reliability.md)",
    "approximate.py": "the file docs/writing-a-pass.md's reader writes",
    "nki_kernels.py": "an nki-sim artifact's module (docs/nki.md)",
}

_NOT_AFTER = r"(?<![\w./<>{},*:-])"  # not inside a longer path, a URL, a dotted name or a brace list
_PART = r"(?:[\w.*-]|<[\w-]+>)+"  # one path component; <placeholder> and * stand for any text
REPOSITORY_PATH = re.compile(_NOT_AFTER + rf"((?:{'|'.join(REPOSITORY_DIRS)})/{_PART}(?:/{_PART})*)")
PACKAGE_PATH = re.compile(_NOT_AFTER + rf"([a-z_]\w*/{_PART}(?:/{_PART})*)")
BARE_FILE = re.compile(_NOT_AFTER + r"([A-Za-z_][\w-]*\.(?:py|md))(?![\w/])")
DOTTED = re.compile(r"(?<![\w.])(neuroncc(?:\.[A-Za-z_]\w*)+)")
#: The rows of architecture.md's layer table: ``| 3 | `codegen/` | ...`` or ``| - | `errors.py` | ...``.
LAYER_ROW = re.compile(r"^\|\s*(?P<rank>\d+|-)\s*\|\s*`(?P<name>[\w.]+/?)`\s*\|", re.MULTILINE)
#: A package as architecture.md names it: ``codegen/llvm/``, ``llvm/`` (a path that ends in a slash).
PACKAGE_NAME = re.compile(r"(?<![\w./-])((?:[a-z_]\w*/)+)(?![\w.*<-])")


@dataclass(frozen=True)
class Reference:
    page: str  # relative to the repository
    line: int
    text: str
    kind: str  # "path", "package path", "file name" or "dotted name"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def checked_pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "performance-history.md")


def checked_text(path: Path) -> str:
    """The page's text, measurement sections of performance.md blanked (line numbers kept)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.name == "performance.md":
        section = subsection = ""
        for number, line in enumerate(lines):
            if line.startswith("## "):
                section, subsection = line, ""
            elif line.startswith("### "):
                subsection = line
            if section == "## Measurements" and subsection:
                lines[number] = ""
    return "\n".join(lines)


# ---- the layer table -------------------------------------------------------------------------------------------


@cache
def layering_rules() -> dict[str, object]:
    """``LAYERS``, ``BASE`` and ``TORCH_FREE`` as tests/test_layering.py states them (read, not imported)."""
    rules = {}
    for node in ast.parse(LAYERING.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("LAYERS", "BASE", "TORCH_FREE"):
            rules[target.id] = ast.literal_eval(node.value)
    return rules


def source_packages(package: Path = PACKAGE) -> set[str]:
    """Every package under ``neuroncc/``, as its path below it: ``codegen``, ``codegen/llvm``."""
    return {init.parent.relative_to(package).as_posix() for init in package.rglob("__init__.py")
            if init.parent != package and "__pycache__" not in init.parts}


def top_level_modules(package: Path = PACKAGE) -> set[str]:
    """``errors.py`` and the package's own ``__init__.py`` (its face, whose imports test_layering.py rules too)."""
    return {path.name for path in package.glob("*.py")}


def unranked_layers() -> set[str]:
    """The table's "-" rows: importable from everywhere (``errors``), above everything (``testing``), the root."""
    return {*layering_rules()["BASE"], "testing", "__init__"}


def architecture_problems(text: str, packages: set[str], modules: set[str], layers: dict[str, int],
                          unranked: set[str]) -> list[str]:
    """What architecture.md's ``text`` gets wrong of the tree: ``packages`` (paths below ``neuroncc/``), top-level
    ``modules``, the rank of each top-level package (``layers``) and the ones without a rank (``unranked``)."""
    problems = []
    rows = {match["name"].rstrip("/"): (match["rank"], match.start()) for match in LAYER_ROW.finditer(text)}
    row_lines = {name: text[start:].partition("\n")[0] for name, (_, start) in rows.items()}
    expected_rows = {p for p in packages if "/" not in p} | modules
    for name in sorted(expected_rows):
        if name not in rows:
            problems.append(f"'{name}' has no row in the layer table")
            continue
        layer = name.removesuffix(".py")
        expected = str(layers[layer]) if layer in layers else "-" if layer in unranked else None
        if expected is None:
            problems.append(f"'{name}' has no layer in tests/test_layering.py (LAYERS)")
        elif rows[name][0] != expected:
            problems.append(f"'{name}' is at rank {rows[name][0]} in the table, {expected} in tests/test_layering.py")
    for name in sorted(set(rows) - expected_rows):
        problems.append(f"the layer table has a row for '{name}', which is no package or module of neuroncc")
    named = {match[1].rstrip("/") for match in PACKAGE_NAME.finditer(text)}
    for package in sorted(p for p in packages if "/" in p):
        top, child = package.split("/")[0], package.rpartition("/")[2]
        in_row = {m[1].rstrip("/").rpartition("/")[2] for m in PACKAGE_NAME.finditer(row_lines.get(top, ""))}
        if package not in named and child not in in_row:
            problems.append(f"the package '{package}/' is named nowhere (as `{package}/`, `{child}/` in {top}'s row)")
    for name in sorted(named):
        if name in packages or any(p.endswith("/" + name) for p in packages) or (ROOT / name).is_dir():
            continue
        problems.append(f"'{name}/' is named as a package, and there is none")
    return problems


# ---- references ------------------------------------------------------------------------------------------------


def references(text: str, page: str) -> list[Reference]:
    """The repository paths and dotted names ``text`` names, in order."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        spans: list[tuple[int, int]] = []
        for kind, pattern in (("path", REPOSITORY_PATH), ("package path", PACKAGE_PATH),
                              ("file name", BARE_FILE), ("dotted name", DOTTED)):
            for match in pattern.finditer(line):
                start, end = match.span(1)
                if any(s <= start < e for s, e in spans):
                    continue  # part of a reference already read (tests/x.py is not also the file name x.py)
                token = line[start:end].rstrip(".")
                if kind == "package path" and not _is_package_path(token):
                    continue
                spans.append((start, end))
                found.append(Reference(page, number, token, kind))
    return sorted(found, key=lambda r: r.line)


def _is_package_path(token: str) -> bool:
    """``codegen/llvm/emit.py`` or ``frontend/stats.compile_records``: below a neuroncc package, naming a module."""
    return token.split("/")[0] in {p for p in source_packages() if "/" not in p} and "." in token.rpartition("/")[2]


def _pattern(token: str) -> str:
    return re.sub(r"<[\w-]+>", "*", token)


def _path_problem(token: str, base: Path) -> str | None:
    if any(base.glob(_pattern(token))) if ("*" in token or "<" in token) else (base / token).exists():
        return None
    module, _, attribute = token.rpartition(".")
    source = base / f"{module}.py"
    if attribute and "/" not in attribute and source.is_file():
        return None if attribute in _top_level_names(source) else f"{source.relative_to(ROOT)} defines no '{attribute}'"
    return "no such file or directory"


@cache
def _top_level_names(source: Path) -> frozenset[str]:
    names = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


@cache
def repository_file_names() -> frozenset[str]:
    inside = {path.name for folder in REPOSITORY_DIRS for path in (ROOT / folder).rglob("*")
              if "__pycache__" not in path.parts}
    return frozenset(inside | {path.name for path in ROOT.glob("*.md")})


def resolve_dotted(name: str) -> str | None:
    """Why ``neuroncc.a.b.c`` does not resolve (None when it does): each part an attribute, or a submodule."""
    parts = name.split(".")
    value = importlib.import_module(parts[0])
    for index, part in enumerate(parts[1:], 1):
        prefix = ".".join(parts[:index])
        try:
            value = getattr(value, part)
            continue
        except AttributeError:
            pass
        if hasattr(value, "__path__") and importlib.util.find_spec(f"{prefix}.{part}") is not None:
            value = importlib.import_module(f"{prefix}.{part}")
        else:
            return f"{prefix} has no '{part}'"
    return None


def reference_problem(reference: Reference) -> str | None:
    """Why ``reference`` does not resolve, or None."""
    token = reference.text
    if reference.kind == "path":
        problem = _path_problem(token, ROOT)
        if problem and token.split("/")[0] == "examples":  # or the bundled examples' package
            problem = problem if _path_problem(token, PACKAGE) else None
        return problem
    if reference.kind == "package path":
        return _path_problem(token, PACKAGE)
    if reference.kind == "file name":
        known = token in repository_file_names() or token in NOT_REPOSITORY_FILES
        return None if known else "no file of the repository has this name"
    try:
        return resolve_dotted(token)
    except ImportError as error:
        return f"does not import: {error}"


def problems_of(refs: Iterable[Reference]) -> list[str]:
    return [f"{r.where}: {r.text} ({r.kind}): {why}" for r in refs if (why := reference_problem(r))]
