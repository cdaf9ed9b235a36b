"""Where the norm rows of ``roofline.py`` lose to their copy roof (issue #19): LayerNorm (c), its bytes without the
reductions (c') and RMSNorm [8192, 1024] float32, each kernel called directly on a held output at chosen distances
past its input (modulo 4 KiB: 4K aliasing), through the numpy path the roofline's rows (a)-(c') take, and
RMSNorm through ``torch.compile`` as its roofline row runs; beside the roofline's own memory roof (the stream
kernel reading the same input, non-temporal stores) and eager.

The host's memory speed moves by up to 2x between minutes (other tenants), so besides each implementation's
median it reports the median over rounds of stream time / implementation time measured in the same round: the
kernel's fraction of the copy, paired against the drift, and p25/p75 of its times (the bimodal 1-thread rows).

Run: ``/work/bin/heavy x python benchmarks/bench_norms.py [--threads 2,1] [--repeats 41] [--distances 0,64,2048]``.
A diagnosis tool: it reaches into the front end's ``CompiledGraph`` to call the compiled RMSNorm's kernel.
"""

from __future__ import annotations

import argparse
import time

from common import ensure_environment, interleaved_samples, record_compiled_graphs, table

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import microkernels as mk  # noqa: E402
from kernel_cases import affine, layernorm, layernorm_graph, rmsnorm, stream_graph  # noqa: E402
from neuroncc.executors.cpu.address_call import AddressCall  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402

ROWS, COLS = 8192, 1024

made = record_compiled_graphs()


def implementations(threads: int, distances: list[int]) -> tuple[dict, torch.Tensor]:
    x, w, b = torch.randn(ROWS, COLS), torch.randn(COLS), torch.randn(COLS)
    nbytes = ROWS * COLS * 4
    raw = torch.empty(nbytes + 3 * 4096, dtype=torch.uint8)
    start = raw.data_ptr() + (x.data_ptr() - raw.data_ptr()) % 4096 + 4096  # x's page offset, a page in
    plain, streaming = (mk.compile_kernel(mk.stream_module(nt), "stream") for nt in (False, True))
    stream = mk.Stream(plain, streaming, nbytes, nbytes, (x.data_ptr(), nbytes))
    impls = {"copy roof (stream, nt stores)": stream.runner("streaming", threads)}
    rows = [("c", layernorm_graph(ROWS, COLS), layernorm, [x, w, b]),
            ("c'", stream_graph(ROWS, COLS), affine, [x, w, b]), ("rms", None, rmsnorm, [x, w])]
    for key, graph, eager, inputs in rows:
        expected = eager(*inputs)
        addresses = [t.data_ptr() for t in inputs]
        impls[f"{key} eager"] = lambda eager=eager, inputs=inputs: eager(*inputs)
        if graph is not None:
            exe = build_cpu_executable(graph, {"threads": threads})
            arrays = [t.numpy() for t in inputs]
            impls[f"{key} by numpy arrays (roofline's path)"] = lambda exe=exe, arrays=arrays: exe(*arrays)
        else:
            made.clear()
            compiled = torch.compile(eager, backend="neuron", dynamic=False, options={"threads": threads})
            for _ in range(3):
                compiled(*inputs)
            import neuroncc.executors.cpu.tiers as tiers

            tiers.OPTIMIZER.wait()
            torch.testing.assert_close(compiled(*inputs), expected, rtol=1.3e-6, atol=1e-5)
            impls[f"{key} torch.compile (roofline's path)"] = lambda f=compiled, inputs=inputs: f(*inputs)
            graph_call = made[-1]
            impls[f"{key} CompiledGraph call"] = lambda g=graph_call, inputs=inputs: g(list(inputs))
        run = AddressCall(exe) if graph is not None else made[-1].direct.run
        for d in distances:
            out = start + d
            run(addresses, [out])
            result = torch.from_numpy(np.frombuffer((np.ctypeslib.as_ctypes_type(np.float32) * (ROWS * COLS))
                                                    .from_address(out), dtype=np.float32).reshape(ROWS, COLS).copy())
            torch.testing.assert_close(result, expected, rtol=1.3e-6, atol=1e-5)
            impls[f"{key} kernel, output at x+{d} mod 4096"] = \
                lambda run=run, addresses=addresses, out=out: run(addresses, [out])
    return impls, raw


def measure(impls: dict, repeats: int, clock) -> dict[str, np.ndarray]:
    """Per-round times of each implementation (``common.interleaved_samples``: entry i of each is round i)."""
    return {name: np.array(times) for name, times in interleaved_samples(impls, repeats, 1, clock).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--distances", default="0,64,2048", help="output - input modulo 4096, bytes")
    args = parser.parse_args()
    distances = [int(d) for d in args.distances.split(",")]
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        impls, _memory = implementations(threads, distances)
        clock = time.thread_time if threads == 1 else time.perf_counter
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        started = time.strftime("%H:%M UTC", time.gmtime())
        times = measure(impls, args.repeats, clock)
        roof = times["copy roof (stream, nt stores)"]
        for name, t in times.items():
            rows.append([name, str(threads), f"{np.median(t) * 1e3:.3f}",
                         f"{np.percentile(t, 25) * 1e3:.2f} / {np.percentile(t, 75) * 1e3:.2f}",
                         f"{np.median(roof / t):.0%}"])
        print(f"{threads} thread(s): {started}, load {load}; medians of {args.repeats} rounds", flush=True)
    print(table(rows, ["implementation", "threads", "median ms", "p25 / p75 ms", "copy roof / time (per round)"]))


if __name__ == "__main__":
    main()
