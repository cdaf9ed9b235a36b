"""Pipelines: the pass registry, the pipeline-string parser and each target's default pipeline.

    canonicalize,fuse,tile{target=trn2 tile=[128,512]}

is a pipeline string (xDSL syntax): passes by command-line name, separated by commas, options in braces as
space-separated ``key=value`` pairs. Option values are typed by the pass's dataclass fields: ``true/false``
for bool, numbers, bare or quoted strings, ``[a,b]`` for tuples, ``none`` for optional values. The same parser
serves ``neuroncc opt -p``, the torch backend's ``options={"pipeline": ...}`` and the tests.

Passes are found by name in :data:`IN_TREE_PASSES` (the one list of passes that ship with neuroncc) and in
the ``neuroncc.passes`` entry-point group, whose entry names are pass names and whose objects are
:class:`Pass` subclasses (loaded only when a pipeline names them). The entry points are scanned once per process
while ``sys.path`` and its directories are unchanged (:func:`_plugin_entry_points`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import threading
import time
import types
import typing
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Literal

from neuroncc.errors import PipelineError
from neuroncc.ir import Function
from neuroncc.passes.canonicalize import Canonicalize
from neuroncc.passes.fuse import Fuse
from neuroncc.passes.layout import ChooseLayouts
from neuroncc.passes.lower_complex import LowerComplex
from neuroncc.passes.manager import Pass, PassContext, Pipeline
from neuroncc.passes.one_hot_sums import FoldOneHotSums
from neuroncc.passes.plan_memory import PlanMemory
from neuroncc.passes.product_words import Bf16ProductWords
from neuroncc.passes.static_shape import StaticShape
from neuroncc.passes.tile import Tile

#: Every pass that ships with neuroncc, in the order a full pipeline runs them.
IN_TREE_PASSES: tuple[type[Pass], ...] = (Canonicalize, FoldOneHotSums, LowerComplex, StaticShape, Bf16ProductWords,
                                          Fuse, ChooseLayouts, Tile, PlanMemory)

#: Entry-point group through which other distributions add passes (entry name = pass name).
ENTRY_POINT_GROUP = "neuroncc.passes"

#: The default pipeline of each target, in one place. ``nki-sim`` (the runtime target) uses ``nki``.
DEFAULT_PIPELINES: dict[str, str] = {
    "interp": "canonicalize,static-shape,fuse,layout,plan-memory",
    "cpu": "canonicalize,fold-one-hot-sums,lower-complex,static-shape,bf16-product-words,fuse,layout{target=cpu},"
           "tile{target=cpu},plan-memory",
    "nki": "canonicalize,lower-complex{fft=dft},static-shape,fuse,layout{target=trn2},tile{target=trn2},plan-memory",
}


def default_pipeline(target: str) -> str:
    """The default pipeline string for a compilation target (``nki-sim`` shares ``nki``'s)."""
    key = target.removesuffix("-sim")
    try:
        return DEFAULT_PIPELINES[key]
    except KeyError:
        raise PipelineError(f"no default pipeline for target '{target}' "
                            f"(known: {', '.join(sorted(DEFAULT_PIPELINES))})") from None


class PassRegistry:
    """Passes by name: the in-tree ones plus the entry points of installed distributions."""

    def __init__(self, passes: Mapping[str, type[Pass]], entry_points: Mapping[str, metadata.EntryPoint]):
        self._passes = dict(passes)
        self._entry_points = dict(entry_points)

    def names(self) -> list[str]:
        return sorted(set(self._passes) | set(self._entry_points))

    def get(self, name: str) -> type[Pass]:
        if name in self._passes:
            return self._passes[name]
        if name in self._entry_points:
            self._passes[name] = _load_entry_point(name, self._entry_points[name])
            return self._passes[name]
        raise PipelineError(f"unknown pass '{name}' (known: {', '.join(self.names())})")


def _load_entry_point(name: str, entry_point: metadata.EntryPoint) -> type[Pass]:
    try:
        loaded = entry_point.load()
    except Exception as exc:  # a broken plug-in must not look like a neuroncc bug
        raise PipelineError(f"pass '{name}': cannot load entry point '{entry_point.value}': {exc}") from None
    if not (isinstance(loaded, type) and issubclass(loaded, Pass) and dataclasses.is_dataclass(loaded)):
        raise PipelineError(f"pass '{name}': entry point '{entry_point.value}' is not a Pass dataclass")
    if loaded.name != name:
        raise PipelineError(f"pass '{name}': entry point '{entry_point.value}' defines a pass named "
                            f"'{loaded.name}'")
    return loaded


def pass_registry() -> PassRegistry:
    """The registry of every available pass (in-tree first; plug-ins may not reuse an in-tree name)."""
    in_tree = {cls.name: cls for cls in IN_TREE_PASSES}
    plugins = _plugin_entry_points()
    for name, entry_point in plugins.items():
        if name in in_tree:
            raise PipelineError(f"entry point '{entry_point.value}' redefines the in-tree pass '{name}'")
    return PassRegistry(in_tree, plugins)


#: A scan is reused only while every sys.path directory's mtime is at least this old (file system clocks are
#: coarse: a plug-in installed right after a scan, in the same tick, would leave the same mtime).
SCAN_SETTLE_NS = 2_000_000_000

_SCAN_LOCK = threading.Lock()
#: a fork's child has a fresh lock (as codegen/llvm/fork_safety.py renews the leaf locks, which this layer cannot
#: import): a thread of the parent's may have held it at the fork
os.register_at_fork(after_in_child=_SCAN_LOCK._at_fork_reinit)
_LAST_SCAN: list[tuple[tuple, dict[str, metadata.EntryPoint]]] = []


def _plugin_entry_points() -> dict[str, metadata.EntryPoint]:
    """The ``neuroncc.passes`` entry points of the installed distributions, by name (a later one of the same
    name wins). Scanning them reads every ``sys.path`` directory's listing and each distribution's metadata:
    3.5-5.5 ms, which every pipeline parse (two per cold compiled call) paid. So the scan is kept while what it
    read from is unchanged, by the signal importlib's own caches use: ``sys.path`` and its import hooks, and the
    mtime of each of its directories (installing or removing a distribution adds or removes entries there; a
    plug-in put on a new ``sys.path`` entry changes the list). A scan of directories changed less than
    :data:`SCAN_SETTLE_NS` ago is not kept."""
    state, newest = _installed_state()
    with _SCAN_LOCK:
        if _LAST_SCAN and _LAST_SCAN[0][0] == state:
            return _LAST_SCAN[0][1]
    plugins = {entry_point.name: entry_point for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    with _SCAN_LOCK:
        _LAST_SCAN[:] = [(state, plugins)] if newest < time.time_ns() - SCAN_SETTLE_NS else []
    return plugins


def _installed_state() -> tuple[tuple, int]:
    """(what a scan of the installed entry points depends on, the newest of its directories' mtimes)."""
    relative = any(not os.path.isabs(entry) for entry in sys.path)  # "" (python -c) or "dir": from the cwd
    places = [*([os.getcwd()] if relative else []), *sys.path]
    mtimes = []
    for place in places:
        try:
            mtimes.append(os.stat(place).st_mtime_ns)
        except (OSError, ValueError):
            mtimes.append(-1)
    state = (metadata.entry_points, tuple(sys.meta_path), tuple(sys.path_hooks), tuple(places), tuple(mtimes))
    return state, max(mtimes, default=0)


# ---- the pipeline-string parser ------------------------------------------------------------------------

_TOKEN = re.compile(r"""\s*(?:(?P<punct>[{}\[\],=])|(?P<string>"(?:[^"\\]|\\.)*")|(?P<word>[^\s{}\[\],="]+))""")


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            raise PipelineError(f"pipeline '{text}': cannot read '{text[pos:].strip()[:20]}'")
        tokens.append(match.group(match.lastgroup))
        pos = match.end()
    return tokens


class _PipelineParser:
    def __init__(self, text: str, registry: PassRegistry):
        self.text, self.registry = text, registry
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self, what: str) -> str:
        token = self.peek()
        if token is None:
            raise PipelineError(f"pipeline '{self.text}': expected {what}, found the end")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        found = self.next(repr(token))
        if found != token:
            raise PipelineError(f"pipeline '{self.text}': expected '{token}', found '{found}'")

    def parse(self) -> Pipeline:
        passes: list[Pass] = []
        if self.peek() is None:
            return Pipeline(())
        while True:
            passes.append(self.parse_pass())
            if self.peek() is None:
                return Pipeline(tuple(passes))
            self.expect(",")

    def parse_pass(self) -> Pass:
        name = self.next("a pass name")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-.]*", name):
            raise PipelineError(f"pipeline '{self.text}': expected a pass name, found '{name}'")
        cls = self.registry.get(name)
        raw: dict[str, Any] = {}
        if self.peek() == "{":
            self.pos += 1
            while self.peek() != "}":
                key = self.next("an option name or '}'")
                self.expect("=")
                if key in raw:
                    raise PipelineError(f"pass '{name}': option '{key}' given twice")
                raw[key] = self.parse_value()
            self.pos += 1
        return make_pass(cls, raw)

    def parse_value(self) -> Any:
        token = self.next("an option value")
        if token == "[":
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.parse_value())
                if self.peek() == ",":
                    self.pos += 1
            self.pos += 1
            return items
        if token in ("{", "}", "]", ",", "="):
            raise PipelineError(f"pipeline '{self.text}': expected an option value, found '{token}'")
        return token


def parse_pipeline(text: str, registry: PassRegistry | None = None) -> Pipeline:
    """Parse a pipeline string; unknown passes and options raise :class:`PipelineError` naming them."""
    return _PipelineParser(text, registry or pass_registry()).parse()


@functools.cache
def _type_hints(cls: type[Pass]) -> dict[str, Any]:
    """A pass class's resolved annotations (resolving them evaluates strings: worth doing once per class)."""
    return typing.get_type_hints(cls)


def make_pass(cls: type[Pass], raw_options: Mapping[str, Any]) -> Pass:
    """Instantiate ``cls`` from option values as written in a pipeline (strings and lists of strings)."""
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, raw in raw_options.items():
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise PipelineError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
        values[key] = convert_option(cls.name, key, hints[key], raw)
    try:
        return cls(**values)
    except (ValueError, TypeError) as exc:
        raise PipelineError(f"pass '{cls.name}': {exc}") from None


def convert_option(pass_name: str, key: str, annotation: Any, raw: Any) -> Any:
    """Convert a written option value to the option's declared type."""
    where = f"pass '{pass_name}' option '{key}'"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if raw == "none" and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return convert_option(pass_name, key, inner, raw)
    if origin is tuple:
        if not isinstance(raw, list):
            raise PipelineError(f"{where} expects a list like [1,2], got '{raw}'")
        return tuple(convert_option(pass_name, key, args[0], item) for item in raw)
    if isinstance(raw, list):
        raise PipelineError(f"{where} expects one value, got a list")
    if origin is Literal:
        if raw not in args:
            raise PipelineError(f"{where} must be one of {', '.join(map(str, args))}, got '{raw}'")
        return raw
    if annotation is bool:
        if raw not in ("true", "false"):
            raise PipelineError(f"{where} expects true or false, got '{raw}'")
        return raw == "true"
    if annotation in (int, float):
        try:
            return annotation(raw)
        except ValueError:
            raise PipelineError(f"{where} expects {annotation.__name__}, got '{raw}'") from None
    if annotation is str:
        return raw[1:-1].encode().decode("unicode_escape") if raw.startswith('"') else raw
    raise PipelineError(f"{where} has an unsupported type {annotation}")


def as_pipeline(spec: str | Pipeline | Pass | Sequence[Pass]) -> Pipeline:
    """A :class:`Pipeline` from a pipeline string, a pass, a list of passes or a pipeline."""
    if isinstance(spec, Pipeline):
        return spec
    if isinstance(spec, Pass):
        return Pipeline((spec,))
    if isinstance(spec, str):
        return parse_pipeline(spec)
    return Pipeline(tuple(spec))


def run_pipeline(spec: str | Pipeline | Pass | Sequence[Pass], fn: Function,
                 ctx: PassContext | None = None) -> Function:
    """Run a pipeline (given as a string, a pass, passes or a :class:`Pipeline`) on ``fn``."""
    return as_pipeline(spec).run(fn, ctx)
