"""Warm loads of stored cpu artifacts, A/B across source trees: fresh processes, each loading every entry of
one compile cache through ``CompileCache.load_entry`` (manifest, every file's sha256, graph parse, the cpu
codec's load), rounds interleaved by tree; median ms per load and the steps' share (in-process probes).

    python benchmarks/bench_cache_load.py --cache DIR [--trees base=/work/main,this=.] [--rounds 7]
    python benchmarks/bench_cache_load.py --cache base=DIR1,this=DIR2 --trees base=/tmp/base,this=.

DIR: a filled cache directory, e.g. the one a cold ``bench_device.py --rows generate`` process fills
(NEURONCC_CACHE_DIR=DIR; 294 kernels of a tiny GPT-2's generate); its cpu entries are loaded (not the signature
index's graph entry). Trees of different artifact format versions (session 30: 3) each need a cache of their own
format, filled by that tree: ``--cache NAME=DIR,...`` names each tree's. torch is imported first (the BLAS steps'
library lookup needs it, as in every process that loads eager kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}

_SCRIPT = r"""
import json, os, sys, time
import torch
from pathlib import Path
from neuroncc.driver import artifact
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
from neuroncc.executors.cpu import launcher

spent = {}


def timed(owner, name, label):
    original = getattr(owner, name)
    record = spent.setdefault(label, 0.0)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)


probe = sys.argv[2] == "probe"
if probe:
    timed(artifact, "read_manifest", "read_manifest")
    timed(artifact, "verify_files", "verify_files")
    timed(artifact, "read_graph", "read_graph")
    timed(launcher, "load_code", "cpu: load_code")
    timed(launcher, "CpuExecutable", "cpu: CpuExecutable()")
    timed(launcher, "load_cpu_executable", "cpu codec (all)")
root = Path(sys.argv[1])
keys = sorted(key for key in os.listdir(root / "entries")  # cpu artifacts (not graph entries: the signature index)
              if json.loads((root / "entries" / key / "manifest.json").read_text())["target"] == "cpu")
cache = CompileCache(root, stats=CacheStats())
start = time.perf_counter()
for key in keys:
    assert cache.load_entry(key, "cpu") is not None, key
total = time.perf_counter() - start
print(json.dumps({"loads": len(keys), "total_s": total, "spent": spent}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", required=True, help="a filled compile cache directory, or NAME=DIR,... per tree")
    parser.add_argument("--trees", default="this=.", help="name=DIR,... source trees to A/B")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    named = [item.partition("=")[::2] for item in args.trees.split(",")]
    plain: dict[str, list[float]] = {name: [] for name, _ in named}
    probed: dict[str, list[dict]] = {name: [] for name, _ in named}
    for round_ in range(args.rounds):
        order = named if round_ % 2 == 0 else named[::-1]
        for mode in ("plain", "probe"):
            for name, tree in order:
                root = os.path.abspath(here if tree in ("", ".") else tree)
                env = dict(os.environ, **_MALLOC,
                           PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
                cache = dict(item.partition("=")[::2] for item in args.cache.split(",")).get(name, args.cache) \
                    if "=" in args.cache else args.cache
                out = subprocess.run([sys.executable, "-c", _SCRIPT, cache, mode], env=env, cwd="/",
                                     capture_output=True, text=True, timeout=600)
                if out.returncode:
                    raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                if mode == "plain":
                    plain[name].append(result["total_s"] / result["loads"] * 1e3)
                else:
                    probed[name].append({k: v / result["loads"] * 1e3 for k, v in result["spent"].items()})
    base = statistics.median(plain[named[0][0]])
    print(f"{args.rounds} rounds, fresh processes, ms per load (median, min-max), ratio to {named[0][0]}")
    for name, _ in named:
        values = plain[name]
        med = statistics.median(values)
        print(f"  {name:8} {med:6.3f} ({min(values):.3f}-{max(values):.3f})  x{med / base:.3f}")
    print("probed runs, ms per load (median):")
    labels = list(probed[named[0][0]][0])
    print(f"  {'step':24}" + "".join(f"{name:>10}" for name, _ in named))
    for label in labels:
        print(f"  {label:24}" + "".join(f"{statistics.median(r[label] for r in probed[name]):10.3f}"
                                          for name, _ in named))


if __name__ == "__main__":
    main()
