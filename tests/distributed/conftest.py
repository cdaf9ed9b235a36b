import pytest


@pytest.fixture(scope="session")
def _shared_compile_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("neuroncc-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(_shared_compile_cache, monkeypatch):
    """The ranks of every multi-process test share one compile cache (per test session): the device's op
    kernels are the same in every scenario, so each is compiled once, not once per rank and test (what the
    cache's per-key locks are for). Overrides the suite's per-test cache."""
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(_shared_compile_cache))

