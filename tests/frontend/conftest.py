import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo):
    """Every test starts with no compiled frames, zeroed neuroncc counters and a fixed seed (tests/conftest.py)."""
