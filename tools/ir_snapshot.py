#!/usr/bin/env python
"""Snapshots of the LLVM IR and launch plans neuroncc generates, to prove a code-generator refactoring changes
no kernel and no threading decision.

    # record every kernel the test suite compiles (all processes, subprocesses included)
    PYTHONPATH=tools/ir_snapshot NEURONCC_IR_SNAPSHOT=/tmp/before python -m pytest -n 2 -q
    # record the kernels of the benchmarks (bench_kernels.py graphs, bench_models.py rows, training included)
    PYTHONPATH=tools/ir_snapshot NEURONCC_IR_SNAPSHOT=/tmp/before python tools/ir_snapshot.py benchmarks
    # ... change the code generator, record again into /tmp/after, then
    python tools/ir_snapshot.py compare /tmp/before /tmp/after

A kernel is keyed by everything that decides its code (region text, parameter and output layouts, block
length, symbol, aligned argument slots: ``ir_snapshot/sitecustomize.py``), a launch plan (``plan.json``:
buffers, steps, each phase's ``n_outer``/``work``/``serial``) by its graph's hash; ``compare`` checks that every
key recorded on both sides has byte-identical text, prints the first differing kernel as a diff, and counts the keys
seen on one side only (randomized tests generate different graphs each run). Exit status 1 on a difference.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(directory: Path) -> tuple[dict[str, set[str]], int]:
    """key -> IR digests recorded under ``directory``, and the number of records."""
    kernels: dict[str, set[str]] = {}
    records = 0
    for index in directory.glob("index-*.tsv"):
        for line in index.read_text().splitlines():
            key, ir_sha, _ = line.split("\t")
            kernels.setdefault(key, set()).add(ir_sha)
            records += 1
    return kernels, records


def compare(before: Path, after: Path) -> int:
    a, a_records = load(before)
    b, b_records = load(after)
    common = sorted(set(a) & set(b))
    unstable = [k for k in common if len(a[k]) > 1 or len(b[k]) > 1]
    differing = [k for k in common if a[k] != b[k]]
    print(f"{before}: {len(a)} keys ({a_records} records); {after}: {len(b)} keys ({b_records} records)")
    for kind in ("kernel", "launch"):
        keys = [k for k in common if k.startswith(kind + ":")]
        bad = [k for k in differing if k.startswith(kind + ":")]
        print(f"{kind}: compared {len(keys)} recorded on both sides: {len(keys) - len(bad)} identical, "
              f"{len(bad)} differ; {len([k for k in set(a) - set(b) if k.startswith(kind)])} only before, "
              f"{len([k for k in set(b) - set(a) if k.startswith(kind)])} only after")
    print(f"{len(unstable)} keys with more than one text on one side")
    for key in differing[:1]:
        old = (before / "ir" / f"{sorted(a[key])[0]}.ll").read_text().splitlines()
        new = (after / "ir" / f"{sorted(b[key])[0]}.ll").read_text().splitlines()
        sys.stdout.writelines(line + "\n" for line in list(difflib.unified_diff(old, new, lineterm=""))[:200])
    return 1 if differing else 0


def benchmarks() -> None:
    """Compile (and run once) every benchmark graph and model row, so that the hook records their kernels."""
    if not os.environ.get("NEURONCC_IR_SNAPSHOT"):
        sys.exit("set NEURONCC_IR_SNAPSHOT and PYTHONPATH=tools/ir_snapshot (see the module docstring)")
    os.environ.setdefault("NEURONCC_DISABLE_CACHE", "1")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT))
    import common

    os.environ.update(common.MALLOC_ENV)  # else importing a benchmark re-executes this script to set them
    import bench_kernels
    import bench_models

    from neuroncc.executors.cpu.launcher import build_cpu_executable

    for label, graph, *_ in bench_kernels.CASES:
        build_cpu_executable(graph)
        print("compiled", label, flush=True)
    for row in bench_models.ROWS:
        bench_models.make_step(row, "neuron")()
        print("compiled and ran", bench_models.ROWS[row][0], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("benchmarks", help="record the kernels of the benchmark graphs and models")
    diff = commands.add_parser("compare", help="compare two snapshot directories")
    diff.add_argument("before", type=Path)
    diff.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "benchmarks":
        benchmarks()
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
