"""Where a large output starts against its inputs (4K aliasing, ``hardware/host.py``: ``placement_shift``).

Two measurements, one process each, calls interleaved (eager's in the rotation, so the caches see what the
roofline's rows see), medians:

- ``--sweep``: each row's kernel (``kernel_cases``' keys, as torch.compile hands the graph over) called into
  outputs started ``d`` bytes past its largest input modulo 4 KiB, for a list of ``d``, two buffers per ``d``,
  each in memory of its own on huge pages (the distance apart from the page lottery; no eager in the rotation;
  ``d`` a multiple of 64: outputs start on a cache line);
- the A/B (default): the rows as a user calls them (RMSNorm through ``torch.compile(backend="neuron")``, the
  data-pointer boundary; LayerNorm (c) as ``bench_kernels``/``roofline`` call it, numpy arrays into
  ``build_cpu_executable``'s executable), with inputs made by torch and by numpy, each call once with the
  placement and once without (``placement_shift`` patched to 0: the output where the allocator put it).

Run: ``/work/bin/heavy x python benchmarks/bench_placement.py [--threads 1] [--repeats 31] [--sweep "rms,c,c'"]
[--distances 0,64,...] [--user-malloc]``.
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


def huge_page_memory(nbytes: int, keep: list) -> int:
    """The address of ``nbytes`` (and two pages more) of fresh memory on transparent huge pages where the kernel
    gives them (``MADV_HUGEPAGE`` before the first touch, then touched), starting on a 2 MiB boundary: outputs
    placed in it sit on physically contiguous memory, so the sweep reads the distance, not the page lottery."""
    import ctypes
    import mmap

    memory = mmap.mmap(-1, nbytes + (4 << 20))
    keep.append(memory)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    base = -(-address // (2 << 20)) * (2 << 20)
    libc = ctypes.CDLL(None)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise(base, nbytes + 8192, 14)  # MADV_HUGEPAGE (a hint: 4 KiB pages where the kernel has none)
    ctypes.memset(base, 1, nbytes + 8192)
    return base


def sweep(keys: list[str], threads: int, repeats: int, clock, distances: list[int]) -> list[list[str]]:
    """Each row's kernel (``kernel_cases``' rows as torch.compile hands them over, ``bench_bf16_words``) called on
    its inputs into outputs starting ``d`` bytes past its largest input modulo 4 KiB, two buffers of their own
    per distance (each in huge-page memory), all interleaved; each buffer's median and their mean against
    ``d = 0``'s."""
    import bench_bf16_words as words

    rows = []
    for case in (c for c in words.bench_rows() if c.key in keys):
        inputs = case.make(np.random.default_rng(0))
        arrays = [t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in inputs]
        exe = build_cpu_executable(words.backend_graph(case, inputs), {"threads": threads})
        arrays = words.graph_order(case, exe, inputs, arrays)
        expected = exe(*arrays)[0]
        run, addresses = AddressCall(exe), [a.ctypes.data for a in arrays]
        x = max(arrays, key=lambda a: a.nbytes).ctypes.data
        keep: list = []
        impls = {}
        for d in distances:
            for k in (1, 2):
                out = huge_page_memory(expected.nbytes, keep) + (x + d) % 4096
                if out % 64:  # (the kernels' vector and non-temporal stores need a cache line: AddressCall's contract)
                    raise SystemExit(f"d = {d}: an output {out % 64} bytes past a cache line; give multiples of 64")
                run(addresses, [out])
                got = np.frombuffer((ctypes_bytes(expected.nbytes)).from_address(out), dtype=np.uint8)
                np.testing.assert_array_equal(got, expected.view(np.uint8).reshape(-1))
                impls[f"{d}/{k}"] = lambda out=out: run(addresses, [out])
        times = interleaved(impls, repeats=repeats, clock=clock)
        base = (times["0/1"] + times["0/2"]) / 2 if 0 in distances else 1.0
        for d in distances:
            pair = times[f"{d}/1"], times[f"{d}/2"]
            rows.append([case.key, str(threads), str(d), f"{pair[0] * 1e3:.3f} / {pair[1] * 1e3:.3f}",
                         f"{sum(pair) / 2 / base:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def ctypes_bytes(nbytes: int):
    import ctypes

    return ctypes.c_uint8 * nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--sweep", default="", help="rows to sweep the output's distance for (kernel_cases' keys: "
                                                    "c, c', rms, b, ...)")
    parser.add_argument("--user-malloc", action="store_true", help="keep glibc's malloc defaults")
    parser.add_argument("--distances", default="0,64,256,512,1024,1536,2048,2560,3072,3584,3840,4032")
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
        print(table(results, ["row", "threads", "d (bytes past x, mod 4096)", "ms (two buffers)", "vs d=0"]))
    else:
        print(table(results, ["row", "inputs made by", "threads", "eager ms", "unplaced ms", "placed ms",
                              "placed / unplaced", "out - x mod 4096 (unplaced, placed)"]))


if __name__ == "__main__":
    main()
