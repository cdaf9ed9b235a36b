"""The backend's options: ``torch.compile(model, backend="neuron", options={...})``.

Read once, at the API boundary (the backend entry point), together with the environment variables the
backend honours (``NEURONCC_DUMP``, ``NEURONCC_DISABLE_GRAPH_CACHE``); everything below receives a
:class:`BackendOptions` value.

    target    where graphs run: "interp" (reference interpreter), "cpu" (LLVM), "nki-sim"
              (default: neuroncc.executors.executable.DEFAULT_TARGET)
    pipeline  a pass pipeline string overriding the target's default
    fallback  "none" (default: an unsupported op fails the compile) or "cpu" (run it on eager PyTorch)
    random_masks  "save" (default: the forward saves dropout masks, 1 byte per element, for the backward) or
              "regenerate" (the backward recomputes them from the saved 16-byte random state)
    dump_dir  write every compiled graph's IR there (default: $NEURONCC_DUMP)
    graph_cache
              False: always run AOTAutograd and look each graph up in the compile cache, instead of running a
              graph seen before from the graph cache (default True; $NEURONCC_DISABLE_GRAPH_CACHE=1 too; see
              neuroncc.frontend.graph_cache)
    max_specializations
              how many input shapes a graph with symbolic sizes may compile (default 8; see
              neuroncc.frontend.specializations)

The keys of :data:`COMPILE_KEYS`, and ``dump_dir`` when set (so the pass pipeline can dump its stages there too),
are passed to ``neuroncc.driver.compile.compile_graph`` as its ``options`` (they belong to the passes and code
generators and are part of the compile cache's key). Any other key is an ``InputError`` naming it (a misspelled
``max_specializatons`` was ignored without a word).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from neuroncc.errors import InputError
from neuroncc.executors.executable import DEFAULT_TARGET, TARGETS

FALLBACK_MODES = ("none", "cpu")
RANDOM_MASK_MODES = ("save", "regenerate")
#: Options the front end consumes itself (target and pipeline reach compile_graph as its own arguments).
FRONTEND_KEYS = frozenset({"target", "pipeline", "fallback", "max_specializations", "random_masks", "graph_cache"})
#: Options torch.compile's users may give that compile_graph's readers take: the cpu launcher's (threads,
#: threading, compile_threads, quick_first, memory_plan: executors/cpu/build_options.py), the nki-sim target's
#: nki_target (executors/nki_sim/executable.py) and the driver's verify_each (driver/compile.py). Declared here,
#: not imported from the readers (the nki-sim target and the driver's compile path stay unloaded on a cpu
#: cache hit); tests/frontend/test_errors.py keeps it equal to what those modules read.
COMPILE_KEYS = frozenset({"dump_dir", "threads", "threading", "compile_threads", "quick_first", "memory_plan",
                          "nki_target", "verify_each"})
#: The default of ``max_specializations`` (TorchDynamo's own ``recompile_limit`` is 8 too).
DEFAULT_MAX_SPECIALIZATIONS = 8
DUMP_ENV_VAR = "NEURONCC_DUMP"
DISABLE_GRAPH_CACHE_VAR = "NEURONCC_DISABLE_GRAPH_CACHE"


@dataclass(frozen=True)
class BackendOptions:
    """The backend's options (``torch.compile(..., options={...})``), checked: see the module docstring."""

    target: str = DEFAULT_TARGET
    pipeline: str | None = None
    fallback: str = "none"
    dump_dir: str | None = None
    max_specializations: int = DEFAULT_MAX_SPECIALIZATIONS
    random_masks: str = "save"
    graph_cache: bool = True
    #: the options for compile_graph: the user's, less FRONTEND_KEYS, plus dump_dir when set
    compile_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def from_user(options: Mapping[str, Any] | None, environ: Mapping[str, str]) -> BackendOptions:
        """Validate the user's options; ``environ`` supplies NEURONCC_DUMP when dump_dir is not given."""
        given = dict(options or {})
        _refuse_unknown_keys(given)
        target = given.get("target") or DEFAULT_TARGET
        if target not in TARGETS:
            raise InputError(f"neuron backend: unknown target '{target}' (known: {', '.join(sorted(TARGETS))})")
        fallback = given.get("fallback") or "none"
        if fallback not in FALLBACK_MODES:
            raise InputError(f"neuron backend: option fallback must be one of {FALLBACK_MODES}, got {fallback!r}")
        random_masks = given.get("random_masks") or "save"
        if random_masks not in RANDOM_MASK_MODES:
            raise InputError(f"neuron backend: option random_masks must be one of {RANDOM_MASK_MODES}, "
                             f"got {random_masks!r}")
        pipeline = given.get("pipeline")
        if pipeline is not None and not isinstance(pipeline, str):
            raise InputError(f"neuron backend: option pipeline must be a string, got {pipeline!r}")
        limit = given.get("max_specializations", DEFAULT_MAX_SPECIALIZATIONS)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InputError(f"neuron backend: option max_specializations must be a positive int, got {limit!r}")
        graph_cache = given.get("graph_cache", True)
        if not isinstance(graph_cache, bool):
            raise InputError(f"neuron backend: option graph_cache must be True or False, got {graph_cache!r}")
        graph_cache = graph_cache and environ.get(DISABLE_GRAPH_CACHE_VAR, "0") in ("", "0")
        dump_dir = given.get("dump_dir") or environ.get(DUMP_ENV_VAR) or None
        compile_options = {k: v for k, v in given.items() if k not in FRONTEND_KEYS}
        if dump_dir is not None:
            dump_dir = compile_options["dump_dir"] = str(dump_dir)
        return BackendOptions(target, pipeline, fallback, dump_dir, limit, random_masks, graph_cache,
                              MappingProxyType(compile_options))


def check_compile_options(options: Mapping[str, Any] | None) -> None:
    """``neuroncc.compile_program``'s ``options=``: compile_graph's keys (:data:`COMPILE_KEYS`, and ``pipeline``,
    which compile_graph takes from its options too), refused by name otherwise, as ``torch.compile``'s are."""
    _refuse_unknown_keys(dict(options or {}), COMPILE_KEYS | {"pipeline"}, "compile_program")


def _refuse_unknown_keys(given: Mapping[str, Any], allowed: frozenset[str] = FRONTEND_KEYS | COMPILE_KEYS,
                         who: str = "neuron backend") -> None:
    """An option no reader takes is a typo or a wish: refuse it by name (with the nearest known one)."""
    known = sorted(allowed)
    for key in given:
        if key in allowed:
            continue
        near = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise InputError(f"{who}: unknown option {key!r} ({hint}known: {', '.join(known)})")
