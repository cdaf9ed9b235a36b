"""``bench_cross_entropy.py --floor``: the cross-entropy kernels' elementwise arithmetic alone, each as an L1-resident
microkernel (``microkernels.math_throughput``) beside the exponential the roofline counts: how much of a kernel's
time its math needs before any memory traffic, loop structure or reduction chain (session 29's xent29)."""

from __future__ import annotations

import os
import time

import microkernels as mk
from common import table
from llvmlite import ir

from neuroncc.codegen.llvm import jit, mathlib

#: ``--floor``'s microkernels: name -> the element's arithmetic around ``exp_nonpositive`` (m, l, s: constants)
FLOORS = {
    "exp_nonpositive": None,
    "forward_nonpositive": lambda b, x, exp: exp(b.fsub(x, ir.Constant(ir.FloatType(), 0.25))),
    "backward_nonpositive": lambda b, x, exp: b.fsub(ir.Constant(ir.FloatType(), 0.0), b.fmul(exp(b.fsub(
        b.fsub(x, ir.Constant(ir.FloatType(), 0.25)), ir.Constant(ir.FloatType(), 0.5))),
        ir.Constant(ir.FloatType(), -0.0019))),
}


def floor(threads_list: str, elements: int) -> None:
    """Each kernel's elementwise arithmetic as a microkernel at each of ``threads_list``'s counts, timed as the
    time of ``elements`` elements."""
    target, exp = jit.host_target(), mathlib.POLYNOMIAL["exp_nonpositive"]
    rows = []
    try:
        for name, around in FLOORS.items():
            if around is not None:
                mathlib.POLYNOMIAL[name] = lambda b, x, t, around=around: around(b, x, lambda v: exp(b, v, t))
        for threads in [int(t) for t in threads_list.split(",")]:
            clock = time.thread_time if threads == 1 else time.perf_counter
            best = {name: 0.0 for name in FLOORS}
            for _ in range(5):  # (interleaved: the fastest of each)
                for name in FLOORS:
                    best[name] = max(best[name], mk.math_throughput(name, target, threads, clock))
            for name in FLOORS:
                count, per = mk.loop_instructions(name, target)
                rows.append([name, str(threads), f"{count} / {per}", f"{elements / best[name] * 1e3:.3f}",
                             f"{best['exp_nonpositive'] / best[name]:.3f}"])
            print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
    finally:
        for name, around in FLOORS.items():
            if around is not None:
                mathlib.POLYNOMIAL.pop(name, None)
    print(table(rows, ["math (L1-resident)", "threads", "vector instructions / elements", "ms per 512 x 32000",
                       "time / exp's"]))
