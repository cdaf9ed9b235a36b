import pytest
import torch

from neuroncc.examples.classifier import export_example


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.arange(3, dtype=torch.float32))

    def forward(self, x):
        return torch.relu(self.linear(x)) + self.offset


class NormNet(torch.nn.Module):
    """Exported in training mode: BatchNorm updates its running stats (buffer mutations)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(5, 6)
        self.norm = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        return torch.tanh(self.norm(self.linear(x)))


class TwoOutputs(torch.nn.Module):
    """Two inputs, a dict of two outputs, one of them bfloat16 (torch.export asserts dtypes for .to())."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        return {"sum": self.linear(x) + y, "product": (x * y).to(torch.bfloat16)}


def _export(path, module, *inputs):
    torch.manual_seed(0)
    torch.export.save(torch.export.export(module, inputs), path)
    return path


@pytest.fixture(scope="session")
def good_pt2(tmp_path_factory):
    """A valid torch.export archive of a small model."""
    torch.manual_seed(0)
    return _export(tmp_path_factory.mktemp("pt2") / "small.pt2", SmallNet(), torch.randn(2, 4))


@pytest.fixture(scope="session")
def norm_pt2(tmp_path_factory):
    torch.manual_seed(0)
    return _export(tmp_path_factory.mktemp("pt2") / "norm.pt2", NormNet(), torch.randn(8, 5))


@pytest.fixture(scope="session")
def two_outputs_pt2(tmp_path_factory):
    torch.manual_seed(0)
    return _export(tmp_path_factory.mktemp("pt2") / "two_outputs.pt2", TwoOutputs(), torch.randn(3, 4),
                   torch.randn(3, 4))


@pytest.fixture(scope="session")
def classifier_pt2(tmp_path_factory):
    """The bundled example (neuroncc demo's model), exported as the demo does."""
    return export_example(tmp_path_factory.mktemp("pt2") / "classifier.pt2")


@pytest.fixture(scope="session")
def multi_pt2(tmp_path_factory):
    """An archive holding two programs, "small" and "large"."""
    from torch.export.pt2_archive._package import package_pt2

    torch.manual_seed(0)
    programs = {name: torch.export.export(torch.nn.Linear(4, width), (torch.randn(3, 4),))
                for name, width in (("small", 2), ("large", 5))}
    path = tmp_path_factory.mktemp("pt2") / "multi.pt2"
    package_pt2(str(path), exported_programs=programs)
    return path
