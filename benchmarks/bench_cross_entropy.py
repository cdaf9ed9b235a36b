"""Cross-entropy's two kernels (roofline.py's row "ce", [512, 32000] float32) built in code variants, in one process.

The row's step (``kernel_cases.cross_entropy_step``) is compiled once through ``torch.compile`` with a dump
directory; its forward graph (the online log-sum-exp and the picked logit) and its backward graph (exp, the
one-hot, the gradient streamed out) are read back, taken through the cpu pipeline, and each is built once per
variant and build (``--builds`` of each, so that two builds of one code show the spread between builds). The
variants' results must agree (bitwise where the code's order of additions is the same, else to float32's last
places); then every build's call runs interleaved (``common.interleaved_samples``: a fresh random order each
round; 1 thread: the calling thread's CPU time, else wall clock) and the table shows medians and the ratio to the
first variant's first build; each build says whether its results equal the first variant's bit for bit.

Variants (``--variants``, comma-separated) of the forward's online log-sum-exp (``online.py``):

- ``groups``: each block's exponentials in groups of ``MEMORY_BURST_LINES`` lines' elements, each group after a
  burst of prefetches of the same lines of the next block (``prefetch.spread_loop``: the code built without
  AVX-512, and with it before session 18);
- ``chunks8`` (the code built with AVX-512: ``CpuTarget.online_exp_chunk_lines``), ``chunks4``, ``chunks16``, ...:
  chunks of that many lines, each a loop of constant length after its prefetches (``prefetch.chunk_loop``);
- ``groups8``, ``groups32``, ``groups64``: groups (and bursts) of that many lines (``prefetch.MEMORY_BURST_LINES``;
  64: one group per block, all its prefetches at its start);
- ``loop``: one loop over each block's exponentials, no software prefetch;
- ``loop512``, ``loop2048``, ``loop4096``: ``loop`` with blocks of that many elements
  (``CpuTarget.online_block_elements``);
- ``head8``, ``head16``, ...: one loop after a burst of prefetches of the next block's first that many lines;
- ``inloop``: each whole chunk's sum in its exp loop (``online.SUM_CHUNK_APART`` off: the code before session 23,
  and AVX-512's), against main's chunk buffer summed in a loop of its own
  (``CpuTarget.sums_online_exponentials_apart``);
- ``ahead1``, ``ahead3``: the next blocks' prefetches that many blocks ahead
  (``CpuTarget.online_prefetch_blocks_ahead``: AVX2 2, AVX-512 1); ``spread0`` (before session 26, AVX-512's), ``spread4``: each chunk's prefetches in a burst
  before its loop, or in pieces of that many lines through it (``CpuTarget.online_exp_prefetch_piece_lines``: AVX2
  2); ``spread0+ahead1``: the code before session 26;
- a name ending in ``i8`` or ``i2`` (``mainI8``, ``inloopI2``): the polynomial loops interleaved by 8 or 2 (AVX2's
  ``CpuTarget.polynomial_interleave`` is 4);
- ``nanbits``: each block's max loop with the amax's NaN bits (before session 25, AVX-512's code), against main's
  loops without them and the row taken again where its total may hold a NaN
  (``CpuTarget.online_block_max_without_nan_bits``); ``nonan``: the loops without them and no retake (wrong for
  NaN rows: an experiment);
- ``maxahead0`` (before session 28, AVX-512's), ``maxahead1``: each block's max loop in its own block before its
  exponentials, or a block early before the previous block's exponentials, against main's a block early between
  the previous block's chunks (``CpuTarget.online_block_max_ahead``; AVX2: 2);
- ``blockN``: blocks of N elements (``CpuTarget.online_block_elements``: Zen 4 4096, elsewhere 1024; other bits);
  ``withoutnan``: the block max loops without the NaN bits where the target keeps them (Intel's AVX-512);
  ``l2aheadN``: also ``prefetcht2`` of x N blocks ahead (``CpuTarget.online_l2_prefetch_blocks_ahead``: Zen 4 4,
  elsewhere 0), ``l2onlyN``: those alone; ``lseN_M`` (``lseN_M_L``): the exp loops' prefetches N elements ahead
  into L1 and M elements ahead into L2 (with LLVM's locality L; 0 elements: none); ``before35``: Zen 4's code
  before session 35 (``cross_entropy_variants.BEFORE_35``: its 1024-element blocks, 8-line chunks, NaN bits, no
  L2 prefetches, and the gradient's pieces through their buffers); ``unfused`` / ``fused``: each block's max in a max
  loop of its own, or in the previous block's exp loop with the block's sums in vector lanes
  (``CpuTarget.takes_the_next_block_max_in_the_exp_loop``: Zen 4 since session 36; ``unfused`` is Zen 4's code
  before it); ``withnear``: the fused blocks with the L1 prefetches a block ahead kept; ``lanesum``: each chunk's
  sum in its exp loop where the target sums them apart (``CpuTarget.sums_online_exponentials_apart``: AVX2), which
  ``fused`` needs (``fused+lanesum``: the fused blocks on AVX2; session 39);
- experiments, the same bits: ``merged2``: two chunks' exponentials in one loop, then their sums; ``bufN``: each
  chunk's buffer N bytes further on the stack; ``splitN``: each chunk's exponentials in N loops, a burst of
  prefetches before each;

of the forward: ``maxline``: each block's max over its first line alone (a bound on what the max loops cost: other
values, not compared); of both kernels: ``noexp``: exp_nonpositive as its clamp alone (the memory skeleton; not cross-entropy, its
results are not compared); and of the backward: ``pf0`` (main before session 23, AVX-512's), ``pf1``, ``pf3``, ...: its input prefetched that
many 16-line bursts ahead (``CpuTarget.streamed_map_prefetch_pieces``; AVX2: 2); ``burst16`` (before session 25,
AVX-512's), ``burst4``, ``burst4pf4``, ...: its pieces of that many lines (``CpuTarget.streamed_map_piece_lines``;
AVX2: 2); ``registers0`` (before session 27, AVX-512's): every piece through its stack buffer, ``registers2``,
``registers4``, ...: the pieces without the row's target from registers, in pieces of that many lines, each one
vector iteration interleaved by its vectors (``CpuTarget.register_piece_lines``; AVX2: 4);
``mulscale`` / ``foldscale``: the gradient's exp(x - max - lse) * s as an exponential and a multiply, or s folded
into the exponential's coefficients and scale (``CpuTarget.folds_row_scale_into_exp``: Zen 4 since session 36;
``mulscale`` is Zen 4's code before it; the same bits where s is a power of two, as the benchmark's mean);
``nofetch``: no software prefetch in either kernel (the online log-sum-exp's chunks keep their places: the same bits);
``plain``: its gradient written with plain stores (the forward as built) (``CpuTarget.streams_outputs`` false) instead
of non-temporal ones.

The backward has no online log-sum-exp (its code is the same in the forward's variants): its builds, timed beside
the forward's, show the run's noise (and the forward's, beside ``plain``).

``--row`` times instead the whole row (the step through ``torch.compile``: both kernels and the call path) in each
variant, two builds each, interleaved (``variant_ab.py``'s row "ce": ``--rounds``; 1 thread: CPU time of the calling
thread).

``--split`` itemizes the row at each thread count in one process: the whole step through ``torch.compile``, its
forward and backward kernels alone (the executables the backend builds for its two graphs), each call timed by
the wall clock and by the calling thread's CPU time at once (roofline's 1-thread column is CPU time, its 2-thread
column wall time: the split shows what each clock sees), calls interleaved; "rest" is the step less its two
kernels (TorchDynamo, AOTAutograd, the graph break, the call path); "graph calls in the step" is the step's own calls
of neuroncc's compiled graphs (its four: two with no op, the forward, the backward), timed inside the step by both
clocks, and "outside neuroncc" the step less them: TorchDynamo's three frames (the function's graph breaks at
``requires_grad_`` and ``backward``), AOTAutograd's runtime and the autograd engine (session 29). Each call's minor
page faults and system time
(``getrusage``, the whole process: the team's threads too) are shown as median / mean: a heap that grows faults
in one call of many, which moves the mean, not the median.

``--needs`` itemizes each kernel against what it must do, interleaved in one process at each thread count (session
27): the kernel as built (main) and its memory skeleton (``noexp``), beside the stream kernels of its bytes
(``microkernels.Stream`` on the row's own logits: the forward's 65.5 MB read alone, the backward's 65.5 MB read and
65.5 MB written with non-temporal stores) and its 16.4M exponentials at ``exp_nonpositive``'s microkernel rate (the
fastest of 7 runs, L1-resident, as roofline.py counts it). Its need is the larger of its memory and exp times.

``--memory dram,l3,l2`` times each build (variants mode) on the plain logits and on memory that holds only 128 or 4
of their rows (``aliased_rows.py``: the same addresses and loops, x resident in the L3 or the L2), each ratio
against the first variant's first build on the same memory (session 35).

``--floor`` times each kernel's elementwise arithmetic alone as ``microkernels.math_throughput`` times the
exponential (L1-resident x and y, the loop hints of the kernels' math loops, the fastest of 5 runs; session 29):
``exp_nonpositive`` itself (roofline.py's count), the forward's exp(x - m) and the backward's
0 - exp((x - m) - l) * s, each over the row's 16.4M elements: the least each kernel's instructions take where
nothing waits for memory (the forward's block max and chunk sums come on top: one vector max and one vector add
per 8 elements).

``a+b`` (``burst16+nanbits``: the code before session 25): both variants' changes.

Run: ``python benchmarks/bench_cross_entropy.py [--threads 2,1] [--builds 2] [--repeats 15] [--variants groups,loop]
[--row [--rounds 31]] [--split [--rounds 31]] [--needs [--rounds 31]] [--floor]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved_samples, table  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import aliased_rows  # noqa: E402
import cross_entropy_floor  # noqa: E402
from cross_entropy_variants import variant  # noqa: E402
import kernel_cases as kc  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.frontend.compiled import CompiledGraph  # noqa: E402
from neuroncc.ir.parser import parse  # noqa: E402
from neuroncc.passes.manager import PassContext  # noqa: E402
from neuroncc.passes.pipeline import default_pipeline, run_pipeline  # noqa: E402

VOCAB = 32000  # the row's classes (its graphs are those with a [rows, VOCAB] parameter)


def dumped_graphs(inputs: list[torch.Tensor]) -> tuple:
    """The forward and backward graphs of the row's compiled step, as the neuron backend imported them."""
    directory = Path(tempfile.mkdtemp(prefix="ce-dump-"))
    step = torch.compile(kc.cross_entropy_step, backend="neuron", dynamic=False,
                         options={"dump_dir": str(directory), "threads": 1})
    step(*inputs)
    graphs = []
    for path in sorted(directory.glob("*.nir")):
        fn = parse(path.read_text())
        if any(op.name not in ("return",) for op in fn.ops) and any(
                len(p.type.shape) == 2 and p.type.shape[-1] == VOCAB for p in fn.params):
            graphs.append((path.stem, fn))
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--builds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--variants", default="groups,loop")
    parser.add_argument("--kernels", default="forward,backward")
    parser.add_argument("--row", action="store_true", help="time the whole row through torch.compile instead")
    parser.add_argument("--rounds", type=int, default=31, help="--row's interleaved rounds")
    parser.add_argument("--split", action="store_true", help="itemize the row: step, kernels, both clocks")
    parser.add_argument("--needs", action="store_true", help="each kernel against its bytes and exponentials")
    parser.add_argument("--floor", action="store_true", help="each kernel's elementwise math alone, L1-resident")
    parser.add_argument("--memory", default="dram", help="the logits' memory: dram, l3, l2 (aliased_rows.py)")
    args = parser.parse_args()
    names = args.variants.split(",")
    if args.floor:
        cross_entropy_floor.floor(args.threads, 512 * VOCAB)
        return
    if args.split:
        split(args)
        return
    if args.needs:
        needs(args)
        return
    if args.row:
        import variant_ab  # (it turns the compile caches off: every variant's build compiles)

        args.rows = "ce"
        variant_ab.compare({name: (lambda name=name: variant(name)) for name in names}, args)
        return
    rng = np.random.default_rng(0)
    inputs = kc.cases()[[c.key for c in kc.cases()].index("ce")].make(rng)
    graphs = dumped_graphs(inputs)
    print("graphs:", ", ".join(f"{name} ({len(fn.params)} params)" for name, fn in graphs), flush=True)
    forward = next(fn for name, fn in graphs if len(fn.params) == 2)
    backward = next((fn for name, fn in graphs if len(fn.params) > 2), None)
    logits, target = inputs[0].numpy(), inputs[1].numpy()
    memories = {name: aliased_rows.aliased(logits, aliased_rows.MEMORIES[name]) for name in args.memory.split(",")}
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        calls, firsts = {}, {}
        for kernel in args.kernels.split(","):
            fn = forward if kernel == "forward" else backward
            if fn is None:
                continue
            lowered = run_pipeline(default_pipeline("cpu"), fn, PassContext())
            arrays = [logits, target]
            if kernel == "backward":  # (its saved inputs: what main's forward computes)
                saved = build_cpu_executable(run_pipeline(default_pipeline("cpu"), forward, PassContext()),
                                             {"threads": threads})(logits, target)
                arrays = _backward_arguments(fn, saved, logits, target)
            reference = None
            for build in range(args.builds):
                for name in names:
                    with variant(name):
                        exe = build_cpu_executable(lowered, {"threads": threads})
                    results = exe(*arrays)
                    if reference is None:
                        reference = results
                    bitwise = all(np.array_equal(np.asarray(g), np.asarray(w), equal_nan=True)
                                  for g, w in zip(results, reference))
                    print(f"{kernel} {name} #{build + 1}: {'bitwise equal' if bitwise else 'OTHER BITS'} to the first",
                          flush=True)
                    for got, want in zip(results, reference):
                        if {"noexp", "maxline"} & set(name.split("+")):
                            break
                        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
                    for memory in args.memory.split(","):  # (the same build on each memory of the logits)
                        on = [memories[memory] if a is logits else a for a in arrays]
                        key = f"{kernel} {name} #{build + 1}" + (f" {memory}" if "," in args.memory else "")
                        calls[key] = (lambda exe=exe, on=on: exe(*on))
                        firsts.setdefault((kernel, memory), key)
        clock = time.thread_time if threads == 1 else time.perf_counter
        samples = interleaved_samples(calls, repeats=args.repeats, clock=clock)
        for key, times in samples.items():
            kernel, memory = key.split()[0], key.split()[-1] if "," in args.memory else args.memory
            base = statistics.median(samples[firsts[kernel, memory]])
            median = statistics.median(times)
            rows.append([key, str(threads), f"{median * 1e3:.3f}", f"{median / base:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["kernel variant build", "threads", "median ms", "ratio"]))


def split(args: argparse.Namespace) -> None:
    """``--split``: the row's step and its two kernels at each thread count, wall and CPU time of each call."""
    import random

    inputs = kc.cases()[[c.key for c in kc.cases()].index("ce")].make(np.random.default_rng(0))
    graphs = dumped_graphs(inputs)
    forward = next(fn for name, fn in graphs if len(fn.params) == 2)
    backward = next(fn for name, fn in graphs if len(fn.params) > 2)
    logits, target = inputs[0].numpy(), inputs[1].numpy()
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        step = torch.compile(kc.cross_entropy_step, backend="neuron", dynamic=False, options={"threads": threads})
        built = [build_cpu_executable(run_pipeline(default_pipeline("cpu"), fn, PassContext()), {"threads": threads})
                 for fn in (forward, backward)]
        arrays = [[logits, target], _backward_arguments(backward, built[0](logits, target), logits, target)]
        inside: list[tuple[float, float]] = []  # (wall, CPU) of each of neuroncc's graph calls in a step

        def graph_call(graph, args, call=CompiledGraph.__call__):
            wall, cpu = time.perf_counter(), time.thread_time()
            outputs = call(graph, args)
            inside.append((time.perf_counter() - wall, time.thread_time() - cpu))
            return outputs

        calls = {"step": lambda: step(*inputs),
                 "forward": lambda: built[0](*arrays[0]), "backward": lambda: built[1](*arrays[1])}
        graph_walls: list[float] = []
        graph_cpus: list[float] = []
        walls: dict[str, list[float]] = {key: [] for key in calls}
        cpus: dict[str, list[float]] = {key: [] for key in calls}
        faults: dict[str, list[float]] = {key: [] for key in calls}
        systems: dict[str, list[float]] = {key: [] for key in calls}
        for call in calls.values():
            call(), call()
        order, names = random.Random(0x5EED), list(calls)
        CompiledGraph.__call__ = graph_call  # type: ignore[method-assign]
        try:
            for _ in range(args.rounds):
                order.shuffle(names)
                for name in names:
                    inside.clear()
                    usage = resource.getrusage(resource.RUSAGE_SELF)
                    wall, cpu = time.perf_counter(), time.thread_time()
                    calls[name]()
                    cpus[name].append(time.thread_time() - cpu)
                    walls[name].append(time.perf_counter() - wall)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    faults[name].append(after.ru_minflt - usage.ru_minflt)
                    systems[name].append(after.ru_stime - usage.ru_stime)
                    if name == "step":
                        graph_walls.append(sum(w for w, _ in inside))
                        graph_cpus.append(sum(c for _, c in inside))
        finally:
            CompiledGraph.__call__ = graph_call.__defaults__[0]  # type: ignore[method-assign]
        wall = {key: statistics.median(v) * 1e3 for key, v in walls.items()}
        cpu = {key: statistics.median(v) * 1e3 for key, v in cpus.items()}
        wall["graph calls in the step"] = statistics.median(graph_walls) * 1e3
        cpu["graph calls in the step"] = statistics.median(graph_cpus) * 1e3
        wall["outside neuroncc"] = statistics.median([s - g for s, g in zip(walls["step"], graph_walls)]) * 1e3
        cpu["outside neuroncc"] = statistics.median([s - g for s, g in zip(cpus["step"], graph_cpus)]) * 1e3
        for key in [*calls, "rest", "graph calls in the step", "outside neuroncc"]:
            w = wall[key] if key != "rest" else wall["step"] - wall["forward"] - wall["backward"]
            c = cpu[key] if key != "rest" else cpu["step"] - cpu["forward"] - cpu["backward"]
            minor = f"{statistics.median(faults[key]):.0f} / {statistics.mean(faults[key]):.1f}" \
                if key in faults else "-"
            system = f"{statistics.median(systems[key]) * 1e3:.3f} / {statistics.mean(systems[key]) * 1e3:.3f}" \
                if key in systems else "-"
            rows.append([key, str(threads), f"{w:.3f}", f"{c:.3f}", minor, system])
        print(f"threads {threads}, load {__import__('os').getloadavg()[0]:.2f}, "
              f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, {args.rounds} rounds", flush=True)
    print(table(rows, ["piece", "threads", "wall ms", "calling thread's CPU ms", "minor faults / call (median / mean)",
                       "system ms / call (process; median / mean)"]))


def needs(args: argparse.Namespace) -> None:
    """``--needs``: each kernel (main and its memory skeleton ``noexp``) beside the streams of its bytes and the
    microkernel time of its exponentials, interleaved at each thread count."""
    import microkernels as mk
    from neuroncc.codegen.llvm import jit

    inputs = kc.cases()[[c.key for c in kc.cases()].index("ce")].make(np.random.default_rng(0))
    graphs = dumped_graphs(inputs)
    forward = next(fn for name, fn in graphs if len(fn.params) == 2)
    backward = next(fn for name, fn in graphs if len(fn.params) > 2)
    logits, target = inputs[0].numpy(), inputs[1].numpy()
    nbytes, elements = logits.nbytes, logits.size
    source = (logits.ctypes.data, nbytes)
    kernels = mk.compile_kernel(mk.stream_module(False), "stream"), mk.compile_kernel(mk.stream_module(True), "stream")
    host = jit.host_target()
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        built = {}
        for name in ("main", "noexp"):
            with variant(name):
                built[name] = [build_cpu_executable(run_pipeline(default_pipeline("cpu"), fn, PassContext()),
                                                    {"threads": threads}) for fn in (forward, backward)]
        arrays = [[logits, target], _backward_arguments(backward, built["main"][0](logits, target), logits, target)]
        calls = {f"{kernel} {name}": (lambda exe=exes[k], a=arrays[k]: exe(*a))
                 for name, exes in built.items() for k, kernel in enumerate(("forward", "backward"))}
        calls["forward's read (stream)"] = mk.Stream(*kernels, nbytes, 0, source).runner("streaming", threads)
        calls["backward's copy (stream)"] = mk.Stream(*kernels, nbytes, nbytes, source).runner("streaming", threads)
        samples = interleaved_samples(calls, repeats=args.rounds, clock=clock)
        ms = {key: statistics.median(v) * 1e3 for key, v in samples.items()}
        exp_ms = elements / mk.math_throughput("exp_nonpositive", host, threads, clock) * 1e3
        for kernel, memory in (("forward", "forward's read (stream)"), ("backward", "backward's copy (stream)")):
            need = max(ms[memory], exp_ms)
            rows.append([kernel, str(threads), f"{ms[f'{kernel} main']:.3f}", f"{ms[f'{kernel} noexp']:.3f}",
                         f"{ms[memory]:.3f} ({nbytes * (1 if kernel == 'forward' else 2) / ms[memory] / 1e6:.1f} GB/s)",
                         f"{exp_ms:.3f}", f"{need / ms[f'{kernel} main']:.0%}"])
            print(" | ".join(rows[-1]), flush=True)
        print(f"threads {threads}, load {__import__('os').getloadavg()[0]:.2f}, "
              f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, {args.rounds} rounds", flush=True)
    print(table(rows, ["kernel", "threads", "ms", "memory skeleton (noexp) ms", "its bytes' stream ms",
                       "its exponentials ms (microkernel)", "need / ms"]))


def _backward_arguments(fn, saved, logits, target) -> list:
    """The backward graph's arguments: each parameter from the forward's outputs or inputs of its shape and dtype
    (in order), the loss's tangent as 1."""
    pool = [np.asarray(a) for a in saved[1:]] + [logits, target]
    arguments = []
    for param in fn.params:
        shape = tuple(param.type.shape)
        match = next((k for k, a in enumerate(pool) if a.shape == shape and a.dtype == param.type.dtype.numpy), None)
        if match is None or shape == ():
            arguments.append(np.ones(shape, dtype=param.type.dtype.numpy))
        else:
            arguments.append(pool.pop(match))
    return arguments


if __name__ == "__main__":
    main()
