import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _fresh_dynamo(request):
    """Model tests start with no compiled frames, zeroed neuroncc counters and a fixed seed."""
    if "models" not in request.module.__name__:  # test_emit_models.py
        yield
        return
    import torch

    import neuroncc

    torch._dynamo.reset()
    neuroncc.reset_stats()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
