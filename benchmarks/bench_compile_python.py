"""The Python part of a compile, stage by stage, on the graphs of the model benchmarks' training rows.

``compile_aten_graph`` spends its time in: the FX import, the driver's verifier, the cache key, the pass
pipeline (with the IR text of every stage recorded, as the driver does), launch planning + LLVM IR emission
(``plan_launch``), LLVM (``jit.compile_ir``: parse, O3, object code, load) and the artifact write. This
benchmark captures the aten graphs of rows f1/f2 (``bench_models.py``: one training step through
``torch.compile(backend="neuron")``), then times each Python stage on them again and again in this process
(medians of ``--repeat``, in CPU time of the calling thread, which the load of a shared machine disturbs much
less than wall time), and LLVM once for scale (wall time: it runs on the compiler's worker threads). It is a
warm-process measurement: a cold compile (``bench_models.py --first-call``) also pays first imports and the
cyclic GC's collections, which land wherever the process happens to be. The last two columns count the kernel
emitter's phases and its emissions of them (a phase whose first emission wished a loop cut or unroll is
emitted again: ``indexing.ROUNDS``).

Run: ``python benchmarks/bench_compile_python.py [--rows f1,f2] [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, table  # noqa: E402

ensure_environment(threads=2)

import bench_models  # noqa: E402

from neuroncc.codegen.llvm import jit  # noqa: E402
from neuroncc.frontend import aot_compile  # noqa: E402
from neuroncc.frontend.importer import import_graph  # noqa: E402
from neuroncc.frontend.saved_facts import with_saved_facts  # noqa: E402
from neuroncc.ir import print_function, verify  # noqa: E402
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import run_pipeline  # noqa: E402
from neuroncc.driver.cache_key import compute_key  # noqa: E402
from neuroncc.driver.compile import make_request  # noqa: E402
from neuroncc.codegen.llvm.emit import KernelEmitter  # noqa: E402
from neuroncc.codegen.llvm.program import plan_launch  # noqa: E402
from neuroncc.codegen.llvm.regions import wrap_remaining_ops  # noqa: E402


def capture(row: str) -> list[tuple[object, str, dict[str, object]]]:
    """The (FX graph module, name, keyword arguments) of each ``compile_aten_graph`` call the neuron backend makes
    for one step of ``row``."""
    graphs: list[tuple[object, str, dict[str, object]]] = []
    compile_aten_graph = aot_compile.compile_aten_graph

    def keep(gm: object, name: str, options: object, *args: object, **kwargs: object) -> object:
        graphs.append((gm, name, dict(zip(("free_layouts", "device", "donate", "saved_facts"), args), **kwargs)))
        return compile_aten_graph(gm, name, options, *args, **kwargs)

    aot_compile.compile_aten_graph = keep
    saved = os.environ.get("NEURONCC_DISABLE_GRAPH_CACHE")
    os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"  # a graph cache hit would skip AOTAutograd: nothing to capture
    try:
        bench_models.make_step(row, "neuron")()
    finally:
        aot_compile.compile_aten_graph = compile_aten_graph
        if saved is None:
            os.environ.pop("NEURONCC_DISABLE_GRAPH_CACHE")
        else:
            os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = saved
    return graphs


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median CPU seconds of ``fn()`` in this thread (everything timed here runs in the calling thread)."""
    samples = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        samples.append(time.thread_time() - start)
    return statistics.median(samples)


def imported(gm: object, name: str, kwargs: dict[str, object]) -> object:
    """``gm`` imported as ``compile_aten_graph`` imports it for the cpu target (host tensors)."""
    graph = import_graph(gm, name, bf16_bits=True, host_devices=("cpu",), donate=bool(kwargs.get("donate")))
    saved_facts = kwargs.get("saved_facts")
    return graph if saved_facts is None else with_saved_facts(graph, gm, saved_facts)


@contextmanager
def counted_emissions() -> Iterator[dict[str, int]]:
    """Counts the kernel emitter's phases and its emissions of them while open: a phase whose first emission
    wished a loop cut or unroll (``indexing.ROUNDS``) is emitted again, and every emission costs as much."""
    counts = {"phases": 0, "emissions": 0}
    emit_phase, emit_phase_once = KernelEmitter._emit_phase, KernelEmitter._emit_phase_once

    def phase(self: KernelEmitter, *args: object) -> str:
        counts["phases"] += 1
        return emit_phase(self, *args)

    def once(self: KernelEmitter, *args: object) -> str:
        counts["emissions"] += 1
        return emit_phase_once(self, *args)

    KernelEmitter._emit_phase, KernelEmitter._emit_phase_once = phase, once
    try:
        yield counts
    finally:
        KernelEmitter._emit_phase, KernelEmitter._emit_phase_once = emit_phase, emit_phase_once


def stage_times(graphs: list[tuple[object, str, dict[str, object]]], repeat: int) -> dict[str, float]:
    """Median CPU seconds of each stage, summed over the graphs."""
    cpu, features = jit.host_cpu()
    totals: dict[str, float] = {}  # seconds, but for the phase counts
    for gm, name, kwargs in graphs:
        fn = imported(gm, name, kwargs).function
        request = make_request(fn, target="cpu")
        stages: dict[str, str] = {}
        ctx = PassContext(on_stage=lambda stage, f, _: stages.__setitem__(stage, print_function(f)))
        lowered = run_pipeline(request.pipeline, fn, ctx)
        top = wrap_remaining_ops(lowered)
        with counted_emissions() as counts:
            ir_texts = plan_launch(top, cpu, features)[1]
        totals["phases"] = totals.get("phases", 0) + counts["phases"]
        totals["phase emissions"] = totals.get("phase emissions", 0) + counts["emissions"]
        timings = {
            "import": lambda: imported(gm, name, kwargs),
            "verify": lambda: verify(fn),
            "cache key": lambda: compute_key(request),
            "passes": lambda: run_pipeline(request.pipeline, fn, ctx),
            "launch plan + IR": lambda: plan_launch(top, cpu, features),
        }
        for stage, run in timings.items():
            totals[stage] = totals.get(stage, 0.0) + median_seconds(run, repeat)
        start = time.perf_counter()
        jit.compile_ir(ir_texts, workers=2)
        totals["LLVM wall (once)"] = totals.get("LLVM wall (once)", 0.0) + time.perf_counter() - start
    return totals


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="f1,f2")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rows = []
    for row in args.rows.split(","):
        times = stage_times(capture(row), args.repeat)
        counts = {stage: int(times.pop(stage)) for stage in ("phases", "phase emissions")}
        python = sum(t for stage, t in times.items() if stage != "LLVM wall (once)")
        rows.append([bench_models.ROWS[row][0], *(f"{t * 1e3:.1f}" for t in times.values()), f"{python * 1e3:.1f}",
                     *map(str, counts.values())])
        header = ["model", *(f"{stage} ms" for stage in times), "Python total ms", *counts]
        print(" | ".join(rows[-1]), flush=True)
    print(table(rows, header))


if __name__ == "__main__":
    main()
