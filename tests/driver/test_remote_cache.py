"""The remote tier of the compile cache against a real redis-server on a free loopback port (no mocks):
another process (another machine: its own empty local cache) reuses an artifact without compiling; tampered,
truncated, foreign-key and other-version values are refused, recompiled and replaced; a server killed or hung
mid-run leaves every compile working; processes racing on a cold key on two "machines" compile it once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from cache_testing import read_nir, sample_function, sample_inputs, write_nir
from redis_testing import redis_server

from neuroncc.driver.artifact import verify_artifact
from neuroncc.driver.bundle import BUNDLE_VERSION, HEADER, MAC_SIZE, sign
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.compile import compile_graph, make_request
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.remote import ARTIFACT_PREFIX, LOCK_PREFIX, RemoteTier
from neuroncc.driver.remote_settings import RemoteSettings
from neuroncc.executors.cpu.launcher import CODE_FILES
from neuroncc.ir import interpret

pytest.importorskip("redis", reason="the redis client is part of the test extra: pip install -e '.[test]'")

HERE = Path(__file__).parent
CHILD = HERE / "remote_child.py"
SECRET = "0123456789abcdef0123456789abcdef"
#: Most tests use the interpreter's artifacts (a child process then needs neither torch nor LLVM; the bundle and
#: its checks do not depend on the target); the first test ships native code (cpu: object code) across.
TARGET = "interp"


@pytest.fixture
def server(tmp_path):
    with redis_server(tmp_path / "redis") as running:
        yield running


@pytest.fixture
def nir_files(tmp_path) -> list[Path]:
    return [write_nir(sample_function(batch=batch), tmp_path / f"mlp{batch}.nir") for batch in (4, 5, 6)]


def _env(cache_dir: Path, server, secret: str = SECRET, **extra: str) -> dict[str, str]:
    python_path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, NEURONCC_CACHE_DIR=str(cache_dir), PYTHONPATH=python_path,
               NEURONCC_REMOTE_CACHE=server.url, NEURONCC_REMOTE_CACHE_KEY=secret, **extra)
    env.pop("NEURONCC_DISABLE_CACHE", None)
    return env


def _command(files, *extra: str, target: str = TARGET) -> list[str]:
    return [sys.executable, str(CHILD), *map(str, files), "--target", target, *extra]


def _run(files, env, *extra: str, target: str = TARGET) -> dict:
    completed = subprocess.run(_command(files, *extra, target=target), env=env, capture_output=True, text=True,
                               timeout=180)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _remote_warnings(report: dict) -> list[str]:
    return [w for w in report["warnings"] if "remote" in w]


# ---- across processes ------------------------------------------------------------------------------------


def test_a_process_with_an_empty_local_cache_reuses_another_machines_artifact(tmp_path, server, nir_files):
    first = _run(nir_files[:1], _env(tmp_path / "machine-a", server), target="cpu")
    assert (first["ok"], first["compiles"], first["remote_stores"], first["warnings"]) == (True, 1, 1, [])
    second = _run(nir_files[:1], _env(tmp_path / "machine-b", server), target="cpu")
    assert (second["ok"], second["compiles"], second["remote_hits"], second["warnings"]) == (True, 0, 1, [])
    # the remote hit was written to machine B's local cache, where it is an ordinary, intact entry
    (entry,) = (tmp_path / "machine-b" / "entries").iterdir()
    assert verify_artifact(entry).target == "cpu" and any(name in verify_artifact(entry).files
                                                          for name in CODE_FILES.values())


def _tamper(value: bytes) -> bytes:
    middle = len(value) // 2  # inside the files (object code, graph), well past the head
    return value[:middle] + bytes([value[middle] ^ 0x01]) + value[middle + 1:]


def _truncate(value: bytes) -> bytes:
    return value[:len(value) * 2 // 3]


def _foreign_key(value: bytes, key: str) -> bytes:
    body = value[:-MAC_SIZE]
    return body + sign(b"another-secret-that-is-long-enough", key, body)


def _other_version(value: bytes, key: str) -> bytes:
    magic, _version, head_length = HEADER.unpack_from(value)
    body = HEADER.pack(magic, BUNDLE_VERSION + 1, head_length) + value[HEADER.size:-MAC_SIZE]
    return body + sign(SECRET.encode(), key, body)  # correctly signed by a newer neuroncc with the same key


DAMAGES = {  # name -> (damage(value, key), the reason the warning gives)
    "tampered": (lambda value, key: _tamper(value), "bad signature"),
    "truncated": (lambda value, key: _truncate(value), "truncated"),
    "foreign-key": (_foreign_key, "bad signature"),
    "other-version": (_other_version, f"bundle format version {BUNDLE_VERSION + 1}"),
}


def test_bad_remote_values_are_refused_recompiled_and_replaced(tmp_path, server):
    files = [write_nir(sample_function(batch=batch), tmp_path / f"mlp{batch}.nir") for batch in range(4, 8)]
    _run(files, _env(tmp_path / "machine-a", server))
    client = server.client()
    names = {}  # damage -> key
    for file, (damage_name, (damage, _reason)) in zip(files, DAMAGES.items()):
        fn = read_nir(file)
        key = CompileCache(tmp_path / "scratch").key_of(make_request(fn, target=TARGET)).key
        name = ARTIFACT_PREFIX + key
        client.set(name, damage(client.get(name), key))
        names[damage_name] = key

    refused = _run(files, _env(tmp_path / "machine-b", server))
    assert refused["ok"] and refused["compiles"] == 4 and refused["remote_hits"] == 0
    assert refused["remote_bad_entries"] == 4 and refused["remote_stores"] == 4
    assert len(refused["warnings"]) == 4, refused["warnings"]
    for damage_name, (_damage, reason) in DAMAGES.items():
        (warning,) = [w for w in refused["warnings"] if names[damage_name][:16] in w]
        assert warning.startswith("refusing remote cache entry") and reason in warning, (damage_name, warning)
    # the recompiled artifacts replaced the bad values: a third machine hits them all
    healed = _run(files, _env(tmp_path / "machine-c", server))
    assert (healed["compiles"], healed["remote_hits"], healed["warnings"]) == (0, 4, [])


def test_a_reader_with_another_key_never_uses_the_entries(tmp_path, server, nir_files):
    _run(nir_files[:1], _env(tmp_path / "machine-a", server))
    other = _run(nir_files[:1], _env(tmp_path / "machine-b", server, secret="a-different-secret-of-32-chars!!"))
    assert other["ok"] and other["compiles"] == 1 and other["remote_hits"] == 0
    assert "bad signature" in other["warnings"][0]


def test_a_server_killed_mid_run_leaves_every_compile_working(tmp_path, server, nir_files):
    control = tmp_path / "control"
    control.mkdir()
    child = subprocess.Popen(_command(nir_files, "--pause-after-first", str(control)),
                             env=_env(tmp_path / "machine-a", server), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (control / "paused").exists():
            assert child.poll() is None and time.monotonic() < deadline, "the child did not reach its pause"
            time.sleep(0.02)
        server.kill()
        (control / "go").touch()
        stdout, stderr = child.communicate(timeout=180)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["ok"] and report["compiles"] == 3 and report["remote_stores"] == 1
    remote = _remote_warnings(report)
    assert len(remote) == 1 and "unavailable" in remote[0] and "local cache only" in remote[0], report["warnings"]


def test_racing_processes_on_two_machines_compile_a_cold_key_once(tmp_path, server, nir_files):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    per_machine, machines = 4, ("machine-a", "machine-b")
    count = per_machine * len(machines)
    # whoever compiles stalls 0.5 s first, so that every other process really waits for it
    processes = [subprocess.Popen(_command(nir_files[:1], "--barrier", f"{barrier}:{count}", "--stall-at-compile",
                                           "0.5"),
                                  env=_env(tmp_path / machine, server), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for machine in machines for _ in range(per_machine)]
    reports = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    assert all(r["ok"] and not r["warnings"] for r in reports), reports
    assert sum(r["compiles"] for r in reports) == 1
    assert sum(r["remote_hits"] for r in reports) == 1  # the other machine fetched it once, then hit locally
    assert sum(r["hits"] for r in reports) == count - 1
    for machine in machines:
        assert len(list((tmp_path / machine / "entries").iterdir())) == 1


# ---- in this process -------------------------------------------------------------------------------------


def _cache(directory: Path, tier: RemoteTier) -> CompileCache:
    return CompileCache(directory, stats=CacheStats(), remote=tier)


def test_a_hung_server_costs_one_bounded_timeout_per_process(tmp_path, server):
    tier = RemoteTier(RemoteSettings(server.url, SECRET.encode(), timeout_s=0.5))
    cache = _cache(tmp_path / "cache", tier)
    server.pause()
    functions = [sample_function(batch=batch) for batch in (4, 5, 6)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        for fn in functions:
            outputs = compile_graph(fn, target="interp", cache=cache)(*sample_inputs(fn))
            assert all((out == ref).all() for out, ref in zip(outputs, interpret(fn, sample_inputs(fn))))
        elapsed = time.monotonic() - start
    assert not tier.available
    assert len([w for w in caught if "unavailable" in str(w.message)]) == 1
    assert cache.stats.compiles == 3
    assert elapsed < 0.5 * 2 + 2.0, elapsed  # one timeout (not one per compile or per call) plus the compiles


def test_a_dead_lock_holder_delays_others_by_its_lease_at_most(tmp_path, server):
    tier = RemoteTier(RemoteSettings(server.url, SECRET.encode(), lock_lease_s=0.6))
    cache = _cache(tmp_path / "cache", tier)
    fn = sample_function()
    key = cache.key_of(make_request(fn, target="interp")).key
    server.client().set(LOCK_PREFIX + key, "a holder that died", px=600)
    start = time.monotonic()
    compile_graph(fn, target="interp", cache=cache)
    assert 0.3 < time.monotonic() - start < 5
    assert cache.stats.compiles == 1 and cache.stats.remote_stores == 1
    assert not server.client().exists(LOCK_PREFIX + key)  # released after publishing


def test_without_a_key_the_remote_tier_is_off_with_one_notice(tmp_path, server, monkeypatch):
    from neuroncc.driver import remote_settings
    from neuroncc.driver.cache import cache_from_environ

    monkeypatch.setattr(remote_settings, "_NOTICES", set())
    environ = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache"), "NEURONCC_REMOTE_CACHE": server.url}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        caches = [cache_from_environ(environ) for _ in range(3)]
        short = cache_from_environ({**environ, "NEURONCC_REMOTE_CACHE_KEY": "short"})
    assert all(c is not None and c.remote is None for c in [*caches, short])
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 2, messages
    assert "NEURONCC_REMOTE_CACHE_KEY is not set" in messages[0] and "shorter than 16" in messages[1]
    with_key = cache_from_environ({**environ, "NEURONCC_REMOTE_CACHE_KEY": SECRET})
    assert with_key.remote is not None and with_key.remote.settings.timeout_s == 2.0


def test_the_password_of_the_url_never_appears_in_messages(tmp_path):
    tier = RemoteTier(RemoteSettings("redis://:hunter2@127.0.0.1:1/0", SECRET.encode(), timeout_s=0.5))
    with pytest.warns(CacheWarning) as caught:
        assert tier.fetch("0" * 64) is None
    assert "hunter2" not in str(caught[0].message) and "***" in str(caught[0].message)
