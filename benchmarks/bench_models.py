"""Model benchmarks (d)-(f): a torch module through eager, Inductor and ``torch.compile(backend="neuron")``.

    (d) MLP inference      (e) transformer block inference      (f) MLP training step (forward + backward)

Structure only until the torch front end lands: ``run(model_factory, input_factory, train)`` interleaves the
three implementations and reports medians and ratios; a missing ``neuron`` backend is reported, not hidden.
Run: ``python benchmarks/bench_models.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import torch  # noqa: E402
from torch import nn  # noqa: E402


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))


def transformer_block() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True, dropout=0.0)


def _step(model: nn.Module, train: bool) -> Callable[[torch.Tensor], object]:
    if not train:
        return lambda x: model(x)

    def step(x: torch.Tensor) -> object:
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    return step


def run(name: str, factory: Callable[[], nn.Module], make_input: Callable[[], torch.Tensor], train: bool) -> list[str]:
    torch.manual_seed(0)
    model = factory().train(train)
    x = make_input()
    impls = {"eager": _step(model, train), "inductor": _step(torch.compile(model, dynamic=False), train)}
    try:
        neuron = torch.compile(model, backend="neuron", dynamic=False)
        _step(neuron, train)(x)
        impls["neuroncc"] = _step(neuron, train)
    except Exception as exc:  # the backend may not be installed yet: say so in the table
        print(f"{name}: neuron backend unavailable ({type(exc).__name__}: {str(exc)[:80]})")
    grad = torch.enable_grad() if train else torch.no_grad()
    with grad:
        times = interleaved({k: (lambda f=f: f(x)) for k, f in impls.items()}, repeats=20)
    neuron_ms = times.get("neuroncc")
    return [name, f"{times['eager'] * 1e3:.2f}", f"{times['inductor'] * 1e3:.2f}",
            "n/a" if neuron_ms is None else f"{neuron_ms * 1e3:.2f}",
            "n/a" if neuron_ms is None else f"{times['eager'] / neuron_ms:.2f}x",
            "n/a" if neuron_ms is None else f"{times['inductor'] / neuron_ms:.2f}x"]


CASES = [
    ("(d) MLP 1024-4096-1024, batch 256", mlp, lambda: torch.randn(256, 1024), False),
    ("(e) transformer block d=512, [8, 128]", transformer_block, lambda: torch.randn(8, 128, 512), False),
    ("(f) MLP training step, batch 256", mlp, lambda: torch.randn(256, 1024), True),
]


def main() -> None:
    rows = [run(*case) for case in CASES]
    print(table(rows, ["model", "eager ms", "inductor ms", "neuroncc ms", "vs eager", "vs inductor"]))


if __name__ == "__main__":
    main()
