"""The simulated timeline as a trace file: what ``nki.profile`` writes.

The cost model's schedule (``scheduler.schedule``) says when each instruction ran on which engine. This
module writes it in the Chrome trace-event format (a JSON list of complete events; Perfetto and
chrome://tracing open it): one process per physical NeuronCore, one thread per engine, one slice per
instruction named by its op, with its operands' shapes in ``args``. Beside it, ``profile_summary.json``
holds the cost-model report of each core (``KernelProfile`` as a dict).
"""

from __future__ import annotations

import dataclasses
import json
import os

from neuroncc.nki import trace as tr
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.profile import ENGINE_LABELS, build_profile
from neuroncc.nki.scheduler import schedule
from neuroncc.nki.target import Target

_ENGINE_ORDER = list(ENGINE_LABELS)


def chrome_trace(cores: list[list[tr.Event]], target: Target, kernel_name: str) -> dict[str, object]:
    """The trace-event document of one launch: a list of per-instruction slices per core and engine."""
    events: list[dict[str, object]] = []
    for core, trace in enumerate(cores):
        events.append({"name": "process_name", "ph": "M", "pid": core, "args": {"name": f"NeuronCore {core}"}})
        for engine, label in ENGINE_LABELS.items():
            events.append({"name": "thread_name", "ph": "M", "pid": core, "tid": _ENGINE_ORDER.index(engine),
                           "args": {"name": label}})
        by_index = {e.index: e for e in trace if isinstance(e, tr.Instruction)}
        for timing in schedule(trace, target).timings:
            instruction = by_index[timing.index]
            events.append({
                "name": instruction.op, "cat": ENGINE_LABELS[timing.engine], "ph": "X", "pid": core,
                "tid": _ENGINE_ORDER.index(timing.engine), "ts": timing.start_ns / 1000.0,
                "dur": max(timing.finish_ns - timing.start_ns, 0.0) / 1000.0,
                "args": {o.role: f"{o.buffer}{list(o.shape)} {o.dtype}" for o in instruction.operands}
                | {key: str(value) for key, value in instruction.params},
            })
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"kernel": kernel_name, "target": target.name, "source": "neuroncc NKI cost model"}}


def write_profile(directory: str, trace_name: str, kernel_name: str, cores: list[list[tr.Event]], target: Target,
                  overwrite: bool = True) -> tuple[str, str]:
    """Write the timeline and the summary into ``directory``; returns their paths."""
    if not os.path.isabs(directory):
        raise NKISimulationError(f"nki.profile working_directory must be an absolute path, got {directory!r}")
    os.makedirs(directory, exist_ok=True)
    base, extension = os.path.splitext(trace_name)
    trace_path = os.path.join(directory, base + (".json" if extension in ("", ".ntff") else extension))
    summary_path = os.path.join(directory, "profile_summary.json")
    for path in (trace_path, summary_path):
        if os.path.exists(path) and not overwrite:
            raise NKISimulationError(f"nki.profile would overwrite {path}; pass overwrite=True")
    with open(trace_path, "w") as out:
        json.dump(chrome_trace(cores, target, kernel_name), out)
    summary = [dataclasses.asdict(build_profile(trace, target)) for trace in cores]
    with open(summary_path, "w") as out:
        json.dump({"kernel": kernel_name, "target": target.name, "cores": summary}, out, indent=1)
    return trace_path, summary_path
