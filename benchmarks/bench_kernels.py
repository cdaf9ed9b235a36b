"""Kernel benchmarks: neuroncc's generated code vs eager PyTorch and Inductor, 2 threads and 1 thread.

    (a) gelu(x*w+b)*sigmoid(x), x [4096, 1024] (4M elements), w and b [1024]
    (b) softmax over rows of [4096, 1024]
    (c) LayerNorm over rows of [8192, 1024] (affine)
    (c') x*w+b over [8192, 1024]: (c)'s memory traffic without its reductions
    bf16 (a)-(c), RMSNorm [8192, 1024], cross-entropy forward + backward over a 32000-word vocabulary (512
    rows), and the AdamW step over 10.1M parameters in 40 tensors (foreach)

Rows (a)-(c') run neuroncc's hand-built one-kernel graphs through ``build_cpu_executable``; the others run
the same Python function through ``torch.compile(backend="neuron")``, as a user would (see
``kernel_cases.py``). Also measured: the machine's copy bandwidth, each kernel's achieved bandwidth (its
unavoidable bytes per second), and the launcher's per-kernel overhead. ``roofline.py`` puts every row against
this machine's measured limits. Run: ``python benchmarks/bench_kernels.py [--rows a,b,c] [--threads 2,1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import copy_bandwidth, ensure_environment, interleaved, parallel_copy_bandwidth, table  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import Case, cases, check, implementations  # noqa: E402
from neuroncc.ir import Builder, DType, TensorType  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402


def launch_overhead(kernels: int = 20) -> float:
    """Seconds of launcher overhead per kernel: a chain of tiny kernels vs a single tiny kernel."""
    def chain(n):
        b = Builder("chain")
        v = b.param(TensorType((8,), DType.f32), "x")
        for _ in range(n):
            v = b.op("neg", v)
        return build_cpu_executable(b.build([v]), {"threads": 2})

    one, many = chain(1), chain(kernels)
    x = np.ones(8, np.float32)
    times = interleaved({"one": lambda: one(x), "many": lambda: many(x)}, repeats=2000, warmup=50)
    return (times["many"] - times["one"]) / (kernels - 1)


def run_cases(selected: list[Case], threads: int, bandwidth: float, repeats: int) -> list[list[str]]:
    torch.set_num_threads(threads)
    rows = []
    rng = np.random.default_rng(0)
    for case in selected:
        inputs = case.make(rng)
        start = time.perf_counter()
        impls = implementations(case, inputs, threads)
        check(case, impls, inputs)  # the first calls compile (torch.compile rows)
        build_s = time.perf_counter() - start
        times = interleaved({name: call for name, (call, _) in impls.items()}, repeats=repeats,
                            clock=time.thread_time if threads == 1 else time.perf_counter)
        ours = times["neuroncc"]
        gbs = (case.work.reads + case.work.writes) / ours / 1e9
        rows.append([case.title, str(threads), f"{times['eager'] * 1e3:.2f}", f"{times['inductor'] * 1e3:.2f}",
                     f"{ours * 1e3:.2f}", f"{times['eager'] / ours:.2f}x", f"{times['inductor'] / ours:.2f}x",
                     f"{gbs:.1f} ({gbs / bandwidth:.0%})", f"{build_s:.1f}"])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description="kernel rows: eager, Inductor, neuroncc")
    parser.add_argument("--rows", default="", help="comma-separated row keys (default: all): "
                        + ", ".join(c.key for c in cases()))
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    keys = [k for k in args.rows.split(",") if k]
    selected = [c for c in cases() if not keys or c.key in keys]
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    wall, cpu, wall2 = copy_bandwidth(), copy_bandwidth(clock=time.thread_time), parallel_copy_bandwidth(2)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        # 1 thread: CPU time of the calling thread, against the single-thread copy rate per CPU-second
        rows += run_cases(selected, threads, wall2 if threads > 1 else cpu, args.repeats)
    print(f"load average at start: {load} (2 cores); copy bandwidth (read+write): numpy copyto on 1 thread "
          f"{wall:.1f} GB/s wall-clock, {cpu:.1f} GB/s per CPU-second; ATen copy_ on 2 threads {wall2:.1f} GB/s "
          "wall-clock (the reference for the 2-thread rows)")
    print("threads=2: wall-clock medians; threads=1: calling-thread CPU-time medians (robust to preemption)")
    print(table(rows, ["kernel", "threads", "eager ms", "inductor ms", "neuroncc ms", "vs eager", "vs inductor",
                       "neuroncc GB/s (of copy)", "build + first calls s"]))
    print(f"launcher overhead per kernel: {launch_overhead() * 1e6:.2f} us")


if __name__ == "__main__":
    main()
