"""The compile cache key: a sha256 over named components, each hashed on its own so a miss can be explained.

    graph             the input graph's canonical text (value names, hints and the function name ignored)
    constants         the sha256 digests of its large constants (their data is not in the text)
    inputs            every input's dtype, shape and strides
    target            the target name
    host              what the target's saved code depends on on this machine (cpu: CPU name and features)
    options           the compile options as canonical JSON (sorted keys)
    pipeline          the pass pipeline string, and for each out-of-tree pass it names (``neuroncc.passes``
                      entry points) the plug-in's distribution, version and a hash of its package's sources
    neuroncc_version  neuroncc's version
    neuroncc_source   a hash of all of neuroncc's .py files (so any compiler change is a miss; remembered in the
                      cache directory while the files are unchanged: driver/source_digest.py)
    torch_version     torch's installed version (read from package metadata; torch is not imported)
    llvmlite_version  llvmlite's installed version
    format_version    the artifact format version

Deliberately *not* in the key (unstable or irrelevant to the result): value names and hints, the graph's name,
process ids, paths (the cache directory, the source file), and time.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuroncc.ir import DenseAttr, Function, print_function
from neuroncc.driver.artifact import ARTIFACT_CODECS, FORMAT_VERSION
from neuroncc.driver.host_stamp import remember_host_in, stamp_asked_answer
from neuroncc.driver.installed_versions import NOT_INSTALLED, installed_versions
from neuroncc.driver.source_digest import package_digest
from neuroncc.errors import PipelineError
import neuroncc

if TYPE_CHECKING:  # the compile path's (driver/compile_request.py), not a graph cache hit's
    from neuroncc.driver.compile_request import CompileRequest

_SUMMARY_LIMIT = 96


@dataclass(frozen=True, slots=True)
class BuildEnvironment:
    """The versions of the compiler and its dependencies, which the key includes."""

    neuroncc_version: str
    neuroncc_source: str  # sha256 over neuroncc's own .py files
    neuroncc_source_files: int
    torch_version: str
    llvmlite_version: str

    @staticmethod
    def current(stamp_root: Path | None = None) -> BuildEnvironment:
        """This process's environment (computed once per process). ``stamp_root``: a cache directory where the
        source digest, the installed versions and the host CPU are remembered between processes
        (:mod:`neuroncc.driver.source_digest`, :mod:`neuroncc.driver.host_stamp`)."""
        global _ENVIRONMENT
        if stamp_root is not None:
            remember_host_in(stamp_root)  # the host CPU's stamp too (neuroncc.driver.host_stamp)
        if _ENVIRONMENT is None:
            _ENVIRONMENT = _environment(stamp_root)
        elif stamp_root is not None and stamp_root not in _STAMPED_ROOTS:
            # computed before this cache directory could be trusted (a cold process's first lookup runs before
            # the directory exists): its stamps are written now, for the next process (whose graph cache hit
            # would otherwise hash the sources and load LLVM again); this process keeps the environment it
            # keyed with
            _environment(stamp_root)
        if stamp_root is not None and stamp_root not in _STAMPED_ROOTS:
            _STAMPED_ROOTS.add(stamp_root)
            stamp_asked_answer(stamp_root)  # LLVM's answer, if this process asked it before the directory existed
        return _ENVIRONMENT


@dataclass(frozen=True, slots=True)
class KeyComponent:
    """One named part of a cache key (the graph, the inputs, the versions, ...), digested."""

    name: str
    digest: str  # sha256 hex of the component's canonical form
    summary: str  # short, human-readable


@dataclass(frozen=True, slots=True)
class CacheKey:
    """A compile request's key: the digest of its components, kept to explain a miss."""

    key: str
    components: tuple[KeyComponent, ...]

    def component(self, name: str) -> KeyComponent:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)


class UncacheableRequestError(TypeError):
    """The request cannot be keyed (an option value that has no JSON form); it is compiled uncached."""


def compute_key(request: CompileRequest, environment: BuildEnvironment | None = None) -> CacheKey:
    """The cache key of ``request`` in ``environment`` (default: this process's), with its components."""
    env = environment or BuildEnvironment.current()
    fn = request.function
    components = (
        _component("graph", canonical_graph_text(fn), f"@{fn.name}: {_count_ops(fn)} ops"),
        _constants_component(fn),
        _inputs_component(fn),
        _component("target", request.target),
        _component("host", host_fingerprint(request.target), _host_summary(request.target)),
        _component("options", canonical_options(request.options)),
        _component("pipeline", pipeline_fingerprint(request.pipeline), request.pipeline or "(target default)"),
        _component("neuroncc_version", env.neuroncc_version),
        _component("neuroncc_source", env.neuroncc_source, f"{env.neuroncc_source_files} files"),
        _component("torch_version", env.torch_version),
        _component("llvmlite_version", env.llvmlite_version),
        _component("format_version", str(FORMAT_VERSION)),
    )
    key_text = "neuroncc-cache-key\n" + "".join(f"{c.name}={c.digest}\n" for c in components)
    return CacheKey(hashlib.sha256(key_text.encode()).hexdigest(), components)


def canonical_graph_text(fn: Function) -> str:
    """The text the key hashes: canonical printing (names ignored) of ``fn`` renamed to a fixed name."""
    return print_function(replace(fn, name="graph"), canonical=True)


def pipeline_fingerprint(pipeline: str) -> str:
    """The pipeline string plus, for each plug-in pass it names, where that pass's code comes from.

    neuroncc's own sources are in the key already; a plug-in's are not, so without this a pass developer
    who edits their pass would keep getting the artifacts the old code compiled. A pipeline of in-tree passes
    only is its own fingerprint (a plug-in that takes an in-tree name is refused when the pipeline runs).
    """
    if _in_tree_only(pipeline):  # the usual case, without a scan of the installed distributions' entry points
        return pipeline
    # the passes (and networkx, which the fusion pass imports): only to key a compile, never to load an artifact
    from neuroncc.passes.pipeline import IN_TREE_PASSES, parse_pipeline

    plugins = [type(p) for p in parse_pipeline(pipeline).passes if type(p) not in IN_TREE_PASSES]
    return "\n".join([pipeline, *(f"{cls.name}: {_plugin_source(cls)}" for cls in dict.fromkeys(plugins))])


@functools.lru_cache(maxsize=256)
def _in_tree_only(pipeline: str) -> bool:
    """Whether ``pipeline`` parses with neuroncc's own passes alone (remembered: the eager device keys every
    op it compiles, and a parse costs ~1 ms)."""
    from neuroncc.passes.pipeline import IN_TREE_PASSES, PassRegistry, parse_pipeline  # see pipeline_fingerprint

    try:
        parse_pipeline(pipeline, PassRegistry({cls.name: cls for cls in IN_TREE_PASSES}, {}))
        return True
    except PipelineError:
        return False  # it names a plug-in (or is invalid: the full parse says so)


@functools.cache
def _plugin_source(cls: type) -> str:
    """``<module> <distribution version> <sha256 of the .py files of its top-level package>`` (cached per class:
    a class object is one load of the code)."""
    top = cls.__module__.partition(".")[0]
    module = sys.modules.get(top)
    path = Path(getattr(module, "__file__", None) or "")
    if path.name == "__init__.py":
        digest, _ = package_source_digest(path.parent)
    elif path.is_file():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    else:
        digest = "no source"
    distributions = importlib.metadata.packages_distributions().get(top, [])
    versions = " ".join(f"{name} {_installed_version(name)}" for name in sorted(set(distributions)))
    return f"{cls.__module__}:{cls.__qualname__} {versions or '(no distribution)'} {digest}"


def canonical_options(options: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(options), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UncacheableRequestError(f"compile options are not JSON data: {exc}") from None


def host_fingerprint(target: str) -> str:
    codec = ARTIFACT_CODECS.get(target)
    return _host_fingerprint_of(codec.host_fingerprint) if codec is not None else ""


@functools.cache
def _host_fingerprint_of(fingerprint: Any) -> str:
    return fingerprint()


def _host_summary(target: str) -> str:
    text = host_fingerprint(target)
    return " ".join(text.split()[:2]) if text else "-"


def _component(name: str, canonical: str, summary: str | None = None) -> KeyComponent:
    summary = canonical if summary is None else summary
    if len(summary) > _SUMMARY_LIMIT:
        summary = summary[:_SUMMARY_LIMIT - 3] + "..."
    return KeyComponent(name, hashlib.sha256(canonical.encode()).hexdigest(), summary or "-")


def _count_ops(fn: Function) -> int:
    return sum(1 for _ in fn.walk())


def _constants_component(fn: Function) -> KeyComponent:
    large = {}
    for op in fn.walk():
        for value in op.attrs.values():
            if isinstance(value, DenseAttr) and not value.is_inline:
                large[value.digest] = value.array.nbytes
    digests = sorted(large)
    return _component("constants", "\n".join(digests), f"{len(digests)} large, {sum(large.values())} bytes")


def _inputs_component(fn: Function) -> KeyComponent:
    types = [(t.dtype.value, list(t.shape), list(t.layout_strides)) for t in fn.input_types]
    summary = "; ".join(
        f"{dtype}[{','.join(map(str, shape))}]" + ("" if t.is_contiguous else f"/{','.join(map(str, strides))}")
        for (dtype, shape, strides), t in zip(types, fn.input_types)
    )
    return _component("inputs", json.dumps(types, separators=(",", ":")), summary or "(none)")


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def package_source_digest(package_dir: Path) -> tuple[str, int]:
    """sha256 over every ``.py`` file under ``package_dir`` (relative path and bytes, sorted by path)."""
    return package_digest(package_dir)


_ENVIRONMENT: BuildEnvironment | None = None
#: The cache directories this process's environment is stamped in (see BuildEnvironment.current).
_STAMPED_ROOTS: set[Path] = set()


def _environment(stamp_root: Path | None) -> BuildEnvironment:
    source, count = package_digest(Path(neuroncc.__file__).resolve().parent, stamp_root)
    versions = installed_versions(("torch", "llvmlite"), stamp_root)
    return BuildEnvironment(
        neuroncc_version=neuroncc.__version__,
        neuroncc_source=source,
        neuroncc_source_files=count,
        torch_version=versions["torch"],
        llvmlite_version=versions["llvmlite"],
    )


def component_differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """Names of the components whose digests differ (or that only one side has), in ``a``'s order."""
    names = list(a) + [n for n in b if n not in a]
    return [n for n in names if a.get(n) != b.get(n)]

