"""A/B in one process: exp2's scale on AVX-512 by the integer n (``llvm.ldexp``: vcvtdq2ps back to float, then
vscalefps; the form before session 19 softmax1t, rebuilt by patching ``mathlib._exp2``) against the float n
(vscalefps of it, ``vector_variants.scaled_by_float``), two builds each, called interleaved, medians per build and
new/old. Rows: exp2 [4096,1024] (``exe(x)``) and exp2 [256,1024] x16 (L2-resident, the compute-bound case); the two
forms' outputs are checked bit-identical. Run under ``/work/bin/heavy x`` (docs/performance.md)."""
import os, sys, time, statistics, contextlib, argparse
os.environ["NEURONCC_DISABLE_CACHE"] = "1"; os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"
sys.path.insert(0, "benchmarks")
import numpy as np, torch
import bench_softmax_parts as bsp
from neuroncc.codegen.llvm import mathlib
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.executors.cpu.launcher import build_cpu_executable


def old_exp2(b, x, target):
    xc = mathlib._clamp_keeping_nan(b, x, -151.0, 129.0)
    n, whole = mathlib._round_to_integer(b, xc)
    r = b.fmul(b.fsub(xc, n), mathlib._c(0.6931471805599453))
    return mathlib._scale(b, mathlib._exp_reduced(b, r), whole, target)


def graph(rows):
    b = Builder("exp2")
    x = b.param(TensorType((rows, 1024), DType.f32), "x")
    return b.build([b.op("exp2", x)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=41, help="interleaved rounds (default 41)")
    a = ap.parse_args()
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        calls, outs = {}, {}
        for rows, repeat in ((4096, 1), (256, 16)):
            x = (np.random.default_rng(rows).standard_normal((rows, 1024)) * 20).astype(np.float32)
            for build in (1, 2):
                for v in ("old", "new"):
                    with bsp.patched(mathlib, "_exp2", old_exp2) if v == "old" else contextlib.nullcontext():
                        exe = build_cpu_executable(graph(rows), {"threads": threads})
                    outs[(rows, v)] = np.asarray(exe(x)).copy()
                    calls[f"{rows} {v} {build}"] = lambda e=exe, n=repeat, x=x: [e(x) for _ in range(n)]
        for rows in (4096, 256):
            print(rows, "old == new bitwise:", np.array_equal(outs[(rows, "old")].view(np.uint32),
                                                             outs[(rows, "new")].view(np.uint32)))
        for f in calls.values():
            f()
        times = {k: [] for k in calls}
        for _ in range(a.rounds):
            for k, f in calls.items():
                s = clock(); f(); times[k].append(clock() - s)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC, {a.rounds} rounds")
        for k, v in med.items():
            print(f"  {k:14s} {v:8.3f} ms")
        for rows in (4096, 256):
            o = (med[f"{rows} old 1"] + med[f"{rows} old 2"]) / 2
            n = (med[f"{rows} new 1"] + med[f"{rows} new 2"]) / 2
            print(f"  exp2 [{rows},1024]{' x16' if rows == 256 else ''}: new/old (mean of builds) {n / o:.3f}")


main()
