"""Benchmark harness: interleaved timing, medians, ratios, and the environment rules of the project.

Numbers come from here, never from unit tests. Every run interleaves the implementations being compared
(eager, Inductor, neuroncc) call by call so machine noise hits all of them alike, and reports medians.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Callable

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def ensure_environment(threads: int = 2) -> None:
    """Re-exec with glibc malloc settings (they are read at process start), then pin torch's threads."""
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.environ.update(MALLOC_ENV)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import torch

    torch.set_num_threads(threads)


def interleaved(impls: dict[str, Callable[[], object]], repeats: int = 30, warmup: int = 3,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds per call of each implementation, calls interleaved round-robin
    (:func:`interleaved_samples`)."""
    samples = interleaved_samples(impls, repeats, warmup, clock)
    return {name: statistics.median(times) for name, times in samples.items()}


def interleaved_samples(impls: dict[str, Callable[[], object]], repeats: int = 30, warmup: int = 3,
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds of each call of each implementation, round by round (entry ``i`` of every list is round ``i``:
    per-round ratios pair calls made moments apart), calls interleaved round-robin.

    Each round runs the implementations in a fresh random order (seeded: runs repeat), so every one runs
    in every position and after every other equally often. A call that follows a different program pays
    for the caches that program evicted: with a fixed order that cost always fell on the same
    implementation, and with a rotated order each implementation still always followed the same one (both
    showed up as a 6-15% "overhead" of the profiler hook between two calls of one executable).

    ``clock=time.thread_time`` measures CPU time of the calling thread: for single-threaded runs on a
    shared, oversubscribed machine it leaves out the time the process spends descheduled.
    """
    for _ in range(warmup):
        for fn in impls.values():
            fn()
    settle_neuroncc(impls)
    names = list(impls)
    order = random.Random(0x5EED)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        order.shuffle(names)
        for name in names:
            fn = impls[name]
            start = clock()
            fn()
            samples[name].append(clock() - start)
    return samples


def record_compiled_graphs() -> list:
    """From now on, every ``CompiledGraph`` the neuron backend makes is appended to the returned list (the
    benchmarks that call a graph's layers one by one take theirs from it)."""
    import neuroncc.frontend.compiled as compiled_module

    made: list = []
    original_init = compiled_module.CompiledGraph.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append(self)

    compiled_module.CompiledGraph.__init__ = recording_init
    return made


def settle_neuroncc(impls: dict[str, Callable[[], object]]) -> None:
    """Steady state is neuroncc's optimized code: torch.compile's graphs start some kernels at LLVM's quick
    tier and take the optimized build from the background (executors/cpu/tiers.py, ~1 s after the last
    compile). Wait for the builds under way, then call each implementation once more so its graphs take them."""
    tiers = sys.modules.get("neuroncc.executors.cpu.tiers")
    if tiers is None or not tiers.OPTIMIZER.pending():
        return
    tiers.OPTIMIZER.wait()
    for fn in impls.values():
        fn()


def copy_bandwidth(nbytes: int = 1 << 28, repeats: int = 10,
                   clock: Callable[[], float] = time.perf_counter) -> float:
    """The machine's measured copy bandwidth in GB/s (bytes read + bytes written per second, numpy copyto,
    one thread), timed with ``clock``."""
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = statistics.median(_time(lambda: np.copyto(dst, src), clock) for _ in range(repeats))
    return 2 * nbytes / best / 1e9


def parallel_copy_bandwidth(threads: int, nbytes: int = 1 << 28, repeats: int = 10) -> float:
    """Copy bandwidth in GB/s (read + write bytes per wall-clock second) of ATen's copy_ on ``threads``
    threads: the memory-bound ceiling for kernels that run on that many threads."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        src = torch.ones(nbytes // 4)
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = statistics.median(_time(lambda: dst.copy_(src)) for _ in range(repeats))
    finally:
        torch.set_num_threads(previous)
    return 2 * nbytes / best / 1e9


def _time(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    fn()
    return clock() - start


def spread_us(seconds: list[float]) -> str:
    """``seconds``' median and quartiles in microseconds: "median (25% .. 75%)"."""
    ordered = sorted(seconds)
    quartile = lambda f: ordered[int(f * (len(ordered) - 1))] * 1e6  # noqa: E731
    return f"{statistics.median(ordered) * 1e6:6.1f} ({quartile(.25):6.1f} .. {quartile(.75):6.1f})"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)


def kernel_alone(exe, inputs: list, outputs: list) -> Callable[[], None]:
    """A cpu executable's one kernel step on the memory of torch tensors ``inputs`` and ``outputs``, its phases
    called straight (no launcher Python between them): the "kernel alone" time of the part benchmarks. The step's
    argument slots hold the tensors' addresses; the returned call keeps the executable and the tensors alive."""
    from neuroncc.executors.cpu.address_call import AddressCall

    AddressCall(exe)([t.data_ptr() for t in inputs], [t.data_ptr() for t in outputs])  # fills the step's slots
    step = exe._runners[0]
    slots = list(step.args)

    def run(keep=(exe, inputs, outputs)) -> None:
        step.args[:] = slots  # other calls of the same executable write their own addresses there
        if step.serial_calls is not None:
            for fn, n in step.serial_calls:
                fn(step.args_address, 0, n)
        else:
            step._phases(0, None)

    return run
