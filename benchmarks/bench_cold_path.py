"""Can a ``torch.compile`` call come back warm after a large kernel (issue #19, session 36 call36)?

A row's call runs its host path (TorchDynamo's guards and bytecode, our entry, the output, the exit) on the
caches its kernel left: 16-64 MiB streamed through L2 and Zen 4's L3 (filled by L2 victims). Each candidate for
keeping that path warm is timed on a small call of a row's function ([16, 1024], the row's own code path and
guards, a kernel of a few us) right after a 32+32 MiB stream (plain or prefetched loads, streaming stores, the
kernels' shape of traffic), interleaved in a fresh random order each round, one process:

- warm (no stream); after the stream; after 2+2 MiB only (L2 emptied, L3 and the TLB not);
- the stream with ``clflushopt`` of each line after its load (a flushed line is no L2 victim: L3 keeps the
  path), on a memory-bound stream and on one with 12 dependent multiply-adds per vector (compute-bound);
- the stream with ``prefetchnta`` 64 KiB ahead;
- the stream, then a twin call made untimed (its own code object, guards and tensors, the same C code, types and
  tables): what warming the code and the shared structures alone gives;
- the stream, then the call path's Python-visible objects prefetched (``prefetcht0``, timed with the call):
  a crawl (``gc.get_referents``, depth 2) from the function, its code, globals, TorchDynamo's cache entries,
  the compiled callable, the tensors and their ``TensorImpl``.

Run: ``/work/bin/heavy x python benchmarks/bench_cold_path.py [--threads N] [--row layernorm|softmax|rmsnorm]
[--repeats R]``. Per variant: the stream's median ms, the call's median us (quartiles) and, per round, the call
after the plain stream minus this one.

``--reuse 16 [--threads N] [--repeats R]``: the flush against what it costs a kernel that reads the same input
again: a 16+16 MiB stream (the size given), memory-bound and with 12 multiply-adds a vector, run twice back to
back and then the small call: the second stream's time (its input partly in L3 without the flush) and the call's.

``--split b,c,c',rms [--threads N] [--repeats R]``: roofline rows' own calls split at their kernel (launch
stamped): the path before the kernel (TorchDynamo's entry and guards, ours up to the launch) and after it, as
built and with the crawl's lines prefetched at the kernel's end (counted in the kernel's column).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import statistics
import sys
import time
import types

from common import ensure_environment, record_compiled_graphs, settle_neuroncc, spread_us

ensure_environment(threads=1)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from llvmlite import ir  # noqa: E402

import microkernels as mk  # noqa: E402
from microkernels import F32, I32, I64, PTR, STREAM_BLOCK, _arg, _function, _loop  # noqa: E402
from neuroncc.codegen.llvm import jit  # noqa: E402

made = record_compiled_graphs()
STREAM_FLOATS = 8 << 20  # 32 MiB read, 32 MiB written


def stream_module(flush: bool = False, work: int = 0, nta_ahead: int = 0) -> str:
    """``stream(args = {src, dst}, start, end)``: blocks of STREAM_BLOCK floats copied with streaming stores;
    ``work`` dependent ``v*v + v`` per vector first; ``flush``: ``clflushopt`` of each source line after its
    load; ``nta_ahead``: ``prefetchnta`` that many floats ahead."""
    vector = ir.VectorType(F32, 16)
    m = ir.Module("stream")
    _, b, args, start, end = _function(m, "stream")
    src, dst = _arg(b, args, 0, PTR), _arg(b, args, 1, PTR)
    marker = m.add_metadata([ir.Constant(I32, 1)])
    clflushopt = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR]), "llvm.x86.clflushopt")
    prefetch = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]), "llvm.prefetch.p0")

    def body(i):
        if nta_ahead:
            b.call(prefetch, [b.gep(src, [b.add(i, ir.Constant(I64, nta_ahead))], source_etype=F32),
                              ir.Constant(I32, 0), ir.Constant(I32, 0), ir.Constant(I32, 1)])
        v = b.load(b.gep(src, [i], source_etype=F32), typ=vector, align=64)
        for _ in range(work):
            v = b.fadd(b.fmul(v, v), v)
        b.store(v, b.gep(dst, [i], source_etype=F32), align=64).set_metadata("nontemporal", marker)
        if flush:
            b.call(clflushopt, [b.gep(src, [i], source_etype=F32)])

    def block(k):
        lo = b.mul(k, ir.Constant(I64, STREAM_BLOCK))
        _loop(b, lo, b.add(lo, ir.Constant(I64, STREAM_BLOCK)), body, step=16)

    _loop(b, start, end, block)
    b.fence("seq_cst")
    b.ret_void()
    return str(m)


def prefetcher():
    """``prefetch(addresses, n)``: ``prefetcht0`` of each of n addresses (an int64 array)."""
    m = ir.Module("prefetch")
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, I64]), "prefetch")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    array, n = fn.args
    intrinsic = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]), "llvm.prefetch.p0")

    def body(i):
        address = b.inttoptr(b.load(b.gep(array, [i], source_etype=I64), typ=I64), PTR)
        b.call(intrinsic, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    _loop(b, ir.Constant(I64, 0), n, body)
    b.ret_void()
    module = jit.compile_ir([str(m)])
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(module.address("prefetch"))
    call.module = module  # keep the code alive
    return call


def path_lines(roots: list, depth: int = 2) -> list[int]:
    """The cache lines of the Python-visible objects reachable from ``roots`` within ``depth`` references (not
    through modules and types, nor dicts of more than 200 items): each object with its GC header, a dict's keys
    and values tables, a list's item array, a tensor's ``TensorImpl`` (256 bytes)."""
    seen, spans, frontier = set(), [], list(roots)
    for level in range(depth + 1):
        following = []
        for obj in frontier:
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            size, header = sys.getsizeof(obj), 16 if gc.is_tracked(obj) else 0
            spans.append((id(obj) - header, min(size, 1024 if isinstance(obj, type) else 4096) + header))
            if isinstance(obj, dict):  # PyDictObject: ma_keys at +32, ma_values at +40 (CPython 3.11-3.13)
                keys, values = (ctypes.c_void_p.from_address(id(obj) + offset).value for offset in (32, 40))
                if keys:
                    spans.append((keys, min(max(size - 48, 64), 8192)))
                if values:
                    spans.append((values, 8 * max(len(obj), 1) + 16))
            elif isinstance(obj, list):  # PyListObject: ob_item at +24
                items = ctypes.c_void_p.from_address(id(obj) + 24).value
                if items:
                    spans.append((items, 8 * max(len(obj), 1)))
            elif isinstance(obj, torch.Tensor):
                spans.append((obj._cdata, 256))
            if level == depth or isinstance(obj, (types.ModuleType, type)) or \
                    (isinstance(obj, dict) and len(obj) > 200):
                continue
            following.extend(gc.get_referents(obj))
            following.append(type(obj))
        frontier = following
    return sorted({(start + k) & ~63 for start, size in spans for k in range(0, size, 64)})


def call_roots(fn, compiled, inputs) -> list:
    entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
    names = fn.__globals__
    roots = [compiled, fn, fn.__code__, names, inputs, entries, torch.Tensor, torch._C.TensorBase,
             *(value for name, value in names.items() if name.startswith("__compiled_fn"))]
    for entry in entries:
        roots += [entry, entry.code, getattr(entry, "guard_manager", None)]
    return roots


def after_stream(threads: int, row: str, repeats: int) -> None:
    import kernel_cases

    torch.set_num_threads(threads)
    src = mk.aligned_empty(STREAM_FLOATS + 8192)[4096:]
    src[:] = 1.0
    dst = mk.aligned_empty(STREAM_FLOATS)
    dst[:] = 0.0
    args = (ctypes.c_int64 * 2)(src.ctypes.data, dst.ctypes.data)
    plain, work = mk.compile_kernel(stream_module(), "stream"), mk.compile_kernel(stream_module(work=12), "stream")
    streams = {
        "warm (no stream)": (None, 0),
        "after the stream (plain loads)": (plain, 1),
        "after 2+2 MiB only": (plain, 16),
        "stream, clflushopt each line": (mk.compile_kernel(stream_module(flush=True), "stream"), 1),
        "stream with 12 FMAs a vector": (work, 1),
        "  the same, clflushopt each line": (mk.compile_kernel(stream_module(flush=True, work=12), "stream"), 1),
        "stream, prefetchnta 64 KiB ahead": (mk.compile_kernel(stream_module(nta_ahead=16384), "stream"), 1),
        "stream, then a twin call (untimed)": (plain, 1),
        "stream, then the path's objects prefetched": (plain, 1),
    }
    fn = getattr(kernel_cases, row)
    twin_fn = types.FunctionType(fn.__code__.replace(co_name=fn.__code__.co_name), fn.__globals__, "twin")
    count = {"layernorm": 3, "rmsnorm": 2, "softmax": 1}[row]
    compile_ = lambda f: torch.compile(f, backend="neuron", dynamic=None, options={"threads": threads})  # noqa: E731
    call, twin = compile_(fn), compile_(twin_fn)
    inputs = [torch.randn(16, 1024), torch.randn(1024), torch.randn(1024)][:count]
    twin_inputs = [torch.randn(16, 1024), torch.randn(1024), torch.randn(1024)][:count]
    for _ in range(3):
        call(*inputs), twin(*twin_inputs)
    settle_neuroncc({"call": lambda: call(*inputs), "twin": lambda: twin(*twin_inputs)})
    lines = path_lines(call_roots(fn, call, inputs))
    array = (ctypes.c_int64 * len(lines))(*lines)
    prefetch = prefetcher()
    clock, labels, order = time.perf_counter, list(streams), random.Random(36)
    stream_times = {label: [] for label in labels}
    call_times = {label: [] for label in labels}
    for round_ in range(repeats + 1):
        order.shuffle(labels)
        for label in labels:
            kernel, part = streams[label]
            start = clock()
            if kernel is not None:
                mk.run(kernel, args, STREAM_FLOATS // STREAM_BLOCK // part, threads)
            if "twin" in label:
                twin(*twin_inputs)
            middle = clock()
            if "objects" in label:
                prefetch(ctypes.addressof(array), len(lines))
            call(*inputs)
            end = clock()
            if round_:
                stream_times[label].append(middle - start)
                call_times[label].append(end - middle)
    print(f"{row} [16, 1024], {threads} thread(s), {repeats} rounds, {len(lines)} lines of the path's objects, "
          f"load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M UTC', time.gmtime())}")
    reference = call_times["after the stream (plain loads)"]
    for label in streams:
        saved = [a - b for a, b in zip(reference, call_times[label])]
        print(f"  {label:44s} stream {statistics.median(stream_times[label]) * 1e3:6.3f} ms, call "
              f"{spread_us(call_times[label])} us, after the stream minus this {statistics.median(saved) * 1e6:6.1f}",
              flush=True)


def reuse(threads: int, mib: int, repeats: int) -> None:
    """``--reuse``: see the module docstring."""
    import kernel_cases

    torch.set_num_threads(threads)
    floats = mib << 18
    src = mk.aligned_empty(floats + 8192)[4096:]
    src[:] = 1.0
    dst = mk.aligned_empty(floats)
    dst[:] = 0.0
    args = (ctypes.c_int64 * 2)(src.ctypes.data, dst.ctypes.data)
    kernels = {"memory-bound": stream_module(), "memory-bound, clflushopt each line": stream_module(flush=True),
               "12 FMAs a vector": stream_module(work=12),
               "12 FMAs a vector, clflushopt each line": stream_module(work=12, flush=True)}
    kernels = {label: mk.compile_kernel(text, "stream") for label, text in kernels.items()}
    call = torch.compile(kernel_cases.layernorm, backend="neuron", dynamic=None, options={"threads": threads})
    inputs = [torch.randn(16, 1024), torch.randn(1024), torch.randn(1024)]
    for _ in range(3):
        call(*inputs)
    settle_neuroncc({"call": lambda: call(*inputs)})
    clock, labels, order = time.perf_counter, list(kernels), random.Random(36)
    results = {label: [] for label in labels}
    for round_ in range(repeats + 1):
        order.shuffle(labels)
        for label in labels:
            mk.run(kernels[label], args, floats // STREAM_BLOCK, threads)
            call(*inputs)
            start = clock()
            mk.run(kernels[label], args, floats // STREAM_BLOCK, threads)
            middle = clock()
            call(*inputs)
            if round_:
                results[label].append((middle - start, clock() - middle))
    print(f"{mib}+{mib} MiB twice, then the small call; {threads} thread(s), {repeats} rounds, load "
          f"{os.getloadavg()[0]:.2f}, {time.strftime('%H:%M UTC', time.gmtime())}")
    for label, rows_ in results.items():
        print(f"  {label:40s} second stream {statistics.median([r[0] for r in rows_]) * 1e3:6.3f} ms, call after it "
              f"{statistics.median([r[1] for r in rows_]) * 1e6:6.1f} us, both "
              f"{statistics.median([r[0] + r[1] for r in rows_]) * 1e3:6.3f} ms", flush=True)


def split(threads: int, rows: list[str], repeats: int) -> None:
    """``--split``: see the module docstring."""
    import neuroncc.frontend.direct_call as direct_call
    from kernel_cases import cases, settled_calls
    from neuroncc.executors.cpu.address_call import AddressCall

    torch.set_num_threads(threads)
    prefetch, clock = prefetcher(), time.perf_counter
    stamps, state = [0.0, 0.0], {"lines": None}

    class Split(AddressCall):
        def runner(self):
            run = super().runner()

            def stamped(inputs, outputs):
                stamps[0] = clock()
                run(inputs, outputs)
                if state["lines"] is not None:
                    prefetch(ctypes.addressof(state["lines"]), len(state["lines"]))
                stamps[1] = clock()

            return stamped

    print(f"{threads} thread(s), {repeats} rounds, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M UTC', time.gmtime())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        first = len(made)
        compiled = settled_calls(case, inputs, threads, graphs=False)["neuroncc"]
        graph = made[first:][-1]
        built_fast, arguments = graph._fast, []
        graph._fast = lambda args: arguments.append(list(args)) or built_fast(args)
        compiled()
        graph._fast = built_fast
        saved = direct_call.AddressCall
        direct_call.AddressCall = Split
        try:
            stamped = direct_call.DirectCall(graph.direct.executable, graph.graph, graph.outputs)
        finally:
            direct_call.AddressCall = saved
        stamped._seen = graph.direct._seen
        stamped.outputs_call(arguments[0])
        lines = path_lines(call_roots(case.eager, compiled, inputs) + [graph, stamped, stamped.outputs_call])
        array = (ctypes.c_int64 * len(lines))(*lines)

        def variant(prefetched):
            def call():
                state["lines"] = array if prefetched else None
                graph._fast = stamped.outputs_call
                try:
                    start = clock()
                    compiled()
                    end = clock()
                finally:
                    graph._fast = built_fast
                return stamps[0] - start, end - stamps[1], stamps[1] - stamps[0]
            return call

        impls = {"as built": variant(False), "the path's objects prefetched at the kernel's end": variant(True)}
        for _ in range(3):
            for impl in impls.values():
                impl()
        results = {label: [] for label in impls}
        labels, order = list(impls), random.Random(36)
        for _ in range(repeats):
            order.shuffle(labels)
            for label in labels:
                results[label].append(impls[label]())
        print(f"{case.title}: {len(lines)} lines prefetched; us before the kernel, after it, both; the kernel ms")
        us = lambda values: statistics.median(values) * 1e6  # noqa: E731
        for label, rows_ in results.items():
            print(f"  {label:52s} before {us([r[0] for r in rows_]):6.1f}, after {us([r[1] for r in rows_]):6.1f}, "
                  f"both {us([r[0] + r[1] for r in rows_]):6.1f}, kernel {us([r[2] for r in rows_]) / 1e3:6.3f}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--row", default="layernorm", choices=["layernorm", "softmax", "rmsnorm"])
    parser.add_argument("--repeats", type=int, default=151)
    parser.add_argument("--split", default=None, help="roofline row keys, comma-separated (b,c,c',rms)")
    parser.add_argument("--reuse", type=int, default=0, help="MiB read (and written) by the stream run twice")
    options = parser.parse_args()
    if options.reuse:
        reuse(options.threads, options.reuse, options.repeats)
    elif options.split:
        split(options.threads, options.split.split(","), options.repeats)
    else:
        after_stream(options.threads, options.row, options.repeats)


if __name__ == "__main__":
    main()
