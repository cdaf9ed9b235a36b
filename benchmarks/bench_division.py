"""Float32 true division with eager's bits (``codegen/llvm/division.py``: a plain ``fdiv``) against the reciprocal
multiply of before session 45 (every division ``arcp``: LLVM hoisted 1/c out of the loop for a loop-invariant
divisor), in one process: each kernel built twice per variant (ABAB), the four builds' calls interleaved in a
shuffled order (``common.interleaved``; 1 thread: the calling thread's CPU time, else wall clock), medians and
their ratio to the first "reciprocal" build.

    /work/bin/heavy x python benchmarks/bench_division.py [--cases scalar,zerod,col,row] [--threads 1,2]
        [--repeats 41] [--shape 4096,1024] [--rows ce,adamw]

Cases: ``scalar`` x / 3.0 (a constant of the graph, as torch.compile hands it over), ``zerod`` x / c for a 0-d
input (the device's ``x / 3.0``: the number in a 0-d buffer), ``col`` x / y[:, None], ``row`` x / y[None, :] (a
divisor varying along the row: ``vdivps`` before and after, the same code). ``--rows``: instead, roofline rows
(``kernel_cases``) through ``torch.compile(backend="neuron")``, each variant compiled twice (the optimizer step
with its own state per build, as ``roofline.py`` runs it): ``ce`` divides its 0-d loss, ``adamw`` its moments by
the bias corrections (0-d tensors), which are now ``vdivps``.
"""

from __future__ import annotations

import argparse
import os
import time

from common import ensure_environment, interleaved, table

ensure_environment(threads=2)
# both variants compile the same graphs: no cache may hand one the other's code
os.environ.update(NEURONCC_DISABLE_GRAPH_CACHE="1", NEURONCC_DISABLE_CACHE="1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import cases as kernel_rows  # noqa: E402
from neuroncc.codegen.llvm import division  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.ir import Builder, DType, TensorType  # noqa: E402
from neuroncc.passes.manager import PassContext  # noqa: E402
from neuroncc.passes.pipeline import default_pipeline, run_pipeline  # noqa: E402

EXACT = division.multiplies_by_the_reciprocal


def graph(case: str, rows: int, cols: int):
    b = Builder(f"div_{case}")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    divisor = {"scalar": lambda: b.op("full", shape=(), dtype=DType.f32, value=3.0),
               "zerod": lambda: b.param(TensorType((), DType.f32), "c"),
               "col": lambda: b.param(TensorType((rows, 1), DType.f32), "y"),
               "row": lambda: b.param(TensorType((1, cols), DType.f32), "y")}[case]()
    return run_pipeline(default_pipeline("cpu"), b.build([b.op("div", x, divisor)]), PassContext())


def build(case: str, shape: tuple[int, int], threads: int, reciprocal: bool):
    division.multiplies_by_the_reciprocal = (lambda region, op: True) if reciprocal else EXACT
    try:
        return build_cpu_executable(graph(case, *shape), {"threads": threads})
    finally:
        division.multiplies_by_the_reciprocal = EXACT


def compiled_row(case, inputs, reciprocal: bool):
    """The row's call through torch.compile with the reciprocal multiply (before session 45) or the exact
    division, compiled (its first call) while that holds; returns the call and its results' getter."""
    division.multiplies_by_the_reciprocal = (lambda region, op: True) if reciprocal else EXACT
    try:
        torch._dynamo.reset()
        if case.setup is not None:
            step, values = case.setup(lambda f: torch.compile(f, backend="neuron"), inputs)
        else:
            compiled = torch.compile(case.eager, backend="neuron", dynamic=False)
            step, values = (lambda: compiled(*inputs)), (lambda: compiled(*inputs))
        step()
        from neuroncc.executors.cpu import deferred_code
        deferred_code.wait_for_pending()
        return step, values
    finally:
        division.multiplies_by_the_reciprocal = EXACT


def bench_rows(keys: list[str], threads_list: list[int], repeats: int) -> None:
    rows = []
    for threads in threads_list:
        torch.set_num_threads(threads)
        for case in (c for c in kernel_rows() if c.key in keys):
            inputs = case.make(np.random.default_rng(0))
            builds, results = {}, {}
            for k in (1, 2):
                for name, reciprocal in (("reciprocal", True), ("exact", False)):
                    step, values = compiled_row(case, inputs, reciprocal)
                    builds[f"{name} {k}"], results[f"{name} {k}"] = step, values
            differ = sum(int((a != b).sum()) for a, b in zip(results["exact 1"](), results["reciprocal 1"]()))
            clock = time.thread_time if threads == 1 else time.perf_counter
            times = interleaved(builds, repeats=repeats, clock=clock)
            base = times["reciprocal 1"]
            rows.append([case.key, str(threads), str(differ)] +
                        [f"{times[n] * 1e3:.3f} ({times[n] / base:.3f})" for n in builds])
            print(rows[-1], flush=True)
    print(table(rows, ["row", "threads", "elements differing"] + list(builds)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="scalar,zerod,col,row")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--shape", default="4096,1024")
    parser.add_argument("--rows", default="")
    args = parser.parse_args()
    if args.rows:
        bench_rows(args.rows.split(","), [int(t) for t in args.threads.split(",")], args.repeats)
        return
    shape = tuple(int(n) for n in args.shape.split(","))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    divisors = {"scalar": [], "zerod": [np.array(3.0, np.float32)],
                "col": [rng.standard_normal((shape[0], 1)).astype(np.float32)],
                "row": [rng.standard_normal((1, shape[1])).astype(np.float32)]}
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for case in args.cases.split(","):
            inputs = [x, *divisors[case]]
            builds = {}
            for k in (1, 2):
                for name, reciprocal in (("reciprocal", True), ("exact", False)):
                    exe = build(case, shape, threads, reciprocal)
                    builds[f"{name} {k}"] = (lambda exe=exe: exe(*inputs))
            (want,) = builds["exact 1"]()
            (got,) = builds["reciprocal 1"]()
            differ = int((want.view(np.int32) != got.view(np.int32)).sum())
            exact = np.divide(*[a.astype(np.float32) for a in (x, inputs[1] if len(inputs) > 1
                                                                 else np.float32(3.0))])
            assert np.array_equal(want.view(np.int32), exact.view(np.int32)), case
            del want, got, exact  # (held outputs: every call of those builds paged in a fresh one)
            clock = time.thread_time if threads == 1 else time.perf_counter
            times = interleaved(builds, repeats=args.repeats, clock=clock)
            base = times["reciprocal 1"]
            rows.append([case, str(threads), f"{differ / x.size:.1%}"] +
                        [f"{times[n] * 1e3:.3f} ({times[n] / base:.3f})" for n in builds])
            print(rows[-1], flush=True)
    print(table(rows, ["case", "threads", "differ"] + list(builds)))


if __name__ == "__main__":
    main()
