"""New values of an op's Python floats on the ``neuron`` device: kernels compiled and time for 20 new values.

    python benchmarks/bench_float_values.py [--trees base=/tmp/base,this=.] [--rounds 3] [--values 20]

Each op's signature is made first with one value (untimed); then ``--values`` new values (0.31, 0.38, ...) are
called one after another, each a first call of that value. Reported per op: the kernels compiled or loaded for
them (``neuroncc.stats()``: one per value where the value is built into the kernel, none where it is a kernel
argument: docs/device.md) and the milliseconds for all of them, forward and backward where the op has one. Every
round is a fresh process over a fresh compile cache per tree (so a compile is a compile, not a load), rounds
interleaved by tree; medians. ``--trees`` compares neuroncc checkouts (``PYTHONPATH``); default: this tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, torch, neuroncc, torch.nn.functional as F
torch.set_num_threads(2)
count = int(sys.argv[1])
x = (torch.rand(64, 128) * 0.9 + 0.05).to("neuron")
t = torch.randn(64, 128).to("neuron")
m1, m2 = torch.randn(64, 32).to("neuron"), torch.randn(32, 128).to("neuron")


def backward(f):
    def run(v):
        a = x.detach().clone().requires_grad_()
        f(a, v).sum().backward()
        return a.grad
    return run


OPS = {
    "celu": lambda v: F.celu(x, v),
    "celu backward": backward(lambda a, v: F.celu(a, v)),
    "huber_loss": lambda v: F.huber_loss(x, t, delta=v),
    "huber_loss backward": backward(lambda a, v: F.huber_loss(a, t, delta=v)),
    "smooth_l1_loss": lambda v: F.smooth_l1_loss(x, t, beta=v),
    "smooth_l1_loss backward": backward(lambda a, v: F.smooth_l1_loss(a, t, beta=v)),
    "logit": lambda v: torch.logit(x, v / 10),
    "logit backward": backward(lambda a, v: torch.logit(a, v / 10)),
    "addmm (beta)": lambda v: torch.addmm(x, m1, m2, beta=v),
    "addmm (alpha)": lambda v: torch.addmm(x, m1, m2, alpha=v),
}


def kernels():
    stats = neuroncc.stats()
    return stats["eager_kernels_compiled"] + stats["eager_kernels_loaded"]


rows = {}
for name, op in OPS.items():
    op(0.3).cpu()  # the signature (and everything its first call needs)
    before, start = kernels(), time.perf_counter()
    for k in range(count):
        op(0.31 + 0.07 * k).cpu()
    rows[name] = (kernels() - before, 1e3 * (time.perf_counter() - start))
print(json.dumps(rows))
print(neuroncc.__file__, file=sys.stderr)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default="this=.", help="name=path,... neuroncc checkouts to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--values", type=int, default=20)
    options = parser.parse_args()
    trees = dict(item.split("=", 1) for item in options.trees.split(","))
    results: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
    for _ in range(options.rounds):
        for name, path in trees.items():
            with tempfile.TemporaryDirectory() as cache:
                env = {k: v for k, v in os.environ.items() if not k.startswith("NEURONCC_")}
                env.update(PYTHONPATH=os.path.abspath(path), NEURONCC_CACHE_DIR=cache)
                # (run outside any checkout: ``-c`` puts the working directory first on the path)
                done = subprocess.run([sys.executable, "-c", CHILD, str(options.values)], env=env, cwd=cache,
                                      capture_output=True, text=True, check=True)
                results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    ops = list(results[next(iter(trees))][0])
    print(f"{options.values} new values per op, medians of {options.rounds} rounds (kernels compiled or loaded, ms)")
    print(f"{'op':26s}" + "".join(f"{name + ' kernels':>16s}{name + ' ms':>12s}" for name in trees))
    for op in ops:
        cells = []
        for name in trees:
            counts = [run[op][0] for run in results[name]]
            times = [run[op][1] for run in results[name]]
            cells.append(f"{statistics.median(counts):16.0f}{statistics.median(times):12.1f}")
        print(f"{op:26s}" + "".join(cells))


if __name__ == "__main__":
    main()
