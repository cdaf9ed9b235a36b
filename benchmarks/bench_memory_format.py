"""A small CNN's training step in channels_last against contiguous (NCHW), on CPU eager and on the neuron device.

    /work/bin/heavy x python benchmarks/bench_memory_format.py [--repeat 20] [--batch 32] [--compile] [--threads 2]

One step: forward, cross-entropy, backward, SGD with momentum, of conv3x3(3->32)-BN-ReLU-maxpool-conv3x3(32->64)-
BN-ReLU-conv3x3(64->64, stride 2)-BN-ReLU-adaptive-avg-pool-linear on [batch, 3, 32, 32]. The four (or, with
``--compile``, six: the device under ``torch.compile(backend="neuron")`` too) run interleaved in one process, 2
threads unless ``--threads`` says (benchmarks/common.py); the table gives the median step and its spread, and
each channels_last step's ratio to the contiguous one of the same runner (the median of the rounds' ratios); the
last line puts the device's ratio beside CPU eager's. Before the timing, each runner's loss is checked to match CPU's,
and the table says whether a channels_last runner's activations are channels_last (as CPU's are).
The compiled channels_last model compiles after the contiguous one: a TorchDynamo recompile on the input's
strides, which marks them dynamic, so neuroncc compiles it as a shape specialization (frontend/specializations.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ensure_environment, interleaved_samples, table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--compile", action="store_true", help="also the device under torch.compile")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    ensure_environment(args.threads)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
            self.c2, self.b2 = nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64)
            self.c3, self.b3 = nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
            x = F.relu(self.b3(self.c3(F.relu(self.b2(self.c2(x))))))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    torch.manual_seed(0)
    data = torch.randn(args.batch, 3, 32, 32)
    target = torch.randint(0, 10, (args.batch,))

    def runner(device: str, fmt: torch.memory_format, compiled: bool = False):
        torch.manual_seed(0)
        model = Net().to(device, memory_format=fmt)
        forward = torch.compile(model, backend="neuron") if compiled else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = data.to(device, memory_format=fmt), target.to(device)

        def step():
            optimizer.zero_grad()
            loss = F.cross_entropy(forward(x), y)
            loss.backward()
            optimizer.step()
            return loss

        return model, step

    cl = torch.channels_last
    runners = {}
    for device in ("cpu", "neuron"):
        for name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", cl)):
            runners[f"{device} eager {name}"] = runner(device, fmt)
    if args.compile:
        for name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", cl)):
            runners[f"neuron compiled {name}"] = runner("neuron", fmt, compiled=True)
    first = {label: step().item() for label, (_, step) in runners.items()}
    kept = {}
    for label, (model, _) in runners.items():
        assert abs(first[label] - first["cpu eager contiguous"]) < 1e-3, (label, first)
        if "channels_last" in label:
            seen = model.c2(model.b1(model.c1(torch.zeros(2, 3, 8, 8, device=next(model.parameters()).device)
                                              .to(memory_format=cl))))
            kept[label] = "yes" if seen.is_contiguous(memory_format=cl) else "no"
    samples = interleaved_samples({label: step for label, (_, step) in runners.items()}, repeats=args.repeat)
    medians = {label: statistics.median(times) for label, times in samples.items()}
    rows, ratio = [], {}
    for label, times in samples.items():
        base = label.replace("channels_last", "contiguous")
        ratio[label] = statistics.median(a / b for a, b in zip(times, samples[base]))
        rows.append([label, f"{medians[label] * 1e3:.2f}", f"{min(times) * 1e3:.2f}-{max(times) * 1e3:.2f}",
                     f"{ratio[label]:.2f}" if base != label else "",
                     f"{medians[label] / medians['cpu eager ' + label.rsplit(' ', 1)[1]]:.2f}", kept.get(label, "")])
    print(f"batch {args.batch}, {args.repeat} interleaved rounds, {args.threads} threads, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(table(rows, ["runner", "median ms", "min-max ms", "CL / contiguous (per round)", "/ CPU eager same format",
                       "activations CL"]))
    compiled = f", device compiled {ratio['neuron compiled channels_last']:.2f}" if args.compile else ""
    print(f"channels_last / contiguous: device eager {ratio['neuron eager channels_last']:.2f}{compiled}, "
          f"CPU eager {ratio['cpu eager channels_last']:.2f}")


if __name__ == "__main__":
    main()
