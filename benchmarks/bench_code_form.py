"""The kernel rows' code in both code forms, in one process: a shared library (position-independent, small code
model, loaded by dlopen: what artifacts hold where a linker is found) against objects for MCJIT (static, large
code model: the form without a linker, and every artifact's before session 14).

    python benchmarks/bench_code_form.py [--rows a,b,c] [--threads 1] [--repeats 15]

Each row's graph (``kernel_cases.py``, the rows with a graph of their own) is built twice, the objects form by
hiding the linker (``native_library.linker``); the two executables must give bitwise the same results, then they
run interleaved (``common.interleaved``; 1 thread: the calling thread's CPU time, else wall clock). The table
shows each form's median and shared/objects.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402

from kernel_cases import cases  # noqa: E402
from neuroncc.codegen.llvm import native_library  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402


def build(graph, threads: int, linker: bool):
    real = native_library.linker
    if not linker:
        native_library.linker = lambda: None
    try:
        return build_cpu_executable(graph, {"threads": threads})
    finally:
        native_library.linker = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="a,b,c,c'")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    wanted = args.rows.split(",")
    rng = np.random.default_rng(0)
    rows = []
    for case in [c for c in cases() if c.key in wanted and c.graph is not None]:
        arrays = [t.numpy() for t in case.make(rng)]
        shared, objects = build(case.graph, args.threads, True), build(case.graph, args.threads, False)
        assert (shared.plan.code_form, objects.plan.code_form) == ("shared-library", "objects")
        for a, b in zip(shared(*arrays), objects(*arrays)):
            np.testing.assert_array_equal(a, b)
        clock = time.thread_time if args.threads == 1 else time.perf_counter
        times = interleaved({"shared": lambda: shared(*arrays), "objects": lambda: objects(*arrays)},
                            repeats=args.repeats, clock=clock)
        rows.append([case.title, str(args.threads), f"{times['shared'] * 1e3:.3f}", f"{times['objects'] * 1e3:.3f}",
                     f"{times['shared'] / times['objects']:.3f}"])
        print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["row", "threads", "shared library ms", "objects (MCJIT) ms", "shared/objects"]))


if __name__ == "__main__":
    main()
