"""A compiled call alone and after eager ops (session 48): the bf16 autocast forward of ``bench_device.py --rows
amp``'s 512-2048-512 MLP at batch 128, ``torch.compile(backend="neuron", dynamic=False)``, on neuron tensors and on
CPU tensors, each timed call after a chosen predecessor: the same compiled call (alone), the same model run eagerly
on its own device, or on the other one; or after one of two probes of what an eager op leaves behind: an ATen op on
the OpenMP team (``exp`` of 64K floats, 256 KB: the team woken, no cache evicted) and a 32 MB copy on one thread
(caches evicted, the team left alone).

Every timed call is one of a pair (predecessor untimed, then the compiled call timed); each round runs every pair
in a fresh random order, so all of them see the same machine. The graphs are compiled in this process on an empty
compile cache (``--cache fresh``, the default: a first run, whose kernels start at LLVM's quick tier and take the
optimized build from the background, executors/cpu/tiers.py), or on the usual one (``--cache default``: a warm
cache loads optimized code at once). Timing starts after the optimizer's builds are done and taken.

Run: ``/work/bin/heavy x python benchmarks/bench_device_interleave.py [--threads 2] [--repeats 60] [--cache
fresh|default] [--steps]`` (``--steps``: each compiled call's kernels by the timeline recorder, alone and after the
eager op of its device, in microseconds).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, settle_neuroncc, table  # noqa: E402

DEVICES = ("neuron", "cpu")
#: the predecessors of a timed compiled call: label -> (which call, on which device: "same" or "other"); the probes
#: are device-free
PREDECESSORS = {"alone": ("compiled", "same"), "after eager, same device": ("eager", "same"),
                "after eager, other device": ("eager", "other"), "after an ATen op on the team": ("team probe", ""),
                "after a 32 MB copy": ("cache probe", "")}


def _mlp(torch, device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
    return model, torch.randn(128, 512, device=device)


def _forwards(torch) -> dict[tuple[str, str], object]:
    """``(device, "compiled" | "eager")`` -> the forward under bf16 autocast and no_grad; ``("", probe)`` -> the
    probes."""
    import numpy as np

    calls = {}
    for device in DEVICES:
        model, x = _mlp(torch, device)
        compiled = torch.compile(model, backend="neuron", dynamic=False)
        for kind, module in (("compiled", compiled), ("eager", model)):
            def forward(module=module, x=x):
                with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16):
                    return module(x)
            calls[(device, kind)] = forward
    small = torch.randn(1 << 16)  # above ATen's grain size: exp runs on both threads of the team
    source, target = np.ones(8 << 20, dtype=np.float32), np.empty(8 << 20, dtype=np.float32)
    calls[("", "team probe")] = lambda: torch.exp(small)
    calls[("", "cache probe")] = lambda: np.copyto(target, source)  # one thread
    return calls


def _before(calls, device: str, label: str):
    """The call made before a timed compiled call on ``device``."""
    kind, where = PREDECESSORS[label]
    other = DEVICES[1 - DEVICES.index(device)]
    return calls[({"same": device, "other": other}.get(where, ""), kind)]


def _pairs_timed(calls, repeats: int) -> dict[tuple[str, str], list[float]]:
    """Seconds of each (device, predecessor) pair's compiled call, round by round, pairs in a random order."""
    pairs = [(device, label) for device in DEVICES for label in PREDECESSORS]
    samples: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    order = random.Random(0x5EED)
    for _ in range(repeats):
        order.shuffle(pairs)
        for device, label in pairs:
            _before(calls, device, label)()
            run = calls[(device, "compiled")]
            start = time.perf_counter()
            run()
            samples[(device, label)].append(time.perf_counter() - start)
    return samples


def _steps(calls, label: str, rounds: int = 20) -> dict[str, dict[str, float]]:
    """Per device: each step of the compiled call's timeline (microseconds, mean over ``rounds``) after the
    predecessor ``label``."""
    from neuroncc.executors.tracing import TimelineRecorder, installed

    found = {}
    for device in DEVICES:
        recorder, totals = TimelineRecorder(), collections.defaultdict(float)
        for _ in range(rounds):
            _before(calls, device, label)()
            with installed(recorder):
                calls[(device, "compiled")]()
        for step in recorder.steps:
            if step.info.kind != "graph":
                totals[step.info.name] += step.duration_us / rounds
        found[device] = dict(totals)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--cache", choices=("fresh", "default"), default="fresh")
    parser.add_argument("--steps", action="store_true")
    args = parser.parse_args()
    ensure_environment(args.threads)
    if args.cache == "fresh":
        os.environ["NEURONCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-interleave-cache-")
    import torch

    import neuroncc.device

    neuroncc.device.register()  # (torch's autoload does it too; explicit, as the tests do)

    calls = _forwards(torch)
    for _ in range(3):
        for call in calls.values():
            call()
    settle_neuroncc({str(key): call for key, call in calls.items()})
    samples = _pairs_timed(calls, args.repeats)
    ms = {pair: statistics.median(times) * 1e3 for pair, times in samples.items()}
    rows = []
    for label in PREDECESSORS:
        neuron, cpu = samples[("neuron", label)], samples[("cpu", label)]
        ratio = statistics.median(n / c for n, c in zip(neuron, cpu))  # per round: calls moments apart
        rows.append([label, f"{ms[('neuron', label)]:.3f}", f"{ms[('cpu', label)]:.3f}", f"{ratio:.2f}"])
    for device in DEVICES:
        alone = samples[(device, "alone")]
        for label in list(PREDECESSORS)[1:]:
            ratio = statistics.median(t / a for t, a in zip(samples[(device, label)], alone))
            rows.append([f"{device}: {label} / alone (per round)", "", "", f"{ratio:.2f}"])
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.repeats} rounds, cache {args.cache}, "
          f"load {' '.join(load)}")
    print(table(rows, ["compiled bf16 autocast forward", "neuron tensors ms", "CPU tensors ms",
                       "neuron / CPU (per round)"]))
    if args.steps:
        for label in ("alone", "after eager, same device"):
            for device, steps in _steps(calls, label).items():
                print(f"{device}, {label}: " + ", ".join(f"{name} {us:.0f}" for name, us in steps.items()))


if __name__ == "__main__":
    main()
