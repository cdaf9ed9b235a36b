"""``torch.compiler.save_cache_artifacts()`` / ``load_cache_artifacts()`` carry neuroncc's compiled artifacts:
a fresh process with an empty compile cache, loaded with one process's bytes, compiles nothing and matches
eager; a payload that does not verify is refused with a typed error and nothing of it is installed or run."""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from pathlib import Path

import pytest
import torch
from torch.compiler._cache import CacheArtifactManager

import neuroncc
from neuroncc.driver.bundle import HEADER, MAC_SIZE, MAGIC, BadBundleError, head_length_of, read_head
from neuroncc.errors import InputError
from neuroncc.frontend.cache_artifacts import ARTIFACT_TYPE
from warm_python import WarmPython

CHILD = Path(__file__).parent / "cache_artifacts_child.py"
SECRET = "portable-cache-test-secret-0123456789"
CRC_SIZE = 4  # torch.utils._appending_byte_serializer: a CRC32 of the rest leads the payload


def _run(python: WarmPython, mode: str, payload: Path, cache_dir: Path, **env: str) -> dict:
    """One fresh process (forked from a warm interpreter that has only imported torch: tests/warm_python.py)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NEURONCC_DISABLE_CACHE", "NEURONCC_REMOTE_CACHE", "NEURONCC_REMOTE_CACHE_KEY")}
    environ.update(NEURONCC_CACHE_DIR=str(cache_dir), NEURONCC_CACHE_ARTIFACTS_KEY=SECRET, **env)
    completed = python.run([sys.executable, str(CHILD), mode, str(payload)], env=environ, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(warm_python, tmp_path_factory) -> tuple[Path, dict]:
    """(the payload file, the saving process's report): a training step compiled with a fresh cache dir."""
    root = tmp_path_factory.mktemp("saved")
    payload = root / "artifacts.bin"
    return payload, _run(warm_python, "save", payload, root / "cache")


def test_the_saving_process_exports_every_graph_it_compiled(saved):
    _, report = saved
    assert report["compiles"] == report["stats"]["cache_misses"] == report["stats"]["graphs_compiled"] >= 2
    # every compiled artifact, plus the graph cache's entry that names them (frontend/graph_cache.py)
    assert report["saved"] == report["entries"] and len(report["saved"]) == report["compiles"] + 1
    assert report["stats"]["graph_cache_stores"] == 1
    assert report["max_difference"] < 1e-5


def test_a_fresh_machine_loaded_with_the_artifacts_compiles_nothing(saved, warm_python, tmp_path):
    payload, first = saved
    report = _run(warm_python.other, "load", payload, tmp_path / "empty-cache")
    assert "error" not in report, report
    assert report["loaded"] == first["saved"] and report["entries"] == first["saved"]
    assert report["compiles"] == 0 and report["stats"]["cache_misses"] == 0
    # the graph cache runs the step from the loaded entries: no AOTAutograd, no import, no compile
    assert report["stats"]["cache_hits"] == first["compiles"] and report["stats"]["graphs_compiled"] == 0
    assert report["stats"]["aot_autograd_runs"] == 0 and report["stats"]["graph_cache_hits"] == 1
    assert report["max_difference"] < 1e-5


def _tampered(data: bytes, where: float) -> bytes:
    """``data`` with one byte of its first neuroncc bundle flipped, ``where`` (0..1) of the way into it, and
    torch's CRC32 of the payload recomputed, as a deliberate tamperer would (the length prefixes around the
    bundle are untouched, so torch's own deserializer still reads the payload and hands it to neuroncc)."""
    start = data.index(MAGIC)
    head = read_head(data[start:])
    length = HEADER.size + head_length_of(data[start:]) + head.payload_size + MAC_SIZE
    position = start + HEADER.size + int((length - HEADER.size - 1) * where)
    body = data[CRC_SIZE:position] + bytes([data[position] ^ 0x20]) + data[position + 1:]
    return zlib.crc32(body).to_bytes(CRC_SIZE, "big") + body


def test_a_tampered_payload_is_refused_in_a_fresh_process(saved, warm_python, tmp_path):
    payload, _ = saved
    tampered = tmp_path / "tampered.bin"
    tampered.write_bytes(_tampered(payload.read_bytes(), 0.6))
    report = _run(warm_python.other, "load", tampered, tmp_path / "empty-cache")
    assert report["error"][0] == "BadBundleError" and "bad signature" in report["error"][1]
    assert report["entries"] == []


@pytest.fixture
def fresh_manager(tmp_path, monkeypatch):
    """This process as a fresh machine: an empty compile cache, torch's artifact list empty."""
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "fresh"))
    monkeypatch.setenv("NEURONCC_CACHE_ARTIFACTS_KEY", SECRET)
    with CacheArtifactManager.with_fresh_cache():
        yield tmp_path / "fresh" / "entries"


@pytest.mark.parametrize("where", [0.0, 0.3, 0.999])
def test_tampering_anywhere_in_the_bundle_is_a_typed_error(saved, fresh_manager, where):
    payload, _ = saved
    with pytest.raises(BadBundleError):
        torch.compiler.load_cache_artifacts(_tampered(payload.read_bytes(), where))
    assert not fresh_manager.exists() or not any(fresh_manager.iterdir())


def test_loading_with_another_secret_or_none_is_refused(saved, fresh_manager, monkeypatch):
    payload, _ = saved
    monkeypatch.setenv("NEURONCC_CACHE_ARTIFACTS_KEY", "another-secret-of-enough-length")
    with pytest.raises(BadBundleError, match="NEURONCC_CACHE_ARTIFACTS_KEY"):
        torch.compiler.load_cache_artifacts(payload.read_bytes())
    monkeypatch.delenv("NEURONCC_CACHE_ARTIFACTS_KEY")
    monkeypatch.delenv("NEURONCC_REMOTE_CACHE_KEY", raising=False)
    with pytest.raises(InputError, match="NEURONCC_CACHE_ARTIFACTS_KEY"):
        torch.compiler.load_cache_artifacts(payload.read_bytes())
    assert not fresh_manager.exists() or not any(fresh_manager.iterdir())


def test_without_a_key_compiles_record_nothing(fresh_manager, monkeypatch):
    monkeypatch.delenv("NEURONCC_CACHE_ARTIFACTS_KEY")
    monkeypatch.delenv("NEURONCC_REMOTE_CACHE_KEY", raising=False)
    model = torch.compile(torch.nn.Linear(4, 3), backend="neuron")
    model(torch.randn(2, 4)).sum().backward()
    assert neuroncc.stats()["graphs_compiled"] >= 2
    saved = torch.compiler.save_cache_artifacts()
    assert saved is None or not saved[1].artifacts.get(ARTIFACT_TYPE)


def test_cache_hits_are_recorded_too(fresh_manager):
    """A warm process (every graph a cache hit) still exports what it used."""
    def run() -> None:
        torch._dynamo.reset()
        torch.compile(torch.nn.Linear(4, 3), backend="neuron")(torch.randn(2, 4))

    run()
    first = torch.compiler.save_cache_artifacts()
    assert first is not None and len(first[1].artifacts[ARTIFACT_TYPE]) == 1
    with CacheArtifactManager.with_fresh_cache():
        neuroncc.reset_stats()
        run()
        assert neuroncc.stats()["cache_hits"] == 1 and neuroncc.stats()["cache_misses"] == 0
        again = torch.compiler.save_cache_artifacts()
    assert again is not None and again[1].artifacts[ARTIFACT_TYPE] == first[1].artifacts[ARTIFACT_TYPE]


def test_a_compile_records_its_entry_without_exporting_it(fresh_manager, monkeypatch, tmp_path):
    """The export waits for the cache's background writer (and the optimized code): it happens when
    save_cache_artifacts() reads the artifact, not inside the compile; an entry that cannot be exported then is
    saved empty and left out on loading, and the rest of the payload still loads."""
    from neuroncc.driver import portable

    exported = []
    export_entry = portable.export_entry

    def counting(cache, key, secret):
        exported.append(key)
        if len(exported) == 1:
            raise OSError("the disk went away")
        return export_entry(cache, key, secret)

    monkeypatch.setattr(portable, "export_entry", counting)
    torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sigmoid()), backend="neuron")(
        torch.randn(2, 4)).sum().backward()
    assert neuroncc.stats()["graphs_compiled"] >= 2 and exported == []
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None and len(exported) == len(saved[1].artifacts[ARTIFACT_TYPE]) >= 3
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "another-machine"))
    with CacheArtifactManager.with_fresh_cache():
        torch.compiler.load_cache_artifacts(saved[0])  # the empty entry is skipped with a warning
    installed = {p.name for p in (tmp_path / "another-machine" / "entries").iterdir()}
    assert installed == set(exported[1:])


def test_a_nan_anywhere_is_the_largest_difference():
    # (the child took builtin max() of the per-tensor differences: max(0.0, nan) is 0.0, so a NaN gradient after
    # a finite loss passed ``< 1e-5``)
    import importlib.util
    spec = importlib.util.spec_from_file_location("cache_artifacts_child", CHILD)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    finite, nan = torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")])
    for compiled in ([finite, nan], [nan, finite]):
        assert math.isnan(child.largest_difference([finite, finite], compiled))
    assert child.largest_difference([finite, finite], [finite, finite + 0.5]) == 0.5
