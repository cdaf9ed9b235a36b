"""Where roofline.py's softmax row [4096, 1024] float32 loses against its roof, in one process.

``roofline.py`` times neuroncc's row as ``exe(*arrays)`` wrapped in ``torch.from_numpy`` and compares it with
max(memory roof, compute roof): the memory roof a copy of the row's bytes (the faster of plain and non-temporal
stores), the compute roof exp_nonpositive's measured throughput plus the other flops at the FMA peak. This
benchmark times, interleaved with eager and the copy (medians; 2 threads wall clock, 1 thread the calling
thread's CPU time):

- the call path, from the outside in: roofline's call, ``exe(*arrays)`` (a fresh output per call),
  ``AddressCall`` into a fresh ``torch.empty`` output, ``AddressCall`` into one held output;
- the kernel's step called straight on that held output (its phase functions on the team, no Python between);
- the same kernel built with exp replaced by its clamp (the memory skeleton: every load, store and prefetch,
  the max and sum passes and the write pass, no polynomial), in two builds each (later builds of a process
  run faster: session 12);
- the roof's pieces measured in the same run.

``--exp-forms`` also times, on L1-resident data, exact ways of scaling exp_nonpositive's polynomial by 2**n on
AVX-512 (``mathlib._exp_nonpositive``: vscalefps by an integer n converted back to float; the one-step scale by
exponent bits with the bias folded into the rounding constant; ``llvm.ldexp`` of fptosi(n)).

``--online`` also times the bounds of an online max+sum pass (one pass computing the running max and the rescaled
sum of exp, as in flash softmax), two builds each: the kernel without its max pass (the row's first element stored
as its max: not softmax, the most that folding the max into the exp pass could save before paying for its
rescaling), the max pass without its NaN flag (a bound: NaN rows come out wrong), the kernel with exp not row-cached (online.py's log-sum-exp, the write pass computing exp again: a
correct build), and both (the work of a softmax that reads the row twice and computes exp twice, without the
online bookkeeping).

``--split`` also times roofline's call in its three parts (session 18): the Python before the kernel step
(``CpuExecutable._call``'s input checks, the output's ``placed_empty``), the step, and what follows it
(the results, ``torch.from_numpy``); and the kernel into output memory in the states a call can find it: only
ever written by the kernel (held), filled by plain stores just before (dirty in the caches), read just before
(clean in the caches), a fresh ``torch.empty``, a fresh one right after eager's softmax freed its result.

``--sizes`` also times the kernel and its memory skeleton per 4M elements on [R, 1024] inputs that fit the L2
(R 64, 256) or not (4096), the small ones with the large one's non-temporal stores forced (session 18: is the
row memory-bound or compute-bound at 1 thread?).

``--call-ab`` times, instead of the tables above, roofline's call of rows (a), (b) and (c) (the numpy path,
``exe(*arrays)`` wrapped in ``torch.from_numpy``) through the executable's common-case call
(``executors/cpu/array_call.py``) against the same executable's full path (``CpuExecutable._call``), interleaved
with the kernel step into a held output (a yardstick) and eager: one executable per row, so the two paths run the
same code on the same arena; per-round ratios pair calls made moments apart (session 18 callfast).

Run: ``python benchmarks/bench_softmax_parts.py [--threads 2,1] [--repeats 25] [--exp-forms] [--online] [--split]
[--sizes] [--call-ab]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved, interleaved_samples, kernel_alone, table  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from llvmlite import ir  # noqa: E402

import kernel_cases as kc  # noqa: E402
import microkernels as mk  # noqa: E402
from neuroncc.codegen.llvm import emit, jit, mathlib, reductions, refine, streams  # noqa: E402
from neuroncc.codegen.llvm.scalars import F32, I32, call  # noqa: E402
from neuroncc.executors.cpu.address_call import AddressCall  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.hardware.host import CpuTarget  # noqa: E402

ROWS, COLS = 4096, 1024


def _clamp_only(b, x, target):
    """exp_nonpositive's clamp and nothing else: the kernel's memory skeleton (not exp: a measurement only)."""
    return mathlib._raised_keeping_nan(b, x, -104.0)


def _reduced(b, xc, rounder: float):
    shifted = b.fadd(b.fmul(xc, mathlib._c(1.4426950408889634), flags=mathlib.FAST), mathlib._c(rounder),
                     flags=mathlib.FAST)
    n = b.fsub(shifted, mathlib._c(rounder))
    r = b.fsub(xc, b.fmul(n, mathlib._c(0.693359375), flags=mathlib.FAST), flags=mathlib.FAST)
    return shifted, n, b.fsub(r, b.fmul(n, mathlib._c(-2.12194440e-4), flags=mathlib.FAST), flags=mathlib.FAST)


def _bits_folded(b, x, target):
    """2**(n + 24) from the rounded sum's bits, the exponent bias folded into the rounding constant (vpslld,
    vmulps), on the polynomial times 2**-24 (exact: n is the same integer, no tie reaches the rounding)."""
    xc = mathlib._raised_keeping_nan(b, x, -104.0)
    shifted, _, r = _reduced(b, xc, mathlib._ROUNDER + 127 + mathlib._EXP_NONPOSITIVE_SHIFT)
    p = mathlib.horner(b, r, [c * 2.0 ** -mathlib._EXP_NONPOSITIVE_SHIFT for c in mathlib._EXP_POLY])
    return b.fmul(p, b.bitcast(b.shl(b.bitcast(shifted, I32), ir.Constant(I32, 23)), F32))


def _ldexp_of_float_n(b, x, target):
    """``llvm.ldexp`` of fptosi(n): vscalefps wants a float exponent, LLVM converts the integer back."""
    xc = mathlib._raised_keeping_nan(b, x, -104.0)
    _, n, r = _reduced(b, xc, mathlib._ROUNDER)
    return call(b, "llvm.ldexp.f32.i32", [mathlib.horner(b, r, mathlib._EXP_POLY), b.fptosi(n, I32)], F32)


EXP_FORMS = {"main": None, "exponent bits, folded bias": _bits_folded, "ldexp(fptosi(n))": _ldexp_of_float_n}


@contextlib.contextmanager
def exp_as(body):
    saved = mathlib.POLYNOMIAL["exp_nonpositive"]
    if body is not None:
        mathlib.POLYNOMIAL["exp_nonpositive"] = body
    try:
        yield
    finally:
        mathlib.POLYNOMIAL["exp_nonpositive"] = saved


@contextlib.contextmanager
def patched(module, name: str, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _max_as_first_element(em, stage, outer, *args, **kwargs):
    """The amax stage as one load: the row's first element stored as its max (a bound, not softmax: what the
    exp pass and the write pass cost without the max pass before them, i.e. the most that computing the max
    inside the exp pass, an online max+sum, could save before paying for its rescaling)."""
    if stage.op.name != "amax" or kwargs.get("online") is not None:
        return _EMIT_REDUCE(em, stage, outer, *args, **kwargs)
    index = list(outer) + [0] * (len(stage.shape) - len(outer))
    em.store(stage.target, index, em.value_at(stage.op.operands[0], index))


_EMIT_REDUCE = emit.emit_reduce


def online_variants() -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    """The builds ``--online`` times beside main's: the bounds of an online max+sum pass (see the module docstring)."""
    no_max = lambda: patched(emit, "emit_reduce", _max_as_first_element)  # noqa: E731
    uncached = lambda: patched(refine, "ROW_CACHE_MAX", 0)  # noqa: E731

    @contextlib.contextmanager
    def both():
        with no_max(), uncached(), patched(emit, "online_maxima", lambda plan, phase: {}):
            yield

    return {"no max pass (bound: max := x[row, 0])": no_max,
            "max pass without its NaN flag (bound: NaN rows wrong)": _max_without_nan_flag,
            "exp not row-cached: online.py's log-sum-exp, exp again in the write pass": uncached,
            "exp not row-cached, no max pass (bound of a 2-read online softmax)": both}


@contextlib.contextmanager
def _max_without_nan_flag():
    """amax's update without the largest-magnitude bits beside its vmaxps (``reductions._extreme``: the NaN flag, an
    and and an unsigned max per vector): a bound of what the flag costs (a NaN in a row is then not propagated)."""
    saved = reductions.COMBINERS["amax"]
    update = saved.update

    def max_only(b, dtype, accs, x, pos):
        return [update(b, dtype, accs, x, pos)[0], accs[1]] if dtype.is_float else update(b, dtype, accs, x, pos)

    reductions.COMBINERS["amax"] = dataclasses.replace(saved, update=max_only)
    try:
        yield
    finally:
        reductions.COMBINERS["amax"] = saved


def step_call(exe, x: torch.Tensor, out: torch.Tensor) -> Callable[[], None]:
    """The executable's one kernel step on (x, out), its phases called straight (``common.kernel_alone``)."""
    return kernel_alone(exe, [x], [out])


def parts(threads: int, repeats: int, online: bool = False) -> None:
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    target = jit.host_target()
    case = next(c for c in kc.cases() if c.key == "b")
    x = case.make(np.random.default_rng(0))[0]
    expected = torch.softmax(x, -1)
    exe = build_cpu_executable(kc.softmax_graph(ROWS, COLS), {"threads": threads})
    arrays, run = [x.numpy()], AddressCall(exe)
    held = torch.empty_like(x)
    kernel = step_call(exe, x, held)
    torch.testing.assert_close(held, expected, rtol=1.3e-6, atol=1e-5)

    def fresh() -> torch.Tensor:
        out = torch.empty_like(x)
        run([x.data_ptr()], [out.data_ptr()])
        return out

    calls = {"eager": lambda: torch.softmax(x, -1),
             "roofline's call": lambda: [torch.from_numpy(a) for a in exe(*arrays)],
             "exe(*arrays)": lambda: exe(*arrays), "AddressCall, fresh output": fresh,
             "AddressCall, held output": lambda: run([x.data_ptr()], [held.data_ptr()]),
             "kernel step on held output": kernel}
    for build in (1, 2):
        with exp_as(_clamp_only):
            skeleton = build_cpu_executable(kc.softmax_graph(ROWS, COLS), {"threads": threads})
        calls[f"memory skeleton (no exp), build {build}"] = step_call(skeleton, x, torch.empty_like(x))
        if build == 1:
            calls["kernel step, 2nd build"] = step_call(build_cpu_executable(
                kc.softmax_graph(ROWS, COLS), {"threads": threads}), x, torch.empty_like(x))
        for name, variant in (online_variants().items() if online else ()):
            with variant():
                built = build_cpu_executable(kc.softmax_graph(ROWS, COLS), {"threads": threads})
            calls[f"{name}, build {build}"] = step_call(built, x, torch.empty_like(x))
    plain, streaming = (mk.compile_kernel(mk.stream_module(nt), "stream") for nt in (False, True))
    stream = mk.Stream(plain, streaming, case.work.reads, case.work.writes, (x.data_ptr(), x.numel() * 4))
    calls["copy, plain stores"] = stream.runner("plain", threads)
    calls["copy, non-temporal stores"] = stream.runner("streaming", threads)
    peak = mk.fma_peak(target, threads, clock)
    exp_rate = mk.math_throughput("exp_nonpositive", target, threads, clock)
    times = interleaved(calls, repeats=repeats, clock=clock)
    memory = min(times["copy, plain stores"], times["copy, non-temporal stores"])
    exp_seconds = case.work.math["exp_nonpositive"] / exp_rate
    compute = exp_seconds + case.work.flops / peak
    roof = max(memory, compute)
    base = times["kernel step on held output"]
    print(f"\n{threads} thread(s): memory roof {memory * 1e3:.3f} ms ({(case.work.reads + case.work.writes) / memory / 1e9:.1f}"
          f" GB/s), compute roof {compute * 1e3:.3f} ms (exp_nonpositive {exp_seconds * 1e3:.3f} ms at "
          f"{exp_rate / 1e9:.2f} Gelem/s, other flops at {peak / 1e9:.0f} GFLOP/s)", flush=True)
    print(table([[name, f"{t * 1e3:.3f}", f"{t / base:.3f}", f"{roof / t:.0%}"] for name, t in times.items()],
                ["call", "ms", "/ kernel step", "roof / time"]), flush=True)


def split(threads: int, repeats: int) -> None:
    """Roofline's call before / in / after its kernel step, and the kernel into output memory in several states
    (``--split``, see the module docstring)."""
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    x = kc.cases()[1].make(np.random.default_rng(0))[0]
    arrays = [x.numpy()]
    exe = build_cpu_executable(kc.softmax_graph(ROWS, COLS), {"threads": threads})
    exe(*arrays)  # binds the step calls
    stamps: list[tuple[float, float]] = []

    def stamped(run):
        def timed_run(*args):
            begin = clock()
            run(*args)
            stamps.append((begin, clock()))
        return timed_run

    exe._calls = [stamped(run) for run in exe._calls]
    parts_of: dict[str, list[float]] = {"before the step": [], "the step": [], "after it": []}

    def roofline_call():
        begin = clock()
        result = [torch.from_numpy(a) for a in exe(*arrays)]
        end = clock()
        (start, stop), = stamps[-1:]
        for name, seconds in zip(parts_of, (start - begin, stop - start, end - stop)):
            parts_of[name].append(seconds)
        return result

    run = AddressCall(build_cpu_executable(kc.softmax_graph(ROWS, COLS), {"threads": threads}))
    held, dirty, clean = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    freed: list[torch.Tensor] = []

    def into(out):
        return lambda: run([x.data_ptr()], [out.data_ptr()])

    def fresh():
        def into_fresh():
            out = torch.empty_like(x)
            run([x.data_ptr()], [out.data_ptr()])
            return out
        return into_fresh

    # name -> (untimed call before, timed call)
    calls = {"eager": (None, lambda: torch.softmax(x, -1)), "roofline's call": (None, roofline_call),
             "kernel into held output": (None, into(held)),
             "into held output, filled by plain stores before": (lambda: dirty.fill_(1.0), into(dirty)),
             "into held output, read before": (lambda: clean.sum(), into(clean)),
             "into fresh torch.empty": (None, fresh()),
             "into fresh torch.empty, eager's result freed before": (
                 lambda: (freed.append(torch.softmax(x, -1)), freed.clear()), fresh())}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names, order = list(calls), random.Random(0x5EED)
    for round_ in range(repeats + 3):
        order.shuffle(names)
        for name in names:
            before, timed = calls[name]
            if before is not None:
                before()
            begin = clock()
            timed()
            if round_ >= 3:
                samples[name].append(clock() - begin)
    base = statistics.median(samples["kernel into held output"])
    rows = [[name, f"{statistics.median(t) * 1e3:.3f}", f"{statistics.median(t) / base:.3f}"]
            for name, t in samples.items()]
    rows += [[f"  roofline's call: {name}", f"{statistics.median(t[-repeats:]) * 1e3:.3f}",
              f"{statistics.median(t[-repeats:]) / base:.3f}"] for name, t in parts_of.items()]
    print(f"\n{threads} thread(s), the call's parts and the output's memory (medians of {repeats})")
    print(table(rows, ["call", "ms", "/ into held output"]), flush=True)


def call_ab(threads: int, repeats: int) -> None:
    """Roofline's call of rows a, b, c through the common-case call and the full path (``--call-ab``)."""
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    calls: dict[str, Callable[[], object]] = {}
    parts_of: dict[str, list[tuple[float, float]]] = {}  # call -> (before the steps, after them) per call
    keep = []
    for case in [c for c in kc.cases() if c.key in ("a", "b", "c")]:
        inputs = case.make(np.random.default_rng(0))
        arrays = [t.numpy() for t in inputs]
        exe = build_cpu_executable(case.graph, {"threads": threads})
        assert exe._array_call is not None, case.key
        np.testing.assert_array_equal(exe(*arrays)[0], exe._call(tuple(arrays), exe._calls)[0])
        held = torch.empty_like(inputs[0])
        keep += [inputs, held]
        kernel = kernel_alone(exe, inputs, [held])
        stamps: list[float] = []

        def stamped(run, stamps=stamps):
            def timed_run(*args):
                stamps.append(clock())
                run(*args)
                stamps.append(clock())
            return timed_run
        exe._calls = [stamped(run) for run in exe._calls]

        def split(name: str, call, stamps=stamps):
            parts_of[name] = []

            def timed():
                stamps.clear()
                begin = clock()
                result = call()
                end = clock()
                parts_of[name].append((stamps[0] - begin, end - stamps[-1]))
                return result
            return timed
        name = f"({case.key}) common call"
        calls[name] = split(name, lambda exe=exe, arrays=arrays: [torch.from_numpy(a) for a in exe(*arrays)])
        name = f"({case.key}) full path"
        calls[name] = split(name, lambda exe=exe, arrays=arrays: [
            torch.from_numpy(a) for a in exe._call(tuple(arrays), exe._calls)])
        calls[f"({case.key}) kernel step, held output"] = kernel
        calls[f"({case.key}) eager"] = lambda f=case.eager, inputs=inputs: f(*inputs)
    samples = interleaved_samples(calls, repeats=repeats, clock=clock)
    rows = []
    for key in ("a", "b", "c"):
        common, full = samples[f"({key}) common call"], samples[f"({key}) full path"]
        kernel = statistics.median(samples[f"({key}) kernel step, held output"])
        ratios = statistics.median(c / f for c, f in zip(common, full))
        paths = [parts_of[f"({key}) {n}"][-repeats:] for n in ("common call", "full path")]
        before = [statistics.median(p[0] for p in path) for path in paths]
        after = [statistics.median(p[1] for p in path) for path in paths]
        rows.append([f"({key})", f"{statistics.median(common) * 1e3:.3f}", f"{statistics.median(full) * 1e3:.3f}",
                     f"{statistics.median(common) / statistics.median(full):.3f}", f"{ratios:.3f}",
                     f"{kernel * 1e3:.3f}", f"{before[0] * 1e6:.0f} / {before[1] * 1e6:.0f}",
                     f"{after[0] * 1e6:.0f} / {after[1] * 1e6:.0f}"])
    print(f"\n{threads} thread(s), roofline's call: common-case call against the full path (medians of {repeats})")
    print(table(rows, ["row", "common ms", "full ms", "common / full", "per-round ratio", "kernel ms",
                       "before the steps us (common / full)", "after them us"]), flush=True)


@contextlib.contextmanager
def streamed_outputs():
    """Outputs of any size written with non-temporal stores (as the large row's are)."""
    with patched(streams, "STREAM_MIN_BYTES", 0), patched(CpuTarget, "streams_outputs", lambda self, nbytes: True):
        yield


def sizes(threads: int, repeats: int) -> None:
    """The kernel and its memory skeleton per 4M elements on inputs in and out of the L2 (``--sizes``)."""
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    calls, held = {}, []
    for rows in (ROWS, 256, 64):
        x = torch.randn(rows, COLS)
        for kind, body in (("kernel", None), ("memory skeleton", _clamp_only)):
            with exp_as(body), (streamed_outputs() if rows < ROWS else contextlib.nullcontext()):
                exe = build_cpu_executable(kc.softmax_graph(rows, COLS), {"threads": threads})
            out = torch.empty_like(x)
            held += [x, out]
            step = step_call(exe, x, out)

            def steps(step=step, times=ROWS // rows) -> None:
                for _ in range(times):
                    step()
            calls[f"{kind} [{rows}, {COLS}] x{ROWS // rows}"] = steps
    times = interleaved(calls, repeats=repeats, clock=clock)
    print(f"\n{threads} thread(s), per {ROWS}x{COLS} elements (inputs of 256 KiB and 1 MiB fit the L2)")
    print(table([[name, f"{t * 1e3:.3f}"] for name, t in times.items()], ["kernel step", "ms"]), flush=True)


def exp_forms(samples: int = 15) -> None:
    """Each exact form of exp_nonpositive: vector instructions per vector and throughput at 1 thread."""
    target = jit.host_target()
    kernels = {}
    for name, body in EXP_FORMS.items():
        with exp_as(body):
            count, elements = mk.loop_instructions("exp_nonpositive", target)
            kernels[name] = (mk.compile_kernel(mk.math_module("exp_nonpositive", target), "math"),
                             count / elements * target.vector_bits / 32)
    rng = np.random.default_rng(0)
    x = mk.aligned_empty(2 * mk.MATH_BLOCK)
    x[:] = rng.uniform(-12.0, 0.0, x.size)
    y = mk.aligned_empty(2 * mk.MATH_BLOCK)
    args = (ctypes.c_int64 * 3)(x.ctypes.data, y.ctypes.data, 200)
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for kernel, _ in kernels.values():
        mk.run(kernel, args, 2, 1)
    for _ in range(samples):
        for name, (kernel, _) in kernels.items():
            begin = time.thread_time()
            mk.run(kernel, args, 2, 1)
            times[name].append(time.thread_time() - begin)
    base = statistics.median(times["main"])
    rows = [[name, f"{per_vector:.1f}", f"{mk.MATH_BLOCK * 400 / statistics.median(times[name]) / 1e9:.2f}",
             f"{statistics.median(times[name]) / base:.3f}"] for name, (_, per_vector) in kernels.items()]
    print(table(rows, ["exp_nonpositive form", "vector instr / vector", "Gelem/s (1T)", "time / main"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--exp-forms", action="store_true")
    parser.add_argument("--online", action="store_true", help="also time the bounds of an online max+sum pass")
    parser.add_argument("--split", action="store_true", help="also time roofline's call before/in/after its "
                        "kernel step, and the kernel into output memory in several cache states")
    parser.add_argument("--sizes", action="store_true", help="also time the kernel and its memory skeleton on "
                        "inputs that fit the L2 (is the row memory- or compute-bound?)")
    parser.add_argument("--call-ab", action="store_true", help="instead: roofline's call of rows a, b, c through "
                        "the executable's common-case call against its full path, interleaved (array_call.py)")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"load {load}; {jit.host_target().name}", flush=True)
    for threads in [int(t) for t in args.threads.split(",")]:
        if args.call_ab:
            call_ab(threads, args.repeats)
            continue
        parts(threads, args.repeats, args.online)
        if args.split:
            split(threads, args.repeats)
        if args.sizes:
            sizes(threads, args.repeats)
    if args.exp_forms:
        exp_forms()
    with open("/proc/loadavg") as f:
        print(f"load {load} -> {f.read().split()[0]}")


if __name__ == "__main__":
    main()
