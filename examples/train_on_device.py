#!/usr/bin/env python
"""Train a small classifier on CPU or on the neuron device: the script is the same, only DEVICE changes.

    python examples/train_on_device.py                 # on the neuron device (neuroncc installed)
    python examples/train_on_device.py --device cpu    # the same script on CPU
    python examples/train_on_device.py --compile       # with torch.compile(backend="neuron") on top

No `import neuroncc` is needed: installing neuroncc registers the "neuron" device with PyTorch. Each op on
neuron tensors is compiled by neuroncc the first time it is seen (then cached in memory and on disk), so the
first step is slower than the rest; a second run of the script compiles nothing.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, features: int = 32, hidden: int = 128, classes: int = 4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def batches(steps: int, batch: int, features: int, classes: int, seed: int):
    """A synthetic task: the class is which quarter of the features has the largest sum."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(batch, features, generator=generator)
        y = x.view(batch, classes, -1).sum(-1).argmax(-1)
        yield x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="neuron", help="neuron (default) or cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--compile", action="store_true", help="also torch.compile the model (backend neuron)")
    args = parser.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Classifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    run = torch.compile(model, backend="neuron", dynamic=False) if args.compile else model
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches(args.steps, batch=64, features=32, classes=4, seed=1), start=1):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(run(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 or step % 10 == 0:
            print(f"step {step:>3}  loss {loss.item():.4f}  ({time.perf_counter() - start:.2f}s)")
    model.eval()
    with torch.no_grad():
        x, y = next(batches(1, batch=512, features=32, classes=4, seed=2))
        accuracy = (model(x.to(device)).argmax(-1).cpu() == y).float().mean().item()
    print(f"accuracy on fresh data: {accuracy:.1%} (device {device})")
    if device.type == "neuron":
        import neuroncc

        stats = neuroncc.stats()
        print(f"neuroncc: {stats['eager_kernels_compiled']} op kernels compiled, {stats['eager_kernels_loaded']} "
              f"loaded from the cache, {len(neuroncc.get_fallback_ops())} ops fell back to CPU")


if __name__ == "__main__":
    main()
