"""Plain or non-temporal output stores: each memory-bound row's kernels built both ways, called interleaved in one
process, as a user calls them and with a held output, and the cost of the output's next reader.

Every row is its Python function through ``torch.compile(backend="neuron")`` (``kernel_cases.py``), built twice
with the kernels' large outputs written with plain stores (``CpuTarget.streams_outputs`` patched to False) and
twice with non-temporal stores (patched to True) (each build checks that its LLVM IR has, or has not, non-temporal
stores). Per build, interleaved round by round with eager (medians):

- ``call``: the compiled function, a fresh output each call (what a user's call costs);
- ``held``: the compiled graph's kernels alone into an output held between calls (``roofline.kernel_alone``);
- ``call+mm`` / ``call+sum``: the call followed by its output's next reader: a linear layer's product
  ``out @ W`` (W [cols, 64]: MKL's sgemm, reading the output once) or ``out.sum()``; the reader's own time is
  printed (``mm after`` / ``sum after``): a streamed output is read back from DRAM, a plain one may still be in
  the last-level cache.

Rows: b, c, c', rms, ce (``kernel_cases``; ce has no kernel alone or reader: its forward and backward are two
graphs), and softmax at 1024, 2048 and 16384 rows of 1024 (``s1k``, ``s2k``, ``s16k``: kernel footprints of 8,
16 and 128 MB) for where the crossover lies. Run under ``/work/bin/heavy x`` (docs/performance.md), several
processes: this VM's times are sometimes bimodal by process.

``--sizes``: instead, the copy (``microkernels.Stream``: read n/2 bytes, write n/2) of footprints n = 1-256 MB
with plain and with non-temporal stores, source and destination held (each size's buffers of their own), called
interleaved in blocks of calls of one copy back to back (the first of each block not counted): the footprint from which the plain copy runs at memory's rate is the cache a kernel here keeps.

``python benchmarks/bench_stream_choice.py [--rows b,c] [--threads 2,1] [--rounds 31] [--readers mm,sum] [--sizes]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["NEURONCC_DISABLE_CACHE"] = "1"
os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"

import roofline  # noqa: E402  (first: it sets the environment and records the compiled graphs)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import kernel_cases as kc  # noqa: E402
import microkernels as mk  # noqa: E402
from common import settle_neuroncc  # noqa: E402
from neuroncc.hardware.host import CpuTarget  # noqa: E402

VARIANTS: dict[str, bool] = {"plain": False, "streamed": True}
SOFTMAX_ROWS = {"s1k": 1024, "s2k": 2048, "s16k": 16384}
READERS = ("mm", "sum")


@contextlib.contextmanager
def stores(streamed: bool):
    saved = CpuTarget.streams_outputs
    CpuTarget.streams_outputs = lambda self, footprint_bytes: streamed  # type: ignore[method-assign]
    try:
        yield
    finally:
        CpuTarget.streams_outputs = saved  # type: ignore[method-assign]


def row_case(key: str) -> kc.Case:
    if key in SOFTMAX_ROWS:
        rows = SOFTMAX_ROWS[key]
        return kc.Case(key, f"softmax [{rows},1024]", kc._inputs((rows, 1024)), kc.softmax, kc.Work(0, 0))
    return next(c for c in kc.cases() if c.key == key)


_BUILDS = 0


def compiled(case: kc.Case, threads: int) -> Callable:
    """``case.eager`` through torch.compile, as a function with a code object of its own (TorchDynamo keeps its
    compiled code on the code object: builds of one function would share it; ``variant_ab.py``)."""
    global _BUILDS
    _BUILDS += 1
    code = case.eager.__code__.replace(co_name=f"{case.eager.__name__}_{_BUILDS}")
    fn = types.FunctionType(code, case.eager.__globals__, code.co_name, case.eager.__defaults__, case.eager.__closure__)
    return torch.compile(fn, backend="neuron", options={"threads": threads})


def nontemporal_stores(graphs: list) -> int:
    return sum("".join(g.executable.module.llvm_ir).count("!nontemporal !") for g in graphs
               if g.executable.module is not None)


def build(case: kc.Case, inputs: list, threads: int, streamed: bool) -> dict[str, Callable]:
    """The build's calls (``call``, ``held``) under the variant; checked against eager."""
    first = len(roofline.MADE)
    with stores(streamed):
        fn = compiled(case, threads)
        kc.check(case, {"neuroncc": ((lambda: fn(*inputs)), None)}, inputs)
        fn(*inputs)
    settle_neuroncc({"neuroncc": lambda: fn(*inputs)})
    graphs = roofline.MADE[first:]
    found = nontemporal_stores(graphs)
    if bool(found) != streamed:
        raise SystemExit(f"{case.key}: {found} non-temporal stores in a build with streamed={streamed}")
    calls = {"call": lambda: fn(*inputs)}
    alone = roofline.kernel_alone(graphs, inputs, case) if len(graphs) == 1 else None
    if alone is not None:
        calls["held"] = alone[0]
    return calls


def reader_calls(call: Callable, like: torch.Tensor, readers: list[str], parts: dict[str, list[float]],
                 clock: Callable[[], float]) -> dict[str, Callable]:
    """``call`` followed by each reader of its output, the reader's own time appended to ``parts[reader]``."""
    weight = torch.from_numpy(np.random.default_rng(1).standard_normal((like.shape[-1], 64)).astype(np.float32))
    weight = weight.to(like.dtype)
    read = {"mm": lambda out: out @ weight, "sum": lambda out: out.sum()}

    def pair(name: str) -> Callable[[], None]:
        def run() -> None:
            out = call()
            start = clock()
            read[name](out)
            parts[name].append(clock() - start)
        return run

    for name in readers:
        parts.setdefault(name, [])
    return {f"call+{name}": pair(name) for name in readers}


def measure(key: str, threads: int, rounds: int, readers: list[str]) -> None:
    clock = time.thread_time if threads == 1 else time.perf_counter
    case = row_case(key)
    inputs = case.make(np.random.default_rng(0))
    calls: dict[str, Callable] = {"eager": lambda: case.eager(*inputs)}
    reader_parts: dict[str, dict[str, list[float]]] = {}
    for number in (1, 2):
        for variant, streamed in VARIANTS.items():
            made = build(case, inputs, threads, streamed)
            for mode, call in made.items():
                calls[f"{variant} {number} {mode}"] = call
            if key != "ce" and readers:
                parts = reader_parts.setdefault(f"{variant} {number}", {})
                for name, call in reader_calls(made["call"], inputs[0], readers, parts, clock).items():
                    calls[f"{variant} {number} {name}"] = call
    for call in calls.values():
        call()
    for parts in reader_parts.values():
        for values in parts.values():
            values.clear()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names, order = list(calls), random.Random(0x5EED)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            start = clock()
            calls[name]()
            samples[name].append(clock() - start)
    med = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
    for variant_number, parts in reader_parts.items():
        for name, values in parts.items():
            med[f"{variant_number} {name} after"] = statistics.median(values) * 1e3
    print(f"{case.title}, {threads} thread(s), load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, {rounds} rounds; eager {med['eager']:.3f} ms", flush=True)
    modes = [m for m in ("call", "held", *(f"call+{r}" for r in readers), *(f"{r} after" for r in readers))
             if f"plain 1 {m}" in med]
    print(f"  {'':10s}" + "".join(f"{m:>16s}" for m in modes))
    for variant in VARIANTS:
        for number in (1, 2):
            print(f"  {variant:8s} {number}" + "".join(f"{med[f'{variant} {number} {m}']:16.3f}" for m in modes))
    mean = {(v, m): (med[f"{v} 1 {m}"] + med[f"{v} 2 {m}"]) / 2 for v in VARIANTS for m in modes}
    print("  streamed/plain" + "".join(f"{mean[('streamed', m)] / mean[('plain', m)]:16.3f}" for m in modes),
          flush=True)


#: --sizes: calls of one copy back to back, the first not counted: the later ones find what it left in the caches
BACK_TO_BACK = 4


def copy_sizes(threads: int, rounds: int) -> None:
    """GB/s (bytes read + written per second) of held copies by footprint, plain against non-temporal stores."""
    clock = time.thread_time if threads == 1 else time.perf_counter
    kernels = mk.compile_kernel(mk.stream_module(False), "stream"), mk.compile_kernel(mk.stream_module(True), "stream")
    sizes = [1 << m for m in range(20, 29)]
    streams = {n: mk.Stream(*kernels, n // 2, n // 2) for n in sizes}
    calls = {(n, kind): streams[n].runner(kind, threads) for n in sizes for kind in ("plain", "streaming")}
    samples: dict = {key: [] for key in calls}
    keys, order = list(calls), random.Random(0x5EED)
    for call in calls.values():
        call()
    for _ in range(rounds):
        order.shuffle(keys)
        for key in keys:
            for repeat in range(BACK_TO_BACK):  # (the first call of a block meets the caches another size left)
                start = clock()
                calls[key]()
                if repeat:
                    samples[key].append(clock() - start)
    print(f"held copies, {threads} thread(s), load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, {rounds} rounds: footprint MB, GB/s plain / streaming")
    for n in sizes:
        plain, streaming = (n / statistics.median(samples[(n, kind)]) / 1e9 for kind in ("plain", "streaming"))
        print(f"  {n >> 20:4d} MB {plain:7.1f} {streaming:7.1f}  streamed/plain time {plain / streaming:.2f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="b,c,c',rms,ce,s1k,s2k,s16k")
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--readers", default=",".join(READERS), help="readers of the output ('' for none)")
    parser.add_argument("--sizes", action="store_true", help="held copies by footprint instead of the rows")
    args = parser.parse_args()
    if args.sizes:
        for threads in [int(t) for t in args.threads.split(",")]:
            copy_sizes(threads, args.rounds)
        return
    readers = [r for r in args.readers.split(",") if r]
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for key in args.rows.split(","):
            measure(key, threads, args.rounds, readers)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
