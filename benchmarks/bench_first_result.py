"""Warm starts as users meet them: from process start to the first result, every program already cached.

    python benchmarks/bench_first_result.py [--trees base=/tmp/base,this=.] [--rounds 5]

Three users, each a fresh process over a compile cache its tree filled before (one cold process per user and
tree, untimed; neuroncc's sources are part of the cache key, so every tree has its own cache directory):

    compiled   ``torch.compile(model, backend="neuron")`` of a two-block MLP with LayerNorm and GELU (8x64),
               its first call under ``torch.no_grad()`` (the graph cache's hit: docs/torch-backend.md)
    eager      a small training loop on the ``neuron`` device (Linear-ReLU-Linear, cross-entropy, SGD): its
               first step, ``.item()`` of the loss included (the signature index's hits: docs/device.md)
    run        ``neuroncc run model.pt2 --random`` of an exported Linear-ReLU-Linear-softmax (docs/cli.md)

Each is checked against CPU eager in its own process (the same values, or the run fails). Columns: "process s"
is the whole process, start to exit, as a shell would time it; "first s" is the first call (compiled), the first
step (eager), or the load from the compile cache that ``run`` prints (its "loaded from the compile cache in").
Rounds are interleaved by tree and user; medians and min-max; the ratio is to the first tree. neuroncc's bytecode
is compiled first (``compileall``), as an installed package has it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}

_COMPILED = r"""
import json, time
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


torch.manual_seed(0)
model = nn.Sequential(Block(), Block(), nn.Linear(64, 10))
x = torch.randn(8, 64)
compiled = torch.compile(model, backend="neuron")
start = time.perf_counter()
with torch.no_grad():
    y = compiled(x)
first = time.perf_counter() - start
with torch.no_grad():
    assert torch.allclose(y, model(x), rtol=1e-4, atol=1e-5)
print(json.dumps({"first_s": first}))
"""

_EAGER = r"""
import json, time
import torch
import torch.nn as nn
import neuroncc

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
reference = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
reference.load_state_dict(model.state_dict())
model.to("neuron")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
x, t = torch.randn(16, 32), torch.randint(0, 4, (16,))


def step(m, o, x, t):
    o.zero_grad()
    loss = nn.functional.cross_entropy(m(x), t)
    loss.backward()
    o.step()
    return loss.item()


start = time.perf_counter()
loss = step(model, optimizer, x.to("neuron"), t.to("neuron"))
first = time.perf_counter() - start
assert abs(loss - step(reference, reference_optimizer, x, t)) < 1e-5
for a, b in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(a.cpu(), b, rtol=1e-4, atol=1e-6)
print(json.dumps({"first_s": first}))
"""

_EXPORT = r"""
import sys
import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 64), nn.Linear(64, 4)

    def forward(self, x):
        return torch.softmax(self.l2(torch.relu(self.l1(x))), -1)


torch.manual_seed(0)
torch.export.save(torch.export.export(M(), (torch.randn(8, 16),)), sys.argv[1])
"""

USERS = ("compiled", "eager", "run")


def _command(user: str, work: str) -> list[str]:
    if user == "run":
        return [sys.executable, "-m", "neuroncc.cli", "run", os.path.join(work, "model.pt2"), "--random", "--check"]
    return [sys.executable, "-c", {"compiled": _COMPILED, "eager": _EAGER}[user]]


def _once(user: str, tree: str, cache: str, work: str, warm: bool = True) -> tuple[float, float]:
    env = dict(os.environ, **_MALLOC, NEURONCC_CACHE_DIR=cache,
               PYTHONPATH=os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p))
    start = time.perf_counter()
    out = subprocess.run(_command(user, work), env=env, cwd=work, capture_output=True, text=True, timeout=300)
    process = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(f"{user} ({tree}) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    if user == "run" and warm:
        found = re.search(r"loaded from the compile cache in ([0-9.]+) ms", out.stdout)
        if not found or "check passed" not in out.stdout:
            raise SystemExit(f"run ({tree}) was not a checked cache hit:\n{out.stdout[-2000:]}")
        return process, float(found.group(1)) / 1e3
    if user == "run":
        return process, 0.0
    return process, json.loads(out.stdout.strip().splitlines()[-1])["first_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default="this=.", help="name=DIR,... source trees to A/B")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--users", default=",".join(USERS))
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [(name, os.path.abspath(here if path in ("", ".") else path))
             for name, path in (item.partition("=")[::2] for item in args.trees.split(","))]
    users = args.users.split(",")
    for _, tree in trees:
        compileall.compile_dir(os.path.join(tree, "neuroncc"), quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench_first_result.") as work:
        subprocess.run([sys.executable, "-c", _EXPORT, os.path.join(work, "model.pt2")], check=True, timeout=300)
        caches = {name: os.path.join(work, f"cache-{name}") for name, _ in trees}
        for name, tree in trees:  # cold: fill each tree's cache (untimed)
            for user in users:
                _once(user, tree, caches[name], work, warm=False)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {(u, n): [] for u in users for n, _ in trees}
        for round_ in range(args.rounds):
            for user in users:
                for name, tree in (trees if round_ % 2 == 0 else trees[::-1]):
                    times[user, name].append(_once(user, tree, caches[name], work))
    print(f"{args.rounds} rounds, fresh processes, warm caches; median (min-max) s, ratio to {trees[0][0]}")
    print(f"  {'user':9} {'tree':8} {'process s':>22} {'first s':>24}")
    for user in users:
        base = [statistics.median(column) for column in zip(*times[user, trees[0][0]])]
        for name, _ in trees:
            cells = []
            for index, column in enumerate(zip(*times[user, name])):
                med = statistics.median(column)
                cells.append(f"{med:7.3f} ({min(column):.3f}-{max(column):.3f}) x{med / base[index]:.2f}")
            print(f"  {user:9} {name:8} {cells[0]:>22} {cells[1]:>24}")


if __name__ == "__main__":
    main()
