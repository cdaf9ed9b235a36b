"""A/B in one process: the interleave count of loops computing polynomial math (``loop_hints.math_interleave``,
``CpuTarget.polynomial_interleave``: 4 with AVX2, 2 with AVX-512 since session 19) at the given counts, rebuilt by
patching ``loop_hints.math_interleave``, two builds each, called interleaved, medians per build and count/base.

Rows as ``bench_exp_scale.py``'s: b (softmax [4096,1024], its kernel step on a held output), bs (softmax
[256,1024] x16: L2-resident, the compute-bound case), a (gelu*sigmoid [4096,1024], ``exe(*arrays)``), ce
(cross-entropy fwd+bwd [512,32000] through ``torch.compile``). Checks that every count's softmax output is
bit-identical to the base's. Run under ``/work/bin/heavy x`` (docs/performance.md)."""
import os, sys, time, statistics, argparse
os.environ["NEURONCC_DISABLE_CACHE"] = "1"; os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"
sys.path.insert(0, "benchmarks")
import numpy as np, torch
import kernel_cases as kc
import bench_softmax_parts as bsp
from neuroncc.codegen.llvm import loop_hints
from neuroncc.executors.cpu.launcher import build_cpu_executable


def timed(calls, rounds, clock):
    t = {k: [] for k in calls}
    for _ in range(rounds):
        for k, f in calls.items():
            s = clock(); f(); t[k].append(clock() - s)
    return {k: statistics.median(v) * 1e3 for k, v in t.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=31, help="interleaved rounds (default 31)")
    ap.add_argument("--rows", default="b,bs,a,ce", help="rows among b, bs, a, ce (default all)")
    ap.add_argument("--counts", default="4,2,8", help="interleave counts, the first the base (default 4,2,8)")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        calls, results = {}, {}
        for row in a.rows.split(","):
            for build in (1, 2):
                for ic in counts:
                    with bsp.patched(loop_hints, "math_interleave", lambda target, ic=ic: ic):
                        if row in ("b", "bs"):
                            R = 4096 if row == "b" else 256
                            x = torch.from_numpy(np.random.default_rng(R).standard_normal((R, 1024)).astype(np.float32) * 4)
                            exe = build_cpu_executable(kc.softmax_graph(R, 1024), {"threads": threads})
                            out = torch.empty_like(x)
                            step = bsp.step_call(exe, x, out)
                            step()
                            results.setdefault((row, ic), out)
                            calls[f"{row} {ic} {build}"] = (lambda s=step: [s() for _ in range(16)]) if row == "bs" else step
                        elif row == "a":
                            case = next(c for c in kc.cases() if c.key == "a")
                            inputs = case.make(np.random.default_rng(0))
                            exe = build_cpu_executable(case.graph, {"threads": threads})
                            arrays = [t.numpy() for t in inputs]
                            calls[f"a {ic} {build}"] = (lambda e=exe, ar=arrays: e(*ar))
                        elif row == "ce":
                            torch._dynamo.reset()
                            case = next(c for c in kc.cases() if c.key == "ce")
                            inputs = case.make(np.random.default_rng(0))
                            fn = torch.compile(case.eager, backend="neuron", dynamic=False, options={"threads": threads})
                            fn(*inputs)
                            calls[f"ce {ic} {build}"] = (lambda f=fn, i=inputs: f(*i))
        for (row, ic), out in results.items():
            if ic != counts[0]:
                print(row, f"interleave {ic} == {counts[0]} bitwise:", torch.equal(out, results[(row, counts[0])]))
        for f in calls.values(): f()
        med = timed(calls, a.rounds, clock)
        print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC, {a.rounds} rounds")
        for row in a.rows.split(","):
            base = (med[f"{row} {counts[0]} 1"] + med[f"{row} {counts[0]} 2"]) / 2
            for k in [k for k in med if k.split()[0] == row]:
                print(f"  {k:10s} {med[k]:8.3f} ms  {med[k]/base:6.3f}")
            for ic in counts[1:]:
                m = (med[f"{row} {ic} 1"] + med[f"{row} {ic} 2"]) / 2
                print(f"  {row}: interleave {ic} / {counts[0]} (mean of builds) {m/base:.3f}")


main()
