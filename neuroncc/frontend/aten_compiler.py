"""Compile one aten-level FX graph: import to IR, dump it if asked, compile it for the target, count it.

    compile_aten_graph(gm, name, options) = import_graph -> [dump .nir] -> driver.compile_graph
                                            -> stats, the entry recorded for save_cache_artifacts()
                                            -> CompiledGraph

with Python's cyclic GC paused meanwhile (see :func:`cyclic_gc_paused`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch.fx as fx

from neuroncc.frontend import cache_artifacts, stats
from neuroncc.frontend.boundary import HostDevice
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.importer import import_graph
from neuroncc.frontend.options import BackendOptions
from neuroncc.frontend.saved_facts import SavedFacts, with_saved_facts
from neuroncc.ir import Function, collect_resources, print_function
from neuroncc.driver.compile import compile_graph
from neuroncc.driver.records import CompileRecord
from neuroncc.executors.cpu.build_options import QUICK_MODULES

log = logging.getLogger("neuroncc.frontend")


def compile_aten_graph(gm: fx.GraphModule, name: str, options: BackendOptions,
                       free_layouts: frozenset[int] = frozenset(), device: HostDevice | None = None,
                       donate: bool = False, saved_facts: SavedFacts | None = None) -> CompiledGraph:
    """Compile ``gm``; ``free_layouts``: output positions that may keep the executable's layout (see
    :class:`CompiledGraph`); ``device``: the host-memory device its tensors live on, if not CPU; ``donate``:
    mutated inputs' buffers may take their new values (see :func:`import_graph`; CPU tensors only: a host
    device's boundary writes mutations through its own temporaries); ``saved_facts``: for a backward graph,
    what its forward's ops said about the activations it reads (``saved_facts.py``)."""
    with cyclic_gc_paused():
        start = time.perf_counter()
        # the cpu target's kernels convert bf16 bits themselves, on CPU tensors and a host device's alike (its
        # Binding passes a bf16 tensor's memory as the i16 parameter and lets a bf16 result's bits be written
        # into the new or mutated tensor); the NKI simulator keeps float32 copies
        imported = import_graph(gm, name, bf16_bits=options.target == "cpu",
                                host_devices=("cpu",) if device is None else ("cpu", device.device_type),
                                donate=donate and device is None)
        if saved_facts is not None:
            imported = with_saved_facts(imported, gm, saved_facts)
        import_seconds = time.perf_counter() - start
        if options.dump_dir:
            dump_function(imported.function, Path(options.dump_dir))
        records: list[CompileRecord] = []
        executable = compile_graph(imported.function, target=options.target, pipeline=options.pipeline,
                                   options=graph_compile_options(options),
                                   on_compiled=lambda record: (records.append(record),
                                                               record_compiled(record, import_seconds)))
    stats.increment("graphs_compiled")
    stats.record_executable(executable, options.target)
    log.debug("neuroncc: compiled %s (%d ops) for target %s", name, len(imported.function.ops), options.target)
    artifact_key = records[0].key if records and records[0].cache != "uncached" else None
    return CompiledGraph(imported, executable, free_layouts, device, artifact_key, source=gm)


def graph_compile_options(options: BackendOptions) -> Mapping[str, Any]:
    """The options a graph compiles with: the user's, and on the cpu target unless the user set it,
    ``quick_first="modules"``: the kernels whose bits do not depend on LLVM's tier start at its quick tier and
    the optimized code follows from the background (executors/cpu/tiers.py; the cache stores optimized code)."""
    if options.target != "cpu" or "quick_first" in options.compile_options:
        return options.compile_options
    return {**options.compile_options, "quick_first": QUICK_MODULES}


def record_compiled(record: CompileRecord, import_seconds: float) -> None:
    """Count a compiled graph in ``neuroncc.stats()`` and, when it is in the cache, keep its key for
    ``torch.compiler.save_cache_artifacts()``."""
    stats.record_compile(record, import_seconds)
    if record.key is not None and record.cache != "uncached":  # an entry in the cache: portable
        cache_artifacts.record(record.key)


def cyclic_gc_paused() -> contextlib.AbstractContextManager[None]:
    """Pause Python's cyclic GC (when it is on), then collect the young generations and restart the clock.

    A compile allocates many objects that live a while and then die (each pass's IR, each kernel's llvmlite
    module). With the GC running, young collections promote them to the oldest generation, and in a process
    holding torch's ~400k objects that made the next full collection (~0.25 s) fall due inside the
    transformer step's compile. Paused, they die young: one collection of the young generation at the end
    (~20 ms) frees the cyclic ones, and no full collection happened in the first call or the 8 steps after
    it (it did in every first call before: 5 pairs of runs, first call 2.93 -> 2.71 s of CPU).

    The collection at the end covers both young generations, so what the compile leaves is freed or old, and
    ``gc.freeze()`` then ``gc.unfreeze()`` (nothing stays frozen; CPython's freeze zeroes the generations'
    counts) restart the clock of the next full collection: it can come only after 11 more collections of the
    middle generation (~85k net allocations), as after a full collection. Before, the forward and backward
    compiles' survivors, with what TorchDynamo and AOTAutograd promote, made a second full collection (0.15-0.4 s
    of torch's ~410k objects) fall due in the transformer step's first call, where aot_eager's has one; now it
    has one, and none came in the 10 steps after (docs/performance-history.md, session 13). Nothing escapes a
    collection: only the next full collection's timing moves, once per compiled graph. A process that froze
    objects itself (``gc.get_freeze_count()``) is left as it is: unfreezing would release its frozen objects.
    """
    return _gc_paused(collect_young=True)


def imports_gc_paused() -> contextlib.AbstractContextManager[None]:
    """Pause Python's cyclic GC (when it is on) around imports, then move what they made to the oldest
    generation without a collection (``gc.freeze()`` then ``gc.unfreeze()``).

    An import's objects (modules, classes, functions) live as long as the process. Promoted by a collection
    (:func:`cyclic_gc_paused`'s young one) they count toward the next full collection's trigger (objects moved
    to the oldest generation since the last one, against a quarter of those there): the code generator's
    import (llvmlite's bindings, ~30 ms) made before AOTAutograd's trace brought a second full collection
    (~0.3 s) into the transformer step's first call, 5 of 5 runs. Moved by ``unfreeze`` they do not count, and
    the full collection's clock restarts (as after :func:`cyclic_gc_paused`). What else was young then moves
    too: a cycle among those objects is freed by the next full collection instead of a young one. A process
    that froze objects itself is left as it is."""
    return _gc_paused(collect_young=False)


@contextlib.contextmanager
def _gc_paused(collect_young: bool) -> Iterator[None]:
    """The cyclic GC off (when it is on) for the block; after it, the young generations collected if asked and
    the full collection's clock restarted (unless the process froze objects itself: then only the youngest
    generation is collected, if asked)."""
    if not gc.isenabled():  # the caller's choice stands
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            if collect_young:
                gc.collect(1)  # both young generations
            gc.freeze()  # every generation's count to zero: the full collection's clock restarts
            gc.unfreeze()
        elif collect_young:
            gc.collect(0)
        gc.enable()


def dump_function(fn: Function, directory: Path) -> Path:
    """Write ``fn`` as ``<directory>/<name>.nir`` (large constants beside it in ``<name>.npz``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{fn.name}.nir"
    suffix = 1
    while path.exists():  # a name seen before (e.g. after torch._dynamo.reset()): keep both
        path = directory / f"{fn.name}.{suffix}.nir"
        suffix += 1
    path.write_text(print_function(fn) + "\n", encoding="utf-8")
    resources = collect_resources(fn)
    if resources:
        np.savez(path.with_suffix(".npz"), **resources)
    log.info("neuroncc: wrote %s", path)
    return path
