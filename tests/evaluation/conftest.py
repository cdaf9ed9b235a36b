import pytest
import torch

import neuroncc


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    neuroncc.reset_stats()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
