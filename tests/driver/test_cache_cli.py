"""``neuroncc cache list | explain | verify | clear``."""

from __future__ import annotations

import pytest
from cache_testing import sample_function, write_nir

from neuroncc.cli import main
from neuroncc.cli.cache import human_size
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.compile import compile_uncached, make_request


@pytest.fixture
def filled_cache(tmp_path, monkeypatch) -> CompileCache:
    """A cache in $NEURONCC_CACHE_DIR holding two entries (default options, and {"tile": 8})."""
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "cache"))
    cache = CompileCache(tmp_path / "cache", stats=CacheStats())
    cache.get_or_compile(make_request(sample_function()), compile_uncached)
    cache.get_or_compile(make_request(sample_function(name="other"), options={"tile": 8}), compile_uncached)
    return cache


def _keys(cache: CompileCache) -> dict[str, str]:
    """graph name -> key."""
    return {e.manifest.graph_name: e.key for e in cache.list_entries()}


def test_list(filled_cache, capsys):
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["KEY", "TARGET", "SIZE", "CREATED", "GRAPH"]
    rows = {line.split()[-1]: line for line in out[1:3]}
    for name, key in _keys(filled_cache).items():
        assert rows[name].startswith(key[:16]) and " cpu " in rows[name] and "KiB" in rows[name]
        assert "UTC" in rows[name]
    assert out[3].startswith("2 entries, ") and str(filled_cache.root) in out[3]


def test_list_empty_cache(tmp_path, capsys):
    assert main(["cache", "list", "--cache-dir", str(tmp_path / "nothing")]) == 0
    assert capsys.readouterr().out.startswith("0 entries, 0 B in ")


def test_verify_ok_then_bad(filled_cache, capsys):
    assert main(["cache", "verify"]) == 0
    assert "2 entries checked, 0 bad" in capsys.readouterr().out
    key = _keys(filled_cache)["mlp"]
    graph = filled_cache.entry_dir(key) / "graph.nir"
    graph.write_text(graph.read_text().replace(" relu ", " sign "))
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"BAD {key[:16]}" in out and "sha256 mismatch" in out and "1 bad" in out


def test_verify_reports_unreadable_manifest(filled_cache, capsys):
    key = _keys(filled_cache)["other"]
    (filled_cache.entry_dir(key) / "manifest.json").write_text("{")
    assert main(["cache", "verify"]) == 1
    assert f"BAD {key[:16]}" in capsys.readouterr().out
    assert main(["cache", "list"]) == 0
    assert "(damaged: " in capsys.readouterr().out


def test_clear_older_than_then_all(filled_cache, capsys):
    assert main(["cache", "clear", "--older-than", "1"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert len(filled_cache.list_entries()) == 2
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert filled_cache.list_entries() == []


def test_clear_rejects_negative_days(filled_cache, capsys):
    assert main(["cache", "clear", "--older-than", "-1"]) == 2
    assert "--older-than" in capsys.readouterr().err


def test_explain_file_lists_every_component(tmp_path, capsys):
    nir = write_nir(sample_function(), tmp_path / "mlp.nir")
    assert main(["cache", "explain", str(nir)]) == 0
    out = capsys.readouterr().out.splitlines()
    key = CompileCache(tmp_path).key_of(make_request(sample_function()))
    assert out[0].startswith(f"key {key.key}")
    assert [line.split()[0] for line in out[1:]] == [c.name for c in key.components]
    assert any("f32[4,32]; f32[8]" in line for line in out)


def test_explain_file_against_its_entry_and_another(filled_cache, tmp_path, capsys):
    nir = write_nir(sample_function(name="renamed", hints=False), tmp_path / "mlp.nir")
    keys = _keys(filled_cache)
    assert main(["cache", "explain", str(nir), "--key", keys["mlp"][:8]]) == 0
    assert "all components equal" in capsys.readouterr().out
    assert main(["cache", "explain", str(nir), "--key", keys["other"][:8]]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("differs: options") and "* options" in out
    assert main(["cache", "explain", str(nir), "--option", "tile=8", "--key", keys["other"][:8]]) == 0
    assert "all components equal" in capsys.readouterr().out


def test_explain_two_keys(filled_cache, capsys):
    keys = _keys(filled_cache)
    assert main(["cache", "explain", "--key", keys["mlp"], "--key", keys["other"]]) == 0
    assert capsys.readouterr().out.strip().endswith("differs: options")
    assert main(["cache", "explain", "--key", keys["mlp"][:6]]) == 0
    assert capsys.readouterr().out.startswith(f"key {keys['mlp']}")


def test_explain_other_target(tmp_path, capsys):
    nir = write_nir(sample_function(), tmp_path / "mlp.nir")
    assert main(["cache", "explain", str(nir), "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "target cpu" in out and "  target            " in out


@pytest.mark.parametrize("argv, message", [
    (["cache", "explain"], "needs a FILE.nir"),
    (["cache", "explain", "--key", "zzzz"], "no cache entry"),
    (["cache", "explain", "--key", "ab"], "too short"),
    (["cache", "explain", "missing.nir"], "no such file"),
    (["cache", "explain", "--key", "a", "--key", "b", "--key", "c"], "two things at most"),
])
def test_explain_errors_exit_2(filled_cache, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuroncc: error: ") and message in err and err.count("\n") == 1


def test_human_size():
    assert [human_size(n) for n in (0, 1023, 1536, 5 * 2**20, 3 * 2**30)] == [
        "0 B", "1023 B", "1.5 KiB", "5.0 MiB", "3.0 GiB"]
