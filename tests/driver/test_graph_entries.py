"""The graph cache's entries (driver.graph_entries) written by the cache's background writer: the caller (the
backward graph's compile) returns before the entry's files and fsync, the entry is whole or absent, this process's
readers of the key wait for the write, and a failed write warns, leaves no entry and releases the key's lock."""

from __future__ import annotations

import threading
import warnings

import pytest

from neuroncc.driver import graph_entries
from neuroncc.driver.artifact import verify_artifact
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.graph_entries import graph_key, read_graph_entry, write_graph_entry
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.publisher import PUBLISHER

GATE_TIMEOUT_S = 10.0
PAYLOAD = {"format": 1, "kind": "inference", "forward": {"artifact": "0" * 64}}


@pytest.fixture
def key():
    return graph_key([("graph", "graph() { return x }", None)], "cpu")


def _write(cache: CompileCache, key) -> bool:
    return write_graph_entry(cache, key, graph_name="g", target="cpu", inputs=[("float32", [2, 3], [3, 1])],
                             options={"target": "cpu"}, payload=PAYLOAD, timings={"compile": 0.5},
                             neuroncc_version="test")


def test_the_entry_is_written_on_the_writer_while_the_caller_goes_on(tmp_path, key, monkeypatch):
    reached, opened, threads = threading.Event(), threading.Event(), []
    real_fsync = graph_entries.fsync_directory

    def gated_fsync(directory) -> None:  # the entry is renamed into place; hold the writer before its fsync
        threads.append(threading.current_thread())
        reached.set()
        opened.wait(GATE_TIMEOUT_S)
        real_fsync(directory)

    monkeypatch.setattr(graph_entries, "fsync_directory", gated_fsync)
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), publish_in_background=True)
    reader: threading.Thread | None = None
    payloads: list[object] = []
    try:
        assert _write(cache, key)
        assert reached.wait(GATE_TIMEOUT_S) and threads == [threads[0]] and threads[0] is not threading.current_thread()
        reader = threading.Thread(target=lambda: payloads.append(read_graph_entry(cache, key.key, "cpu")))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive(), "a reader of the key in this process did not wait for the pending write"
    finally:
        opened.set()
    reader.join(GATE_TIMEOUT_S)
    assert payloads == [PAYLOAD]
    assert verify_artifact(cache.entries_dir / key.key).target == "aot:cpu"
    assert cache.stats.snapshot()["publish_failures"] == 0


def test_a_failed_background_write_warns_and_leaves_no_entry(tmp_path, key, monkeypatch):
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), publish_in_background=True)

    def full_disk(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(graph_entries, "write_new_file", full_disk)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _write(cache, key)  # handed to the writer
        PUBLISHER.flush()
    assert any("could not save graph cache entry" in str(w.message) and "disk full" in str(w.message)
               for w in caught)
    assert cache.stats.snapshot()["publish_failures"] == 1
    assert list(cache.entries_dir.iterdir()) == [] and list(cache.tmp_dir.iterdir()) == []
    monkeypatch.undo()  # the key's lock was released: the next write takes it instead of timing out
    again = CompileCache(tmp_path / "cache", stats=CacheStats(), lock_timeout_s=5)
    assert _write(again, key) and read_graph_entry(again, key.key, "cpu") == PAYLOAD


def test_a_cache_without_the_writer_writes_before_returning(tmp_path, key, monkeypatch):
    cache = CompileCache(tmp_path / "cache", stats=CacheStats())
    assert _write(cache, key)
    assert verify_artifact(cache.entries_dir / key.key).graph_name == "g"

    def full_disk(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(graph_entries, "write_new_file", full_disk)
    other = graph_key([("graph", "another graph", None)], "cpu")
    with pytest.warns(UserWarning, match="could not save graph cache entry"):
        assert not _write(cache, other)
    assert not (cache.entries_dir / other.key).exists()
