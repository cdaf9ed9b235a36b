"""``neuroncc evaluate MODEL.pt2``: the evaluation report of an exported program (text, --json, --html), the
exit code following the verdict, --shapes, and bad flags as one-line errors."""

from __future__ import annotations

import json

from cli_testing import run_in_process


def test_evaluate_the_bundled_example_as_json_and_html(classifier_pt2, tmp_path, capsys):
    html = tmp_path / "report.html"
    result = run_in_process(capsys, "evaluate", str(classifier_pt2), "--train", "--json", "--html", str(html),
                            "--repeat", "3", "--shapes", "16x8,16", "-q", "--cache-dir", str(tmp_path / "cache"))
    document = json.loads(result.stdout)
    assert result.returncode == 0, result.stderr
    assert document["passed"] is True and document["train"] is True and document["fallbacks"] == []
    kinds = {d["kind"] for d in document["differences"]}
    assert kinds == {"output", "gradient", "parameter"}
    assert any(d["name"] == "model.qkv.weight" and d["kind"] == "gradient" for d in document["differences"])
    graphs = document["compile"]["graphs"]
    assert [g["function"].rsplit("_", 2)[-2] for g in graphs] == ["forward", "backward"]
    assert all(g["cache"] == "miss" and g["pass_seconds"] for g in graphs)
    assert [t["name"] for t in document["steady_state"]] == ["neuroncc", "eager"]
    (shape,) = document["shapes"]
    # the program was exported for [32, 8] tokens: eager PyTorch refuses other shapes, and the report says so
    assert shape["error"].startswith("eager PyTorch refuses these shapes too")
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and '<figure id="plot-errors">' in page and "<svg" in page


def test_exit_code_follows_the_verdict(good_pt2, tmp_path, capsys):
    result = run_in_process(capsys, "evaluate", str(good_pt2), "--repeat", "1", "--rtol", "0", "--atol", "0",
                            "-q", "--json", "--cache-dir", str(tmp_path / "cache"))
    document = json.loads(result.stdout)
    exact = all(d["abs32"] == 0 for d in document["differences"])
    assert document["passed"] is exact
    assert result.returncode == (0 if exact else 1)
    text = run_in_process(capsys, "evaluate", str(good_pt2), "--repeat", "1", "-q",
                          "--cache-dir", str(tmp_path / "cache"))
    assert text.returncode == 0, text.stderr
    assert "verdict      PASS" in text.stdout and "fallbacks    none" in text.stdout
    assert "cache hit" not in text.stdout and ", hit," in text.stdout  # the second evaluation loads from the cache


def test_bad_shapes_are_one_line_errors(good_pt2, capsys):
    result = run_in_process(capsys, "evaluate", str(good_pt2), "--shapes", "2xfour")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "sizes joined by 'x'" in result.stderr


def test_neuroncc_log_prints_the_compile_lines_of_cli_commands(good_pt2, tmp_path):
    from cli_testing import process_environment
    import subprocess
    import sys

    env = process_environment(tmp_path, tmp_path / "cache") | {"NEURONCC_LOG": "info"}
    done = subprocess.run([sys.executable, "-m", "neuroncc.cli", "compile", str(good_pt2), "-q"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = [l for l in done.stderr.splitlines() if l.startswith("neuroncc: compiled @small for cpu: ")]
    assert "cache miss (no stored entry of this target to compare)" in line and "codegen" in line
