"""A/B of session 28's huge pages for fresh large outputs (``neuroncc/hardware/pages.py``), in one process, as a user
calls the rows: under glibc's default malloc settings (no ``MALLOC_*`` variables: an output of 32 MiB or more is
mapped anew each call and faulted in by the kernel), or with ``--malloc-env`` under the benchmarks' settings (the
output reuses a heap block: the change then costs its one ``mincore`` a call).

Each row's function (kernel_cases: roofline.py's rows) through ``torch.compile(backend="neuron")`` twice, with code
objects of their own: "before" compiled with the advice switched off (the direct call takes the function when it is
made), "after" as committed; the two calls and eager interleaved in a fresh random order each round; medians, the
per-round before/after ratio, minor page faults per call.

``--null``: both compiled as committed, the A/B's own spread. Run: ``/work/bin/heavy s python benchmarks/bench_output_pages.py --rows c,rms --threads 2,1`` (glibc's defaults:
``heavy x`` sets the benchmarks' malloc variables, so pass ``--malloc-env`` under it).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MALLOC_ENV, ensure_environment, interleaved_samples, settle_neuroncc  # noqa: E402

if "--malloc-env" in sys.argv:
    ensure_environment(threads=2)
elif any(name in os.environ for name in MALLOC_ENV):
    sys.exit("glibc's defaults asked for, but MALLOC_* variables are set (heavy x sets them: pass --malloc-env)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from call_path_rows import _fresh_function  # noqa: E402
from kernel_cases import cases  # noqa: E402
from neuroncc.hardware import pages  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="c,rms")
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--malloc-env", action="store_true")
    parser.add_argument("--null", action="store_true", help="both calls as committed (the A/B's own noise)")
    args = parser.parse_args()
    advise = pages.advise_fresh_huge_pages
    print(f"{time.strftime('%H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}, malloc: "
          f"{'the benchmarks settings' if args.malloc_env else 'glibc defaults'}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for case in (c for c in cases() if c.key in args.rows.split(",") and c.setup is None):
            inputs = case.make(np.random.default_rng(0))
            compiled = {}
            off = advise if args.null else (lambda address, nbytes: False)
            for name, function in (("before", off), ("after", advise)):
                pages.advise_fresh_huge_pages = function
                try:
                    compiled[name] = torch.compile(_fresh_function(case.eager), backend="neuron",
                                                   options={"threads": threads})
                    for _ in range(3):
                        compiled[name](*inputs)
                finally:
                    pages.advise_fresh_huge_pages = advise
            impls = {"eager": lambda: case.eager(*inputs)}
            impls.update({name: (lambda fn=fn: fn(*inputs)) for name, fn in compiled.items()})
            settle_neuroncc(impls)
            samples = interleaved_samples(impls, repeats=args.repeats, warmup=2, clock=clock)
            faults = {}
            for name, call in impls.items():
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                for _ in range(5):
                    call()
                faults[name] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
            ratios = sorted(b / a for b, a in zip(samples["before"], samples["after"]))
            print(f"{case.title}, {threads} thread(s): " + ", ".join(
                f"{name} {statistics.median(times) * 1e3:.2f} ms ({faults[name]:.0f} faults a call)"
                for name, times in samples.items())
                + f"; before/after per round: median {statistics.median(ratios):.3f}, min {ratios[0]:.3f}, "
                  f"max {ratios[-1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
