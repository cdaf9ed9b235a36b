"""The training loop users write, phase by phase, on the neuron device against the same loop on CPU eager.

    /work/bin/heavy x python benchmarks/bench_device_optimizers.py [--loops mlp-adamw,...] [--repeat 30]
        [--threads 2]

Each loop is the usual step: forward and loss, ``scaler.scale(loss).backward()`` (or ``loss.backward()``),
``scaler.unscale_(optimizer)``, ``torch.nn.utils.clip_grad_norm_(params, 1.0)``, ``scaler.step(optimizer)``
(or ``optimizer.step()``), ``scaler.update()``, ``optimizer.zero_grad()`` (PyTorch's default, set_to_none=True),
each phase timed on its own (perf_counter around it; the device runs synchronously). The CPU loop and the
device loop own their model, data and optimizer; their steps run interleaved in a seeded random order per round
and the table gives each phase's median over the rounds, the device's against CPU's.

Loops (the optimizer's default form: foreach on the device, single-tensor on CPU; ``fused`` rows say so):

* ``mlp-adamw``: a 768-1536-1536-768 MLP (6 tensors, 4.7M parameters), batch 64, GradScaler, clip, AdamW.
* ``mlp-sgd``: the same MLP, no GradScaler, clip, SGD with momentum 0.9.
* ``many-adamw``: 30 blocks of Linear(64, 64) + LayerNorm(64) (120 tensors, 125K parameters), batch 32,
  GradScaler, clip, AdamW: per-tensor host work dominates.
* ``many-adam``: the same without GradScaler, Adam.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, table  # noqa: E402

PHASES = ("forward", "backward", "unscale_", "clip_grad_norm_", "step", "update", "zero_grad")
LOOPS = ("mlp-adamw", "mlp-sgd", "many-adamw", "many-adam")


def _model(kind: str):
    import torch

    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(768, 1536), torch.nn.GELU(), torch.nn.Linear(1536, 1536),
                                   torch.nn.GELU(), torch.nn.Linear(1536, 768)), 64, 768
    blocks = []
    for _ in range(30):
        blocks += [torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)]
    return torch.nn.Sequential(*blocks), 32, 64


class Loop:
    """One training loop on one device; ``step()`` returns each phase's seconds."""

    def __init__(self, name: str, device: str):
        import torch

        kind, optimizer = name.split("-")
        torch.manual_seed(0)
        model, batch, width = _model(kind)
        self.model = model.to(device)
        self.x = torch.randn(batch, width).to(device)
        self.y = torch.randn(batch, width).to(device)
        params = list(self.model.parameters())
        self.params = params
        self.optimizer = {"adamw": lambda: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2),
                          "adam": lambda: torch.optim.Adam(params, lr=1e-3),
                          "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9)}[optimizer]()
        self.scaler = torch.amp.GradScaler(device) if optimizer == "adamw" else None

    def step(self) -> dict[str, float]:
        import torch

        clock = time.perf_counter
        times = {}
        t0 = clock()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        t1 = clock()
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        t2 = clock()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        t3 = clock()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        t4 = clock()
        if self.scaler:
            self.scaler.step(self.optimizer)
        else:
            self.optimizer.step()
        t5 = clock()
        if self.scaler:
            self.scaler.update()
        t6 = clock()
        self.optimizer.zero_grad()
        t7 = clock()
        for phase, start, end in zip(PHASES, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
            times[phase] = end - start
        times["total"] = t7 - t0
        return times


def bench(name: str, repeat: int) -> list[list[str]]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GradScaler's float64 reciprocal on the device warns once
        loops = {"cpu": Loop(name, "cpu"), "neuron": Loop(name, "neuron")}
        for _ in range(4):  # state made, every kernel compiled
            for loop in loops.values():
                loop.step()
        samples: dict[str, dict[str, list[float]]] = {device: {} for device in loops}
        order, devices = random.Random(0x5EED), list(loops)
        for _ in range(repeat):
            order.shuffle(devices)
            for device in devices:
                for phase, seconds in loops[device].step().items():
                    samples[device].setdefault(phase, []).append(seconds)
    rows = []
    for phase in (*PHASES, "total"):
        cpu, dev = statistics.median(samples["cpu"][phase]) * 1e6, statistics.median(samples["neuron"][phase]) * 1e6
        if cpu < 1 and dev < 1:
            continue
        spread = samples["neuron"][phase]
        rows.append([name, phase, f"{cpu:.0f}", f"{dev:.0f} ({min(spread) * 1e6:.0f}-{max(spread) * 1e6:.0f})",
                     f"{dev / cpu:.2f}x" if cpu >= 1 else "-", f"{dev - cpu:+.0f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    ensure_environment(threads=args.threads)
    import os

    rows = []
    for name in args.loops.split(","):
        rows += bench(name, args.repeat)
    print(f"load {os.getloadavg()[0]:.1f}, {args.threads} threads, {time.strftime('%H:%M UTC', time.gmtime())}")
    print(table(rows, ["loop", "phase", "CPU us", "neuron us (min-max)", "vs CPU", "neuron - CPU us"]))


if __name__ == "__main__":
    main()
