"""Where a large output starts against its inputs (4K aliasing, ``hardware/host.py``: ``placement_shift``).

Two measurements, one process each, calls interleaved (eager's in the rotation, so the caches see what the
roofline's rows see), medians:

- ``--sweep``: one kernel (RMSNorm or LayerNorm [8192, 1024], hand-built graph) called on fixed buffers with
  its output started ``d`` bytes past its input modulo 4 KiB, for a list of ``d``;
- the A/B (default): the rows as a user calls them (RMSNorm through ``torch.compile(backend="neuron")``, the
  data-pointer boundary; LayerNorm (c) as ``bench_kernels``/``roofline`` call it, numpy arrays into
  ``build_cpu_executable``'s executable), with inputs made by torch and by numpy, each call once with the
  placement and once without (``placement_shift`` patched to 0: the output where the allocator put it).

Run: ``python benchmarks/bench_placement.py [--threads 1] [--repeats 31] [--sweep rms,c] [--user-malloc]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, table  # noqa: E402

if "--user-malloc" not in sys.argv:  # glibc's own defaults: large arrays mmapped, as in a user's process
    ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kernel_cases as kc  # noqa: E402
from neuroncc.codegen.llvm.regions import fuse_whole_function  # noqa: E402
from neuroncc.executors.cpu import buffers  # noqa: E402
from neuroncc.executors.cpu.address_call import AddressCall  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.frontend import direct_call  # noqa: E402
from neuroncc.hardware.host import placement_shift  # noqa: E402
from neuroncc.ir import Builder, DType, TensorType  # noqa: E402

ROWS, COLS = 8192, 1024


def rmsnorm_graph(rows: int, cols: int):
    b = Builder("rmsnorm")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    ms = b.op("mean", b.op("mul", x, x), dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", ms, b.op("full", shape=(), dtype=DType.f32, value=1e-6)))
    return fuse_whole_function(b.build([b.op("mul", b.op("mul", x, rstd), w)]))


GRAPHS = {"rms": (rmsnorm_graph, kc.rmsnorm), "c": (kc.layernorm_graph, kc.layernorm)}


def _unplaced(base: int, near) -> int:
    return 0


class Placement:
    """Calls ``fn`` with the placement rule as built, or patched out."""

    def __init__(self, on: bool):
        self.on = on

    def wrap(self, fn):
        if self.on:
            return fn

        def call():
            direct_call.placement_shift, buffers.placement_shift = _unplaced, _unplaced
            try:
                return fn()
            finally:
                direct_call.placement_shift = buffers.placement_shift = placement_shift

        return call


def inputs_for(key: str, made_by: str, rng) -> list[torch.Tensor]:
    shapes = [(ROWS, COLS), (COLS,)] + ([(COLS,)] if key == "c" else [])
    if made_by == "numpy":
        return [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    return [torch.randn(s) for s in shapes]


def ab(threads: int, repeats: int, clock) -> list[list[str]]:
    rows = []
    rng = np.random.default_rng(0)
    for key in ("rms", "c"):
        graph, eager = GRAPHS[key]
        for made_by in ("torch", "numpy"):
            inputs = inputs_for(key, made_by, rng)
            if key == "rms":  # through torch.compile: the data-pointer boundary (direct_call.py)
                torch._dynamo.reset()
                neuron = torch.compile(eager, backend="neuron", dynamic=False, options={"threads": threads})
                call = lambda f=neuron: f(*inputs)  # noqa: E731
            else:  # the numpy boundary, as the roofline's rows (a)-(c') call it
                exe = build_cpu_executable(graph(ROWS, COLS), {"threads": threads})
                arrays = [t.numpy() for t in inputs]
                call = lambda e=exe: e(*arrays)  # noqa: E731
            expected = eager(*inputs)
            got = call()
            got = got[0] if isinstance(got, list) else got
            torch.testing.assert_close(torch.as_tensor(got), expected, rtol=1.3e-6, atol=1e-5)
            distance = {}
            for name, on in (("placed", True), ("unplaced", False)):
                out = Placement(on).wrap(call)()
                out = out[0] if isinstance(out, list) else out
                address = out.data_ptr() if isinstance(out, torch.Tensor) else out.ctypes.data
                distance[name] = (address - inputs[0].data_ptr()) % 4096
            impls = {"eager": lambda: eager(*inputs), "placed": Placement(True).wrap(call),
                     "unplaced": Placement(False).wrap(call)}
            times = interleaved(impls, repeats=repeats, clock=clock)
            rows.append([key, made_by, str(threads), f"{times['eager'] * 1e3:.2f}", f"{times['unplaced'] * 1e3:.2f}",
                         f"{times['placed'] * 1e3:.2f}", f"{times['placed'] / times['unplaced']:.3f}",
                         f"{distance['unplaced']}, {distance['placed']}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def sweep(keys: list[str], threads: int, repeats: int, clock, distances: list[int]) -> list[list[str]]:
    rows = []
    rng = np.random.default_rng(0)
    for key in keys:
        graph, eager = GRAPHS[key]
        exe = build_cpu_executable(graph(ROWS, COLS), {"threads": threads})
        run = AddressCall(exe)
        inputs = inputs_for(key, "numpy", rng)
        nbytes = ROWS * COLS * 4
        memory = np.empty(nbytes + 3 * 4096, dtype=np.uint8)
        # the first address past 4 KiB into ``memory`` at x's page offset: out = start + d (d < 0: before it)
        start = memory.ctypes.data + (inputs[0].data_ptr() - memory.ctypes.data) % 4096 + 4096
        expected = eager(*inputs)
        impls = {"eager": lambda: eager(*inputs)}
        for d in distances:
            out = start + d
            assert (out - inputs[0].data_ptr()) % 4096 == d % 4096
            addresses = [t.data_ptr() for t in inputs]
            impls[f"d={d}"] = lambda out=out, addresses=addresses: run(addresses, [out])
            run(addresses, [out])
            result = np.frombuffer((np.ctypeslib.as_ctypes_type(np.float32) * (ROWS * COLS)).from_address(out),
                                   dtype=np.float32).reshape(ROWS, COLS)
            torch.testing.assert_close(torch.from_numpy(result.copy()), expected, rtol=1.3e-6, atol=1e-5)
        times = interleaved(impls, repeats=repeats, clock=clock)
        base = times["d=0"]
        for d in distances:
            rows.append([key, str(threads), str(d), f"{times[f'd={d}'] * 1e3:.2f}", f"{times[f'd={d}'] / base:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--sweep", default="", help="rows to sweep the output's distance for (rms, c)")
    parser.add_argument("--user-malloc", action="store_true", help="keep glibc's malloc defaults")
    parser.add_argument("--distances", default="0,32,64,128,192,256,512,1024,2048,3072,-64,-256")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"load {load}", flush=True)
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        if args.sweep:
            results += sweep(args.sweep.split(","), threads, args.repeats, clock,
                             [int(d) for d in args.distances.split(",")])
        else:
            results += ab(threads, args.repeats, clock)
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]
    print(f"load {load} -> {load_end}")
    if args.sweep:
        print(table(results, ["row", "threads", "d (bytes, mod 4096)", "ms", "vs d=0"]))
    else:
        print(table(results, ["row", "inputs made by", "threads", "eager ms", "unplaced ms", "placed ms",
                              "placed / unplaced", "out - x mod 4096 (unplaced, placed)"]))


if __name__ == "__main__":
    main()
