"""The graph cache in front of AOTAutograd (neuroncc/frontend/graph_cache.py): a second, fresh process runs a
TorchDynamo graph it has seen before without AOTAutograd (the child makes AOTAutograd unusable, and counts its
runs), bit for bit as the first process did, for training graphs with input mutations (BatchNorm's running
statistics) and aliased outputs (a view of an input, a view of an intermediate), an inference graph and a
compiled AdamW step (parameters and optimizer state updated in place). A
damaged or tampered entry, or one whose artifacts are gone, is a miss with one warning and a recompile, never a
crash; a graph the key cannot describe is compiled as before, with its reason counted."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

import neuroncc
from neuroncc.driver.artifact import MANIFEST_NAME, file_digest, manifest_bytes, read_manifest
from neuroncc.driver.graph_entries import PAYLOAD_NAME, TARGET_PREFIX
from neuroncc.frontend import graph_cache
from warm_python import WarmPython

CHILD = Path(__file__).parent / "graph_cache_child.py"
SCENARIOS = ("mlp_train", "batchnorm_train", "view_output", "inference", "adamw_step")


def _run(python: WarmPython, scenario: str, mode: str, cache_dir: Path, path: Path | None = None) -> dict:
    """One fresh process (forked from a warm interpreter that has only imported torch: tests/warm_python.py; a
    process that reads what another wrote runs on the other one, with another string hash seed)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NEURONCC_DISABLE_CACHE", "NEURONCC_DISABLE_GRAPH_CACHE", "NEURONCC_REMOTE_CACHE")}
    environ.update(NEURONCC_CACHE_DIR=str(cache_dir), NEURONCC_CACHE_ARTIFACTS_KEY="graph-cache-test-secret-0123")
    command = [sys.executable, str(CHILD), scenario, mode, *([str(path)] if path is not None else [])]
    completed = python.run(command, env=environ, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _graph_entries(cache_dir: Path) -> list[Path]:
    return [d for d in sorted((cache_dir / "entries").iterdir())
            if read_manifest(d).target.startswith(TARGET_PREFIX)]


@pytest.fixture(scope="module")
def first_runs(warm_python, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Each scenario run once in a fresh process with an empty cache: (its cache dir, its report)."""
    root = tmp_path_factory.mktemp("graph-cache")
    return {scenario: (root / scenario, _run(warm_python, scenario, "any", root / scenario))
            for scenario in SCENARIOS}


@pytest.fixture(scope="module")
def second_runs(first_runs, warm_python, tmp_path_factory):
    """A scenario's second fresh process, which may not run AOTAutograd, on a copy of the first one's cache
    (its report; run once per scenario and module: two tests read the view_output one)."""
    reports: dict[str, dict] = {}

    def second(scenario: str) -> dict:
        if scenario not in reports:
            warm = tmp_path_factory.mktemp(f"warm-{scenario}") / "cache"
            shutil.copytree(first_runs[scenario][0], warm)
            reports[scenario] = _run(warm_python.other, scenario, "no-aot", warm)
        return reports[scenario]

    return second


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_fresh_process_runs_the_graph_without_aot_autograd_bit_for_bit(first_runs, second_runs, scenario):
    cache_dir, first = first_runs[scenario]
    assert first["stats"]["aot_autograd_runs"] == 1 and first["stats"]["graph_cache_stores"] == 1
    assert len(_graph_entries(cache_dir)) == 1
    second = second_runs(scenario)
    assert second["stats"]["graph_cache_hits"] == 1
    assert second["stats"]["aot_autograd_runs"] == 0 and second["stats"]["graphs_compiled"] == 0
    assert second["stats"]["cache_misses"] == 0 and second["warnings"] == []
    assert second["results"] == first["results"]


def test_outputs_that_alias_an_input_or_an_intermediate_stay_views_on_a_hit(first_runs, second_runs):
    _, first = first_runs["view_output"]
    second = second_runs("view_output")
    assert second["results"][3] == first["results"][3] == "010101"  # x.view(-1) is a view of x, y.t() of y


def test_batchnorm_running_statistics_are_written_back_on_a_hit(first_runs):
    _, first = first_runs["batchnorm_train"]
    eager_model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                      torch.nn.Linear(6, 2))
    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                      torch.nn.Linear(6, 2))
    x = torch.randn(7, 5)
    for _ in range(2):
        eager_model(x).sum().backward()
    running_mean = bytes.fromhex(first["results"][-3])
    assert torch.allclose(torch.frombuffer(bytearray(running_mean), dtype=torch.float32),
                          eager_model[1].running_mean, atol=1e-5)


def _rewrite_payload(entry: Path, edit) -> None:
    """Change the entry's payload and re-sign its manifest, as someone who knows the format would: the file
    checks pass, so only decoding the payload field by field can catch it."""
    payload = json.loads((entry / PAYLOAD_NAME).read_text())
    edit(payload)
    (entry / PAYLOAD_NAME).write_text(json.dumps(payload))
    manifest = read_manifest(entry)
    fixed = dataclasses.replace(manifest, files={PAYLOAD_NAME: file_digest(entry / PAYLOAD_NAME)})
    (entry / MANIFEST_NAME).write_bytes(manifest_bytes(fixed))


def _corrupt_bytes(entry: Path) -> None:
    data = bytearray((entry / PAYLOAD_NAME).read_bytes())
    data[len(data) // 2] ^= 0x01
    (entry / PAYLOAD_NAME).write_bytes(bytes(data))


def _bogus_output_type(entry: Path) -> None:
    _rewrite_payload(entry, lambda p: p["metadata"]["output_info"][0].update(output_type="bogus"))


def _unknown_view_class(entry: Path) -> None:
    def edit(payload):
        payload["metadata"]["output_info"][0]["view_meta_sequence"] = {
            "sequence": [{"view": "os_ViewMeta", "args": {"tuple": []}}],
            "metadata": {"size": [], "layout": "strided", "is_sparse": False, "stride": [], "storage_offset": 0,
                         "is_conj": False, "is_neg": False}}
    _rewrite_payload(entry, edit)


def _missing_artifact(entry: Path) -> None:
    payload = json.loads((entry / PAYLOAD_NAME).read_text())
    shutil.rmtree(entry.parent / payload["forward"]["artifact"])


@pytest.mark.parametrize("damage", [_corrupt_bytes, _bogus_output_type, _unknown_view_class, _missing_artifact])
def test_a_damaged_entry_is_a_miss_with_a_warning_then_replaced(first_runs, warm_python, tmp_path, damage):
    cache_dir, first = first_runs["view_output"]
    warm = tmp_path / "warm"
    shutil.copytree(cache_dir, warm)
    (entry,) = _graph_entries(warm)
    damage(entry)
    second = _run(warm_python.other, "view_output", "any", warm)
    assert second["stats"]["aot_autograd_runs"] == 1 and second["stats"]["graph_cache_hits"] == 0
    assert any("CacheWarning" in w and ("graph cache entry" in w or "cache entry" in w) for w in second["warnings"])
    assert second["results"] == first["results"]
    if damage is _corrupt_bytes:  # the recompile replaced the entry (one damage shows it: a process costs ~4 s)
        third = _run(warm_python, "view_output", "no-aot", warm)
        assert third["stats"]["graph_cache_hits"] == 1 and third["results"] == first["results"]


def test_load_cache_artifacts_into_an_empty_cache_runs_no_aot_autograd(warm_python, tmp_path):
    payload = tmp_path / "artifacts.bin"
    saved = _run(warm_python, "mlp_train", "save", tmp_path / "build-cache", payload)
    assert len(saved["saved"]) == 3  # forward, backward and the graph entry
    loaded = _run(warm_python.other, "mlp_train", "load", tmp_path / "empty-cache", payload)
    assert loaded["loaded"] == saved["saved"]
    assert loaded["stats"]["aot_autograd_runs"] == 0 and loaded["stats"]["graph_cache_hits"] == 1
    assert loaded["stats"]["graphs_compiled"] == 0 and loaded["stats"]["cache_misses"] == 0
    assert loaded["results"] == saved["results"]


def test_the_same_graph_compiled_again_in_one_process_is_a_hit():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    torch.compile(model, backend="neuron")(x).sum().backward()
    first = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    torch.compile(model, backend="neuron")(x).sum().backward()
    stats = neuroncc.stats()
    assert stats["aot_autograd_runs"] == 1 and stats["graph_cache_hits"] == 1
    assert all(torch.equal(a, p.grad) for a, p in zip(first, model.parameters()))


def test_a_hit_gives_the_forward_and_backward_one_arena(monkeypatch):
    """Loaded from the disk, a training graph's two executables share one arena (and its lock), so the process
    keeps one instead of two; their calls take turns in it, and gradients stay bit for bit those of the compile."""
    from neuroncc.driver.process_cache import PROCESS_MEMORY

    loaded = []
    compiled_graph = graph_cache._compiled_graph
    monkeypatch.setattr(graph_cache, "_compiled_graph",
                        lambda part, executable, target: loaded.append(compiled_graph(part, executable, target))
                        or loaded[-1])
    model, x = _small_training_model()
    grads = []
    for _ in range(2):  # compiled (a miss), then loaded from the disk (a hit), two steps each
        torch._dynamo.reset()
        PROCESS_MEMORY.clear()  # not the executables compiled here: the ones the artifacts load
        run = torch.compile(model, backend="neuron", dynamic=False)
        for _ in range(2):
            model.zero_grad()
            run(x).pow(2).sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
    assert neuroncc.stats()["graph_cache_hits"] == 1 and neuroncc.stats()["cache_misses"] == 2
    forward, backward = (graph.executable for graph in loaded)
    assert forward._lock is backward._lock and forward.plan.arena_bytes > 0 and backward.plan.arena_bytes > 0
    larger = max(forward, backward, key=lambda e: e.plan.arena_bytes)
    assert forward._arena.ctypes.data == backward._arena.ctypes.data == larger._arena.ctypes.data
    assert all(torch.equal(a, b) for step in grads[1:] for a, b in zip(grads[0], step))


@pytest.mark.parametrize("quick_first", [False, "modules"])
def test_a_compile_gives_the_forward_and_backward_one_arena_as_a_hit_does(quick_first, monkeypatch):
    """The same rule on a miss: one arena once both graphs run their final code (with quick-tier code first,
    once each has taken its optimized build, which is made over the quick code's own arena)."""
    from neuroncc.frontend.compiled import CompiledGraph

    pairs = []
    share = CompiledGraph.share_arena_with
    monkeypatch.setattr(CompiledGraph, "share_arena_with", lambda self, other: pairs.append((self, other)) or
                        share(self, other))
    monkeypatch.setenv("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    torch._dynamo.reset()
    model, x = _small_training_model()
    run = torch.compile(model, backend="neuron", dynamic=False, options={"quick_first": quick_first})
    grads = []
    for _ in range(3):
        model.zero_grad()
        run(x).pow(2).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        for graph in (graph for pair in pairs for graph in pair):
            if graph._pending is not None:
                graph._pending.result()  # the optimized build: taken on the next call
    ((forward, backward),) = pairs
    assert forward._pending is None and backward._pending is None
    assert forward.executable._lock is backward.executable._lock
    assert forward.executable._arena.ctypes.data == backward.executable._arena.ctypes.data
    assert all(torch.equal(a, b) for step in grads[1:] for a, b in zip(grads[0], step))  # quick and optimized


def test_a_compile_gives_the_backward_the_forwards_arena_from_its_build_on(monkeypatch):
    """Not only once both run their final code: the backward shares the forward's arena from its build on, its code
    still pending, so its first call runs in pages the forward's first call touched, or in the arena reserve's
    whose pages were faulted in while AOTAutograd traced (executors/cpu/arena_reserve.py; here a reserve that
    holds both arenas, handed to the forward, built first)."""
    import numpy as np

    from neuroncc.executors.cpu import arena_reserve
    from neuroncc.executors.cpu.buffers import aligned_empty
    from neuroncc.frontend.compiled import CompiledGraph

    pairs, reserve = [], []
    share = CompiledGraph.share_arena_with

    def sharing(forward: CompiledGraph, backward: CompiledGraph) -> None:
        share(forward, backward)
        pairs.append((forward, backward, backward._code_pending, forward.executable._lock is backward.executable._lock))

    def take(nbytes: int) -> np.ndarray | None:
        if reserve:
            return None
        reserve.append(aligned_empty(1 << 20, np.dtype(np.uint8))[0])
        return reserve[0]

    monkeypatch.setattr(CompiledGraph, "share_arena_with", sharing)
    monkeypatch.setattr(arena_reserve, "take", take)
    monkeypatch.setenv("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    torch._dynamo.reset()
    model, x = _small_training_model()
    model(x).pow(2).sum().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    run = torch.compile(model, backend="neuron", dynamic=False)
    for _ in range(2):
        model.zero_grad()
        run(x).pow(2).sum().backward()
        for want, parameter in zip(eager, model.parameters()):
            torch.testing.assert_close(parameter.grad, want, rtol=1e-4, atol=1e-5)
    ((forward, backward, pending, shared),) = pairs
    assert pending and shared  # at the backward's build, its code still pending
    assert forward.executable._arena_buffer is reserve[0] is backward.executable._arena_buffer


def test_inputs_sharing_memory_are_compiled_every_time_with_the_reason_counted():
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b.sum()

    base = torch.randn(4, 4)
    out = torch.compile(f, backend="neuron")(base, base[1:])
    torch.testing.assert_close(out, f(base, base[1:]))
    assert neuroncc.stats()["graph_cache_uncacheable"] == 1 and neuroncc.stats()["aot_autograd_runs"] == 1
    assert any("share memory" in reason for reason in graph_cache.uncacheable_reasons())


def test_the_graph_cache_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    model = torch.nn.Linear(4, 2)
    for _ in range(2):
        torch._dynamo.reset()
        torch.compile(model, backend="neuron")(torch.randn(3, 4)).sum().backward()
    stats = neuroncc.stats()
    assert stats["aot_autograd_runs"] == 2 and stats["graph_cache_hits"] == stats["graph_cache_misses"] == 0


def test_a_miss_names_the_key_components_that_changed(caplog):
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    with caplog.at_level("INFO", logger="neuroncc.frontend"):
        torch.compile(f, backend="neuron", dynamic=False)(torch.randn(2, 3))
        torch._dynamo.reset()
        torch.compile(f, backend="neuron", dynamic=False)(torch.randn(2, 4))
    misses = [r.getMessage() for r in caplog.records if "graph cache miss" in r.getMessage()]
    assert len(misses) == 2 and misses[1].endswith("differs in: inputs"), misses


def test_another_host_cpu_misses_and_names_the_host(monkeypatch, caplog):
    """The key's host fingerprint (computed once per process) is the target's: a graph cached on one CPU is a
    miss on a CPU with other features, never object code loaded where it was not built."""
    from neuroncc.driver import artifact

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    x = torch.randn(2, 3)
    with caplog.at_level("INFO", logger="neuroncc.frontend"):
        torch.compile(f, backend="neuron", dynamic=False)(x)
        torch._dynamo.reset()
        host = artifact.ARTIFACT_CODECS["cpu"].host_fingerprint()
        flipped = host.replace("+", "-", 1) if "+" in host else host + " +feature"  # one CPU feature differs
        other = dataclasses.replace(artifact.ARTIFACT_CODECS["cpu"], host_fingerprint=lambda: flipped)
        assert other.host_fingerprint() != host
        monkeypatch.setitem(artifact.ARTIFACT_CODECS, "cpu", other)
        out = torch.compile(f, backend="neuron", dynamic=False)(x)
    torch.testing.assert_close(out, f(x))
    misses = [r.getMessage() for r in caplog.records if "graph cache miss" in r.getMessage()]
    assert len(misses) == 2 and misses[1].endswith("differs in: host"), misses
    assert neuroncc.stats()["graph_cache_hits"] == 0 and neuroncc.stats()["aot_autograd_runs"] == 2


def _small_training_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """The training graphs these tests compile: Linear, GELU, LayerNorm, Linear (seeded), and its input."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 8))
    return model, torch.randn(32, 64)
