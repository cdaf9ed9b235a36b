"""The compile driver: one function from an IR graph to something that runs.

    compile_graph(fn, target=...) = verify -> [compile cache] -> pass pipeline for the target
                                    -> build the target's executable

Both the torch front end and the CLI call this. This is an API boundary, so it is where the environment is
read: ``NEURONCC_CACHE_DIR`` / ``NEURONCC_DISABLE_CACHE`` choose the cache, ``NEURONCC_REMOTE_CACHE`` /
``NEURONCC_REMOTE_CACHE_KEY`` / ``NEURONCC_REMOTE_CACHE_TIMEOUT`` its remote tier (``driver.remote``),
``NEURONCC_LOG`` sends the log lines to stderr, and ``NEURONCC_DUMP`` (a directory) writes each pipeline
stage's IR under ``$NEURONCC_DUMP/<function>-<hash>/NN-<pass>.nir``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from neuroncc.ir import Function, print_function, verify
from neuroncc.passes.manager import PassContext, Pipeline
from neuroncc.passes.pipeline import as_pipeline, default_pipeline, parse_pipeline, run_pipeline
from neuroncc.driver.cache import CompileCache, cache_from_environ
from neuroncc.driver.compile_request import CacheOutcome, CompileRequest, CompileResult
from neuroncc.driver.log_settings import configure_log_from_environ
from neuroncc.driver.records import CompileRecord, make_record
from neuroncc.executors.executable import DEFAULT_TARGET, Executable, build_executable

log = logging.getLogger("neuroncc.driver")

#: ``compile_graph(cache=FROM_ENVIRONMENT)``: the cache that the environment names (:func:`cache_from_environ`).
FROM_ENVIRONMENT = "environment"


def compile_graph(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                  options: Mapping[str, Any] | None = None,
                  cache: CompileCache | None | str = FROM_ENVIRONMENT,
                  on_compiled: Callable[[CompileRecord], None] | None = None,
                  on_progress: Callable[[str], None] | None = None) -> Executable:
    """Compile ``fn`` for ``target``.

    ``pipeline`` (or ``options["pipeline"]``, as the torch backend passes it) overrides the target's default
    pass pipeline (:data:`neuroncc.passes.pipeline.DEFAULT_PIPELINES`); ``options["verify_each"]`` runs the
    verifier after every pass. ``cache`` is a :class:`CompileCache`, None (compile without caching), or
    :data:`FROM_ENVIRONMENT`. ``on_compiled`` receives the :class:`CompileRecord` of this compile, which is
    also logged (one line on the ``neuroncc.driver`` logger at INFO; see :mod:`neuroncc.driver.records`).
    ``on_progress`` hears what a compile is doing (``passes 3/9: fuse``, ``code generation``) as it goes.
    """
    start = time.perf_counter()
    configure_log_from_environ(os.environ)  # NEURONCC_LOG=info|debug: the log lines on stderr
    verify(fn)
    request = make_request(fn, target=target, pipeline=pipeline, options=options)
    if cache == FROM_ENVIRONMENT:
        cache = cache_from_environ(os.environ)
    timings: dict[str, float] = {}

    def compile_and_time(request: CompileRequest) -> CompileResult:
        result = compile_uncached(request, on_progress)
        timings.update(result.timings)
        return result

    outcome = CacheOutcome(explain_miss=log.isEnabledFor(logging.INFO))
    if cache is None:
        executable = compile_and_time(request).executable
    else:
        assert isinstance(cache, CompileCache)
        executable = cache.get_or_compile(request, compile_and_time, outcome)
    record = make_record(request, executable, outcome, timings, time.perf_counter() - start)
    log.info("%s", record.line())
    if on_compiled is not None:
        on_compiled(record)
    return executable


def make_request(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                 options: Mapping[str, Any] | None = None) -> CompileRequest:
    """The request (and so the cache key) that ``compile_graph`` uses: the one place the pipeline is settled."""
    options = dict(options or {})
    if pipeline is None:
        pipeline = options.pop("pipeline", None)
    else:
        options.pop("pipeline", None)
    if pipeline is None:
        pipeline = default_pipeline(target)
    return CompileRequest(fn, target, pipeline, options)


def compile_uncached(request: CompileRequest, on_progress: Callable[[str], None] | None = None) -> CompileResult:
    """Run the pipeline and build the executable, recording the IR text and time of every stage; ``on_progress``
    hears each pass as it finishes and the start of code generation."""
    stages = StageTexts()
    timings: dict[str, float] = {}
    passes = len(as_pipeline(request.pipeline).passes) if on_progress is not None else 0

    def record(stage: str, fn: Function, seconds: float) -> None:
        stages.graphs[stage] = fn
        timings[stage] = seconds
        if on_progress is not None:
            number, _, name = stage.partition("-")
            on_progress(f"passes {int(number) if number.isdigit() else len(stages)}/{passes}: {name or stage} done")

    ctx = PassContext(verify_each=bool(request.options.get("verify_each", False)),
                      dump_dir=dump_dir_for(request.function), on_stage=record)
    lowered = run_pipeline(_parsed_pipeline(request.pipeline), request.function, ctx)
    verify(lowered)  # once, cheaply, even when not after every pass: codegen never sees invalid IR
    if on_progress is not None:
        on_progress("code generation")
    start = time.perf_counter()
    executable = build_executable(lowered, request.target, request.options)
    timings["build"] = time.perf_counter() - start
    return CompileResult(executable, stages=stages, timings=timings)


class StageTexts(Mapping[str, str]):
    """Stage name -> the IR text after it, in order: the graphs are kept and printed when read. The texts go
    into the cache entry, which is written on the cache's background thread (driver/publisher.py), so the
    compile that waits does not print every stage (IR is immutable: a kept graph prints the same later)."""

    def __init__(self) -> None:
        self.graphs: dict[str, Function] = {}
        self._texts: dict[str, str] = {}

    def __getitem__(self, stage: str) -> str:
        text = self._texts.get(stage)
        if text is None:
            text = self._texts[stage] = print_function(self.graphs[stage])
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self.graphs)

    def __len__(self) -> int:
        return len(self.graphs)


@functools.lru_cache(maxsize=64)
def _parsed_pipeline(text: str) -> Pipeline:
    """A pipeline string parsed once per process: parsing looks plug-in passes up in the installed packages'
    entry points (~30 ms), which the eager device would pay on every op it compiles."""
    return parse_pipeline(text)


def dump_dir_for(fn: Function) -> Path | None:
    """``$NEURONCC_DUMP/<name>-<hash of the graph>``, or None when ``NEURONCC_DUMP`` is not set."""
    root = os.environ.get("NEURONCC_DUMP")
    if not root:
        return None
    digest = hashlib.sha256(print_function(fn, canonical=True).encode()).hexdigest()[:12]
    return Path(root) / f"{fn.name}-{digest}"
