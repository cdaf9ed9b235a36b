"""A compiling first call's wall-clock timeline: which thread does what when (``bench_warm_start.py --timeline``).

:func:`install` wraps, as each module is imported (so imports still happen where the real path has them), the
pieces of a neuroncc compile and of the work it leaves to background threads, and records each call as a span
(name, thread, start, end, seconds from the first call's start):

    compile_aten_graph, import_graph, run_pipeline        the main thread's compile of each graph (own s)
    build_cpu_executable, plan_launch                     the launcher's build and its planner (IR emission)
    LLVM modules                                          each kernel module's parse + optimize + emit, per
                                                          graph and tier, on the compile workers
    KernelCompiler.finish, ld, dlopen                     the build's tail (joined workers, link, load)
    load_helpers, LLVM helpers                            the process-wide helpers (team entry, interpreter)
    arena reserve                                         the arena reserve's pages faulted in (arena_reserve.py)
    CompiledGraph.call, bind_code                         each graph's first call, and its wait for the code
    share arena                                           the forward and backward given one arena (at the
                                                          backward's compile)
    cache.publish, reoptimize                             the cache writer's entry, the optimizer's builds
    graph entry, load_helpers_soon                        the graph cache's entry handed over (at the backward's
                                                          compile), the helpers' compile started
    graph entry files                                     the entry's files, rename and fsync (the cache writer)
    gc                                                    full (generation 2) collections

:func:`timeline_rows` gives medians over several runs' spans: start and end (seconds from the first call's start)
and duration per span, the k-th call of a name on a thread kind counted as its own row ("plan_launch 2" is the
backward's), LLVM modules summed per graph and tier (count, the workers' thread CPU seconds in them, the last
one's end; until session 23 this column summed their wall times, which on a cold call's two busy cores are
~2.5x their CPU: the forward's two LayerNorm modules read ~110 ms each for ~42 ms of CPU).
Wrapping costs a few microseconds a call; the numbers are for reading the order and overlap of the pieces, the
plain first-call columns of ``bench_warm_start.py`` for the totals.
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib.abc
import statistics
import sys
import threading
import time
from typing import Any

#: (name, thread, start, end, detail) of every recorded call, seconds of ``time.perf_counter()``
SPANS: list[tuple[str, str, float, float, str]] = []


def _wrap(owner: Any, attr: str, name: str, detail: Any = None, cpu: bool = False) -> None:
    """``cpu``: the detail ends with the calling thread's CPU seconds in the call (an LLVM module's wall time on a
    worker counts the time other threads held the two cores: ~2.5x its CPU time beside the planner)."""
    function = getattr(owner, attr)

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        begin, begin_cpu = time.perf_counter(), time.thread_time() if cpu else 0.0
        try:
            return function(*args, **kwargs)
        finally:
            text = detail(*args, **kwargs) if detail else ""
            if cpu:
                text += f" {time.thread_time() - begin_cpu:.6f}"
            SPANS.append((name, threading.current_thread().name, begin, time.perf_counter(), text))

    setattr(owner, attr, timed)


def _jit(module: Any) -> None:
    def tier(text: str, context: Any, machine: Any, tier: Any) -> str:
        return f"{tier.name} {'helper' if 'define internal' not in text else 'kernel'}"

    _wrap(module, "_compile_module", "LLVM module", tier, cpu=True)
    _wrap(module.KernelCompiler, "finish", "KernelCompiler.finish")
    _wrap(module, "link", "ld")
    _wrap(module, "load_library", "dlopen")
    _wrap(module, "reoptimize", "reoptimize")


def _launcher(module: Any) -> None:
    _wrap(module, "build_cpu_executable", "build_cpu_executable")
    _wrap(module.CpuExecutable, "bind_code", "bind_code")
    if module.load_helpers.__module__ == module.__name__:  # else helper_start's, wrapped there
        _wrap(module, "load_helpers", "load_helpers")


#: module -> what to wrap in it once it is imported (names looked up at call time, so wrapping the module's
#: attribute catches every caller)
PATCHES = {
    "neuroncc.codegen.llvm.jit": _jit,
    "neuroncc.codegen.llvm.program": lambda m: _wrap(m, "plan_launch", "plan_launch"),
    "neuroncc.frontend.aten_compiler": lambda m: _wrap(m, "import_graph", "import_graph"),
    "neuroncc.frontend.aot_compile": lambda m: _wrap(m, "compile_aten_graph", "compile_aten_graph"),
    "neuroncc.driver.compile": lambda m: _wrap(m, "run_pipeline", "run_pipeline"),
    "neuroncc.driver.cache": lambda m: _wrap(m.CompileCache, "_publish", "cache.publish"),
    "neuroncc.frontend.compiled": lambda m: (_wrap(m.CompiledGraph, "__call__", "CompiledGraph.call"),
                                             _wrap(m.CompiledGraph, "share_arena_with", "share arena")),
    "neuroncc.frontend.graph_cache": lambda m: _wrap(m.GraphRecorder, "_publish_if_complete", "graph entry"),
    "neuroncc.driver.graph_entries": lambda m: _wrap(m, "_write_entry", "graph entry files"),
    "neuroncc.executors.cpu.launcher": _launcher,
    "neuroncc.executors.cpu.arena_reserve": lambda m: _wrap(m, "_fill", "arena reserve"),
    "neuroncc.executors.cpu.helper_start": lambda m: (_wrap(m, "load_helpers", "load_helpers"),
                                                      _wrap(m, "load_helpers_soon", "load_helpers_soon")),
}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is not self and (spec := getattr(finder, "find_spec", lambda *a: None)(name, path, target)):
                break
        else:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Record spans from now on (call before neuroncc is imported: modules already imported are not wrapped)."""
    already = [name for name in PATCHES if name in sys.modules]
    assert not already, f"imported before the timeline was installed: {already}"
    sys.meta_path.insert(0, _PatchOnImport())
    begin = [0.0]

    def collections_(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            begin[0] = time.perf_counter()
        elif info["generation"] == 2:
            SPANS.append(("gc (full)", threading.current_thread().name, begin[0], time.perf_counter(), ""))

    gc.callbacks.append(collections_)


def spans_since(origin: float) -> list[list[Any]]:
    """The spans so far, times in seconds from ``origin`` (JSON-ready)."""
    return [[name, thread, start - origin, end - origin, detail] for name, thread, start, end, detail in SPANS]


def _thread_kind(thread: str) -> str:
    return "main" if thread == "MainThread" else thread.removeprefix("neuroncc-")


def timeline_rows(runs: list[list[list[Any]]]) -> list[list[str]]:
    """Medians over ``runs`` (each :func:`spans_since`'s list) of each span: see the module docstring."""
    keyed: dict[tuple[str, str], list[tuple[float, float, float, int]]] = collections.defaultdict(list)
    for spans in runs:
        spans = sorted(spans, key=lambda s: s[2])
        graph_starts = [s[2] for s in spans if s[0] == "compile_aten_graph"]
        seen: collections.Counter = collections.Counter()
        modules: dict[tuple[str, str], list[float]] = {}
        for name, thread, start, end, detail in spans:
            kind = _thread_kind(thread)
            if name == "LLVM module":
                graph = sum(start >= g for g in graph_starts)
                tier, what, cpu_seconds = detail.split()
                label = f"LLVM {what}s, {tier.lower()}" + (f", graph {graph}" if what == "kernel" else "")
                if kind == "optimizer":  # the background builds of every graph's quick modules
                    label = f"LLVM {what}s, {tier.lower()} again"
                key = (label, "workers" if kind.startswith("llvm") else kind)
                first, last, cpu, count = modules.get(key, (start, end, 0.0, 0))
                modules[key] = (min(first, start), max(last, end), cpu + float(cpu_seconds), count + 1)
                continue
            if name == "bind_code" and kind != "main":
                continue  # the cache writer's and the optimizer's: no one waits there
            seen[name, kind] += 1
            keyed[f"{name} {seen[name, kind]}", kind].append((start, end, end - start, 1))
        for key, value in modules.items():
            keyed[key].append(value)
    rows = []
    for (name, kind), values in keyed.items():
        start, end, seconds, count = (statistics.median(v[i] for v in values) for i in range(4))
        rows.append((start, [name, kind, f"{start:.3f}", f"{end:.3f}", f"{seconds:.3f}", f"{count:g}",
                             f"{len(values)}/{len(runs)}"]))
    return [row for _, row in sorted(rows, key=lambda r: r[0])]


TIMELINE_HEADER = ["span", "thread", "start s", "end s", "seconds (LLVM: CPU)", "calls", "runs"]
