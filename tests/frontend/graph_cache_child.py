"""One process of the graph cache tests (test_graph_cache.py): ``SCENARIO MODE`` compiles and runs one scenario
with ``torch.compile(..., backend="neuron")`` and prints one JSON line: neuroncc's counters, the graph cache's
reasons for not caching, the warnings raised, and every result tensor's bytes (hex) so that two processes can be
compared bit for bit.

MODE ``any`` runs as usual; ``no-aot`` makes AOTAutograd unusable first (TorchDynamo's ``aot_autograd`` backend
helper raises if it is called), so the run proves that the graph cache served every graph; ``load FILE`` calls
``torch.compiler.load_cache_artifacts`` with FILE's bytes first; ``save FILE`` writes
``torch.compiler.save_cache_artifacts()``'s bytes to FILE after the run.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch._dynamo.backends.common

import neuroncc
from neuroncc.frontend import graph_cache


def _mlp_train() -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Dropout(0.25), torch.nn.Linear(16, 4))
    x = torch.randn(6, 8)
    compiled = torch.compile(model, backend="neuron")
    loss = compiled(x).square().mean()
    loss.backward()
    return [loss.detach(), *(p.grad for p in model.parameters())]


def _batchnorm_train() -> list[torch.Tensor]:
    """Input mutation: BatchNorm's running statistics are updated in place by the compiled graph."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    x = torch.randn(7, 5)
    compiled = torch.compile(model, backend="neuron")
    results = []
    for _ in range(2):
        loss = compiled(x).sum()
        loss.backward()
        results.append(loss.detach())
    bn = model[1]
    return [*results, *(p.grad for p in model.parameters()), bn.running_mean, bn.running_var,
            bn.num_batches_tracked]


class _ViewOutput(torch.nn.Module):
    """Output aliasing: the first output is a view of the input, the second of an intermediate."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = self.linear(x)
        return x.view(-1), y, y.t()


def _view_output() -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = _ViewOutput()
    x = torch.randn(3, 4, requires_grad=True)
    flat, y, yt = torch.compile(model, backend="neuron")(x)
    aliases = torch.tensor([flat.data_ptr() == x.data_ptr(), flat._base is x, yt.data_ptr() == y.data_ptr()])
    (flat.sum() * 2 + y.square().sum() + yt[0].sum()).backward()
    return [flat.detach(), y.detach(), yt.detach(), aliases, x.grad, *(p.grad for p in model.parameters())]


def _inference() -> list[torch.Tensor]:
    """A parameter-free graph run under no_grad: AOTAutograd's inference path."""
    torch.manual_seed(0)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sin(a) @ b + a.sum(dim=0, keepdim=True).t()

    a, b = torch.randn(5, 5), torch.randn(5, 3)
    with torch.no_grad():
        return [torch.compile(f, backend="neuron")(a, b)]


def _adamw_step() -> list[torch.Tensor]:
    """A compiled optimizer step: parameters and optimizer state updated in place, under no_grad."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(4, 6)).sum().backward()
    step = torch.compile(optimizer.step, backend="neuron")
    for _ in range(2):
        step()
    state = [t for p in model.parameters() for t in optimizer.state[p].values()]
    return [*model.parameters(), *state]


SCENARIOS = {"adamw_step": _adamw_step, "mlp_train": _mlp_train, "batchnorm_train": _batchnorm_train, "view_output": _view_output,
             "inference": _inference}


def _forbid_aot_autograd() -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("aot_module_simplified was called")

    torch._dynamo.backends.common.aot_module_simplified = refuse


def main(scenario: str, mode: str, path: str | None) -> dict:
    report: dict = {}
    if mode == "no-aot":
        _forbid_aot_autograd()
    if mode == "load":
        info = torch.compiler.load_cache_artifacts(Path(path).read_bytes())
        report["loaded"] = sorted(info.artifacts.get("neuroncc", [])) if info is not None else []
        _forbid_aot_autograd()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = SCENARIOS[scenario]()
    report["results"] = [t.detach().contiguous().numpy().tobytes().hex() for t in results]
    report["stats"] = neuroncc.stats()
    report["reasons"] = graph_cache.uncacheable_reasons()
    report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught
                          if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    if mode == "save":
        data, info = torch.compiler.save_cache_artifacts()
        Path(path).write_bytes(data)
        report["saved"] = sorted(info.artifacts.get("neuroncc", []))
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)))
