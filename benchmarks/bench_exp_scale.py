"""A/B in one process: exp's scale on AVX-512 by the integer n (``llvm.ldexp``: vpaddd, vcvtdq2ps, vscalefps; the
form before session 18 exppass, rebuilt by patching ``mathlib._exp_in_range``) against the float n (vscalefps of it,
``vector_variants.scaled_by_float``), two builds each, called interleaved, medians per build and new/old.

Rows: b (softmax [4096,1024], its kernel step on a held output), bs (softmax [256,1024] x16: L2-resident, the
compute-bound case), a (gelu*sigmoid [4096,1024], ``exe(*arrays)``), ce (cross-entropy fwd+bwd [512,32000] through
``torch.compile``). Also checks that the two forms' softmax outputs are bit-identical. Run under
``/work/bin/heavy x`` (docs/performance.md)."""
import os, sys, time, statistics, contextlib, argparse
os.environ["NEURONCC_DISABLE_CACHE"] = "1"; os.environ["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"
sys.path.insert(0, "benchmarks")
import numpy as np, torch
import kernel_cases as kc
import bench_softmax_parts as bsp
from neuroncc.codegen.llvm import mathlib
from neuroncc.executors.cpu.launcher import build_cpu_executable

def _old_exp_in_range(b, xc, target):
    n, whole = mathlib._round_to_integer(b, b.fmul(xc, mathlib._c(1.4426950408889634), flags=mathlib.FAST))
    r = b.fsub(xc, b.fmul(n, mathlib._c(0.693359375), flags=mathlib.FAST), flags=mathlib.FAST)
    r = b.fsub(r, b.fmul(n, mathlib._c(-2.12194440e-4), flags=mathlib.FAST), flags=mathlib.FAST)
    return mathlib._scale(b, mathlib._exp_reduced(b, r), whole, target)

@contextlib.contextmanager
def variant(name):
    if name == "old":
        with bsp.patched(mathlib, "_exp_in_range", _old_exp_in_range):
            yield
    else:
        yield

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
    a = ap.parse_args()
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        calls = {}
        for row in a.rows.split(","):
            for build in (1, 2):
                for v in ("old", "new"):
                    with variant(v):
                        if row in ("b", "bs"):
                            R = 4096 if row == "b" else 256
                            x = torch.from_numpy(np.random.default_rng(R).standard_normal((R, 1024)).astype(np.float32) * 4)
                            exe = build_cpu_executable(kc.softmax_graph(R, 1024), {"threads": threads})
                            out = torch.empty_like(x)
                            step = bsp.step_call(exe, x, out)
                            step()
                            if row == "bs":
                                f = (lambda s=step: [s() for _ in range(16)])
                            else:
                                f = step
                            calls[f"{row} {v} {build}"] = f
                            calls.setdefault(f"_res {row} {v}", out)
                        elif row == "a":
                            case = next(c for c in kc.cases() if c.key == "a")
                            inputs = case.make(np.random.default_rng(0))
                            exe = build_cpu_executable(case.graph, {"threads": threads})
                            arrays = [t.numpy() for t in inputs]
                            calls[f"a {v} {build}"] = (lambda e=exe, ar=arrays: e(*ar))
                        elif row == "ce":
                            torch._dynamo.reset()
                            case = next(c for c in kc.cases() if c.key == "ce")
                            inputs = case.make(np.random.default_rng(0))
                            fn = torch.compile(case.eager, backend="neuron", dynamic=False, options={"threads": threads})
                            fn(*inputs)
                            calls[f"ce {v} {build}"] = (lambda f=fn, i=inputs: f(*i))
        # bit-identity of the softmax results old vs new
        for row in ("b", "bs"):
            if f"_res {row} old" in calls:
                print(row, "old == new bitwise:", torch.equal(calls[f"_res {row} old"], calls[f"_res {row} new"]))
        calls = {k: v for k, v in calls.items() if not k.startswith("_")}
        for f in calls.values(): f()
        med = timed(calls, a.rounds, clock)
        print(f"threads {threads}, load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC, {a.rounds} rounds")
        for row in a.rows.split(","):
            base = med[f"{row} old 1"]
            for k in [k for k in med if k.split()[0] == row]:
                print(f"  {k:10s} {med[k]:8.3f} ms  {med[k]/base:6.3f}")
            o = (med[f"{row} old 1"] + med[f"{row} old 2"]) / 2; n = (med[f"{row} new 1"] + med[f"{row} new 2"]) / 2
            print(f"  {row}: new/old (mean of builds) {n/o:.3f}")
main()
