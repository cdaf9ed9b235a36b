"""The compile cache in one process: hits, misses, damaged entries, permissions, locks, leftovers."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from cache_testing import sample_function, sample_inputs

from neuroncc.ir import interpret
from neuroncc.driver import artifact, cache_locks
from neuroncc.driver.cache import CacheWarning, CompileCache
from neuroncc.driver.process_cache import CACHE_STATS, CacheStats, MemoryTier
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.driver.cache_key import BuildEnvironment
from neuroncc.executors.cpu.threads import default_threads
from neuroncc.driver.compile import compile_graph, make_request


def _assert_runs_like_reference(executable, fn=None):
    fn = fn if fn is not None else sample_function()
    inputs = sample_inputs(fn)
    for out, ref in zip(executable(*inputs), interpret(fn, inputs), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def _only_entry(cache: CompileCache):
    (entry,) = cache.list_entries()
    return entry


def test_second_lookup_hits_without_compiling(cache, compiler, request_for):
    first = cache.get_or_compile(request_for(), compiler)
    second = cache.get_or_compile(request_for(), compiler)
    assert compiler.calls == 1
    assert cache.stats.snapshot() | {"load_seconds": 0} == {
        "hits": 1, "misses": 1, "compiles": 1, "bad_entries": 0, "publish_failures": 0, "uncached": 0,
        "load_seconds": 0, "memory_hits": 0, "remote_hits": 0, "remote_bad_entries": 0, "remote_stores": 0}
    _assert_runs_like_reference(first)
    _assert_runs_like_reference(second)


def test_a_new_cache_object_on_the_same_directory_hits(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    again = CompileCache(cache.root, stats=CacheStats())
    _assert_runs_like_reference(again.get_or_compile(request_for(), compiler))
    assert compiler.calls == 1 and again.stats.hits == 1


def test_a_hit_keeps_the_threads_option(cache, compiler):
    # the cpu executable loaded from the disk runs on the count its options fix, as the build it replaces does
    # (the loader once took no options: the hit followed torch's count instead)
    threads = default_threads() + 1
    request = make_request(sample_function(), target="cpu", options={"threads": threads})
    built = cache.get_or_compile(request, compiler)
    loaded = CompileCache(cache.root, stats=CacheStats()).get_or_compile(request, compiler)
    assert compiler.calls == 1 and loaded is not built
    assert (loaded.threads, loaded.fixed_threads) == (built.threads, built.fixed_threads) == (threads, True)
    _assert_runs_like_reference(loaded)


def test_renamed_graph_hits(cache, compiler, request_for):
    cache.get_or_compile(request_for(sample_function(name="a", hints=True)), compiler)
    renamed = sample_function(name="b", hints=False)
    _assert_runs_like_reference(cache.get_or_compile(request_for(renamed), compiler), renamed)
    assert compiler.calls == 1


@pytest.mark.parametrize("change", ["graph", "constants", "inputs", "options", "pipeline", "neuroncc_version",
                                    "neuroncc_source", "torch_version", "llvmlite_version"])
def test_each_component_changed_alone_misses(cache, compiler, request_for, change):
    cache.get_or_compile(request_for(), compiler)
    fn, kwargs, environment = sample_function(), {}, BuildEnvironment.current()
    if change == "graph":
        fn = sample_function(activation="sigmoid")
    elif change == "constants":
        fn = sample_function(constant_seed=3)
    elif change == "inputs":
        fn = sample_function(batch=3)
    elif change == "options":
        kwargs = {"options": {"unroll": 2}}
    elif change == "pipeline":
        kwargs = {"pipeline": "canonicalize"}
    else:
        environment = dataclasses.replace(environment, **{change: "changed"})
    other = CompileCache(cache.root, environment=environment, stats=cache.stats)
    _assert_runs_like_reference(other.get_or_compile(request_for(fn, **kwargs), compiler), fn)
    assert compiler.calls == 2 and len(cache.list_entries()) == 2


def test_directories_are_private(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    for directory in (cache.root, cache.entries_dir, cache.locks_dir, cache.tmp_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    entry = _only_entry(cache)
    assert stat.S_IMODE((entry.directory / "manifest.json").stat().st_mode) == 0o600


def test_cache_writable_by_others_is_not_used(tmp_path, compiler, request_for):
    root = tmp_path / "shared"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    cache = CompileCache(root, stats=CacheStats())
    with pytest.warns(CacheWarning, match="writable by others"):
        _assert_runs_like_reference(cache.get_or_compile(request_for(), compiler))
    assert cache.stats.uncached == 1 and not (root / "entries").exists()


# ---- damaged entries -------------------------------------------------------------------------------------

def _flip_bit(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _delete(path):
    path.unlink()


DAMAGE = {"bit-flip": _flip_bit, "truncate": _truncate, "delete": _delete}


def _recompiles_with_one_warning(cache, compiler, request, match=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executable = cache.get_or_compile(request, compiler)
    cache_warnings = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(cache_warnings) == 1, [str(w.message) for w in caught]
    if match is not None:
        assert match in str(cache_warnings[0].message)
    _assert_runs_like_reference(executable)
    assert compiler.calls == 2 and cache.stats.bad_entries == 1
    # ... and the entry was replaced: the next lookup is a quiet, verified hit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_runs_like_reference(cache.get_or_compile(request, compiler))
    assert compiler.calls == 2
    assert cache.verify_entry(_only_entry(cache)) is None
    assert list(cache.tmp_dir.iterdir()) == []


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_file_is_a_miss_with_one_warning(cache, compiler, request_for, damage):
    cache.get_or_compile(request_for(), compiler)
    entry = _only_entry(cache)
    names = sorted(p.relative_to(entry.directory) for p in entry.directory.rglob("*") if p.is_file())
    if damage == "bit-flip":  # a hit hashes the files it reads; the others' sizes (test_artifact.py's hit tests)
        names = [name for name in names if name.as_posix() not in ("stages.nir", "runtime.json")]
    for index, name in enumerate(names):  # every file of the entry, one at a time
        if index:
            compiler.calls, cache.stats.bad_entries = 1, 0
        DAMAGE[damage](entry.directory / name)
        _recompiles_with_one_warning(cache, compiler, request_for())


def test_same_size_edit_that_still_parses_is_caught(cache, compiler, request_for):
    """Only the sha256 check stands between this edit and a wrong result: relu -> sign parses and runs."""
    cache.get_or_compile(request_for(), compiler)
    graph = _only_entry(cache).directory / "graph.nir"
    text = graph.read_text()
    assert " relu " in text
    graph.write_text(text.replace(" relu ", " sign "))
    _recompiles_with_one_warning(cache, compiler, request_for(), match="sha256 mismatch")


def test_a_cpu_hit_takes_the_plans_function_hash_from_the_checked_artifact(cache, compiler, monkeypatch):
    """The plan's hash of the graph is not computed again on a hit (the sha256 checks above stand for it);
    loading an executable's files outside an artifact still computes it (tests/codegen/test_launcher.py)."""
    from neuroncc.driver.compile import make_request
    from neuroncc.executors.cpu import launcher

    cache.get_or_compile(make_request(sample_function(), target="cpu"), compiler)

    def refuse(fn):
        raise AssertionError("function_hash computed on a hit")

    monkeypatch.setattr(launcher, "function_hash", refuse)
    again = CompileCache(cache.root, stats=CacheStats())  # no memory tier: loaded from the disk
    _assert_runs_like_reference(again.get_or_compile(make_request(sample_function(), target="cpu"), compiler))
    assert compiler.calls == 1 and again.stats.hits == 1 and again.stats.bad_entries == 0


def test_other_format_version_is_a_miss_with_one_warning(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    manifest = _only_entry(cache).directory / "manifest.json"
    fields = json.loads(manifest.read_text())
    fields["format_version"] = 0
    manifest.write_text(json.dumps(fields))
    _recompiles_with_one_warning(cache, compiler, request_for(), match="format version 0")


def test_entry_without_manifest_is_a_miss_with_one_warning(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    (_only_entry(cache).directory / "manifest.json").unlink()
    _recompiles_with_one_warning(cache, compiler, request_for(), match="missing")


def test_entry_under_the_wrong_key_is_a_miss(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    other = request_for(options={"x": 1})
    os.rename(_only_entry(cache).directory, cache.entry_dir(cache.key_of(other).key))
    compiler.calls = 1
    with pytest.warns(CacheWarning, match="not its directory name"):
        _assert_runs_like_reference(cache.get_or_compile(other, compiler))
    assert compiler.calls == 2


def test_loader_failure_is_a_miss_not_a_crash(cache, compiler, request_for, monkeypatch, target):
    cache.get_or_compile(request_for(), compiler)

    def broken_loader(directory, fn, options, files):
        raise RuntimeError("loader bug")

    codec = dataclasses.replace(artifact.ARTIFACT_CODECS[target], load=broken_loader)
    monkeypatch.setitem(artifact.ARTIFACT_CODECS, target, codec)
    with pytest.warns(CacheWarning, match="RuntimeError: loader bug"):
        _assert_runs_like_reference(cache.get_or_compile(request_for(), compiler))
    assert compiler.calls == 2


# ---- publishing, uncacheable requests, locks, leftovers --------------------------------------------------

def test_failed_save_warns_and_still_returns_the_executable(cache, compiler, request_for, monkeypatch, target):
    def full_disk(executable, directory):
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(artifact.ARTIFACT_CODECS, target,
                        dataclasses.replace(artifact.ARTIFACT_CODECS[target], save=full_disk))
    with pytest.warns(CacheWarning, match="No space left"):
        _assert_runs_like_reference(cache.get_or_compile(request_for(), compiler))
    assert cache.stats.publish_failures == 1 and cache.list_entries() == []
    assert list(cache.tmp_dir.iterdir()) == []


def test_unkeyable_options_compile_uncached(cache, compiler, request_for):
    _assert_runs_like_reference(cache.get_or_compile(request_for(options={"hook": object()}), compiler))
    assert cache.stats.uncached == 1 and not cache.root.exists()


def test_target_without_codec_compiles_uncached(cache, compiler, request_for, monkeypatch, target):
    monkeypatch.delitem(artifact.ARTIFACT_CODECS, target)
    _assert_runs_like_reference(cache.get_or_compile(request_for(), compiler))
    cache.get_or_compile(request_for(), compiler)
    assert compiler.calls == 2 and cache.stats.uncached == 2


def test_lock_held_too_long_compiles_without_the_cache(tmp_path, compiler, request_for):
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), lock_timeout_s=0.05)
    request = request_for()
    assert cache.ensure_usable()
    with cache.key_lock(cache.key_of(request).key):  # another holder (a separate open file description)
        with pytest.warns(CacheWarning, match="timed out"):
            _assert_runs_like_reference(cache.get_or_compile(request, compiler))
    assert cache.list_entries() == [] and compiler.calls == 1


def test_a_long_wait_for_a_compile_lock_is_said(tmp_path, compiler, request_for, monkeypatch):
    # a holder that never lets go: the waiter said nothing until its timeout (600 s by default)
    monkeypatch.setattr(cache_locks, "WAIT_NOTICE_SECONDS", 0.02)
    cache = CompileCache(tmp_path / "cache", stats=CacheStats(), lock_timeout_s=0.3)
    request = request_for()
    assert cache.ensure_usable()
    with cache.key_lock(cache.key_of(request).key), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _assert_runs_like_reference(cache.get_or_compile(request, compiler))
    messages = [str(w.message) for w in said if issubclass(w.category, CacheWarning)]
    assert len(messages) == 2, messages
    assert messages[0].startswith("waiting for the compile lock ") and "another process is compiling" in messages[0]
    assert "after 0.3 s this process compiles without the cache" in messages[0] and "timed out" in messages[1]


def test_leftovers_of_dead_processes_are_collected(cache, compiler, request_for):
    assert cache.ensure_usable()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    (cache.tmp_dir / f"0123456789abcdef.{dead_pid}.xyz").mkdir()
    (cache.tmp_dir / f"0123456789abcdef.{dead_pid}.xyz" / "graph.nir").write_text("partial")
    (cache.tmp_dir / f"trash.{dead_pid}.abc").mkdir()
    live = cache.tmp_dir / f"0123456789abcdef.{os.getpid()}.live"
    live.mkdir()
    cache.get_or_compile(request_for(), compiler)
    assert sorted(p.name for p in cache.tmp_dir.iterdir()) == [live.name]


def test_clear_keeps_held_locks(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    key = cache.key_of(request_for()).key
    with cache.key_lock(key):
        assert cache.clear()[0] == 1
        assert (cache.locks_dir / f"{key}.lock").exists()
    cache.clear()
    assert list(cache.locks_dir.iterdir()) == [] and cache.list_entries() == []


def test_clear_older_than(cache, compiler, request_for):
    cache.get_or_compile(request_for(), compiler)
    import time

    assert cache.clear(older_than_s=3600) == (0, 0)
    removed, freed = cache.clear(older_than_s=3600, now=time.time() + 7200)
    assert removed == 1 and freed > 0 and cache.list_entries() == []


# ---- the driver's environment boundary -------------------------------------------------------------------

def test_compile_graph_caches_in_neuroncc_cache_dir(tmp_path, monkeypatch, target):
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "from-env"))
    before = CACHE_STATS.snapshot()
    fn = sample_function()
    _assert_runs_like_reference(compile_graph(fn, target=target))
    _assert_runs_like_reference(compile_graph(sample_function(hints=False), target=target))
    after = CACHE_STATS.snapshot()
    assert (after["compiles"] - before["compiles"], after["hits"] - before["hits"]) == (1, 1)
    PUBLISHER.flush()  # the environment's cache publishes in the background
    assert len(list((tmp_path / "from-env" / "entries").iterdir())) == 1


def test_compile_graph_without_cache(tmp_path, monkeypatch, target):
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("NEURONCC_DISABLE_CACHE", "1")
    _assert_runs_like_reference(compile_graph(sample_function(), target=target))
    monkeypatch.delenv("NEURONCC_DISABLE_CACHE")
    _assert_runs_like_reference(compile_graph(sample_function(), target=target, cache=None))
    assert not (tmp_path / "from-env").exists()


def test_default_cache_dir_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("NEURONCC_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert CompileCache.from_environ(os.environ).root == tmp_path / ".cache" / "neuroncc"


def test_stats_reset_and_snapshot():
    stats = CacheStats()
    stats.add("hits")
    stats.add("load_seconds", 0.25)
    assert stats.snapshot()["hits"] == 1 and stats.snapshot()["load_seconds"] == 0.25
    stats.reset()
    assert stats.snapshot() == dict.fromkeys(stats.snapshot(), 0)


# ---- the memory tier -------------------------------------------------------------------------------------


def test_the_memory_tier_returns_the_loaded_executable_without_reading_the_disk(tmp_path, compiler, request_for):
    memory = MemoryTier()
    first_cache = CompileCache(tmp_path / "cache", stats=CacheStats(), memory=memory)
    first = first_cache.get_or_compile(request_for(), compiler)
    shutil.rmtree(tmp_path / "cache" / "entries")  # nothing left on disk to load
    again = CompileCache(tmp_path / "cache", stats=CacheStats(), memory=memory)
    assert again.get_or_compile(request_for(), compiler) is first
    assert compiler.calls == 1 and again.stats.memory_hits == again.stats.hits == 1
    # another directory is another namespace: it compiles (or loads) on its own
    other = CompileCache(tmp_path / "other", stats=CacheStats(), memory=memory)
    assert other.get_or_compile(request_for(), compiler) is not first and compiler.calls == 2


def test_the_memory_tier_keeps_the_most_recently_used():
    memory = MemoryTier(capacity=2)
    for name in "abc":
        memory.put((Path("/d"), name), name)
        memory.get((Path("/d"), "a"))  # keep "a" in use
    assert [memory.get((Path("/d"), n)) for n in "abc"] == ["a", None, "c"]


def test_a_miss_is_explained_by_the_closest_entry_of_its_own_target(cache, compiler, request_for, target):
    cache.get_or_compile(request_for(), compiler)
    key = cache.key_of(request_for(sample_function(batch=3)))
    assert cache.explain_miss(key, "mlp", target) == (_only_entry(cache).manifest.graph_name, ("graph", "inputs"))
    # an entry of another kind (a graph cache entry is "aot:<target>") differs in everything: never the closest
    assert cache.explain_miss(key, "mlp", "aot:" + target) == (None, ())
