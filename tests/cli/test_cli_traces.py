"""``inspect --cost --trace/--plot`` (the cost model's timeline and per-kernel picture) and ``run --trace/--plot``
(the measured timeline of one call): Chrome trace JSON with the expected tracks, and real SVG/PNG pictures."""

from __future__ import annotations

import json

import pytest
from cli_testing import run_in_process
from PIL import Image

from neuroncc.executors.nki_sim.timeline import COMPUTE_TRACKS, DMA_TRACK, KERNELS_TRACK
from neuroncc.testing.choices import choose


def _threads(document, pid):
    return {e["tid"]: e["args"]["name"] for e in document["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}


def test_inspect_cost_trace_has_a_track_per_engine_and_dma_queue(classifier_pt2, tmp_path, capsys):
    trace, plot = tmp_path / "cost.json", tmp_path / "cost.svg"
    result = run_in_process(capsys, "inspect", str(classifier_pt2), "--train", "--cost", "--trace", str(trace),
                            "--plot", str(plot), "-q")
    assert result.returncode == 0, result.stderr
    document = json.loads(trace.read_text())
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["@classifier_backward on trn2", "@classifier_forward on trn2"]
    for pid in processes:
        threads = _threads(document, pid)
        assert threads[KERNELS_TRACK] == "kernels"
        assert {threads[t] for t in COMPUTE_TRACKS.values()} == {"TensorE", "VectorE", "ScalarE", "GpSimdE"}
        assert any(name.startswith("DMA queue") for tid, name in threads.items() if tid >= DMA_TRACK)
        slices = [e for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]
        kernels = [e for e in slices if e["tid"] == KERNELS_TRACK]
        # the kernels run back to back, and every instruction lies inside its kernel's slice
        for before, after in zip(kernels, kernels[1:]):
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"])
        spans = {k["name"]: (k["ts"], k["ts"] + k["dur"]) for k in kernels}
        instructions = [e for e in slices if e["tid"] != KERNELS_TRACK]
        assert instructions and any(e["tid"] >= DMA_TRACK for e in instructions)
        for event in instructions:
            start, end = spans[event["args"]["kernel"]]
            assert start - 1e-6 <= event["ts"] and event["ts"] + event["dur"] <= end + 1e-6
        # the kernels track ends where the cost table's total does
        table_total = sum(k["dur"] for k in kernels)
        assert kernels[-1]["ts"] + kernels[-1]["dur"] == pytest.approx(kernels[0]["ts"] + table_total)
    svg = plot.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "classifier_forward" in svg


def test_inspect_trace_needs_cost(good_pt2, tmp_path, capsys):
    result = run_in_process(capsys, "inspect", str(good_pt2), "--trace", str(tmp_path / "t.json"))
    assert result.returncode == 2 and "add --cost" in result.stderr
    result = run_in_process(capsys, "inspect", str(good_pt2), "--cost", "--plot", str(tmp_path / "t.pdf"))
    assert result.returncode == 2 and ".svg or .png" in result.stderr
    assert not list(tmp_path.iterdir())


def test_run_trace_and_plot_record_one_call(classifier_pt2, tmp_path, capsys, monkeypatch):
    # the classifier's products as ATen calls on every host (hosts generate them: small_mm_max_macs), so
    # the trace has extern steps to record beside the kernels
    choose(monkeypatch, small_mm_max_macs=0)
    trace, plot = tmp_path / "run.json", tmp_path / "run.png"
    result = run_in_process(capsys, "run", str(classifier_pt2), "--trace", str(trace), "--plot", str(plot), "-q")
    assert result.returncode == 0, result.stderr
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    graphs = [e for e in events if e["cat"] == "graph"]
    assert [g["name"] for g in graphs] == ["neuroncc::graph::classifier"]  # exactly one call recorded
    steps = [e for e in events if e["cat"] != "graph"]
    assert any(e["cat"] == "kernel" and "layer_norm" in e["name"] for e in steps)
    assert any(e["cat"] == "extern" for e in steps)
    start, end = graphs[0]["ts"], graphs[0]["ts"] + graphs[0]["dur"]
    for step in steps:
        assert start <= step["ts"] and step["ts"] + step["dur"] <= end + 1e-3
        assert "Input Dims" in step["args"]
    image = Image.open(plot).convert("L")
    assert image.size[0] > 400 and len(image.getcolors(1 << 16) or ()) > 8  # a drawn chart, not a blank page
