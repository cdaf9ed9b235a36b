"""Small random ops and a CPU fallback on the eager ``neuron`` device, per call, beside CPU eager: what the
host path around CPU's kernel costs (the device's random numbers are drawn on the host, where its memory is).

    randn(64); bernoulli_(0.5) of 64; randperm(100); randn(64) with a new seeded torch.Generator each call
    (a pipeline seeding each image; a CPU generator, which the device's random ops take as they take a
    neuron one, so that trees without ``torch.Generator("neuron")`` run it too); x[mask] of 64 (a CPU
    fallback: its result's shape depends on the data)

Each row: the device and CPU interleaved call by call in one process (a call = ``--inner`` ops), medians of
``--repeat`` rounds, microseconds an op. Compare two trees by running each tree's copy of this file (it imports
the neuroncc of the tree it is in).

Run: ``python benchmarks/bench_device_random.py [--repeat 15] [--inner 200]``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import torch  # noqa: E402

import neuroncc.device  # noqa: E402, F401


def _value(flag: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(flag) + 1]) if flag in sys.argv else default


def _rows(device: str) -> dict[str, Callable[[], object]]:
    x = torch.randn(64, device=device)
    mask, p = x > 0, torch.full((64,), 0.5, device=device)
    seeds = iter(range(1 << 30))
    return {
        "randn(64)": lambda: torch.randn(64, device=device),
        "bernoulli_(0.5), 64": lambda: p.bernoulli_(0.5),
        "randperm(100)": lambda: torch.randperm(100, device=device),
        "randn(64), new generator": lambda: torch.randn(  # a CPU generator: main before session 30 had no other
            64, device=device, generator=torch.Generator().manual_seed(next(seeds))),
        "x[mask], 64 (fallback)": lambda: x[mask],
    }


def main() -> None:
    repeats, inner = _value("--repeat", 15), _value("--inner", 200)
    warnings.simplefilter("ignore")  # the fallback's DeviceFallbackWarning
    on_device, on_cpu = _rows("neuron"), _rows("cpu")
    rows = []
    for name in on_device:
        def many(op: Callable[[], object]) -> Callable[[], None]:
            def run() -> None:
                for _ in range(inner):
                    op()
            return run

        medians = interleaved({"neuron": many(on_device[name]), "cpu": many(on_cpu[name])}, repeats=repeats)
        device_us, cpu_us = (medians[k] / inner * 1e6 for k in ("neuron", "cpu"))
        rows.append([name, f"{device_us:.1f}", f"{cpu_us:.1f}", f"{device_us / cpu_us:.1f}"])
    print(f"neuroncc: {neuroncc.__file__}")
    print(table(rows, ["op", "neuron us", "CPU us", "neuron / CPU"]))


if __name__ == "__main__":
    main()
