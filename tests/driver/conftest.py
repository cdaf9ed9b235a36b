from __future__ import annotations

import pytest
from cache_testing import ARTIFACT_TARGETS, sample_function

from neuroncc.driver.cache import CompileCache
from neuroncc.driver.compile_request import CompileRequest, CompileResult
from neuroncc.driver.process_cache import CacheStats
from neuroncc.driver.compile import compile_uncached, make_request


class CountingCompiler:
    """A compile function for the cache that counts how often it really compiles."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: CompileRequest) -> CompileResult:
        self.calls += 1
        return compile_uncached(request)


@pytest.fixture(params=ARTIFACT_TARGETS)
def target(request) -> str:
    return request.param


@pytest.fixture
def cache(tmp_path) -> CompileCache:
    return CompileCache(tmp_path / "cache", stats=CacheStats())


@pytest.fixture
def compiler() -> CountingCompiler:
    return CountingCompiler()


@pytest.fixture
def request_for(target):
    """``request_for(fn, **make_request_kwargs)``: a compile request for the parametrized target."""
    def make(fn=None, **kwargs):
        return make_request(fn if fn is not None else sample_function(), target=target, **kwargs)
    return make
