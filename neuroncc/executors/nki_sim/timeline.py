"""The cost model's timeline of a whole compiled graph as a Chrome trace (``neuroncc inspect --cost --trace``).

``cost_trace(tables)`` lays the kernels of each :class:`~neuroncc.executors.nki_sim.costs.CostTable` back to back
on one NeuronCore, as the estimate assumes, and writes the trace-event format Perfetto and chrome://tracing
open: one process per graph; in it a ``kernels`` track (one slice per kernel, with its estimate in ``args``),
one track per compute engine (TensorE, VectorE, ScalarE, GpSimdE) and one per DMA queue that carried a
transfer, each instruction a slice at the time the scheduler placed it. Host steps take no device time and
appear as instant events on the kernels track. Times are microseconds of estimated device time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuroncc.executors.nki_sim.costs import ENGINES, CostTable
from neuroncc.nki import trace as tr
from neuroncc.nki.trace import Engine
from neuroncc.nki.profile import ENGINE_LABELS
from neuroncc.nki.scheduler import schedule
from neuroncc.nki.target import resolve_target

KERNELS_TRACK = 0
#: Thread ids: the kernels track, then the compute engines in ENGINES order, then DMA queues from DMA_TRACK.
COMPUTE_TRACKS = {label: 1 + position for position, label in enumerate(e for e in ENGINES if e != "DMA")}
DMA_TRACK = 1 + len(COMPUTE_TRACKS)


def cost_trace(tables: Sequence[CostTable]) -> dict[str, Any]:
    """The trace-event document of ``tables`` (one process per graph); see the module docstring."""
    events: list[dict[str, Any]] = []
    for pid, table in enumerate(tables):
        events += _graph_events(pid, table)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"source": "neuroncc NKI cost model", "targets": sorted({t.target for t in tables})}}


def _graph_events(pid: int, table: CostTable) -> list[dict[str, Any]]:
    target = resolve_target(table.target, {})
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"@{table.function} on {table.target}"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": KERNELS_TRACK, "args": {"name": "kernels"}},
    ]
    events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}
               for label, tid in COMPUTE_TRACKS.items()]
    queues: set[int] = set()
    clock_us = 0.0
    for step in table.steps:
        if step.kind == "host":
            events.append({"name": step.name, "cat": "host", "ph": "i", "s": "t", "pid": pid, "tid": KERNELS_TRACK,
                           "ts": clock_us, "args": {"kind": "host step (no device time)"}})
            continue
        events.append({"name": step.name, "cat": "kernel", "ph": "X", "pid": pid, "tid": KERNELS_TRACK,
                       "ts": clock_us, "dur": step.latency_us,
                       "args": {"latency_us": round(step.latency_us, 3), "bound": step.bound,
                                "dma_bytes": step.dma_bytes, "instructions": step.instructions}
                       | {f"{engine} busy": f"{100 * share:.1f}%" for engine, share in step.utilisation}})
        by_index = {e.index: e for e in step.trace if isinstance(e, tr.Instruction)}
        for timing in schedule(step.trace, target).timings:
            instruction = by_index[timing.index]
            if timing.engine is Engine.DMA:
                tid = DMA_TRACK + timing.queue
                queues.add(timing.queue)
            else:
                tid = COMPUTE_TRACKS[ENGINE_LABELS[timing.engine]]
            events.append({"name": instruction.op, "cat": ENGINE_LABELS[timing.engine], "ph": "X", "pid": pid,
                           "tid": tid, "ts": clock_us + timing.start_ns / 1000.0,
                           "dur": max(timing.finish_ns - timing.start_ns, 0.0) / 1000.0,
                           "args": {"kernel": step.name}
                           | {o.role: f"{o.buffer}{list(o.shape)} {o.dtype}" for o in instruction.operands}})
        clock_us += step.latency_us
    events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": DMA_TRACK + queue,
                "args": {"name": f"DMA queue {queue}"}} for queue in sorted(queues)]
    return events


__all__ = ["cost_trace"]
