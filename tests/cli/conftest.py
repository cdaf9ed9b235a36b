import pytest
import torch


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.arange(3, dtype=torch.float32))

    def forward(self, x):
        return torch.relu(self.linear(x)) + self.offset


@pytest.fixture(scope="session")
def good_pt2(tmp_path_factory):
    """A valid torch.export archive of a small model."""
    path = tmp_path_factory.mktemp("pt2") / "small.pt2"
    torch.manual_seed(0)
    torch.export.save(torch.export.export(SmallNet(), (torch.randn(2, 4),)), path)
    return path
