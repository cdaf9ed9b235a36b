"""Kernel benchmarks (a)-(c): neuroncc's generated code vs eager PyTorch and Inductor, 2 threads.

    (a) gelu(x*w+b)*sigmoid(x), x [4096, 1024] (4M elements), w and b [1024]
    (b) softmax over rows of [4096, 1024]
    (c) LayerNorm over rows of [8192, 1024] (affine)
    (c') x*w+b over [8192, 1024]: (c)'s memory traffic without its reductions, the roofline (c) runs against

The neuroncc graphs are built by hand (one kernel each, as the fusion pass would make) and run through
``build_cpu_executable``. Also measured: the machine's copy bandwidth, each kernel's achieved bandwidth,
cold compile time, and the launcher's per-kernel overhead. Run: ``python benchmarks/bench_kernels.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import copy_bandwidth, ensure_environment, interleaved, parallel_copy_bandwidth, table  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from neuroncc.codegen.llvm.regions import fuse_whole_function  # noqa: E402
from neuroncc.ir import Builder, DType, TensorType  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402


def gelu_graph(rows, cols):
    b = Builder("gelu_sigmoid")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    y = b.op("mul", b.op("gelu", b.op("add", b.op("mul", x, w), bias)), b.op("sigmoid", x))
    return fuse_whole_function(b.build([y]))


def softmax_graph(rows, cols):
    b = Builder("softmax")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return fuse_whole_function(b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))]))


def layernorm_graph(rows, cols):
    b = Builder("layernorm")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    centered = b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True))
    var = b.op("mean", b.op("mul", centered, centered), dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    return fuse_whole_function(b.build([b.op("add", b.op("mul", b.op("mul", centered, rstd), w), bias)]))


def stream_graph(rows, cols):
    """x*w+b: LayerNorm's bytes (read x, write y) without its row reductions: the memory roofline for (c)."""
    b = Builder("stream")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    return fuse_whole_function(b.build([b.op("add", b.op("mul", x, w), bias)]))


def eager_stream(x, w, b):
    return torch.addcmul(b, x, w)


def eager_gelu(x, w, b):
    return torch.nn.functional.gelu(x * w + b) * torch.sigmoid(x)


def eager_softmax(x):
    return torch.softmax(x, dim=-1)


def eager_layernorm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


CASES = [
    ("(a) gelu(x*w+b)*sigmoid(x) [4096,1024]", gelu_graph(4096, 1024), eager_gelu,
     [(4096, 1024), (1024,), (1024,)]),
    ("(b) softmax [4096,1024]", softmax_graph(4096, 1024), eager_softmax, [(4096, 1024)]),
    ("(c) LayerNorm [8192,1024]", layernorm_graph(8192, 1024), eager_layernorm, [(8192, 1024), (1024,), (1024,)]),
    ("(c') x*w+b [8192,1024]: (c)'s bytes, no reductions", stream_graph(8192, 1024), eager_stream,
     [(8192, 1024), (1024,), (1024,)]),
]


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


def run_cases(threads: int, bandwidth: float) -> list[list[str]]:
    torch.set_num_threads(threads)
    rows = []
    rng = np.random.default_rng(0)
    for title, graph, eager, shapes in CASES:
        tensors = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        arrays = [t.numpy() for t in tensors]
        start = time.perf_counter()
        exe = build_cpu_executable(graph, {"threads": threads})
        compile_s = time.perf_counter() - start
        torch._dynamo.reset()
        inductor = torch.compile(eager, dynamic=False)
        inductor(*tensors)
        expected = eager(*tensors)
        torch.testing.assert_close(torch.from_numpy(exe(*arrays)[0]), expected, rtol=1.3e-6, atol=1e-5)
        times = interleaved({
            "eager": lambda: eager(*tensors),
            "inductor": lambda: inductor(*tensors),
            "neuroncc": lambda: exe(*arrays),
        }, repeats=40, clock=time.thread_time if threads == 1 else time.perf_counter)
        traffic = sum(a.nbytes for a in arrays) + expected.numel() * 4
        gbs = traffic / times["neuroncc"] / 1e9
        rows.append([title, str(threads), f"{times['eager'] * 1e3:.2f}", f"{times['inductor'] * 1e3:.2f}",
                     f"{times['neuroncc'] * 1e3:.2f}", f"{times['eager'] / times['neuroncc']:.2f}x",
                     f"{times['inductor'] / times['neuroncc']:.2f}x", f"{gbs:.1f} ({gbs / bandwidth:.0%})",
                     f"{compile_s * 1e3:.0f}"])
    return rows


def main() -> None:
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    wall, cpu, wall2 = copy_bandwidth(), copy_bandwidth(clock=time.thread_time), parallel_copy_bandwidth(2)
    rows = run_cases(2, wall2) + run_cases(1, cpu)  # 1 thread: CPU time of the calling thread
    print(f"load average at start: {load} (2 cores); copy bandwidth (read+write): numpy copyto on 1 thread "
          f"{wall:.1f} GB/s wall-clock, {cpu:.1f} GB/s per CPU-second; ATen copy_ on 2 threads {wall2:.1f} GB/s "
          "wall-clock (the reference for the 2-thread rows)")
    print("threads=2: wall-clock medians; threads=1: calling-thread CPU-time medians (robust to preemption)")
    print(table(rows, ["kernel", "threads", "eager ms", "inductor ms", "neuroncc ms", "vs eager", "vs inductor",
                       "neuroncc GB/s (of copy)", "cold compile ms"]))
    print(f"launcher overhead per kernel: {launch_overhead() * 1e6:.2f} us")


if __name__ == "__main__":
    main()
