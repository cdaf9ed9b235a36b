"""Pictures of what neuroncc did, drawn with matplotlib (``--plot FILE.svg|png``, the HTML report).

- :func:`plot_costs`: the NKI cost model's per-kernel breakdown: one stacked bar per kernel (busy time of
  each engine), the estimated latency as a dot and the roofline bound (the larger of the DMA-bound time and
  the TensorE peak-rate time) as a tick: a bar far right of its tick is latency-bound.
- :func:`plot_timeline`: measured wall time per kernel of one call (``neuroncc run --plot``).
- :func:`plot_steady_state`: time per call, neuroncc against eager, with the spread of the samples.
- :func:`plot_errors`: how much of the numeric tolerance each output or gradient uses.
- :func:`plot_compile_split`: where the first call's time went (tracing, passes, code generation, cache).

matplotlib is imported inside each function, with the non-interactive Agg backend (no display needed).
Each returns the figure; :func:`save` writes it as SVG or PNG by the file's suffix.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuroncc.errors import InputError
from neuroncc.executors.nki_sim.costs import ENGINES, CostTable
from neuroncc.executors.tracing import TimedStep

PLOT_SUFFIXES = (".svg", ".png")
ENGINE_COLOURS = {"TensorE": "#4C72B0", "VectorE": "#55A868", "ScalarE": "#DD8452", "GpSimdE": "#8172B2",
                  "DMA": "#CCB974"}
STEP_COLOURS = {"kernel": "#4C72B0", "extern": "#C44E52", "interpreted": "#8172B2", "host": "#CCB974",
                "fallback": "#DD8452"}
MAX_BARS = 60  # kernels beyond this many (the slowest are kept) would make bars unreadably thin


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str) -> None:
    """Refuse a plot file name whose format we cannot write, before any work is done."""
    if Path(path).suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"{path}: a plot is written as .svg or .png")


def plot_costs(tables: Sequence[CostTable]) -> Any:
    """Per-kernel stacked engine busy time, latency and roofline bound of each table (one panel per graph)."""
    plt = _pyplot()
    tables = [t for t in tables if t.kernels] or list(tables)
    heights = [max(2.0, 0.28 * min(len(t.kernels), MAX_BARS) + 1.2) for t in tables]
    figure, axes = plt.subplots(len(tables), 1, figsize=(10, sum(heights)), squeeze=False,
                                gridspec_kw={"height_ratios": heights})
    for ax, table in zip(axes[:, 0], tables):
        kernels = sorted(table.kernels, key=lambda k: -k.latency_us)[:MAX_BARS][::-1]
        names = [k.name for k in kernels]
        left = [0.0] * len(kernels)
        for engine in ENGINES:
            busy = [dict(k.utilisation).get(engine, 0.0) * k.latency_us for k in kernels]
            ax.barh(names, busy, left=left, color=ENGINE_COLOURS[engine], label=f"{engine} busy", height=0.7)
            left = [a + b for a, b in zip(left, busy)]
        ax.scatter([k.latency_us for k in kernels], names, color="#d62728", s=18, zorder=3,
                   label="estimated latency")
        bounds = [max(k.dma_bound_us, k.latency_us * k.tensor_peak_fraction) for k in kernels]
        ax.scatter(bounds, names, marker="|", color="black", s=220, zorder=4, linewidths=2.5,
                   label="roofline bound (DMA or TensorE peak)")
        ax.set_xlabel("microseconds (engine busy times stack; engines overlap, so stacks can exceed the latency)")
        ax.set_title(f"@{table.function} on {table.target}: {len(table.kernels)} kernels, "
                     f"{table.total_us:.1f} us estimated", fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    return figure


def plot_timeline(steps: Sequence[TimedStep], title: str) -> Any:
    """Measured time of each kernel/extern step of one call, in call order."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    origin = min((s.start_us for s in steps), default=0.0)  # the call's start (its graph range)
    kernels = [s for s in steps if s.info.kind != "graph"][:MAX_BARS]
    figure, ax = plt.subplots(figsize=(10, max(2.0, 0.28 * len(kernels) + 1.2)))
    names = [s.info.name for s in kernels][::-1]
    ax.barh(names, [s.duration_us for s in kernels][::-1], left=[s.start_us - origin for s in kernels][::-1],
            color=[STEP_COLOURS.get(s.info.kind, "grey") for s in kernels][::-1], height=0.7)
    kinds = [kind for kind in STEP_COLOURS if any(s.info.kind == kind for s in kernels)]
    ax.legend(handles=[Patch(color=STEP_COLOURS[kind], label=kind) for kind in kinds], fontsize=7, loc="lower right")
    ax.set_xlim(left=0)
    ax.set_xlabel("microseconds from the start of the call (measured)")
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    return figure


def plot_steady_state(samples: Mapping[str, Sequence[float]], title: str) -> Any:
    """Box plot of seconds per call for each runner (``{"neuroncc": [...], "eager": [...]}``), in ms."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(7, 2.2 + 0.4 * len(samples)))
    labels = list(samples)
    ax.boxplot([[s * 1e3 for s in samples[label]] for label in labels], orientation="horizontal", showfliers=True)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_xlabel("milliseconds per call")
    ax.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure


def plot_errors(used: Mapping[str, float], title: str) -> Any:
    """How much of the tolerance each output / gradient uses (max |diff| / (atol + rtol |eager|)), log scale,
    with the limit (1) marked: a bar past the line is outside the tolerance."""
    plt = _pyplot()
    names = list(used)
    figure, ax = plt.subplots(figsize=(8, max(2.0, 0.3 * len(names) + 1.2)))
    values = [min(max(used[n], 1e-6), 1e6) for n in names]
    ax.barh(names[::-1], values[::-1], color=["#C44E52" if v > 1 else "#4C72B0" for v in values][::-1], height=0.6)
    ax.axvline(1.0, color="#d62728", linestyle="--", label="tolerance")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xscale("log")
    ax.set_xlabel("max |neuroncc - eager float32| / (atol + rtol |eager float32|)   (log scale; 0 drawn at 1e-6)")
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    return figure


def plot_compile_split(parts: Mapping[str, float], title: str) -> Any:
    """One stacked bar: where the first call's compile time went (``{"tracing": s, "passes": s, ...}``)."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(8, 1.8))
    left = 0.0
    colours = ["#4C72B0", "#55A868", "#C44E52", "#CCB974", "#8172B2"]
    for (name, seconds), colour in zip(parts.items(), colours):
        ax.barh(["compile"], [seconds * 1e3], left=left, color=colour, label=f"{name} {seconds * 1e3:.0f} ms")
        left += seconds * 1e3
    ax.set_xlabel("milliseconds")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=len(parts))
    figure.tight_layout()
    return figure


def save(figure: Any, path: str | Path) -> Path:
    """Write ``figure`` as SVG or PNG (by the suffix) and close it."""
    path = Path(path)
    check_plot_path(str(path))
    figure.savefig(path, format=path.suffix.lower().lstrip("."), dpi=110)
    _pyplot().close(figure)
    return path


def svg_text(figure: Any) -> str:
    """``figure`` as inline SVG text (for the HTML report), then closed."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    _pyplot().close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]
