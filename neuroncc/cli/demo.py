"""``neuroncc demo``: the tour a new user runs first, on the bundled example model.

    1 export   the tiny transformer classifier (neuroncc/examples/classifier.py) with torch.export, then load
               the .pt2 back with neuroncc's loader (which never unpickles)
    2 compile  forward and backward: AOTAutograd joint export, min-cut partition, IR, the target's pipeline,
               through the compile cache
    3 train    a few AdamW steps with the compiled graphs and, side by side, with the eager PyTorch model;
               losses per step and the largest parameter difference at the end. Our side compiles its
               ``optimizer.step`` too, as a user would (``torch.compile(optimizer.step, backend="neuron")``,
               PyTorch's "Compiling the optimizer"); eager's stays eager
    4 kernels  what the compiled graphs launch
    5 cache    ``neuroncc compile --train`` again in a fresh process: every graph is a cache hit
    6 NKI      the forward and backward graphs emitted as NKI kernels for trn2, and the cost model's estimate
               (total, DMA- vs compute-bound, the slowest kernels); ``neuroncc inspect --cost`` has the table
    7 device   the same model trained eagerly on the ``neuron`` device (``model.to("neuron")``), side by side
               with CPU: each op compiled on first use, what ran where (neuroncc/cli/demo_device.py)

Everything is written to ``-o DIR`` (a temporary directory, removed at the end, by default): the .pt2, and the
compile cache unless ``--cache-dir`` names another. Your own cache and working directory are left alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from neuroncc.cli import programs
from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.cache import human_size
from neuroncc.cli.process_exit import finish_background_work
from neuroncc.cli.demo_device import compile_cache_at, train_on_device
from neuroncc.cli.progress import Progress, format_seconds
from neuroncc.cli.summary import summarize
from neuroncc.errors import InputError, UnsupportedOpError
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CacheStats
import statistics
from neuroncc.executors.executable import TARGETS
from neuroncc.executors.interpreter_executable import InterpreterExecutable
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.executors.nki_sim.executable import nki_program
import neuroncc
from neuroncc.driver.compile import DEFAULT_TARGET

EXIT_OK, EXIT_CHECK_FAILED = 0, 1
MAX_STEPS = 1000
LEARNING_RATE = 1e-2
#: Largest parameter difference (after training) still counted as agreement: float32 reassociation noise,
#: amplified a little by AdamW's normalization over a few steps.
PARAMETER_TOLERANCE = 1e-4
INDENT = " " * 11


def run_demo(args: argparse.Namespace) -> int:
    if not 1 <= args.steps <= MAX_STEPS:
        raise InputError(f"--steps must be between 1 and {MAX_STEPS}, got {args.steps}")
    if args.output:
        return _demo(args, programs.ensure_output_directory(args.output), keep=True)
    with tempfile.TemporaryDirectory(prefix="neuroncc-demo-") as directory:
        try:
            return _demo(args, Path(directory), keep=False)
        finally:
            # the background writes go into the directory: removing it under them failed the demo at exit
            # ("Directory not empty") or lost their entries with a warning each
            finish_background_work()


def _demo(args: argparse.Namespace, directory: Path, keep: bool) -> int:
    import torch

    from neuroncc.examples.classifier import ClassifierConfig, export_example
    from neuroncc.frontend.exported import load_program, trace_training

    started = time.perf_counter()
    progress = Progress(enabled=not args.quiet, transient=True)
    config = ClassifierConfig()
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else directory / "cache"
    cache = CompileCache(cache_dir, stats=CacheStats())
    model_path = directory / "classifier.pt2"
    print("neuroncc demo: a tiny transformer classifier, trained with neuroncc and with eager PyTorch side by side")
    print(f"{INDENT}target {args.target}; files in {directory}" + ("" if keep else " (removed at exit; keep them "
                                                                          "with -o DIR)"))
    print()
    # The example is tiny: one thread is fastest for eager and neuroncc alike (no wake-ups, and no spinning
    # OpenMP workers on a busy machine, where they made every small matmul take milliseconds).
    torch.set_num_threads(1)
    with programs.one_line_warnings():
        with progress.step("export the example model") as step:
            export_example(model_path, seed=args.seed, config=config)
        _row("1 export", f"torch.export -> {model_path.name} ({human_size(model_path.stat().st_size)})",
             step.seconds)
        with progress.step("load it back") as step:
            program = load_program(model_path)
        _row("", "loaded back with neuroncc's .pt2 loader (it never unpickles)", step.seconds)

        compiled: list[programs.CompiledFunction] = []

        def compile_imported(kind, imported):
            result = programs.compile_function(imported.function, kind, target=args.target, pipeline=None,
                                               cache=cache, progress=progress)
            compiled.append(result)
            return result.executable

        with progress.step("compile forward + backward") as step:
            graphs = trace_training(program, "classifier", compile_imported, args.target)
        _row("2 compile", "forward + backward: joint export, min-cut partition, import to IR, "
                          f"{args.target} pipeline", step.seconds)
        for c in compiled:
            words = {"hit": "cache hit", "compiled": "compiled, cached", "uncached": "compiled"}[c.cache]
            print(f"{INDENT}  {c.kind:<8} @{c.function.name:<20} {len(c.function.ops):>4} ops imported  key "
                  f"{(c.key or '-')[:16]}  {words} in {format_seconds(c.seconds)}")
        print()
        with progress.step(f"train {args.steps} steps"):
            agreed = _train(args, graphs, config, cache_dir)
        print()
        _print_kernels(compiled)
        print()
        with progress.step("compile again in a fresh process"):
            _rerun(args, model_path, cache_dir)
        print()
        with progress.step("estimate the NKI kernels' cost on trn2") as step:
            tables = [(kind, _nki_costs(fn)) for kind, fn in _nki_functions(args, program, compiled)]
        _print_nki_costs(tables, step.seconds)
        print()
        with progress.step(f"train {args.steps} steps on the neuron device"):
            agreed &= train_on_device(args.steps, args.seed, LEARNING_RATE, cache_dir, _row, INDENT)
    print()
    verdict = "neuroncc and eager PyTorch agree" if agreed else "neuroncc and eager PyTorch DISAGREE (see above)"
    print(f"done in {format_seconds(time.perf_counter() - started)}: {verdict}")
    return EXIT_OK if agreed else EXIT_CHECK_FAILED


def _train(args: argparse.Namespace, graphs, config, cache_dir: Path) -> bool:
    """AdamW steps on the same batches with the compiled step and the eager model; prints the comparison. Our
    optimizer step is compiled by ``torch.compile`` (into the demo's cache) on the first step."""

    import torch

    from neuroncc.examples.classifier import build_example, make_batch

    eager = build_example(args.seed, config)
    eager_parameters = dict(eager.named_parameters())
    state = dict(graphs.module.named_parameters())
    ours = [state[name].detach().clone().requires_grad_(True) for name in graphs.parameter_names]
    buffer_state = dict(graphs.module.named_buffers())
    buffers = [buffer_state[name].detach().clone() for name in graphs.buffer_names]
    optimizer = torch.optim.AdamW(ours, lr=LEARNING_RATE)
    update = torch.compile(optimizer.step, backend="neuron", options={"target": args.target})
    eager_optimizer = torch.optim.AdamW([eager_parameters[n] for n in graphs.parameter_names], lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(args.seed + 1)
    _row("3 train", f"{args.steps} AdamW steps (lr {LEARNING_RATE}) on batches of {config.batch} random sequences; "
                    "our optimizer.step compiled by torch.compile")
    print(f"{INDENT}  step  neuroncc loss  eager loss  |difference|")
    times: dict[str, list[float]] = {"neuroncc": [], "eager": []}
    losses_agree = True
    with compile_cache_at(cache_dir), _quiet_ignored_profiler_ranges():
        for step in range(1, args.steps + 1):
            tokens, labels = make_batch(config, generator)
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = graphs.step(*ours, *buffers, tokens, labels)
            loss.backward()
            update()
            times["neuroncc"].append(time.perf_counter() - start)
            start = time.perf_counter()
            eager_optimizer.zero_grad()
            eager_loss = eager(tokens, labels)
            eager_loss.backward()
            eager_optimizer.step()
            times["eager"].append(time.perf_counter() - start)
            ours_value, eager_value = loss.item(), eager_loss.item()
            difference = abs(ours_value - eager_value)
            losses_agree &= difference <= 1e-4 * max(1.0, abs(eager_value))
            print(f"{INDENT}  {step:>4}  {ours_value:>13.6f}  {eager_value:>10.6f}  {difference:>12.2e}")
    worst_name, worst = max(((name, float((p.detach() - eager_parameters[name].detach()).abs().max()))
                             for name, p in zip(graphs.parameter_names, ours)), key=lambda item: item[1])
    agreed = losses_agree and worst <= PARAMETER_TOLERANCE
    print(f"{INDENT}max |parameter difference| after {args.steps} steps: {worst:.2e} ({worst_name}): "
          f"{'ok' if agreed else 'TOO LARGE'} (tolerance {PARAMETER_TOLERANCE:g})")
    print(f"{INDENT}{_step_times(times)}")
    # Said because the numbers invite a conclusion they do not support: at this size each step is ~1 ms of
    # arithmetic, and the rest is per-call overhead (the Python launcher, AOTAutograd's runtime wrappers).
    print(f"{INDENT}(a model this tiny measures per-call overhead more than kernels; the large-model "
          "comparisons are in docs/performance.md)")
    return agreed


def _step_times(times: dict[str, list[float]]) -> str:
    """The per-step time lines. Our first step compiled the optimizer step, so the medians leave it out (on
    both sides) when there are more; a single step is shown as what it was."""
    first = f"{INDENT}(our step 1 took {format_seconds(times['neuroncc'][0])}: it compiled the optimizer step)"
    if len(times["neuroncc"]) == 1:
        return (f"time of the one step (forward + backward + AdamW): neuroncc {format_seconds(times['neuroncc'][0])}"
                f", eager {format_seconds(times['eager'][0])}\n{first}")
    later = {name: statistics.median(values[1:]) for name, values in times.items()}
    shown = "step 2" if len(times["neuroncc"]) == 2 else f"steps 2-{len(times['neuroncc'])}"
    return (f"time per step (median of {shown}, forward + backward + AdamW): neuroncc "
            f"{format_seconds(later['neuroncc'])}, eager {format_seconds(later['eager'])}\n{first}")


@contextlib.contextmanager
def _quiet_ignored_profiler_ranges() -> Iterator[None]:
    """TorchDynamo warns (once, on stderr) that it ignores the ``record_function`` range ``optimizer.step``
    opens for the profiler; the demo keeps stderr for real problems."""
    log = logging.getLogger("torch._dynamo.variables.ctx_manager")
    quiet = _DropMessage("Profiler record function")
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _print_kernels(compiled: list[programs.CompiledFunction]) -> None:
    for index, c in enumerate(compiled):
        lines = summarize(c.ran_function).lines(limit=6)
        _row("4 kernels" if index == 0 else "", f"{c.kind}: {lines[0]}")
        for line in lines[1:]:
            print(f"{INDENT}  {line}")


NKI_DEMO_TARGET = "trn2"
NKI_SLOWEST_SHOWN = 3


def _nki_functions(args: argparse.Namespace, program, compiled) -> list:
    """(kind, IR) of the graphs nki-sim compiles: the cpu target keeps attention as one library op (a host
    step on NKI), nki-sim traces it as matmuls and softmax (see frontend/lowering/attention.py)."""
    if args.target == "nki-sim":
        return [(c.kind, c.function) for c in compiled]
    from neuroncc.frontend.exported import trace_training

    graphs = trace_training(program, "classifier", lambda kind, graph: InterpreterExecutable(graph.function),
                            "nki-sim")
    return [("forward", graphs.forward.function), ("backward", graphs.backward.function)]


def _nki_costs(fn):
    """The cost table of ``fn`` emitted for NKI on trn2, or the one-line reason the emitter refused it."""

    try:
        return estimate_costs(nki_program(fn, NKI_DEMO_TARGET), NKI_DEMO_TARGET)
    except UnsupportedOpError as error:
        return str(error).splitlines()[0]


def _print_nki_costs(tables, seconds: float) -> None:
    _row("6 NKI", f"cost-model estimate of the generated NKI kernels on {NKI_DEMO_TARGET} "
                  "(one NeuronCore, kernels back to back)", seconds)
    for kind, table in tables:
        if isinstance(table, str):
            print(f"{INDENT}  {kind}: not emitted: {table}")
            continue
        kernels = table.kernels
        bounds = {}
        for k in kernels:
            bounds[k.bound] = bounds.get(k.bound, 0) + 1
        split = ", ".join(f"{n} {bound}-bound" for bound, n in sorted(bounds.items(), key=lambda kv: -kv[1]))
        print(f"{INDENT}  {kind}: {len(kernels)} kernels, {table.total_us:.1f} us estimated ({split})")
        for k in sorted(kernels, key=lambda k: -k.latency_us)[:NKI_SLOWEST_SHOWN]:
            print(f"{INDENT}    {k.name:<28} {k.latency_us:8.2f} us  {k.bound}-bound")
    print(f"{INDENT}  (every kernel's engine use: neuroncc inspect MODEL.pt2 --train --cost)")


def _rerun(args: argparse.Namespace, model_path: Path, cache_dir: Path) -> None:
    """``neuroncc compile --train`` in a fresh Python process, on the same cache: report its hits."""

    command = [sys.executable, "-m", "neuroncc.cli", "compile", str(model_path), "--train", "--target",
               args.target, "--cache-dir", str(cache_dir), "--json", "-q"]
    package_root = str(Path(neuroncc.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    child = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - start
    shown = f"neuroncc compile {model_path.name} --train --target {args.target}"
    if child.returncode != 0:
        message = (child.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise InputError(f"demo: the rerun `{shown}` failed with exit code {child.returncode}: {message}")
    report = json.loads(child.stdout)
    hits, compiles = report["cache_hits"], report["compiles"]
    loading = sum(g["seconds"] for g in report["graphs"])
    _row("5 cache", f"`{shown}` in a fresh process:", seconds)
    print(f"{INDENT}  {hits} cache hits, {compiles} compiles: the {len(report['graphs'])} artifacts loaded in "
          f"{format_seconds(loading)}")
    print(f"{INDENT}  (the rest is starting Python, importing torch, loading and tracing the .pt2)")


def _row(label: str, text: str, seconds: float | None = None) -> None:
    line = f"{label:<{len(INDENT)}}{text}"
    if seconds is not None:
        line = f"{line}  [{format_seconds(seconds)}]"
    print(line)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = programs.add_command(
        subparsers, "demo", __doc__,
        help=COMMANDS["demo"].help,
        description="The neuroncc tour: export a tiny transformer classifier, compile its forward and backward "
                    "graphs, train it against eager PyTorch, show its kernels and a cache hit.",
        exit_codes="0 neuroncc and eager PyTorch agree, 1 they do not, 2 bad input, 3 internal error")
    parser.add_argument("--steps", type=int, default=8, metavar="N", help="training steps (default 8)")
    parser.add_argument("--target", choices=sorted(TARGETS), default=DEFAULT_TARGET,
                        help=programs.TARGET_HELP.format(default=DEFAULT_TARGET))
    parser.add_argument("-o", "--output", metavar="DIR", help="keep the .pt2 and the cache in DIR")
    parser.add_argument("--cache-dir", metavar="DIR", help="use this compile cache (default: DIR/cache)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the weights and the data (default 0)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    parser.set_defaults(func=run_demo)
