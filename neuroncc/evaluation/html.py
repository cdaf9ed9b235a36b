"""The evaluation report as one self-contained HTML page (``neuroncc evaluate --html FILE``).

Tables for every section of :mod:`neuroncc.evaluation.report` and the plots as inline SVG (no scripts, no
files beside it: the page can be mailed or attached to a ticket). Each plot sits in a ``<figure>`` with an
``id`` (``plot-errors``, ``plot-compile``, ``plot-steady-state``, ``plot-kernels``) that tests and readers
can find.
"""

from __future__ import annotations

import html
from typing import Any

from neuroncc.evaluation import plots
from neuroncc.evaluation.report import EvaluationReport, format_seconds
from neuroncc.executors.tracing import StepInfo, TimedStep

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; } td, th { padding: 2px 8px; text-align: left; }
tr:nth-child(even) { background: #f4f4f4; } .pass { color: #1a7f37; } .fail { color: #c62828; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
code { font-size: 0.9em; }
"""


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(identifier: str, figure: Any) -> str:
    return f'<figure id="{identifier}">{plots.svg_text(figure)}</figure>'


def render_html(report: EvaluationReport) -> str:
    verdict = "PASS" if report.passed else "FAIL"
    mode = "training step (forward, backward, SGD step)" if report.train else "inference"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>neuroncc evaluation: "
             f"{html.escape(report.model)}</title><style>{STYLE}</style></head><body>",
             f"<h1>neuroncc evaluation of <code>{html.escape(report.model)}</code></h1>",
             f"<p>{mode}, target <code>{html.escape(report.target)}</code>. Verdict: "
             f"<b class='{verdict.lower()}'>{verdict}</b> (every tensor within rtol {report.rtol:g}, "
             f"atol {report.atol:g} of eager float32).</p>"]

    parts.append("<h2>Fallbacks</h2>")
    if report.fallbacks:
        parts.append(_table(["op", "graph nodes", "calls", "source", "where"],
                            [[f.op, f.nodes, f.calls, f.source, ", ".join(f.sites) or "-"] for f in report.fallbacks]))
    else:
        parts.append("<p>None: every op ran in neuroncc's code.</p>")

    parts.append("<h2>Numerics</h2>")
    parts.append(_table(
        ["", "kind", "tensor", "shape", "tolerance used", "max abs vs fp32", "max rel vs fp32", "max abs vs fp64",
         "eager fp32 vs fp64"],
        [["ok" if d.within else "FAIL", d.kind, d.name, list(d.shape), f"{d.tolerance_used:.3g}", f"{d.abs32:.2e}",
          f"{d.rel32:.2e}",
          f"{d.abs64:.2e}" if d.abs64 is not None else "-",
          f"{d.eager_abs64:.2e}" if d.eager_abs64 is not None else "-"] for d in report.differences]))
    if report.differences:
        used = {f"{d.kind} {d.name}": d.tolerance_used for d in report.differences}
        parts.append(_figure("plot-errors", plots.plot_errors(used, "share of the tolerance used (1 = the limit)")))

    if report.compile:
        c = report.compile
        parts.append("<h2>Compile time</h2>")
        parts.append(f"<p>First call {format_seconds(c.first_call)}.</p>")
        split = {"tracing": c.tracing, "passes": c.passes, "code generation": c.codegen, "cache": c.cache}
        parts.append(_figure("plot-compile", plots.plot_compile_split(split, "where the first call's time went")))
        parts.append(_table(["graph", "ops", "launches", "cache", "passes", "codegen", "total"],
                            [[g.function, g.ops, ", ".join(f"{n} {k}" for k, n in g.launches.items() if n), g.cache,
                              format_seconds(g.passes_total), format_seconds(g.codegen_seconds), format_seconds(g.seconds)] for g in c.graphs]))

    if report.steady_state:
        parts.append("<h2>Steady state</h2>")
        parts.append(_table(["", "median", "q1", "q3", "min", "max", "calls"],
                            [[t.name, format_seconds(t.median), format_seconds(t.spread[0]), format_seconds(t.spread[1]), format_seconds(min(t.samples)),
                              format_seconds(max(t.samples)), len(t.samples)] for t in report.steady_state]))
        samples = {t.name: t.samples for t in report.steady_state}
        parts.append(_figure("plot-steady-state", plots.plot_steady_state(samples, "time per call (interleaved)")))

    if report.kernels:
        parts.append("<h2>Kernels of one call (measured)</h2>")
        steps = [TimedStep(StepInfo(k.name, k.kind, k.graph), k.start_us, k.duration_us, 0) for k in report.kernels]
        parts.append(_figure("plot-kernels", plots.plot_timeline(steps, "every neuroncc step of one call")))

    if report.shapes:
        parts.append("<h2>Recompiles over input shapes</h2>")
        parts.append(_table(["shapes", "new graphs", "time", "why"],
                            [[", ".join(str(list(s)) for s in run.shapes), run.new_graphs, format_seconds(run.seconds),
                              run.error or "; ".join(run.reasons) or "-"] for run in report.shapes]))
    parts.append("</body></html>\n")
    return "\n".join(parts)
