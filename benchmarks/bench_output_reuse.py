"""A/B of session 32's output reuse (``neuroncc/frontend/output_reuse.py``): a compiled graph's large output written
into the memory of one its caller has dropped, in one process, as a user calls the rows.

Each row's function (kernel_cases: roofline.py's rows) through ``torch.compile(backend="neuron")`` twice, with
code objects of their own: "fresh" compiled with the reuse switched off (a fresh ``torch.empty_strided`` output
each call, main's call), "reuse" as committed; beside them eager, Inductor and the kernel alone into an output held between
calls (the direct call's address call). All interleaved in a fresh random order each round; each implementation
keeps its previous result until its next call returns, as a loop ``y = f(x)`` does (``--drop``: dropped before
the next call). Medians, the per-round fresh/reuse ratio, minor page faults per call.

``--null``: "fresh" compiled as committed too (the A/B's own spread). Run under the benchmarks' malloc settings:
``/work/bin/heavy x python benchmarks/bench_output_reuse.py --rows a,b,c --threads 2,1``; under glibc's defaults
(an output of 32 MiB or more mapped anew each call): ``/work/bin/heavy s python ... --glibc-defaults``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MALLOC_ENV, ensure_environment, record_compiled_graphs, settle_neuroncc  # noqa: E402

if "--glibc-defaults" not in sys.argv:
    ensure_environment(threads=2)
elif any(name in os.environ for name in MALLOC_ENV):
    sys.exit("glibc's defaults asked for, but MALLOC_* variables are set (heavy x sets them: use heavy s)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from call_path_rows import _fresh_function  # noqa: E402
from kernel_cases import cases  # noqa: E402
from neuroncc.frontend import direct_call  # noqa: E402

made = record_compiled_graphs()


class _NoReuse:
    """OutputRing's interface, never giving memory back: main's call."""

    def take(self):
        return None

    def keep(self, tensor):
        pass


def _compiled(case, threads: int, ring):
    """The row through torch.compile with ``ring`` as the direct call's OutputRing (bound when the one-frame call
    is made). One build (``quick_first`` off): a background build arriving later would make a new direct call."""
    saved_ring = direct_call.OutputRing
    direct_call.OutputRing = ring
    try:
        function = torch.compile(_fresh_function(case.eager), backend="neuron",
                                 options={"threads": threads, "quick_first": False})
        inputs = case.make(np.random.default_rng(0))
        for _ in range(4):
            function(*inputs)
    finally:
        direct_call.OutputRing = saved_ring
    return function


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="a,b,c")
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--glibc-defaults", action="store_true")
    parser.add_argument("--drop", action="store_true", help="each result dropped before the next call")
    parser.add_argument("--null", action="store_true", help="'fresh' as committed too (the A/B's own noise)")
    args = parser.parse_args()
    print(f"{time.strftime('%H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}, malloc: "
          f"{'glibc defaults' if args.glibc_defaults else 'the benchmarks settings'}, "
          f"{'dropped before the next call' if args.drop else 'kept until the next call returns'}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for case in (c for c in cases() if c.key in args.rows.split(",") and c.setup is None):
            inputs = case.make(np.random.default_rng(0))
            first = len(made)
            fresh = _compiled(case, threads, direct_call.OutputRing if args.null else _NoReuse)
            graph = made[first]
            reuse = _compiled(case, threads, direct_call.OutputRing)
            inductor = torch.compile(_fresh_function(case.eager))
            direct = graph.direct
            addresses = [t.data_ptr() for t in inputs]
            held = direct.launch(addresses)
            pointers = [t.data_ptr() for t in held]
            impls = {"eager": lambda: case.eager(*inputs), "inductor": lambda: inductor(*inputs),
                     "kernel alone (held output)": lambda: direct.run(addresses, pointers),
                     "fresh": lambda: fresh(*inputs),
                     "reuse": lambda: reuse(*inputs)}
            for _ in range(3):
                for call in impls.values():
                    call()
            settle_neuroncc(impls)
            names, order = list(impls), random.Random(0x5EED)
            samples: dict[str, list[float]] = {name: [] for name in names}
            faults = {name: 0 for name in names}
            last: dict[str, object] = {}
            results: dict[str, list[int]] = {"fresh": [], "reuse": []}  # the first output addresses, for the print
            for _ in range(args.repeats):
                order.shuffle(names)
                for name in names:
                    if args.drop:
                        last.pop(name, None)
                    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    start = clock()
                    result = impls[name]()
                    samples[name].append(clock() - start)
                    faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
                    last[name] = result  # the previous result dropped here, after the call: y = f(x)
                    if name in results and len(results[name]) < 6:
                        results[name].append(result.data_ptr())
                    del result
            distinct = {name: len(set(addresses)) for name, addresses in results.items()}
            ratios = sorted(f / r for f, r in zip(samples["fresh"], samples["reuse"]))
            print(f"{case.title}, {threads} thread(s), {args.repeats} rounds: " + ", ".join(
                f"{name} {statistics.median(times) * 1e3:.3f} ms ({faults[name] / args.repeats:.0f} faults)"
                for name, times in samples.items())
                + f"; fresh/reuse per round: median {statistics.median(ratios):.3f}, "
                  f"quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[3 * len(ratios) // 4]:.3f}; distinct output "
                  f"addresses in 6 calls: {distinct}", flush=True)
            last.clear()


if __name__ == "__main__":
    main()
