"""``neuroncc cache list | explain | verify | clear --remote`` against a real redis-server on a free loopback port."""

from __future__ import annotations

import pytest
from cache_testing import sample_function
from redis_testing import free_port, redis_server

from neuroncc.cli import main
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.compile import compile_graph, make_request
from neuroncc.driver.remote import ARTIFACT_PREFIX, RemoteTier
from neuroncc.driver.remote_settings import RemoteSettings

pytest.importorskip("redis", reason="the redis client is part of the test extra: pip install -e '.[test]'")

SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def server(tmp_path):
    with redis_server(tmp_path / "redis") as running:
        yield running


@pytest.fixture
def remote_keys(tmp_path, server, monkeypatch) -> dict[str, str]:
    """Two graphs published to the server (graph name -> key); the environment points the CLI at it."""
    monkeypatch.setenv("NEURONCC_REMOTE_CACHE", server.url)
    monkeypatch.setenv("NEURONCC_REMOTE_CACHE_KEY", SECRET)
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "local"))
    cache = CompileCache(tmp_path / "writer", stats=CacheStats(),
                         remote=RemoteTier(RemoteSettings(server.url, SECRET.encode())))
    keys = {}
    for fn in (sample_function(), sample_function(name="other", batch=5)):
        compile_graph(fn, target="interp", cache=cache)
        keys[fn.name] = cache.key_of(make_request(fn, target="interp")).key
    assert cache.stats.remote_stores == 2
    return keys


def test_list_shows_the_remote_entries(remote_keys, server, capsys):
    assert main(["cache", "list", "--remote"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["KEY", "TARGET", "SIZE", "CREATED", "GRAPH"]
    rows = {line.split()[-1]: line for line in out[1:3]}
    for name, key in remote_keys.items():
        assert rows[name].startswith(key[:16]) and " interp " in rows[name] and "UTC" in rows[name]
    assert out[3].startswith("2 entries, ") and server.url in out[3]
    # the local directory is another thing: empty
    assert main(["cache", "list"]) == 0
    assert capsys.readouterr().out.startswith("0 entries")


def test_verify_checks_signatures_and_files(remote_keys, server, capsys):
    assert main(["cache", "verify", "--remote"]) == 0
    assert "2 entries checked, 0 bad" in capsys.readouterr().out
    client = server.client()
    name = ARTIFACT_PREFIX + remote_keys["other"]
    value = client.get(name)
    client.set(name, value[:-40] + bytes([value[-40] ^ 1]) + value[-39:])
    assert main(["cache", "verify", "--remote"]) == 1
    out = capsys.readouterr().out
    assert f"BAD {remote_keys['other'][:16]}  bad signature" in out and "1 bad" in out


def test_verify_without_the_key_is_a_clear_error(remote_keys, monkeypatch, capsys):
    monkeypatch.delenv("NEURONCC_REMOTE_CACHE_KEY")
    assert main(["cache", "verify", "--remote"]) == 2
    assert "NEURONCC_REMOTE_CACHE_KEY is not set" in capsys.readouterr().err
    assert main(["cache", "list", "--remote"]) == 0  # listing runs nothing and needs no key


def test_explain_a_remote_entry_and_compare_it_with_a_file(remote_keys, tmp_path, capsys):
    assert main(["cache", "explain", "--remote", "--key", remote_keys["mlp"][:8]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"key {remote_keys['mlp']}  (remote entry @mlp in redis://")
    assert "  graph " in out and "  target " in out
    assert main(["cache", "explain", "--remote", "--key", remote_keys["mlp"][:8], "--key",
                 remote_keys["other"][:8]]) == 0
    assert "differs: graph, inputs" in capsys.readouterr().out


def test_clear_older_than_then_all(remote_keys, server, capsys):
    assert main(["cache", "clear", "--remote", "--older-than", "1"]) == 0
    assert capsys.readouterr().out.startswith("removed 0 entries (0 B) from redis://")
    assert main(["cache", "clear", "--remote"]) == 0
    assert capsys.readouterr().out.startswith("removed 2 entries (")
    assert not list(server.client().scan_iter(match=ARTIFACT_PREFIX + "*"))


def test_an_unreachable_server_or_no_server_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("NEURONCC_REMOTE_CACHE", f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("NEURONCC_REMOTE_CACHE_TIMEOUT", "0.5")
    assert main(["cache", "list", "--remote"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuroncc: error: remote compile cache redis://***@127.0.0.1:") and "unavailable" in err
    assert len(err.splitlines()) == 1 and "hunter2" not in err
    monkeypatch.delenv("NEURONCC_REMOTE_CACHE")
    assert main(["cache", "clear", "--remote"]) == 2
    assert "--remote needs NEURONCC_REMOTE_CACHE" in capsys.readouterr().err
