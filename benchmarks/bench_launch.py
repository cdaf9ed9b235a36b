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
   (``tracing.watching()``, timed in a tight loop) in nanoseconds.
2. ``classifier``: the demo's classifier (neuroncc/examples/classifier.py) forward + backward, eager vs
   Inductor vs neuroncc, at each thread count.
3. ``small``: issue #18's two small models, eager vs TorchDynamo alone (``backend="eager"``: the floor every
   backend pays per call) vs Inductor vs neuroncc: a tiny MLP's inference call (8x64 -> 256 -> 10; also its
   exported program served without TorchDynamo, by ``neuroncc.compile_program`` and by AOTInductor's
   ``aoti_compile_and_package`` + ``aoti_load_package``, built before timing; ``--only mlp``: these rows
   alone) and the classifier's whole AdamW step at the issue's size (d=64, 4 heads, batch 32 x 16 tokens;
   forward + backward + ``AdamW.step()``), twice: with the optimizer step eager in every column, and with it
   compiled by each compiled column's own backend (``torch.compile(optimizer.step)``, PyTorch's "Compiling the
   optimizer"; the eager column stays eager, a control for the first row's eager; TorchDynamo's eager backend
   has no such row: it runs the traced per-parameter ops one by one). Both rows' ratios are to the first row's eager.
   ``--ab-bmm`` adds neuroncc with its small bmm on MKL's sgemm_batch instead of generated code
   (``CpuTarget.small_bmm_max_macs`` 0 while it compiles); ``--ab-mm`` neuroncc with its 2-d products
   (mm, addmm) on MKL instead of generated register tiles (``CpuTarget.small_mm_max_macs`` 0); ``--ab-exp``
   neuroncc with AVX2's non-positive exp clamped at -104 (``mathlib.EXP_NONPOSITIVE_FLOOR``, before session 20:
   the attention softmax's masked entries then underflow a product each), and ``--ab-exp`` runs first the
   attention softmax [128, 16, 16] kernel alone, both builds and eager, interleaved; ``--ab-team`` neuroncc with
   every kernel split on the OpenMP team called from Python, outside the native launch sequences (before
   session 21: ``native_sequence.py``'s TEAM instruction); ``--ab-team-min-work N[,N...]`` neuroncc with its
   kernels bound under ``threads.TEAM_MIN_WORK = N`` (which phases split on the team), one row per N (the
   default, 262144, is the control of the way these rows are bound).

``--profile`` prints ``small``'s AdamW step per launcher step instead (``profile_steps.py``: each kernel's time,
bytes and fraction of a copy roofline, eager's ATen ops for the same step, the hot kernels head to head), each
thread count in a fresh process (``--same-process``: all in this one; a later table's inline kernels then ran
1.3-4x the first's, docs/performance-history.md, session 18 threads).

Interleaved medians (benchmarks/common.py); the load average is printed with the results: the machine is
shared, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ensure_environment, interleaved, kernel_alone, table  # noqa: E402

STEPS = 20
#: issue #18's tiny transformer classifier: d=64, 4 heads, batch 32 x 16 tokens (the demo's model is smaller)
ISSUE_CLASSIFIER_SHAPE = {"width": 64, "heads": 4, "length": 16, "batch": 32}


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
    from neuroncc.executors import tracing
    from neuroncc.executors.tracing import active_tracer
    from neuroncc.frontend import profiling

    profiling.ensure_installed()
    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.3
    exe = compile_graph(chain_graph(), target="cpu", cache=None)
    xn, wn = x.numpy(), w.numpy()
    assert active_tracer() is None

    def unhooked(*inputs):  # CpuExecutable.__call__ without its tracer check: the same frames otherwise
        return exe._call(inputs, exe._calls)

    times = interleaved({"executable (A)": lambda: exe(xn, wn), "executable (A, again)": lambda: exe(xn, wn),
                         "executable, no tracer hook": lambda: unhooked(xn, wn)},
                        repeats=repeat, warmup=20, clock=clock)
    number = 200_000
    check_ns = min(timeit.repeat("tracing.watching()", globals={"tracing": tracing}, number=number, repeat=5)) \
        / number * 1e9
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


@contextlib.contextmanager
def on_blas(bound: str = "small_bmm_max_macs"):
    """Compile with every bmm on sgemm_batch (``CpuTarget.small_bmm_max_macs`` 0), or with ``bound``
    "small_mm_max_macs" every mm/addmm on MKL/oneDNN: the A side of an A/B of generated products
    (codegen/llvm/small_matmul.py). The launch plans made inside keep the decision."""
    from neuroncc.hardware.host import CpuTarget

    saved = CpuTarget.__dict__[bound]
    setattr(CpuTarget, bound, property(lambda self: 0))
    try:
        yield
    finally:
        setattr(CpuTarget, bound, saved)


@contextlib.contextmanager
def team_steps_in_python():
    """Bind native launch sequences without TEAM instructions (before session 21): a kernel with a phase split on
    the OpenMP team leaves the sequence for a Python step call. The A side of ``native_sequence.py``'s TEAM."""
    from neuroncc.executors.cpu import native_sequence

    saved = native_sequence.phase_words

    def without_team(kernel, tasks):
        made: list = []
        words = saved(kernel, made)
        return None if made else words
    native_sequence.phase_words = without_team
    try:
        yield
    finally:
        native_sequence.phase_words = saved


@contextlib.contextmanager
def team_min_work(units: int):
    """Bind the launcher's steps with ``threads.TEAM_MIN_WORK`` = ``units``: the A side of the team threshold."""
    from neuroncc.executors.cpu import threads

    saved = threads.TEAM_MIN_WORK
    threads.TEAM_MIN_WORK = units
    try:
        yield
    finally:
        threads.TEAM_MIN_WORK = saved


def settle_builds() -> None:
    """Wait for the optimized builds under way (tiers.py): their executables bind their calls when built."""
    tiers = sys.modules.get("neuroncc.executors.cpu.tiers")
    if tiers is not None and tiers.OPTIMIZER.pending():
        tiers.OPTIMIZER.wait()


@contextlib.contextmanager
def exp_floor_before():
    """Compile with AVX2's non-positive exp clamped at -104, as before session 20 (its masked -inf entries
    then come out +0 from an underflowing product): the A side of ``mathlib.EXP_NONPOSITIVE_FLOOR``'s A/B."""
    from neuroncc.codegen.llvm import mathlib

    saved = mathlib.EXP_NONPOSITIVE_FLOOR
    mathlib.EXP_NONPOSITIVE_FLOOR = -104.0
    try:
        yield
    finally:
        mathlib.EXP_NONPOSITIVE_FLOOR = saved


#: the classifier's attention softmax kernel (fused_2_log_softmax: scale, causal mask, softmax and its
#: log-sum-exp for the backward) as the forward graph has it
ATTENTION_SOFTMAX = ("func @attention_softmax(%x: tensor<128x16x16xf32>)"
                     " -> (tensor<128x16x16xf32>, tensor<128x16x1xf32>) {" + """
  %s = full {dtype = f32, shape = [], value = 0.25} : tensor<f32>
  %scaled = mul %x, %s : tensor<128x16x16xf32>
  %col = iota {dtype = i32, length = 16} : tensor<16xi32>
  %row = constant {value = dense<16x1xi32: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]>} : tensor<16x1xi32>
  %keep = le %col, %row : tensor<16x16xbool>
  %ninf = full {dtype = f32, shape = [], value = -inf} : tensor<f32>
  %masked = where %keep, %scaled, %ninf : tensor<128x16x16xf32>
  %max = amax %masked {dims = [2], keepdim = true} : tensor<128x16x1xf32>
  %shifted = sub %masked, %max : tensor<128x16x16xf32>
  %e = exp %shifted : tensor<128x16x16xf32>
  %sum = sum %e {dims = [2], keepdim = true} : tensor<128x16x1xf32>
  %y = div %e, %sum : tensor<128x16x16xf32>
  %logsum = log %sum : tensor<128x16x1xf32>
  %lse = add %max, %logsum : tensor<128x16x1xf32>
  return %y, %lse
}
""")


def bench_attention_softmax(repeat: int, clock) -> list[list[str]]:
    """The attention softmax kernel's step on held outputs, built with the exp floor before session 20 and
    now, against eager's scale + mask + softmax and its softmax alone on that shape, interleaved."""
    import torch

    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.executors.cpu.launcher import build_cpu_executable
    from neuroncc.ir.parser import parse

    x = torch.randn(128, 16, 16, generator=torch.Generator().manual_seed(0))
    keep = torch.ones(16, 16, dtype=torch.bool).tril()

    def eager():
        return torch.softmax((x * 0.25).masked_fill(~keep, float("-inf")), -1)

    def kernel_step():
        exe = build_cpu_executable(fuse_whole_function(parse(ATTENTION_SOFTMAX)), {"threads": torch.get_num_threads()})
        y, lse = torch.empty(128, 16, 16), torch.empty(128, 16, 1)
        kernel = kernel_alone(exe, [x], [y, lse])

        def run() -> torch.Tensor:
            kernel()
            return y
        torch.testing.assert_close(run(), eager())
        return run

    with exp_floor_before():
        before = kernel_step()
    now = kernel_step()
    assert torch.equal(before(), now())
    times = interleaved({"kernel, exp floor -104 (before)": before, "kernel, exp floor -104.5": now,
                         "eager scale + mask + softmax": eager, "eager softmax alone": lambda: torch.softmax(x, -1)},
                        repeats=repeat, warmup=20, clock=clock)
    first = times["kernel, exp floor -104 (before)"]
    return [[name, f"{t * 1e6:.1f}", f"{t / first:.2f}"] for name, t in times.items()]


def distinct_neuron_backend():
    """neuroncc's backend under a callable of its own: TorchDynamo keeps one compiled graph per code object and
    backend, and two instances of one model class share their ``forward``'s code, so an A/B row compiled with
    the same "neuron" backend would run the other row's graphs (the first compiled, whichever that was)."""
    import torch

    neuron = torch._dynamo.lookup_backend("neuron")

    def backend(gm, example_inputs, **kwargs):
        return neuron(gm, example_inputs, **kwargs)
    return backend


def bench_small_mlp(repeat: int, clock, aoti: dict[str, object]) -> list[list[str]]:
    """The tiny MLP's inference call: eager, through torch.compile (TorchDynamo's floor, Inductor, neuroncc), and
    the exported program served without TorchDynamo (``neuroncc.compile_program``; AOTInductor's
    ``aoti_compile_and_package`` + ``aoti_load_package``). ``aoti`` keeps AOTInductor's loaded model (or why
    it could not be built) between thread counts: its C++ build is slow, and stays out of the timed loop."""
    import torch

    import neuroncc

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(8, 64)
    backends = {"eager": None, "dynamo floor": "eager", "inductor": "inductor", "neuroncc": "neuron"}
    with torch.no_grad():
        impls = {name: (mlp if b is None else torch.compile(mlp, backend=b, dynamic=False)) for name, b in backends.items()}
        program = torch.export.export(mlp, (x,))
        impls["neuroncc compile_program (no TorchDynamo)"] = neuroncc.compile_program(program)
        if "model" not in aoti and "error" not in aoti:
            aoti.update(aoti_model(program))
        if "model" in aoti:
            impls["AOTInductor (aoti_load_package)"] = aoti["model"]
        for name in ("neuroncc", "neuroncc compile_program (no TorchDynamo)", *(("AOTInductor (aoti_load_package)",)
                                                                             if "model" in aoti else ())):
            torch.testing.assert_close(impls[name](x), mlp(x), rtol=1e-5, atol=1e-5)
        times = interleaved({name: (lambda f=f: f(x)) for name, f in impls.items()}, repeats=repeat * 5, warmup=20,
                            clock=clock)
    rows = [["MLP 8x64->256->10 inference", name, f"{t * 1e6:.1f} us", f"{t / times['eager']:.2f}"]
            for name, t in times.items()]
    if "error" in aoti:
        rows.append(["MLP 8x64->256->10 inference", "AOTInductor (aoti_load_package)", "not built here",
                     str(aoti["error"])[:60]])
    return rows


def aoti_model(program) -> dict[str, object]:
    """``{"model": AOTInductor's loaded package}`` of ``program``, built with the system C++ compiler (and the
    seconds it took), or ``{"error": why}`` when it cannot be built here."""
    import tempfile

    import torch

    start = time.perf_counter()
    try:
        directory = tempfile.mkdtemp(prefix="bench-aoti-")
        path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(directory, "mlp.pt2"))
        model = torch._inductor.aoti_load_package(path)
    except Exception as error:  # noqa: BLE001 - no compiler, no headers, an Inductor failure: reported, not fatal
        message = " ".join(str(error).split())[:200] or type(error).__name__
        print(f"AOTInductor could not build the MLP here: {type(error).__name__}: {message}", file=sys.stderr)
        return {"error": f"{type(error).__name__}: {message}"}
    print(f"AOTInductor built the MLP in {time.perf_counter() - start:.1f} s (not timed)", file=sys.stderr)
    return {"model": model}


def bench_small(repeat: int, clock, ab_bmm: bool = False, aoti: dict[str, object] | None = None,
                mlp_only: bool = False, ab_mm: bool = False, ab_exp: bool = False,
                ab_team: bool = False, ab_team_min_work: tuple[int, ...] = ()) -> list[list[str]]:
    """The tiny MLP's inference call (:func:`bench_small_mlp`) and the classifier's AdamW step, per
    implementation (``ab_bmm``: and neuroncc with its bmm on BLAS, compiled under :func:`on_blas`; ``ab_mm``:
    and neuroncc with its 2-d products on MKL)."""
    from neuroncc.examples.classifier import ClassifierConfig

    rows = bench_small_mlp(repeat, clock, aoti if aoti is not None else {})
    if mlp_only:
        return rows
    backends = {"eager": None, "dynamo floor": "eager", "inductor": "inductor", "neuroncc": "neuron"}
    config = ClassifierConfig(**ISSUE_CLASSIFIER_SHAPE)
    steps = {}
    ab = {}
    if ab_bmm:
        ab["neuroncc, bmm on BLAS"] = "small_bmm_max_macs"
    if ab_mm:
        ab["neuroncc, mm on MKL"] = "small_mm_max_macs"
    if ab_exp:
        ab["neuroncc, exp floor -104"] = "exp floor"
    if ab_team:
        ab["neuroncc, team steps from Python"] = "team steps"
    for units in ab_team_min_work:
        ab[f"neuroncc, TEAM_MIN_WORK {units}"] = units
    backends.update({name: distinct_neuron_backend() for name in ab})
    for compile_optimizer in (False, True):
        for name, b in backends.items():
            # TorchDynamo's eager backend runs a compiled optimizer step's per-parameter ops one by one (slower
            # than eager's foreach kernels): no floor there
            if compile_optimizer and name == "dynamo floor":
                continue
            step = classifier_step(config, b, compile_optimizer)
            if name in ab and (ab[name] == "team steps" or isinstance(ab[name], int)):
                settle_builds()  # no other variant's optimized build may bind inside the switch
                with team_steps_in_python() if ab[name] == "team steps" else team_min_work(ab[name]):
                    step()  # compiles; the optimized builds bind their launch sequences as they finish
                    settle_builds()
                    step()
            elif name in ab:
                with exp_floor_before() if ab[name] == "exp floor" else on_blas(ab[name]):
                    step()  # compiles the forward and backward graphs (and the optimizer step)
            steps[(compile_optimizer, name)] = step
    times = interleaved(steps, repeats=max(repeat // 4, 20), warmup=5, clock=clock)
    for compile_optimizer, label in ((False, "AdamW step, optimizer eager"), (True, "AdamW step, optimizer compiled")):
        eager = times[(False, "eager")]
        rows += [[f"classifier d=64 h=4 32x16 {label}", name, f"{t * 1e3:.3f} ms", f"{t / eager:.2f}"]
                 for (compiled, name), t in times.items() if compiled == compile_optimizer]
    return rows


def classifier_step(config, backend: str | None, compile_optimizer: bool):
    """One AdamW training step of issue #18's classifier (``tokens, labels`` of :data:`ISSUE_CLASSIFIER_SHAPE`):
    the model compiled by ``backend`` (None: eager), and with ``compile_optimizer`` its ``optimizer.step()``
    too, by the same backend, as PyTorch's "Compiling the optimizer" tutorial does. Two of these share one
    interleaved run: each has its own model, optimizer and compiled graphs."""
    import torch

    from neuroncc.examples.classifier import build_example, make_batch

    tokens, labels = make_batch(config, torch.Generator().manual_seed(1))
    model = build_example(0, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = model if backend is None else torch.compile(model, backend=backend, dynamic=False)
    update = optimizer.step
    if compile_optimizer and backend is not None:
        update = torch.compile(optimizer.step, backend=backend, dynamic=False)

    def step():
        optimizer.zero_grad(set_to_none=True)
        run(tokens, labels).backward()
        update()
    return step


def _clock(args: argparse.Namespace, threads: int):
    return time.thread_time if args.cpu_time and threads == 1 else time.perf_counter


def _clock_name(args: argparse.Namespace, threads: int) -> str:
    return "CPU time" if _clock(args, threads) is time.thread_time else "wall time"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--only", choices=["chain", "hook", "classifier", "small", "mlp"], default=None,
                        help="one section (mlp: small's MLP rows alone)")
    parser.add_argument("--profile", action="store_true",
                        help="the issue #18 classifier step per launcher step, at each thread count (profile_steps.py)")
    parser.add_argument("--same-process", action="store_true",
                        help="--profile: every thread count in this one process (by default each runs in a fresh "
                             "process: in one process a later table's inline kernels ran 1.3-4x the first's)")
    parser.add_argument("--ab-bmm", action="store_true",
                        help="small: add neuroncc with every bmm on sgemm_batch (generated small bmm off)")
    parser.add_argument("--ab-mm", action="store_true",
                        help="small: add neuroncc with every mm/addmm on MKL (generated 2-d products off)")
    parser.add_argument("--ab-exp", action="store_true",
                        help="small: add neuroncc with AVX2's non-positive exp clamped at -104 (before session 20), "
                             "and time the attention softmax kernel both ways first")
    parser.add_argument("--ab-team", action="store_true",
                        help="small: add neuroncc with kernels split on the OpenMP team called from Python, outside "
                             "the native launch sequences (before session 21)")
    parser.add_argument("--ab-team-min-work", default="", metavar="UNITS[,UNITS...]",
                        help="small: add neuroncc with its steps bound under threads.TEAM_MIN_WORK = UNITS, a row "
                             "each")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time 1-thread runs by the calling thread's CPU time (time.thread_time), which leaves "
                             "out the time a loaded machine keeps the process descheduled")
    args = parser.parse_args()
    ensure_environment(1)
    import torch

    os.environ.setdefault("NEURONCC_DISABLE_CACHE", "1")
    if args.ab_exp or args.ab_team or args.ab_team_min_work:  # the builds' graphs are alike: none may come from
        # another's graph cache entry
        os.environ.setdefault("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    if args.profile:
        from profile_steps import profile

        counts = [int(t) for t in args.threads.split(",")]
        if len(counts) > 1 and not args.same_process:
            for threads in counts:  # each table in a process of its own (see --same-process's help)
                subprocess.run([sys.executable, os.path.abspath(__file__), "--profile", "--threads", str(threads),
                                "--repeat", str(args.repeat)], check=True)
            return
        profile(counts, max(args.repeat // 4, 20), load)
        return
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
        print(f"the hook's check alone (tracing.watching(), front end's tracer installed): {check_ns:.0f} ns per call")
    if args.only in (None, "small", "mlp"):
        aoti: dict[str, object] = {}
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            torch._dynamo.reset()
            if args.ab_exp:
                print(f"\nattention softmax [128, 16, 16] kernel, {threads} thread(s), {_clock_name(args, threads)}, "
                      f"load {load()}")
                print(table(bench_attention_softmax(args.repeat, _clock(args, threads)), ["", "us", "x before"]))
            rows = bench_small(args.repeat, _clock(args, threads), args.ab_bmm, aoti, mlp_only=args.only == "mlp",
                               ab_mm=args.ab_mm, ab_exp=args.ab_exp, ab_team=args.ab_team,
                               ab_team_min_work=tuple(int(u) for u in args.ab_team_min_work.split(",") if u))
            print(f"\nsmall models (issue #18), {threads} thread(s), {_clock_name(args, threads)}, load {load()}")
            print(table(rows, ["model", "", "time", "x eager"]))
    if args.only in ("chain", "hook", "small", "mlp"):
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
