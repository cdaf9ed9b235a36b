"""Per-launch overhead of small graphs on the cpu target: extern (matmul) steps and the demo training step.

    PYTHONPATH=. python benchmarks/bench_launch.py [--repeat 200] [--threads 1,2]

1. ``chain``: 20 tiny ``x = tanh(x @ w)`` steps (x [8, 16], w [16, 16]): eager, Inductor and neuroncc through
   ``torch.compile``, and neuroncc's executable called directly on numpy arrays (the launcher alone: each step
   is one native kernel that starts with an extern mm). Microseconds per 20 steps and per launch. The last row
   calls the executable past its profiler hook (``executors/tracing.py``: with the front end's torch.profiler
   tracer installed and no profiler running); its difference from the row above is the hook's cost. The
   last row runs the steps one by one in Python, as before native launch sequences
   (``executors/cpu/native_sequence.py``) ran them in one native call.
   ``--only hook`` measures that difference against the noise: the executable twice under the same name
   (a control pair: any gap between them is noise) beside the hook-free call, and the hook's check alone
   (``active_tracer()``, timed in a tight loop) in nanoseconds.
2. ``classifier``: the demo's classifier (neuroncc/examples/classifier.py) forward + backward, eager vs
   Inductor vs neuroncc, at each thread count.

Interleaved medians (benchmarks/common.py); the load average is printed with the results: the machine is
shared, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ensure_environment, interleaved, table  # noqa: E402

STEPS = 20


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def chain(x, w):
    import torch

    for _ in range(STEPS):
        x = torch.tanh(x @ w)
    return x


def chain_graph():
    from neuroncc.ir import Builder, DType, TensorType

    b = Builder("chain")
    x = b.param(TensorType((8, 16), DType.f32), "x")
    w = b.param(TensorType((16, 16), DType.f32), "w")
    for _ in range(STEPS):
        x = b.op("tanh", b.op("mm", x, w))
    return b.build([x])


def bench_chain(repeat: int, clock) -> list[list[str]]:
    import torch

    from neuroncc.driver.compile import compile_graph

    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.3
    ours = torch.compile(chain, backend="neuron", dynamic=False)
    inductor = torch.compile(chain, backend="inductor", dynamic=False)
    exe = compile_graph(chain_graph(), target="cpu", cache=None)
    xn, wn = x.numpy(), w.numpy()
    with torch.no_grad():
        torch.testing.assert_close(ours(x, w), chain(x, w), rtol=1e-5, atol=1e-5)
        inductor(x, w)
        times = interleaved({"eager": lambda: chain(x, w), "inductor": lambda: inductor(x, w),
                             "neuroncc": lambda: ours(x, w), "neuroncc executable": lambda: exe(xn, wn),
                             "executable, no tracer hook": lambda: exe._call((xn, wn), exe._calls),
                             "executable, Python step loop": lambda: exe._call((xn, wn), exe._step_calls)},
                            repeats=repeat, warmup=20, clock=clock)
    eager = times["eager"]
    return [[name, f"{t * 1e6:.1f}", f"{t * 1e6 / STEPS:.2f}", f"{t / eager:.2f}"] for name, t in times.items()]


def bench_hook(repeat: int, clock) -> tuple[list[list[str]], float]:
    """The executable called through its profiler hook, twice under different names (the control pair),
    and past the hook; and the hook's own check in ns per call (the front end's tracer installed, no
    profiler running)."""
    import timeit

    import torch

    from neuroncc.driver.compile import compile_graph
    from neuroncc.executors.tracing import active_tracer
    from neuroncc.frontend import profiling

    profiling.ensure_installed()
    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.3
    exe = compile_graph(chain_graph(), target="cpu", cache=None)
    xn, wn = x.numpy(), w.numpy()
    assert active_tracer() is None
    times = interleaved({"executable (A)": lambda: exe(xn, wn), "executable (A, again)": lambda: exe(xn, wn),
                         "executable, no tracer hook": lambda: exe._call((xn, wn), exe._calls)},
                        repeats=repeat, warmup=20, clock=clock)
    number = 200_000
    check_ns = min(timeit.repeat(active_tracer, number=number, repeat=5)) / number * 1e9
    base = times["executable (A)"]
    return [[name, f"{t * 1e6:.2f}", f"{(t - base) * 1e6:+.2f}", f"{(t / base - 1) * 100:+.2f}%"]
            for name, t in times.items()], check_ns


def bench_classifier(repeat: int, clock) -> list[list[str]]:
    import torch

    from neuroncc.examples.classifier import ClassifierConfig, build_example, make_batch

    config = ClassifierConfig()
    model = build_example(0, config)
    tokens, labels = make_batch(config, torch.Generator().manual_seed(1))
    ours = torch.compile(model, backend="neuron", dynamic=False)
    inductor = torch.compile(model, backend="inductor", dynamic=False)

    def step(fn):
        def run():
            model.zero_grad(set_to_none=True)
            fn(tokens, labels).backward()
        return run

    times = interleaved({"eager": step(model), "inductor": step(inductor), "neuroncc": step(ours)},
                        repeats=repeat, warmup=10, clock=clock)
    eager = times["eager"]
    return [[name, f"{t * 1e3:.3f}", f"{t / eager:.2f}"] for name, t in times.items()]


def _clock(args: argparse.Namespace, threads: int):
    return time.thread_time if args.cpu_time and threads == 1 else time.perf_counter


def _clock_name(args: argparse.Namespace, threads: int) -> str:
    return "CPU time" if _clock(args, threads) is time.thread_time else "wall time"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--only", choices=["chain", "hook", "classifier"], default=None)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time 1-thread runs by the calling thread's CPU time (time.thread_time), which leaves "
                             "out the time a loaded machine keeps the process descheduled")
    args = parser.parse_args()
    ensure_environment(1)
    import torch

    os.environ.setdefault("NEURONCC_DISABLE_CACHE", "1")
    if args.only in (None, "chain"):
        torch.set_num_threads(1)
        rows = bench_chain(args.repeat, _clock(args, 1))
        print(f"\n{STEPS} x tanh([8,16] @ [16,16]), 1 thread, {_clock_name(args, 1)}, load {load()}")
        print(table(rows, ["", "us / call", "us / step", "x eager"]))
    if args.only in (None, "hook"):
        torch.set_num_threads(1)
        rows, check_ns = bench_hook(args.repeat * 5, _clock(args, 1))
        print(f"\nprofiler hook, no profiler running: the chain's executable, 1 thread, {_clock_name(args, 1)}, "
              f"load {load()}")
        print(table(rows, ["", "us / call", "vs (A)", "vs (A)"]))
        print(f"the hook's check alone (active_tracer(), front end's tracer installed): {check_ns:.0f} ns per call")
    if args.only in ("chain", "hook"):
        return
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        rows = bench_classifier(max(args.repeat // 4, 20), _clock(args, threads))
        print(f"\nclassifier training step (forward + backward), {threads} thread(s), {_clock_name(args, threads)}, "
              f"load {load()}")
        print(table(rows, ["", "ms / step", "x eager"]))


if __name__ == "__main__":
    main()
