"""The cache across processes: a second process hits, concurrent processes compile once, killed processes
leave nothing wrong behind.

The sequential runs fork from a warm interpreter (tests/warm_python.py); the concurrent processes and the test
of the interpreter waiting for its writer at exit run new interpreters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cache_testing import sample_function, write_nir

from neuroncc.driver import artifact
from warm_python import WarmPython

HERE = Path(__file__).parent
CHILD = HERE / "cache_child.py"


@pytest.fixture
def nir_file(tmp_path) -> Path:
    return write_nir(sample_function(), tmp_path / "mlp.nir")


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


def _child_env(cache_dir: Path) -> dict[str, str]:
    python_path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, NEURONCC_CACHE_DIR=str(cache_dir), PYTHONPATH=python_path)
    env.pop("NEURONCC_DISABLE_CACHE", None)
    return env


def _command(nir: Path, target: str, *extra: str) -> list[str]:
    return [sys.executable, str(CHILD), str(nir), target, *extra]


def _run_child(nir: Path, target: str, cache_dir: Path, *extra: str,
               python: WarmPython | None = None) -> subprocess.CompletedProcess:
    """The child in a new interpreter, or forked from ``python`` (tests/warm_python.py: torch, which the cpu
    target's BLAS calls import, already imported; the script's directory is its sys.path[0] either way)."""
    if python is not None:
        env = {k: v for k, v in os.environ.items() if k != "NEURONCC_DISABLE_CACHE"}
        return python.run(_command(nir, target, *extra), env={**env, "NEURONCC_CACHE_DIR": str(cache_dir)},
                          timeout=120)
    return subprocess.run(_command(nir, target, *extra), env=_child_env(cache_dir), capture_output=True,
                          text=True, timeout=120)


def _report(completed: subprocess.CompletedProcess) -> dict:
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_second_process_loads_without_compiling(nir_file, cache_dir, target, warm_python):
    first = _report(_run_child(nir_file, target, cache_dir, python=warm_python))
    second = _report(_run_child(nir_file, target, cache_dir, python=warm_python.other))
    assert first == {"ok": True, "compiles": 1, "hits": 0, "bad_entries": 0, "warnings": []}
    assert second == {"ok": True, "compiles": 0, "hits": 1, "bad_entries": 0, "warnings": []}


def test_concurrent_processes_on_a_cold_cache_compile_once(nir_file, cache_dir, target, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    count = 8
    # whoever wins the lock stalls 0.3 s in the compile, so the others really wait on it
    processes = [
        subprocess.Popen(_command(nir_file, target, "--barrier", f"{barrier}:{count}", "--stall-at", "compile:0.3"),
                         env=_child_env(cache_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    reports = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=120)
        reports.append(_report(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)))
    assert all(r["ok"] and not r["warnings"] for r in reports), reports
    assert sum(r["compiles"] for r in reports) == 1
    assert sum(r["hits"] for r in reports) == count - 1
    assert len(list((cache_dir / "entries").iterdir())) == 1
    assert list((cache_dir / "tmp").iterdir()) == []


@pytest.mark.parametrize("step, published", [
    ("compiled", False),  # lock held, nothing written
    ("graph-written", False),  # half of the artifact written in tmp/
    ("artifact-written", False),  # all written and synced, not yet renamed into place
    ("published", True),  # renamed into place, lock still held
])
def test_process_killed_while_publishing(nir_file, cache_dir, target, step, published, warm_python):
    killed = _run_child(nir_file, target, cache_dir, "--crash-at", step, python=warm_python)
    assert killed.returncode == -signal.SIGKILL
    entries = list((cache_dir / "entries").iterdir())
    assert len(entries) == (1 if published else 0)
    # the next process is not blocked by the dead one's lock, gets a correct result, and recompiles
    # exactly when nothing had been published
    after = _report(_run_child(nir_file, target, cache_dir, python=warm_python.other))
    assert after == {"ok": True, "compiles": 0 if published else 1, "hits": 1 if published else 0,
                     "bad_entries": 0, "warnings": []}
    if not published:  # publishing collected the dead process's half-written temp dir
        assert list((cache_dir / "tmp").iterdir()) == []


@pytest.mark.parametrize("step, published", [
    ("graph-written", False),  # the writer thread killed halfway through the artifact
    ("artifact-written", False),  # all written, not yet renamed into place
    ("published", True),  # renamed into place, the writer still holds the lock
])
def test_process_killed_while_its_writer_thread_publishes(nir_file, cache_dir, step, published, warm_python):
    killed = _run_child(nir_file, "cpu", cache_dir, "--background", "--crash-at", step, python=warm_python)
    assert killed.returncode == -signal.SIGKILL
    assert len(list((cache_dir / "entries").iterdir())) == (1 if published else 0)
    after = _report(_run_child(nir_file, "cpu", cache_dir, python=warm_python.other))
    assert after == {"ok": True, "compiles": 0 if published else 1, "hits": 1 if published else 0,
                     "bad_entries": 0, "warnings": []}


def test_a_process_exits_only_after_its_writer_has_published(nir_file, cache_dir):
    """The child is done (result checked, report printed) while its writer still stalls before the rename;
    the interpreter waits for the writer, so the entry is whole on the disk when the process is gone."""
    first = _report(_run_child(nir_file, "cpu", cache_dir, "--background", "--stall-at", "artifact-written:1"))
    assert first == {"ok": True, "compiles": 1, "hits": 0, "bad_entries": 0, "warnings": []}
    (entry,) = (cache_dir / "entries").iterdir()
    artifact.verify_artifact(entry)
    assert list((cache_dir / "tmp").iterdir()) == []
    second = _report(_run_child(nir_file, "cpu", cache_dir))
    assert second == {"ok": True, "compiles": 0, "hits": 1, "bad_entries": 0, "warnings": []}
