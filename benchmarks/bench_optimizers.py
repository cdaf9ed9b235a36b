"""Compiled optimizer steps: ``torch.compile(opt.step)`` with Inductor and with ``backend="neuron"`` against
eager's foreach (multi-tensor) step, all three interleaved call by call in one process (medians).

    (o1) AdamW over a 12-layer transformer's parameters (d_model 256, FFN 1024, vocabulary 8192: 148 tensors,
         10.6M elements, 12 shapes)
    (o2) AdamW over 512 small tensors ([64] and [64, 64], 1.1M elements): per-tensor overhead dominates
    (o3) SGD with momentum over the parameters of (o1)

Each implementation owns its parameters, gradients (fixed, set once) and optimizer state; a call is one
``step()``. The compile time is the first call's (TorchDynamo + AOTAutograd + the backend), cold caches.
Run: ``python benchmarks/bench_optimizers.py [--rows o1,o2,o3] [--repeat 30]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import torch  # noqa: E402


def transformer_shapes(layers: int = 12, d: int = 256, ffn: int = 1024, vocab: int = 8192) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = [(vocab, d), (512, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (ffn, d), (ffn,), (d, ffn), (d,)]
    return shapes + [(d,), (d,)]


def small_shapes(count: int = 512) -> list[tuple[int, ...]]:
    return [(64,) if i % 2 else (64, 64) for i in range(count)]


#: row -> (label, parameter shapes, optimizer factory)
ROWS: dict[str, tuple[str, Callable[[], list[tuple[int, ...]]], Callable[..., torch.optim.Optimizer]]] = {
    "o1": ("(o1) AdamW, transformer 148 tensors", transformer_shapes,
           lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)),
    "o2": ("(o2) AdamW, 512 small tensors", small_shapes,
           lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)),
    "o3": ("(o3) SGD momentum, transformer 148 tensors", transformer_shapes,
           lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9)),
}


def make_step(row: str, backend: str) -> tuple[Callable[[], object], float]:
    """The row's optimizer over fresh parameters, its step for ``backend``, and the first call's seconds."""
    _, shapes, factory = ROWS[row]
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=generator, requires_grad=True) for s in shapes()]
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator) * 1e-2
    optimizer = factory(params)
    if backend == "inductor":
        step = torch.compile(optimizer.step)
    elif backend == "neuron":
        step = torch.compile(optimizer.step, backend="neuron")
    else:
        step = optimizer.step
    start = time.perf_counter()
    step()
    return step, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        os.environ["NEURONCC_CACHE_DIR"] = f"{root}/neuroncc"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{root}/inductor"
        rows = []
        for row in args.rows.split(","):
            torch._dynamo.reset()
            made = {name: make_step(row, backend) for name, backend in
                    (("eager", "eager"), ("inductor", "inductor"), ("neuroncc", "neuron"))}
            t = interleaved({name: step for name, (step, _) in made.items()}, repeats=args.repeat, warmup=3)
            import neuroncc

            kernels = neuroncc.stats()["kernels"]
            neuroncc.reset_stats()
            cells = [ROWS[row][0], f"{t['eager'] * 1e3:.2f}", f"{t['inductor'] * 1e3:.2f}",
                     f"{t['neuroncc'] * 1e3:.2f}", f"{t['eager'] / t['neuroncc']:.2f}x",
                     f"{t['inductor'] / t['neuroncc']:.2f}x", str(kernels),
                     f"{made['inductor'][1]:.1f}", f"{made['neuroncc'][1]:.1f}"]
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    print(table(rows, ["optimizer step", "eager foreach ms", "Inductor ms", "neuroncc ms", "vs eager",
                       "vs Inductor", "neuroncc kernels", "Inductor compile s", "neuroncc compile s"]))


if __name__ == "__main__":
    main()
