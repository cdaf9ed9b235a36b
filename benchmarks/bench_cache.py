"""Warm-load time of cached artifacts vs compiling, by graph size (medians of interleaved repetitions).

    PYTHONPATH=. python benchmarks/bench_cache.py [--target interp] [--repeat 15]

For each graph: `compile` = compile_graph without the cache; `warm` = compile_graph through a cache that holds
the entry (key + read + sha256 of every file + parse + target load), and its parts: `key` (canonical print +
hashing), `verify` (manifest + file sha256s) and `read+load` (parse graph.nir, np.load constants, target loader).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
if any(os.environ.get(k) != v for k, v in _MALLOC.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **_MALLOC})

import numpy as np  # noqa: E402

from neuroncc.ir import Builder, DenseAttr, DType, Function, TensorType  # noqa: E402
from neuroncc.driver.artifact import ARTIFACT_CODECS, read_artifact, verify_artifact  # noqa: E402
from neuroncc.driver.cache import CompileCache  # noqa: E402
from neuroncc.driver.process_cache import CacheStats  # noqa: E402
from neuroncc.driver.cache_key import compute_key  # noqa: E402
from neuroncc.driver.compile import compile_graph, make_request  # noqa: E402


def mlp(layers: int, width: int, elementwise: int) -> Function:
    """``layers`` dense layers with width x width constant weights, then a chain of ``elementwise`` ops."""
    rng = np.random.default_rng(0)
    b = Builder(f"mlp{layers}x{width}")
    h = b.param(TensorType((16, width), DType.f32), "x")
    for _ in range(layers):
        w = b.op("constant", value=DenseAttr(rng.standard_normal((width, width)).astype(np.float32) / width))
        h = b.op("relu", b.op("mm", h, w))
    for i in range(elementwise):
        h = b.op(("tanh", "sigmoid", "neg")[i % 3], h)
    return b.build([h])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="interp")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    graphs = [("small", mlp(1, 64, 4)), ("medium", mlp(4, 256, 100)), ("large", mlp(8, 512, 400))]
    print(f"target {args.target}; medians of {args.repeat} interleaved runs, milliseconds")
    print(f"{'graph':8} {'ops':>5} {'consts':>9}  {'compile':>8} {'warm':>8}  {'key':>7} {'verify':>7} "
          f"{'read+load':>9}")
    with tempfile.TemporaryDirectory() as root:
        for name, fn in graphs:
            cache = CompileCache(Path(root) / name, stats=CacheStats())
            compile_graph(fn, target=args.target, cache=cache)  # fill
            request = make_request(fn, target=args.target)
            entry = cache.entry_dir(compute_key(request).key)
            codec = ARTIFACT_CODECS[args.target]
            samples: dict[str, list[float]] = {k: [] for k in ("compile", "warm", "key", "verify", "load")}
            for _ in range(args.repeat):  # interleave the measurements
                for label, run in (
                    ("compile", lambda: compile_graph(fn, target=args.target, cache=None)),
                    ("warm", lambda: compile_graph(fn, target=args.target, cache=cache)),
                    ("key", lambda: compute_key(request)),
                    ("verify", lambda: verify_artifact(entry)),
                    ("load", lambda: read_artifact(entry, codec)),
                ):
                    start = time.perf_counter()
                    run()
                    samples[label].append((time.perf_counter() - start) * 1e3)
            assert cache.stats.compiles == 1 and cache.stats.hits == args.repeat
            med = {k: statistics.median(v) for k, v in samples.items()}
            consts = sum(p.stat().st_size for p in entry.glob("constants.npz")) / 2**20
            ops = sum(1 for _ in fn.walk())
            print(f"{name:8} {ops:5d} {consts:7.2f}MB  {med['compile']:8.2f} {med['warm']:8.2f}  {med['key']:7.2f} "
                  f"{med['verify']:7.2f} {med['load'] - med['verify']:9.2f}")


if __name__ == "__main__":
    main()
