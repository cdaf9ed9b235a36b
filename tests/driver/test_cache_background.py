"""Publishing cache entries on the writer thread (driver.publisher): the compile returns first, readers of the
key in this process wait for the write, and an entry costs one fsync. (Across processes, killed writers and the
wait at exit: test_cache_processes.py.)"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest
from cache_testing import sample_function, sample_inputs

from neuroncc.driver import artifact
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.ir import interpret

GATE_TIMEOUT_S = 10.0


class Gate:
    """A cache checkpoint that holds whichever thread reaches ``step`` until :meth:`open` (or the timeout)."""

    def __init__(self, step: str):
        self.step, self.opened, self.reached = step, threading.Event(), threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, step: str) -> None:
        if step == self.step:
            self.thread = threading.current_thread()
            self.reached.set()
            self.opened.wait(GATE_TIMEOUT_S)

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def target():
    return "cpu"


def _runs_like_reference(executable) -> None:
    fn = sample_function()
    inputs = sample_inputs(fn)
    for out, ref in zip(executable(*inputs), interpret(fn, inputs), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_the_compile_returns_before_its_entry_is_written(tmp_path, compiler, request_for):
    gate = Gate("graph-written")
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), checkpoint=gate, publish_in_background=True)
    try:
        executable = cache.get_or_compile(request_for(), compiler)
        _runs_like_reference(executable)  # usable while the writer is still halfway through the artifact
        assert gate.reached.wait(GATE_TIMEOUT_S) and gate.thread is not threading.current_thread()
        assert not gate.opened.is_set() and list(cache.entries_dir.iterdir()) == []
    finally:
        gate.open()
    PUBLISHER.flush()
    (entry,) = cache.entries_dir.iterdir()
    assert artifact.verify_artifact(entry).key == entry.name


def test_a_reader_of_the_key_in_this_process_waits_for_the_write(tmp_path, compiler, request_for):
    gate = Gate("artifact-written")  # everything written in tmp/, not yet renamed into place
    writer = CompileCache(tmp_path / "cache", stats=CacheStats(), checkpoint=gate, publish_in_background=True)
    reader = CompileCache(tmp_path / "cache", stats=CacheStats())  # another object: no shared memory tier
    results: dict[str, object] = {}

    def read() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results["executable"] = reader.get_or_compile(request_for(), compiler)
        results["warnings"] = [str(w.message) for w in caught]

    try:
        writer.get_or_compile(request_for(), compiler)
        assert gate.reached.wait(GATE_TIMEOUT_S)
        thread = threading.Thread(target=read)
        thread.start()
        thread.join(0.3)
        assert thread.is_alive(), "the reader did not wait for the pending write"
    finally:
        gate.open()
    thread.join(GATE_TIMEOUT_S)
    assert results["warnings"] == [] and compiler.calls == 1
    assert reader.stats.snapshot()["hits"] == 1 and reader.stats.snapshot()["bad_entries"] == 0
    _runs_like_reference(results["executable"])


def test_a_listing_in_this_process_waits_for_pending_writes(tmp_path, compiler, request_for):
    gate = Gate("graph-written")
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), checkpoint=gate, publish_in_background=True)
    cache.get_or_compile(request_for(), compiler)
    assert gate.reached.wait(GATE_TIMEOUT_S)
    threading.Timer(0.2, gate.open).start()
    (entry,) = cache.list_entries()
    assert entry.problem is None and cache.verify_entry(entry) is None


@pytest.mark.parametrize("background", [False, True])
def test_an_entry_is_published_with_one_fsync(tmp_path, compiler, request_for, monkeypatch, background):
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), publish_in_background=background)
    cache.get_or_compile(request_for(), compiler)
    PUBLISHER.flush()
    assert len(synced) == 1
    (entry,) = cache.entries_dir.iterdir()
    artifact.verify_artifact(entry)


def test_a_failed_background_write_warns_and_loses_only_the_entry(tmp_path, compiler, request_for, monkeypatch):
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), publish_in_background=True)

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("neuroncc.driver.cache.write_artifact", broken_save)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _runs_like_reference(cache.get_or_compile(request_for(), compiler))
        PUBLISHER.flush()
    assert any("could not save cache entry" in str(w.message) and "disk full" in str(w.message) for w in caught)
    assert cache.stats.snapshot()["publish_failures"] == 1 and list(cache.entries_dir.iterdir()) == []
    # the lock was released: the next lookup compiles again instead of timing out
    monkeypatch.undo()
    again = CompileCache(tmp_path / "cache", stats=CacheStats(), lock_timeout_s=5)
    _runs_like_reference(again.get_or_compile(request_for(), compiler))
    assert compiler.calls == 2 and again.stats.snapshot()["compiles"] == 1
