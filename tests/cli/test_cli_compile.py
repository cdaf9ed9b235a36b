"""``neuroncc compile`` and ``neuroncc cache explain`` on exported programs (in-process)."""

import json
import re

from cli_testing import run_in_process, run_process

from neuroncc.ir import parse
from neuroncc.driver.artifact import read_manifest
from neuroncc.driver.compile import DEFAULT_TARGET

KEY = re.compile(r"key\s+([0-9a-f]{64})")


def test_compile_misses_then_hits_the_cache(good_pt2, capsys, tmp_path):
    """On the default target (the one users get)."""
    first = run_in_process(capsys, "compile", str(good_pt2))
    assert first.returncode == 0, first.stderr
    (key,) = KEY.findall(first.stdout)
    assert "miss: compiled" in first.stdout
    assert "inference @small" in first.stdout
    assert "launch" in first.stdout  # the kernel summary

    second = run_in_process(capsys, "compile", str(good_pt2))
    assert second.returncode == 0, second.stderr
    assert KEY.findall(second.stdout) == [key]
    assert "hit: loaded the stored artifact" in second.stdout

    explained = run_in_process(capsys, "cache", "explain", str(good_pt2))
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith(f"key {key}")
    against_entry = run_in_process(capsys, "cache", "explain", str(good_pt2), "--key", key[:12])
    assert "all components equal" in against_entry.stdout


def test_other_target_or_pipeline_is_another_key(good_pt2, capsys):
    default = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp")
    other = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp", "--pipeline", "canonicalize")
    assert default.returncode == other.returncode == 0
    assert KEY.findall(default.stdout) != KEY.findall(other.stdout)
    assert "0 launches" not in other.stdout


def test_train_compiles_forward_and_backward(classifier_pt2, capsys, tmp_path):
    result = run_in_process(capsys, "compile", str(classifier_pt2), "--train", "--target", "interp", "--json",
                            "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mode"] == "train" and report["compiles"] == 2 and report["cache_hits"] == 0
    forward, backward = report["graphs"]
    assert (forward["kind"], backward["kind"]) == ("forward", "backward")
    assert forward["name"] == "classifier_forward" and backward["name"] == "classifier_backward"
    for graph in report["graphs"]:
        summary = graph["summary"]
        assert summary["kernels"] >= 1 and summary["launches"] >= summary["kernels"]
        manifest = read_manifest(tmp_path / "out" / graph["name"])  # the copied artifact is whole and checked
        assert manifest.key == graph["key"] and manifest.target == "interp"
        parse((tmp_path / "out" / graph["name"] / "graph.nir").read_text())

    again = json.loads(run_in_process(capsys, "compile", str(classifier_pt2), "--train", "--target", "interp",
                                      "--json").stdout)
    assert again["compiles"] == 0 and again["cache_hits"] == 2
    assert [g["key"] for g in again["graphs"]] == [forward["key"], backward["key"]]

    explained = run_in_process(capsys, "cache", "explain", str(classifier_pt2), "--train", "--target", "interp")
    assert re.findall(r"^key ([0-9a-f]{64})", explained.stdout, re.M) == [forward["key"], backward["key"]]


def test_no_cache_writes_nothing(good_pt2, capsys, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(cache))
    result = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "not cached (cache disabled)" in result.stdout
    assert not cache.exists()


def test_cache_dir_flag_overrides_the_environment(good_pt2, capsys, tmp_path):
    result = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp", "--cache-dir",
                            str(tmp_path / "mine"))
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "mine" / "entries").iterdir())) == 1


def test_compile_progress_lines_on_a_log(good_pt2, capsys):
    result = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp")
    assert re.fullmatch(r"neuroncc: compile inference for interp \(compiled, cached\)  \S+ m?s\n", result.stderr)
    quiet = run_in_process(capsys, "compile", str(good_pt2), "--target", "interp", "-q")
    assert quiet.stderr == ""


def test_compile_for_a_named_cpu_says_so_and_is_its_own_key(good_pt2, tmp_path):
    """``--cpu`` (``NEURONCC_CPU``): the report names the CPU the code is for; its key is not the host's; a CPU
    the host cannot run is a one-line error (exit 2) before anything is compiled. In fresh processes: the CPU
    is settled once per process."""
    import pytest

    from neuroncc.hardware.host import host_cpu
    from neuroncc.hardware.named_cpu import llvm_cpu_features, missing_features

    host = host_cpu()
    if not host.has("avx2") or missing_features(llvm_cpu_features("x86-64-v3", host.features), host.features):
        pytest.skip("this host cannot run x86-64-v3's code")
    run = dict(cwd=tmp_path, home=tmp_path / "home", cache=tmp_path / "cache")
    mine = run_process("compile", str(good_pt2), "--json", "-q", **run)
    named = run_process("compile", str(good_pt2), "--json", "-q", "--cpu", "x86-64-v3", **run)
    text = run_process("compile", str(good_pt2), "-q", "--cpu", "x86-64-v3", **run)
    assert mine.returncode == named.returncode == text.returncode == 0, named.stderr
    mine, named = json.loads(mine.stdout), json.loads(named.stdout)
    assert (mine["cpu"], named["cpu"]) == (host.name, "x86-64-v3")
    assert mine["graphs"][0]["key"] != named["graphs"][0]["key"]
    assert "cpu      code for x86-64-v3 (NEURONCC_CPU or --cpu; host " in text.stdout and "hit:" in text.stdout
    bad = run_process("compile", str(good_pt2), "-q", "--cpu", "not-a-cpu", **run)
    assert bad.returncode == 2 and "neuroncc: error: NEURONCC_CPU=not-a-cpu: LLVM knows no CPU" in bad.stderr
