import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _fresh_dynamo(request):
    """Model tests start with no compiled frames, zeroed neuroncc counters and a fixed seed (tests/conftest.py's
    ``fresh_dynamo``)."""
    if "models" in request.module.__name__:  # test_emit_models.py
        request.getfixturevalue("fresh_dynamo")
