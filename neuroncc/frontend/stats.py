"""Counters that tests and users read: ``neuroncc.stats()``, ``neuroncc.reset_stats()``, ``neuroncc.get_fallback_ops()``.

The counters are process-wide (one torch.compile session is one process). The front end increments them as it
compiles. Lower layers cannot import the front end, so they keep their own counters and these functions read
them: the compile cache's process-wide ``neuroncc.driver.process_cache.CACHE_STATS`` (hits and misses), and the
``stats`` mapping of each :class:`~neuroncc.executors.executable.Executable` (for example
``{"kernels": 3, "native_kernels": 3}`` from a code generator), which :func:`record_executable` adds in.
Upper layers that count on their own (the ``neuron`` device's eager counters) add a :class:`StatsSource` when
they start, so ``neuroncc.stats()`` stays importable without torch and reports them once they exist.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neuroncc.driver.process_cache import CACHE_STATS
from neuroncc.ir import Category
from neuroncc.codegen.llvm.fork_safety import renew_in_child

if TYPE_CHECKING:  # the records come from a compile: a graph cache hit makes none, nor imports them
    from neuroncc.driver.records import CompileRecord
    from neuroncc.frontend.compiled_graph_record import CompiledGraphRecord

#: Every counter, with what it counts. ``stats()`` always returns all of them.
COUNTERS: Mapping[str, str] = {
    "dynamo_graphs": "graphs handed to the backend by TorchDynamo (one per specialization)",
    "detach_graphs": "graphs TorchDynamo handed over whose every op is a detach: run as traced, not compiled",
    "shape_specializations": "static specializations compiled from graphs with symbolic sizes (one per shape)",
    "graphs_compiled": "aten graphs compiled to an executable (forward + backward + inference + fallback pieces)",
    "forward_graphs": "training forward graphs compiled",
    "backward_graphs": "backward graphs compiled",
    "inference_graphs": "inference (no-grad) graphs compiled",
    "kernels": "kernels in the compiled executables (a graph without fused kernels counts as one)",
    "interpreted_kernels": "kernels run by the reference interpreter (target 'interp')",
    "native_kernels": "kernels run as generated code (LLVM CPU code, NKI simulator)",
    "cache_hits": "compiled artifacts found in the compile cache",
    "cache_misses": "compiled artifacts not found in the compile cache",
    "fallback_ops": "aten op nodes run by eager PyTorch on CPU (fallback='cpu')",
    "fallback_partitions": "graph pieces compiled by neuroncc in fallback mode",
    "aot_autograd_runs": "TorchDynamo graphs traced and partitioned by AOTAutograd (graph cache misses)",
    "graph_cache_hits": "TorchDynamo graphs run from the graph cache, without AOTAutograd or a compile",
    "graph_cache_misses": "TorchDynamo graphs looked up in the graph cache and not found",
    "graph_cache_stores": "graph cache entries written (or handed to the cache's background writer)",
    "graph_cache_uncacheable": "TorchDynamo graphs the graph cache cannot key or record (see graph_cache."
                               "uncacheable_reasons())",
}

_lock = renew_in_child(threading.Lock())
_counters: Counter[str] = Counter()
_fallback_ops: Counter[str] = Counter()
_fallback_sites: dict[str, list[str]] = {}  # op -> the user's file:line of each node (as far as known)
_compiles: list[CompiledGraphRecord] = []


@dataclass(frozen=True)
class StatsSource:
    """Counters an upper layer keeps: read by ``stats()``, zeroed by ``reset_stats()``, and the ops it ran on CPU
    (merged into ``get_fallback_ops()``)."""

    stats: Callable[[], Mapping[str, int]]
    reset: Callable[[], None]
    fallback_ops: Callable[[], Mapping[str, int]]


_sources: dict[str, StatsSource] = {}


def add_source(name: str, source: StatsSource) -> None:
    """Report ``source``'s counters from now on (idempotent per ``name``)."""
    _sources[name] = source


def stats() -> dict[str, int]:
    """A snapshot of every counter (see :data:`COUNTERS`; runtime components may report extra ones)."""

    cache = CACHE_STATS.snapshot()
    with _lock:
        counts = {**dict.fromkeys(COUNTERS, 0), **_counters}
    counts["cache_hits"] += int(cache["hits"])
    counts["cache_misses"] += int(cache["misses"])
    for source in list(_sources.values()):
        counts.update(source.stats())
    return counts


def reset_stats() -> None:
    """Zero every counter (the compile cache's too) and forget the recorded fallback ops."""

    CACHE_STATS.reset()
    with _lock:
        _counters.clear()
        _fallback_ops.clear()
        _fallback_sites.clear()
        _compiles.clear()
    for source in list(_sources.values()):
        source.reset()


def get_fallback_ops() -> dict[str, int]:
    """The aten ops that ran on eager PyTorch: op name -> graph nodes (torch.compile's fallback mode) plus calls
    (an upper layer's, such as the ``neuron`` device's CPU fallback)."""
    with _lock:
        found = dict(_fallback_ops)
    for source in list(_sources.values()):
        for name, count in source.fallback_ops().items():
            found[name] = found.get(name, 0) + count
    return found


def fallback_ops_by_source() -> dict[str, dict[str, int]]:
    """Who ran which ops on eager PyTorch: ``{"graph": {op: graph nodes}, "<source>": {op: calls}, ...}`` (the
    torch.compile fallback mode's nodes, then each added source's calls, e.g. the ``neuron device``'s)."""
    with _lock:
        found = {"graph": dict(_fallback_ops)}
    for name, source in list(_sources.items()):
        found[name] = dict(source.fallback_ops())
    return found


def clear_fallback_ops() -> None:
    """Forget the recorded fallback ops (their counter stays)."""
    with _lock:
        _fallback_ops.clear()


def increment(name: str, amount: int = 1) -> None:
    """Add ``amount`` to counter ``name`` (one of :data:`COUNTERS`)."""
    if name not in COUNTERS:
        raise KeyError(f"unknown neuroncc counter '{name}' (known: {', '.join(COUNTERS)})")
    with _lock:
        _counters[name] += amount


def record_fallback_op(op_name: str, where: str | None = None) -> bool:
    """Count one graph node of ``op_name`` run by eager PyTorch (at the user's ``where``, when known); True the
    first time the op is seen."""
    with _lock:
        first = op_name not in _fallback_ops
        _fallback_ops[op_name] += 1
        _counters["fallback_ops"] += 1
        sites = _fallback_sites.setdefault(op_name, [])
        if where is not None and where not in sites:
            sites.append(where)
        return first


def get_fallback_sites() -> dict[str, list[str]]:
    """Op name -> the user's source lines (``file:line``) of the fallen-back nodes, where the graph knew them."""
    with _lock:
        return {op: list(sites) for op, sites in _fallback_sites.items()}


def record_compile(record: CompileRecord, import_seconds: float) -> None:
    """Keep the driver's record of one compiled graph (``compile_records()`` returns them)."""
    from neuroncc.frontend.compiled_graph_record import CompiledGraphRecord  # a compile's: off a hit's path

    with _lock:
        _compiles.append(CompiledGraphRecord(record, import_seconds))


def compile_records() -> list[CompiledGraphRecord]:
    """Every graph compiled since the last ``reset_stats()``, in order."""
    with _lock:
        return list(_compiles)


def record_executable(executable: Any, target: str) -> None:
    """Count one compiled executable: its kernels, and whatever the runtime reported in ``executable.stats``."""
    reported: Mapping[str, int] = getattr(executable, "stats", None) or {}
    # Only integer counters add up across executables (timings, per-op tables and reasons stay per executable).
    counts = Counter({k: v for k, v in reported.items() if isinstance(v, int) and not isinstance(v, bool)})
    if "kernels" not in counts:
        function = getattr(executable, "function", None)
        fused = sum(op.opdef.category is Category.KERNEL for op in function.ops) if function is not None else 0
        counts["kernels"] = max(fused, 1)
    if "interpreted_kernels" not in counts and "native_kernels" not in counts:
        kind = "interpreted_kernels" if target == "interp" else "native_kernels"
        counts[kind] = counts["kernels"]
    with _lock:
        _counters.update(counts)
