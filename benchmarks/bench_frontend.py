"""The torch front end's own costs: compile time by stage, and the per-call boundary overhead.

    PYTHONPATH=. python benchmarks/bench_frontend.py [--target interp] [--repeat 30]

Compile: wall time of the first call (TorchDynamo + AOTAutograd + neuroncc) for eager-compiled models, with the
part spent in neuroncc's importer and in compile_graph, from a fresh ``torch._dynamo.reset()`` each repetition
(the compile cache is disabled so every compile is real). Calls: per-call time of eager, Inductor and neuroncc
(interleaved), and neuroncc's boundary overhead (torch <-> numpy conversion and output layout), i.e. the
compiled callable's time minus its executable's. Medians; ratios against eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
_ENV = {**_MALLOC, "NEURONCC_DISABLE_CACHE": "1"}
if any(os.environ.get(k) != v for k, v in _ENV.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **_ENV})

import torch  # noqa: E402

from neuroncc.frontend import aten_compiler  # noqa: E402


class Timed:
    """Wraps a function and adds up the seconds spent in it."""

    def __init__(self, module, name):
        self.module, self.name, self.inner, self.seconds = module, name, getattr(module, name), 0.0

    def __enter__(self):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(self.module, self.name, timed)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.inner)


def models():
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    block = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return [("mlp 32x64", mlp, torch.randn(32, 64)), ("encoder layer 4x16x32", block, torch.randn(4, 16, 32))]


def median_ms(samples):
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="interp")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    options = {"target": args.target}
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)  # trace nn.TransformerEncoderLayer to plain ops
    print(f"target {args.target}; medians of interleaved runs; 1 torch thread")
    for name, model, x in models():
        model.eval()
        compile_s, import_s, build_s = [], [], []
        for _ in range(max(3, args.repeat // 10)):
            torch._dynamo.reset()
            with Timed(aten_compiler, "import_graph") as imp, Timed(aten_compiler, "compile_graph") as build:
                start = time.perf_counter()
                with torch.no_grad():
                    torch.compile(model, backend="neuron", dynamic=False, options=options)(x)
                compile_s.append(time.perf_counter() - start)
            import_s.append(imp.seconds)
            build_s.append(build.seconds)
        torch._dynamo.reset()
        ours = torch.compile(model, backend="neuron", dynamic=False, options=options)
        inductor = torch.compile(model, backend="inductor", dynamic=False)
        calls = {"eager": model, "inductor": inductor, "neuroncc": ours}
        times = {k: [] for k in calls}
        with torch.no_grad():
            for fn in calls.values():
                fn(x)  # compile / warm up
            for _ in range(args.repeat):
                for label, fn in calls.items():  # interleaved
                    start = time.perf_counter()
                    fn(x)
                    times[label].append(time.perf_counter() - start)
        overhead = boundary_overhead(ours, x, args.repeat)
        eager = median_ms(times["eager"])
        print(f"\n{name}: compile {median_ms(compile_s):.0f} ms (importer {median_ms(import_s):.1f} ms, "
              f"compile_graph {median_ms(build_s):.1f} ms)")
        for label in calls:
            ms = median_ms(times[label])
            print(f"  call {label:9} {ms:8.3f} ms  x{ms / eager:6.2f} eager")
        print(f"  neuroncc boundary overhead (call - executable) {overhead * 1e3:.3f} ms")


def boundary_overhead(compiled, x, repeat):
    """Median of (compiled graph call - its executable call), measured inside the same calls."""
    from neuroncc.frontend.compiled import CompiledGraph

    samples = []
    original = CompiledGraph.__call__

    def measured(self, boxed):
        executable = self.executable
        spent = [0.0]

        def timed_executable(*arrays):
            start = time.perf_counter()
            try:
                return executable(*arrays)
            finally:
                spent[0] += time.perf_counter() - start

        self.executable = timed_executable
        start = time.perf_counter()
        try:
            return original(self, boxed)
        finally:
            samples.append(time.perf_counter() - start - spent[0])
            self.executable = executable

    CompiledGraph.__call__ = measured
    try:
        with torch.no_grad():
            for _ in range(repeat):
                compiled(x)
    finally:
        CompiledGraph.__call__ = original
    return statistics.median(samples)


if __name__ == "__main__":
    main()
