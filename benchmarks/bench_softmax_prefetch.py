"""Float32 softmax [4096, 1024]'s kernel in prefetch variants, A/B in one process, on the same pages for every build.

Between processes and between buffers of one process the same kernel's time moves by up to ~50% on Zen 4 (which
physical pages its input and output got: session 33's "page lottery"), and a call right after another call on the
same input finds part of it in the L3. So every build here runs on the same memory: ``--pairs`` inputs and as many
outputs (the outputs placed as the product places them, ``variant_ab._placed_like``) are made, the first variant's
first build is timed on every input/output pair (7 rounds), and every build is then timed on the fastest and on the
slowest pair, each timed call right after an untimed call of the first build on a third pair (so that no call finds
its input in the L3 from the call before; ``--no-flush``: without it), in a fresh random order each round. Two
builds per variant; every build's output bits are checked equal to the first's. Printed: medians, each over the
first variant's (the mean of its two builds), and the median of the per-round ratios.

Variants (``--variants``, comma-separated; ``a+b`` both): ``t0`` / ``t2``: the next row's prefetches in the exp
pass with ``prefetcht0`` / ``prefetcht2`` (``CpuTarget.prefetches_the_next_row_into_l2_in_the_exp_pass`` off / on:
Zen 4's default is ``t2``, session 34); ``flag`` / ``flagless``: the next row's max in the exp loop with / without
its NaN magnitudes (``CpuTarget.finds_next_row_max_nans_by_the_sum`` off / on: Zen 4's default is ``flagless``,
session 36); ``none``: no software prefetch (the same groups); ``locN``: every prefetch with LLVM's locality N (3
``prefetcht0``, 2 ``prefetcht1``, 1 ``prefetcht2``, 0 ``prefetchnta``); ``headL.F``: only the first F of each
group's 16 lines, with locality L; ``aN``: N rows ahead instead of the next row; ``spreadL``:
no bursts, each block of the fused exp loop (``delayed_writes.DelayedGroups.fused``) followed by the prefetches of
its own lines of the next row (two per 32 float32), with locality L.

    /work/bin/heavy x python benchmarks/bench_softmax_prefetch.py --threads 1 --variants t0,t2,none [--rounds 41]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import time

import variant_ab  # noqa: I001  (first: it sets the cache environment before neuroncc is imported)
import bench_math_interleave as bmi
import bench_softmax_parts as bsp
import kernel_cases as kc
import numpy as np
import torch
from llvmlite import ir

from neuroncc.codegen.llvm import delayed_writes, emit, prefetch
from neuroncc.codegen.llvm.scalars import I8, I32, I64
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CACHE_LINE_BYTES, CpuTarget

SHAPE = (4096, 1024)


def _lines(locality: int | None, first: int | None = None, none: bool = False):
    """``prefetch._prefetch_lines`` with every prefetch at ``locality`` (None: each stream's own), only the
    ``first`` lines of a group, or none."""
    def lines(em, intrinsic, ahead, start, elements):
        for stream in () if none else ahead:
            base = stream.at(start)
            count = -(-elements * stream.itemsize // CACHE_LINE_BYTES)
            for line in range(count if first is None else min(first, count)):
                address = em.b.gep(base, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
                em.b.call(intrinsic, [address, ir.Constant(I32, int(stream.write)),
                                      ir.Constant(I32, stream.locality if locality is None else locality),
                                      ir.Constant(I32, 1)])
    return lines


def _spread(locality: int):
    """``delayed_writes._stream_piece`` that also prefetches the next row's lines of the fused block it follows."""
    stream_piece = delayed_writes._stream_piece

    def piece(em, buffer, target, index, width):
        stream_piece(em, buffer, target, index, width)
        intrinsic = prefetch._prefetch_intrinsic(em.b.module)
        for stream in (stream for stream in em._ahead if not stream.write):
            base = stream.at(index[-1])
            for line in range(-(-width * stream.itemsize // CACHE_LINE_BYTES)):
                address = em.b.gep(base, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
                em.b.call(intrinsic, [address, ir.Constant(I32, 0), ir.Constant(I32, locality), ir.Constant(I32, 1)])
    return piece


def variant(spec: str):
    @contextlib.contextmanager
    def patched():
        with contextlib.ExitStack() as stack:
            for part in spec.split("+"):
                if part in ("t0", "t2"):
                    stack.enter_context(bsp.patched(CpuTarget, "prefetches_the_next_row_into_l2_in_the_exp_pass",
                                                    property(lambda self, on=part == "t2": on)))
                elif part in ("flag", "flagless"):
                    stack.enter_context(bsp.patched(CpuTarget, "finds_next_row_max_nans_by_the_sum",
                                                    property(lambda self, on=part == "flagless": on)))
                elif part == "none":
                    stack.enter_context(bsp.patched(prefetch, "_prefetch_lines", _lines(None, none=True)))
                elif part.startswith("loc"):
                    stack.enter_context(bsp.patched(prefetch, "_prefetch_lines", _lines(int(part[3:]))))
                elif part.startswith("head"):
                    locality, first = part[4:].split(".")
                    stack.enter_context(bsp.patched(prefetch, "_prefetch_lines", _lines(int(locality), int(first))))
                elif part.startswith("spread"):  # spreadL: each fused block's own lines (2), locality L, no bursts
                    stack.enter_context(bsp.patched(prefetch, "_prefetch_lines", _lines(None, none=True)))
                    stack.enter_context(bsp.patched(delayed_writes, "_stream_piece", _spread(int(part[6:]))))
                elif part.startswith("a"):
                    stack.enter_context(bsp.patched(emit, "next_row", bmi._rows_ahead(int(part[1:]))))
                else:
                    raise SystemExit(f"unknown variant part {part!r}")
            yield
    return patched


def _timed(calls: dict, rounds: int, clock, before=None) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {key: [] for key in calls}
    order = random.Random(1)
    for _ in range(rounds):
        keys = list(calls)
        order.shuffle(keys)
        for key in keys:
            if before is not None:
                before()
            start = clock()
            calls[key]()
            times[key].append(clock() - start)
    return times


def compare(names: list[str], threads: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter  # 1 thread: CPU time of this thread
    source = torch.from_numpy(np.random.default_rng(4096).standard_normal(SHAPE).astype(np.float32) * 4)
    xs = [torch.empty(SHAPE).copy_(source) for _ in range(args.pairs)]
    outs = [variant_ab._placed_like(xs[0]) for _ in range(args.pairs)]
    exes = {}
    for build in (1, 2):
        for name in names:
            with variant(name)():
                exes[f"{name} {build}"] = build_cpu_executable(kc.softmax_graph(*SHAPE), {"threads": threads})
    first = exes[f"{names[0]} 1"]
    probes = {(i, j): bsp.step_call(first, xs[i], outs[j]) for i in range(args.pairs) for j in range(args.pairs)}
    probed = {key: statistics.median(v) for key, v in _timed(probes, 7, clock).items()}
    ranked = sorted(probed, key=probed.get)
    pairs = {"fastest": ranked[0], "slowest": ranked[-1]}
    spare = next((i, j) for i in range(args.pairs) for j in range(args.pairs)
                 if i not in (ranked[0][0], ranked[-1][0]) and j not in (ranked[0][1], ranked[-1][1]))
    flush = None if args.no_flush else bsp.step_call(first, xs[spare[0]], outs[spare[1]])
    print(f"threads {threads}: the first build on each input/output pair (ms): "
          + " ".join(f"{i}{j}:{probed[(i, j)] * 1e3:.2f}" for i, j in sorted(probed)), flush=True)
    calls, reference = {}, {}
    for pair, (i, j) in pairs.items():
        for key, exe in exes.items():
            step = bsp.step_call(exe, xs[i], outs[j])
            outs[j].fill_(0)
            step()
            if pair not in reference:
                reference[pair] = outs[j].clone()
            elif not torch.equal(outs[j], reference[pair]):
                raise SystemExit(f"{key} on the {pair} pair: other bits than {names[0]} 1's")
            calls[f"{pair} {key}"] = step
    times = _timed(calls, args.rounds, clock, flush)
    print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M', time.gmtime())} UTC, "
          f"{args.rounds} rounds, {'no flush' if flush is None else 'flushed'}: median ms, / {names[0]}, "
          "median of the per-round ratios", flush=True)
    for pair in pairs:
        base = [(a + b) / 2 for a, b in zip(times[f"{pair} {names[0]} 1"], times[f"{pair} {names[0]} 2"])]
        for name in names:
            for build in (1, 2):
                got = times[f"{pair} {name} {build}"]
                print(f"  {pair} {name} {build}: {statistics.median(got) * 1e3:.3f} ms "
                      f"{statistics.median(got) / statistics.median(base):.3f} "
                      f"{statistics.median([a / b for a, b in zip(got, base)]):.3f}")
        for name in names[1:]:
            mean = [(a + b) / 2 for a, b in zip(times[f"{pair} {name} 1"], times[f"{pair} {name} 2"])]
            print(f"  {pair}: {name} / {names[0]} {statistics.median(mean) / statistics.median(base):.3f} "
                  f"(per round {statistics.median([a / b for a, b in zip(mean, base)]):.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1", help="thread counts, comma-separated (each best in a process)")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--variants", default="t0,t2,none")
    parser.add_argument("--pairs", type=int, default=4, help="inputs and outputs made (pairs probed: its square)")
    parser.add_argument("--no-flush", action="store_true", help="no untimed call on other buffers before each")
    args = parser.parse_args()
    names = args.variants.split(",")
    for threads in (int(t) for t in args.threads.split(",")):
        compare(names, threads, args)


if __name__ == "__main__":
    main()
