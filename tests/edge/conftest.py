import pytest
import torch

from .helpers import TARGETS


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch with a fixed seed."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


@pytest.fixture(params=TARGETS)
def target(request):
    """Every neuroncc target whose backend is in this tree."""
    return request.param
