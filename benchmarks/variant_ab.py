"""A/B of code-generation variants in one process, shared by ``bench_exp_scale.py`` and ``bench_math_interleave.py``.

Each variant is a context manager under which kernels are built (a patched emitter function); every row is built
twice per variant, all builds are called interleaved round by round, and the medians are printed per build with
each variant's time over the first one's (mean of its two builds). Rows: b (softmax [4096,1024], its kernel step
on a held output), bs (softmax [256,1024] x16: L2-resident, the compute-bound case), a (gelu*sigmoid [4096,1024],
``exe(*arrays)``), ce (cross-entropy fwd+bwd [512,32000] through ``torch.compile``). The softmax rows' outputs are
checked bit for bit against the first variant's. Run under ``/work/bin/heavy x`` (docs/performance.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import types
from collections.abc import Callable

os.environ["NEURONCC_DISABLE_CACHE"] = "1"
os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

import bench_softmax_parts as bsp  # noqa: E402
import kernel_cases as kc  # noqa: E402
from neuroncc.executors.cpu.buffers import placed_empty  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402

ROWS = ("b", "bs", "a", "ce")
Variant = Callable[[], contextlib.AbstractContextManager]


def add_arguments(parser: argparse.ArgumentParser, rounds: int = 31) -> None:
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds (default {rounds})")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"rows among {', '.join(ROWS)} (default all)")


_BUILDS = 0  # (each ce build's function copy gets a name of its own)


def _row_call(row: str, threads: int) -> tuple[Callable[[], object], torch.Tensor | None]:
    """The row's call, built under whatever variant is active, and the output to compare bits of (softmax rows)."""
    if row in ("b", "bs"):
        rows = 4096 if row == "b" else 256
        x = torch.from_numpy(np.random.default_rng(rows).standard_normal((rows, 1024)).astype(np.float32) * 4)
        exe = build_cpu_executable(kc.softmax_graph(rows, 1024), {"threads": threads})
        out = _placed_like(x)
        step = bsp.step_call(exe, x, out)
        step()
        return ((lambda: [step() for _ in range(16)]) if row == "bs" else step), out
    case = next(c for c in kc.cases() if c.key == row)
    inputs = case.make(np.random.default_rng(0))
    if row == "a":
        exe = build_cpu_executable(case.graph, {"threads": threads})
        arrays = [t.numpy() for t in inputs]
        return (lambda: exe(*arrays)), None
    if row == "ce":
        # a copy of the row's function with a code object of its own: TorchDynamo keeps its compiled code on the
        # code object, so builds of one function shared one cache (and ``torch._dynamo.reset()`` before each build,
        # as before session 23, left only the last build's: every variant then ran the code of the one built last,
        # or recompiled outside its variant)
        global _BUILDS
        _BUILDS += 1
        code = case.eager.__code__.replace(co_name=f"{case.eager.__name__}_{_BUILDS}")
        eager = types.FunctionType(code, case.eager.__globals__, code.co_name, case.eager.__defaults__,
                                   case.eager.__closure__)
        fn = torch.compile(eager, backend="neuron", dynamic=False, options={"threads": threads})
        fn(*inputs)
        return (lambda: fn(*inputs)), None
    raise SystemExit(f"unknown row {row!r}: rows are {', '.join(ROWS)}")


def _placed_like(x: torch.Tensor) -> torch.Tensor:
    """An output for ``x``'s softmax placed as the product places the outputs it makes (``buffers.placed_empty``): not
    1-255 bytes past ``x`` modulo 4 KiB. ``torch.empty_like`` put it there for ~3 of 64 builds, and float32 softmax
    [4096, 1024]'s kernel then ran 7-25% slower at 1 thread (its exp loop's loads of x matched the previous
    iteration's non-temporal stores in their low 12 address bits: session 27 softmax27), one build of a variant
    apart from the other."""
    array, _ = placed_empty(x.numel(), np.dtype(np.float32), [x.data_ptr()])
    return torch.from_numpy(array).view(x.shape)


def _medians(calls: dict[str, Callable[[], object]], rounds: int, clock: Callable[[], float]) -> dict[str, float]:
    times: dict[str, list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        for key, call in calls.items():
            start = clock()
            call()
            times[key].append(clock() - start)
    return {key: statistics.median(values) * 1e3 for key, values in times.items()}


def compare(variants: dict[str, Variant], args: argparse.Namespace) -> None:
    """Build every row under each variant (two builds each), check the softmax bits, time interleaved, print."""
    names = list(variants)
    rows = args.rows.split(",")
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter  # 1 thread: CPU time of this thread
        calls, outputs = {}, {}
        for row in rows:
            for build in (1, 2):
                for name in names:
                    with variants[name]():
                        call, out = _row_call(row, threads)
                    calls[f"{row} {name} {build}"] = call
                    if out is not None:
                        outputs.setdefault((row, name), out)
        for (row, name), out in outputs.items():
            if name != names[0]:
                print(row, f"{name} == {names[0]} bitwise:", torch.equal(out, outputs[(row, names[0])]))
        for call in calls.values():
            call()
        med = _medians(calls, args.rounds, clock)
        print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC, "
              f"{args.rounds} rounds")
        for row in rows:
            base = (med[f"{row} {names[0]} 1"] + med[f"{row} {names[0]} 2"]) / 2
            for key in [key for key in med if key.split()[0] == row]:
                print(f"  {key:12s} {med[key]:8.3f} ms  {med[key] / base:6.3f}")
            for name in names[1:]:
                mean = (med[f"{row} {name} 1"] + med[f"{row} {name} 2"]) / 2
                print(f"  {row}: {name} / {names[0]} (mean of builds) {mean / base:.3f}")
