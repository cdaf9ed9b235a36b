import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch with a fixed seed."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
