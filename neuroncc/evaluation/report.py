"""The evaluation report: what ``neuroncc.evaluate`` found, as data, as text and as JSON.

Sections, in the order a team deciding whether a model is ready reads them:

1. verdict: do the numbers stay within tolerance (exit 1 of ``neuroncc evaluate`` when not);
2. fallbacks: ops that ran on eager PyTorch instead of neuroncc, with counts and the user's source lines;
3. numerics: per output, per buffer and input the call updated in place (and, in training, per gradient and per
   parameter after one optimizer step) the max absolute and relative difference from eager PyTorch in float32,
   and from eager in float64, beside eager float32's own difference from float64 (how far any float32 run is
   from the exact answer);
4. compile time, split into tracing (TorchDynamo, AOTAutograd, FX -> IR), passes, code generation and the
   compile cache, per graph;
5. steady state: time per call (median and spread) of neuroncc and eager, sampled interleaved;
6. recompiles: for each extra input shape, whether it compiled new graphs and why (the input that changed);
7. notices: what the process had to give up on the way, e.g. kernels in shared libraries after a link or load
   failed (``codegen/llvm/native_library.py``'s ``give_up``: correct, but loaded by MCJIT from then on).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from neuroncc.driver.records import CompileRecord

#: The default tolerance against eager float32 (elementwise: |ours - eager| <= atol + rtol * |eager|).
DEFAULT_RTOL, DEFAULT_ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class FallbackOp:
    """An op that ran on eager PyTorch: ``nodes`` graph nodes compiled around it, ``calls`` run during the
    evaluation, where in the user's code (``sites``), and who fell back (``source``: ``graph`` for a
    torch.compile partition, ``device`` for the eager neuron device)."""

    op: str
    nodes: int
    calls: int
    sites: tuple[str, ...] = ()
    source: str = "graph"


@dataclass(frozen=True)
class Difference:
    """neuroncc's result for one tensor against eager float32 (``abs32``/``rel32``) and float64 (``abs64``/
    ``rel64``), and eager float32's own distance from float64 (``eager_abs64``/``eager_rel64``)."""

    name: str
    kind: str  # "output" | "buffer" | "input" (updated in place) | "gradient" | "parameter" (after one SGD step)
    shape: tuple[int, ...]
    abs32: float
    rel32: float
    abs64: float | None = None
    rel64: float | None = None
    eager_abs64: float | None = None
    eager_rel64: float | None = None
    tolerance_used: float = 0.0  # max of |ours - eager32| / (atol + rtol * |eager32|): within when <= 1
    within: bool = True  # |ours - eager32| <= atol + rtol * |eager32| everywhere


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``samples`` calls: median, quartiles and extremes."""

    name: str
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return _quantile(self.samples, 0.5)

    @property
    def spread(self) -> tuple[float, float]:
        """The interquartile range (q1, q3)."""
        return _quantile(self.samples, 0.25), _quantile(self.samples, 0.75)

    def to_dict(self) -> dict[str, Any]:
        q1, q3 = self.spread
        return {"name": self.name, "median_s": self.median, "q1_s": q1, "q3_s": q3,
                "min_s": min(self.samples, default=math.nan), "max_s": max(self.samples, default=math.nan),
                "samples": len(self.samples)}


@dataclass(frozen=True)
class CompileTime:
    """Where the first call's time went (seconds): ``tracing`` is TorchDynamo + AOTAutograd + the FX -> IR import
    (``importing`` of it), ``passes``/``codegen``/``cache`` come from the driver's records of each graph."""

    first_call: float
    tracing: float
    importing: float
    passes: float
    codegen: float
    cache: float
    graphs: tuple[CompileRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"first_call_s": self.first_call, "tracing_s": self.tracing, "importing_s": self.importing,
                "passes_s": self.passes, "codegen_s": self.codegen, "cache_s": self.cache,
                "graphs": [g.to_dict() for g in self.graphs]}


@dataclass(frozen=True)
class ShapeRun:
    """One extra input shape: the graphs it compiled (0: a compiled specialization was reused) and why."""

    shapes: tuple[tuple[int, ...], ...]
    new_graphs: int
    seconds: float
    reasons: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class KernelTime:
    """Measured time of one step of one neuroncc call (from the timeline recorder)."""

    graph: str
    name: str
    kind: str
    start_us: float
    duration_us: float


@dataclass
class EvaluationReport:
    model: str
    target: str
    train: bool
    rtol: float
    atol: float
    fallbacks: list[FallbackOp] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    compile: CompileTime | None = None
    steady_state: list[Timing] = field(default_factory=list)
    shapes: list[ShapeRun] = field(default_factory=list)
    kernels: list[KernelTime] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(d.within for d in self.differences)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "train": self.train, "passed": self.passed,
                "tolerance": {"rtol": self.rtol, "atol": self.atol},
                "fallbacks": [asdict(f) for f in self.fallbacks],
                "differences": [asdict(d) for d in self.differences],
                "compile": self.compile.to_dict() if self.compile else None,
                "steady_state": [t.to_dict() for t in self.steady_state],
                "shapes": [asdict(s) for s in self.shapes],
                "kernels": [asdict(k) for k in self.kernels], "notices": list(self.notices)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=True)

    def text(self) -> str:
        return "\n".join(render_text(self))


def render_text(report: EvaluationReport) -> list[str]:
    mode = "training step (forward, backward, optimizer step)" if report.train else "inference"
    lines = [f"neuroncc evaluation of {report.model}: {mode}, target {report.target}"]
    lines.append(f"  verdict      {'PASS' if report.passed else 'FAIL'}: numerics "
                 f"{'within' if report.passed else 'outside'} rtol {report.rtol:g}, atol {report.atol:g} of eager "
                 "float32")
    if report.fallbacks:
        lines.append(f"  fallbacks    {len(report.fallbacks)} op(s) ran on eager PyTorch:")
        for f in report.fallbacks:
            where = f"  at {', '.join(f.sites)}" if f.sites else ""
            lines.append(f"                 {f.op}: {f.nodes} node(s), {f.calls} call(s) ({f.source}){where}")
    else:
        lines.append("  fallbacks    none: every op ran in neuroncc's code")
    lines.append("  numerics     max abs / rel difference; vs eager float32 | vs float64 (eager float32 vs float64)")
    for d in report.differences:
        sixty_four = (f"{d.abs64:.2e} / {d.rel64:.2e} ({d.eager_abs64:.2e} / {d.eager_rel64:.2e})"
                      if d.abs64 is not None else "-")
        lines.append(f"    {'ok  ' if d.within else 'FAIL'} {d.kind:9s} {d.name:32s} {d.abs32:.2e} / {d.rel32:.2e} | "
                     f"{sixty_four}")
    if report.compile:
        c = report.compile
        lines.append(f"  compile      first call {format_seconds(c.first_call)}: tracing {format_seconds(c.tracing)} (of it FX -> IR "
                     f"{format_seconds(c.importing)}), passes {format_seconds(c.passes)}, code generation {format_seconds(c.codegen)}, cache {format_seconds(c.cache)}")
        for g in c.graphs:
            lines.append(f"                 @{g.function}: {g.ops} ops, {g.cache}, {format_seconds(g.seconds)}")
    if report.steady_state:
        parts = []
        for t in report.steady_state:
            q1, q3 = t.spread
            parts.append(f"{t.name} {format_seconds(t.median)} (IQR {format_seconds(q1)}-{format_seconds(q3)})")
        lines.append(f"  steady state median per call over {len(report.steady_state[0].samples)} calls: "
                     + ", ".join(parts))
        if len(report.steady_state) == 2 and report.steady_state[1].median:
            lines.append(f"               neuroncc / eager = {report.steady_state[0].median / report.steady_state[1].median:.2f}")
    for run in report.shapes:
        shapes = ", ".join(str(list(s)) for s in run.shapes)
        if run.error:
            lines.append(f"  shapes       {shapes}: {run.error}")
        else:
            verdict = f"{run.new_graphs} new graph(s) compiled" if run.new_graphs else "reused a compiled graph"
            lines.append(f"  shapes       {shapes}: {verdict} in {format_seconds(run.seconds)}"
                         + (f"; {'; '.join(run.reasons)}" if run.reasons else ""))
    for notice in report.notices:
        lines.append(f"  notice       {notice}")
    return lines


def format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _quantile(values: tuple[float, ...], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
