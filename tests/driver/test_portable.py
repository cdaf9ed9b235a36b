"""Cache entries carried as signed bytes (``driver.portable``, neuroncc's part of torch's portable cache): a
verified entry installs into another cache and loads there without compiling; anything that does not verify is
refused before it touches the disk, and nothing in it is run."""

from __future__ import annotations

import numpy as np
import pytest
from cache_testing import sample_function, sample_inputs

from neuroncc.driver.bundle import BadBundleError, pack_bundle
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.compile import compile_graph, make_request
from neuroncc.driver.portable import KEY_VARIABLE, export_entry, import_entry, require_secret, secret_from_environ
from neuroncc.errors import InputError
from neuroncc.executors.executable import run

SECRET = b"0123456789abcdef0123456789abcdef"


@pytest.fixture
def exported(cache, target):
    """(key, value): the sample function's entry, compiled into ``cache`` and exported."""
    fn = sample_function()
    compile_graph(fn, target=target, cache=cache)
    key = cache.key_of(make_request(fn, target=target)).key
    return key, export_entry(cache, key, SECRET)


@pytest.fixture
def elsewhere(tmp_path) -> CompileCache:
    """Another machine's empty cache."""
    return CompileCache(tmp_path / "elsewhere", stats=CacheStats())


def _entries(cache: CompileCache) -> list[str]:
    return sorted(p.name for p in cache.entries_dir.iterdir()) if cache.entries_dir.exists() else []


def test_an_imported_entry_loads_without_compiling(exported, elsewhere, target, compiler):
    key, value = exported
    assert import_entry(elsewhere, key, value, SECRET) is True
    assert _entries(elsewhere) == [key]
    fn = sample_function()
    executable = elsewhere.get_or_compile(make_request(fn, target=target), compiler)
    assert compiler.calls == 0 and elsewhere.stats.hits == 1 and elsewhere.stats.compiles == 0
    inputs = sample_inputs(fn)
    for mine, theirs in zip(executable(*inputs), run(fn, inputs), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_importing_again_keeps_the_intact_entry(exported, elsewhere):
    key, value = exported
    assert import_entry(elsewhere, key, value, SECRET) is True
    modified = elsewhere.entry_dir(key).stat().st_mtime_ns
    assert import_entry(elsewhere, key, value, SECRET) is False
    assert elsewhere.entry_dir(key).stat().st_mtime_ns == modified


def test_a_damaged_local_entry_is_replaced_by_the_verified_one(exported, elsewhere):
    key, value = exported
    import_entry(elsewhere, key, value, SECRET)
    graph = elsewhere.entry_dir(key) / "graph.nir"
    graph.write_text(graph.read_text() + "\n")
    assert import_entry(elsewhere, key, value, SECRET) is True
    assert graph.read_text() != "" and import_entry(elsewhere, key, value, SECRET) is False


def test_every_flipped_byte_is_refused_and_nothing_is_installed(exported, elsewhere):
    key, value = exported
    for position in range(0, len(value), max(1, len(value) // 150)):
        damaged = value[:position] + bytes([value[position] ^ 0x01]) + value[position + 1:]
        with pytest.raises(BadBundleError):
            import_entry(elsewhere, key, damaged, SECRET)
    assert _entries(elsewhere) == []


@pytest.mark.parametrize("how", ["other secret", "other key", "remote bundle", "truncated", "not a key"])
def test_values_not_signed_for_this_use_are_refused(exported, elsewhere, cache, how):
    key, value = exported
    other_key = "f" * 64
    secret, stored_as = SECRET, key
    if how == "other secret":
        secret = b"another secret, just as long...."
    elif how == "other key":
        stored_as = other_key  # a signed entry presented under another key
    elif how == "remote bundle":
        value = pack_bundle(cache.entry_dir(key), SECRET)  # signed with the same secret for the remote tier
    elif how == "truncated":
        value = value[:len(value) // 2]
    elif how == "not a key":
        stored_as = "../" + key[3:]
    with pytest.raises(BadBundleError):
        import_entry(elsewhere, stored_as, value, secret)
    assert _entries(elsewhere) == []


def test_the_secret_comes_from_the_environment():
    assert secret_from_environ({}) is None
    assert secret_from_environ({KEY_VARIABLE: SECRET.decode()}) == SECRET
    assert secret_from_environ({"NEURONCC_REMOTE_CACHE_KEY": SECRET.decode()}) == SECRET
    assert secret_from_environ({KEY_VARIABLE: "a" * 16, "NEURONCC_REMOTE_CACHE_KEY": SECRET.decode()}) == b"a" * 16
    with pytest.raises(InputError, match="shorter than 16"):
        secret_from_environ({KEY_VARIABLE: "short"})
    with pytest.raises(InputError, match=KEY_VARIABLE):
        require_secret({})
