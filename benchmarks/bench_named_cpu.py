"""The kernels of issue #19's rows built for this host's CPU and for a named one (``NEURONCC_CPU``'s code, e.g.
znver3's AVX2 code on a Zen 4), in one process, interleaved.

    /work/bin/heavy x python benchmarks/bench_named_cpu.py [--cpu znver3] [--rows a,b,c,c',a16,b16,c16,rms]
        [--threads 1,2] [--repeats 25]

Each row's graph is the one torch.compile hands the neuron backend (dumped through the ``dump_dir`` option); the
cpu pipeline (its tile pass reads the CPU's vector width) and the build run once per CPU
(``hardware.host.compiling_for``), twice each in the order ABAB (later builds of one process ran faster: session
12); every build's outputs are checked against eager's (the row's tolerance: the two CPUs' code may round
differently); then the four run interleaved in a shuffled order (``common.interleaved``; 1 thread: the calling
thread's CPU time, else wall clock). The table shows each build's median ms and its ratio to the first host
build. The page lottery (session 34 mem34) moves a kernel's time between processes: run it in two or three.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import ensure_environment, interleaved, table

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import cases, in_graph_order  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.hardware.host import compiling_for, host_cpu, target_cpu  # noqa: E402
from neuroncc.ir.parser import parse  # noqa: E402
from neuroncc.passes.manager import PassContext  # noqa: E402
from neuroncc.passes.pipeline import default_pipeline, run_pipeline  # noqa: E402


def dumped_graph(case, inputs: list[torch.Tensor]):
    """The graph torch.compile hands the backend for ``case`` (before the pipeline)."""
    with tempfile.TemporaryDirectory() as dump:
        torch._dynamo.reset()
        compiled = torch.compile(case.eager, backend="neuron", dynamic=False, options={"dump_dir": dump})
        compiled(*inputs)
        (path,) = Path(dump).glob("*.nir")
        return parse(path.read_text())


def build(graph, threads: int, cpu: str | None):
    """An executable of ``graph`` (the pipeline run for ``cpu`` too) compiled for ``cpu`` (None: the host's)."""
    with compiling_for(cpu):
        fn = run_pipeline(default_pipeline("cpu"), graph, PassContext())
        return build_cpu_executable(fn, {"threads": threads})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", default="znver3", help="the named CPU (an LLVM -mcpu name)")
    parser.add_argument("--rows", default="a,b,c,c',a16,b16,c16,rms")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()
    with compiling_for(args.cpu):
        named = target_cpu()
    host = host_cpu()
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), f"load {open('/proc/loadavg').read().split()[0]}; "
          f"host {host.name} ({host.vector_bits}-bit vectors), named {named.name} ({named.vector_bits}-bit)",
          flush=True)
    keys = args.rows.split(",")
    rows, names = [], []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for case in (c for c in cases() if c.key in keys):
            inputs = case.make(np.random.default_rng(0))
            graph = dumped_graph(case, inputs)
            expected = case.eager(*inputs)
            arrays = [t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in inputs]
            builds = {}
            for name, cpu in (("host 1", None), (f"{args.cpu} 1", args.cpu), ("host 2", None),
                              (f"{args.cpu} 2", args.cpu)):
                exe = build(graph, threads, cpu)

                def run(order, exe=exe) -> torch.Tensor:
                    got = torch.from_numpy(exe(*order)[0])
                    return got.view(torch.bfloat16) if expected.dtype == torch.bfloat16 else got

                # the graph's inputs in its own order, found by eager's result: every build is checked against it
                order = in_graph_order(arrays, len(exe.function.params), run, expected, case.tolerance)
                if order is None:
                    raise SystemExit(f"{case.key}: {name} does not give eager's result in any order of its inputs")
                builds[name] = lambda exe=exe, order=order: exe(*order)
            times = interleaved(builds, repeats=args.repeats, clock=clock)
            base = times["host 1"]
            names = list(builds)
            rows.append([case.key, str(threads)] + [f"{times[n] * 1e3:.3f} ({times[n] / base:.3f})" for n in builds])
            print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["row", "threads", *names]))


if __name__ == "__main__":
    main()
