"""A/B in one process: the interleave count of loops computing polynomial math (``loop_hints.math_interleave``,
``CpuTarget.polynomial_interleave``: 4 with AVX2, 2 with AVX-512 since session 19) at the given counts, rebuilt by
patching ``loop_hints.math_interleave``, two builds each, called interleaved, medians per build and count/base.
A count written with an ``s`` (``2s``) also keeps a softmax's row-cached sum in its exp loop
(``stages.SUM_ROW_CACHE_APART`` off: AVX-512's code; with AVX2's 16 registers the sum runs in a loop of its own);
with ``bN`` (``4b8``) softmax's exp loop (and the spread groups of the online log-sum-exp, where the target has them)
runs in groups of N lines (``prefetch.MEMORY_BURST_LINES``, 16: each group after the prefetches of its lines of the
next row, and followed by the delayed write of the previous row's); with ``aN`` (``4a2``) the spread prefetches
fetch the row N rows ahead instead of the next one (session 25).

``--lookup gelu,sigmoid`` (session 25 table25) instead times a bf16 unary function's forms over L1-resident bf16
inputs (``microkernels.bf16_math_module``: the polynomial with its rounding, a 65536-entry table read by scalar
loads as LLVM vectorizes them, of 16 bits or of 32 as the kernels read it, and by explicit ``vpgatherdd``), on normal, uniform(-6, 6) and uniform-bits inputs,
interleaved rounds, medians in ns per element; the table is the polynomial form's output over all 65536 inputs,
and every form's output is checked equal to the polynomial's.

Rows and method: ``variant_ab.py`` (softmax, L2-resident softmax, gelu*sigmoid, cross-entropy; every count's
softmax output compared bit for bit with the base's). Run under ``/work/bin/heavy x`` (docs/performance.md)."""

import argparse
import contextlib
import math
import os
import sys

from llvmlite import ir

sys.path.insert(0, "benchmarks")

import variant_ab  # noqa: E402  (first: it sets the cache environment before neuroncc is imported)
import bench_softmax_parts as bsp  # noqa: E402
from neuroncc.codegen.llvm import emit, loop_hints, prefetch, stages  # noqa: E402
from neuroncc.codegen.llvm.context import Ahead  # noqa: E402
from neuroncc.codegen.llvm.scalars import I64, storage_type  # noqa: E402


def _rows_ahead(rows: int):
    """``prefetch.next_row`` for the row ``rows`` rows past the current one: the spread prefetches' distance."""
    def next_row(em, layout, outer, locality=3):
        nearest = prefetch.next_row(em, layout, outer, locality)
        row = math.prod(layout.shape[len(outer):])
        return Ahead(lambda i: em.b.gep(nearest.at(i), [ir.Constant(I64, (rows - 1) * row)],
                                        source_etype=storage_type(layout.dtype), inbounds=False), nearest.itemsize,
                     locality=locality)
    return next_row


@contextlib.contextmanager
def interleaved(spec: str):
    """Kernels built as ``spec`` says: "4" (the interleave count), "4s" (and the sum in the exp loop), "4b8" (and
    groups of 8 lines), "4a2" (and the spread prefetches 2 rows ahead, not the next row)."""
    spec, _, rows = spec.partition("a")
    head, _, burst = spec.partition("b")
    count = int(head.rstrip("s"))
    with bsp.patched(loop_hints, "math_interleave", lambda target: count), \
            bsp.patched(stages, "SUM_ROW_CACHE_APART", stages.SUM_ROW_CACHE_APART and not head.endswith("s")), \
            bsp.patched(prefetch, "MEMORY_BURST_LINES", int(burst) if burst else prefetch.MEMORY_BURST_LINES), \
            bsp.patched(emit, "next_row", _rows_ahead(int(rows)) if rows else emit.next_row):
        yield


def lookup_main(names: list[str], args: argparse.Namespace) -> None:
    """The ``--lookup`` A/B (module docstring)."""
    import statistics
    import time

    import numpy as np
    import torch

    import microkernels as mk
    from neuroncc.hardware.host import host_cpu

    target = host_cpu()
    rng = np.random.default_rng(0)
    size = 2 * mk.MATH_BLOCK
    as_bits = lambda v: torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().copy()
    inputs = {"normal": as_bits(rng.standard_normal(size)), "uniform(-6,6)": as_bits(rng.uniform(-6, 6, size)),
              "uniform bits": rng.integers(-(1 << 15), 1 << 15, size, dtype=np.int16)}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for name in names:
            table = mk.bf16_table(name, target)
            calls, elements = {}, 0
            for data, x in inputs.items():
                for form in mk.BF16_MATH_FORMS:
                    call, y, elements = mk.bf16_math_runner(name, target, form, x, table, threads)
                    call()
                    np.testing.assert_array_equal(y, table[1:-1][x.view(np.uint16)])
                    calls[(data, form)] = call
            times = {key: [] for key in calls}
            for _ in range(args.rounds):
                for key, call in calls.items():
                    start = clock()
                    call()
                    times[key].append(clock() - start)
            print(f"{name}, threads {threads}, load {os.getloadavg()[0]:.2f}, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, {args.rounds} rounds (ns per element, "
                  f"/ polynomial)", flush=True)
            for data in inputs:
                base = statistics.median(times[(data, "polynomial")])
                print(f"  {data:14s} " + "  ".join(
                    f"{form} {statistics.median(times[(data, form)]) / elements * 1e9:6.3f} "
                    f"({statistics.median(times[(data, form)]) / base:.3f})" for form in mk.BF16_MATH_FORMS),
                    flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    variant_ab.add_arguments(parser)
    parser.add_argument("--counts", default="4,2,8",
                        help="interleave counts, the first the base (default 4,2,8); a count with an s (2s) also "
                        "keeps softmax's sum in its exp loop, with bN (4b8) groups of N lines, with aN (4a2) the "
                        "prefetches N rows ahead")
    parser.add_argument("--lookup", default="",
                        help="bf16 functions (gelu,sigmoid) whose polynomial and table forms are timed instead")
    args = parser.parse_args()
    if args.lookup:
        lookup_main(args.lookup.split(","), args)
        return
    variants = {f"interleave-{spec}": (lambda spec=spec: interleaved(spec)) for spec in args.counts.split(",")}
    variant_ab.compare(variants, args)


if __name__ == "__main__":
    main()
