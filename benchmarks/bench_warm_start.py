"""Warm starts: the first call of a compiled training step in a fresh process, against the TorchDynamo floor.

    python benchmarks/bench_warm_start.py [--row f2] [--rounds 3]

Each measurement is a fresh process timing ``torch.compile`` + the first full step (after ``import
torch._dynamo``, torch's own import, paid alike by all), as ``bench_models.py --first-call`` does:

    eager       backend="eager": TorchDynamo tracing plus the step itself (the floor)
    aot_eager   backend="aot_eager": the floor plus AOTAutograd's tracing and partitioning
    cold        neuroncc from an empty compile cache (then ``torch.compiler.save_cache_artifacts()``, untimed)
    warm        neuroncc over the cache the cold run filled: the graph cache (frontend/graph_cache.py) runs
                the graph without AOTAutograd
    warm_aot    the same with the graph cache off (NEURONCC_DISABLE_GRAPH_CACHE=1): AOTAutograd runs, every
                compile is a compile-cache hit (the warm start before the graph cache)
    prewarmed   neuroncc from another empty cache, after ``torch.compiler.load_cache_artifacts()`` of the cold
                run's bytes (the load is timed apart: "load s")

"aot runs" counts the graphs AOTAutograd traced (``neuroncc.stats()["aot_autograd_runs"]``). "own s" is the
time in neuroncc's ``compile_aten_graph`` (FX import to IR, cache lookup and load, or the
compile), summed over the forward and backward graphs (in the warm and prewarmed modes, which never import the
miss path, the same from neuroncc's compile records: 0 on graph cache hits); the rest of a neuroncc first call beyond the floor is
AOTAutograd. "lookup s" is the graph cache's part (``graph_cache.lookup``: the key, and on a hit reading the
entry, loading both artifacts and building AOTAutograd's runtime wrappers), of which "key s" is the key
(``key_parts``, ``graph_key``; its host fingerprint loads LLVM's bindings on first use, ~25 ms, which loading
object code needs anyway) and "artifacts s" the two artifacts (``graph_cache._load_graph``: the entries read
and checked, the IR parsed, the object code loaded, and on first use the import of the cpu launcher); the rest
is the entry's payload and AOTAutograd's runtime wrappers. "import s" is the import of
neuroncc's torch.compile backend, which a user's first ``torch.compile(backend="neuron")`` call pays: it is timed
in the neuroncc modes and counted in their first call, and the eager and aot_eager modes never import it (before
session 8 every mode imported it untimed, which gave the neuroncc modes the torch modules it loads for free).
The cold and warm_aot modes import the graph cache's miss path (``frontend/aot_compile.py``) there too, after
"shared s": the AOTAutograd modules it needs that aot_eager's first call imports as well (its partitioner,
``torch._dynamo.backends.common``), timed apart so that "import s" is neuroncc's own import (our modules,
llvmlite); both are counted in the first call.
The modes run interleaved, round by round; the table shows medians and minimums. A second table says where
each mode's first call goes beyond the same round's eager run (medians of the per-round differences; for eager
its own parts): the backend's import ("import", "shared"), TorchDynamo's compile of the frame ("dynamo": tracing
and bytecode, without the two that follow), its guard building ("guards"), the backend's call ("backend": for
neuroncc the graph cache lookup, on a miss AOTAutograd and the compile), the first call of the graph the
backend returned ("fw": the forward), the first backward ("bw"), the cyclic garbage collector ("gc": a full
collection, ~0.17 s here, lands in whichever part runs, so every part is timed without collections), and the
rest ("other": torch.compile's backend lookup, which imports TorchDynamo's backends, the loss, the optimizer).

neuroncc's bytecode is compiled first (``compileall``, into the tree's ``__pycache__``), as an installed package
has it: with ``PYTHONDONTWRITEBYTECODE=1`` (set on the shared benchmark machine) every process would otherwise
compile neuroncc's sources again, and only the neuroncc modes import modules in the timed part (the launcher
and LLVM bindings, when the first artifact loads): 20-30 ms of a warm first call. ``--no-bytecode`` measures
without it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import first_call_timeline  # noqa: E402
from common import MALLOC_ENV, ensure_environment, table  # noqa: E402

ensure_environment(threads=2)

MODES = ("eager", "aot_eager", "cold", "warm", "warm_aot", "prewarmed")
#: The neuroncc modes that run AOTAutograd (the graph cache's miss path, frontend/aot_compile.py).
COMPILING_MODES = ("cold", "warm_aot")
SECRET = "bench-warm-start-secret-0123456789"


def first_call(row: str, mode: str, artifacts: Path, timeline: bool = False) -> dict[str, Any]:
    """In this fresh process: seconds of compile + first step (and, for neuroncc, in compile_aten_graph); with
    ``timeline``, also "spans": the first call's timeline (first_call_timeline.py)."""
    import torch._dynamo  # noqa: F401 - torch.compile's own import, the same for every backend

    origin = time.perf_counter()
    if timeline:
        first_call_timeline.install()
    result = _first_call(row, mode, artifacts)
    if timeline:
        _timeline_spans(result, origin)
        result["spans"] = first_call_timeline.spans_since(origin)
    return result


def _timeline_spans(result: dict[str, Any], origin: float) -> None:
    """The first call's parts that ``result`` times as spans of the timeline (the imports come first, then
    torch.compile and the step; "first step" ends where the first call does)."""
    spans = first_call_timeline.SPANS
    shared_end = origin + result["shared"]
    spans.append(("import (shared)", "MainThread", origin, shared_end, ""))
    spans.append(("import (neuroncc)", "MainThread", shared_end, shared_end + result["import"], ""))
    spans.append(("torch.compile + first step", "MainThread", _STEP[0], _STEP[1], ""))
    spans.append(("loss.backward()", "MainThread", _STEP[2], _STEP[3], ""))


def _first_call(row: str, mode: str, artifacts: Path) -> dict[str, float]:
    import torch  # imported already (first_call): the prewarmed mode's load below

    result = {"own": 0.0, "load": 0.0, "lookup": 0.0, "key": 0.0, "artifacts": 0.0, "import": 0.0, "shared": 0.0,
              **dict.fromkeys(PHASES, 0.0)}
    gc.callbacks.append(_count_gc)
    _time_dynamo(result)
    if mode in ("eager", "aot_eager"):
        result = _first_step(row, mode, result)
        result["gc"] = _GC_SECONDS[0]
        return result
    # A user's first torch.compile(backend="neuron") imports the backend (the torch_dynamo_backends entry
    # point): timed here and counted in the first call ("import s"), as the torch modules it loads that
    # AOTAutograd needs anyway would otherwise be free for the neuroncc modes and paid by aot_eager
    if mode in COMPILING_MODES:  # what aot_eager's first call imports too: "shared s", not neuroncc's own
        begin = _clock()
        importlib.import_module("torch._dynamo.backends.common")
        importlib.import_module("torch._functorch.partitioners")

        result["shared"] = _clock() - begin
    begin = _clock()
    from neuroncc.frontend import backend as neuron_backend

    if mode in COMPILING_MODES:  # they run AOTAutograd: the miss path's import is part of their first call
        from neuroncc.frontend import aot_compile

    result["import"] = _clock() - begin
    before_step = _GC_SECONDS[0]
    if mode == "prewarmed":  # timed apart, not part of the first call (nor its collections)
        begin = time.perf_counter()
        torch.compiler.load_cache_artifacts(artifacts.read_bytes())
        result["load"] = time.perf_counter() - begin
        _GC_SECONDS[0] = before_step
    if mode in COMPILING_MODES:
        compile_aten_graph = aot_compile.compile_aten_graph

        def timed(*args: object, **kwargs: object) -> object:
            begin = _clock()
            try:
                return compile_aten_graph(*args, **kwargs)
            finally:
                result["own"] += _clock() - begin

        aot_compile.compile_aten_graph = timed
    timed_parts = (("lookup", "lookup"), ("key_parts", "key"), ("graph_key", "key"), ("_load_graph", "artifacts"))
    for name, column in timed_parts:
        _time_calls(neuron_backend.graph_cache, name, result, column)
    _first_step(row, mode, result)
    result["seconds"] += result["import"] + result["shared"] + before_step  # the imports' collections too
    result["gc"] = _GC_SECONDS[0]
    return _after_first_step(mode, artifacts, result)


#: Seconds spent in the cyclic garbage collector so far in this process, from the first call's start: a full
#: collection (~0.17 s here, of every object torch and the backend made) lands in whichever part is running, so
#: every part below is timed without collections (``_clock``) and collections are a part of their own ("gc")
_GC_SECONDS = [0.0]
_GC_START = [0.0]


def _count_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _GC_START[0] = time.perf_counter()
    else:
        _GC_SECONDS[0] += time.perf_counter() - _GC_START[0]


def _clock() -> float:
    """Wall seconds without the collections so far (time.perf_counter() less ``_GC_SECONDS``)."""
    return time.perf_counter() - _GC_SECONDS[0]


#: Where every mode's first call goes (seconds; "other" is what is left of the first call: the loss, the optimizer
#: step, torch.compile's wrapper): "dynamo" TorchDynamo's compile of the frame without the backend and the guards
#: (tracing, bytecode), "guards" its guard building, "backend" the backend's call (neuroncc: the graph cache
#: lookup and, on a miss, AOTAutograd and the compile; eager: the graph module's code), "fw" the first call of the
#: graph the backend returned (the forward: the compiled graph's first run), "bw" the first backward.
PHASES = ("dynamo", "guards", "backend", "fw", "bw")


def _time_dynamo(result: dict[str, float]) -> None:
    """Time TorchDynamo's compile of a frame, its guard building, the backend's call and the returned graph's
    first call, the same way in every mode (internal names of torch's: a renamed one fails loudly here)."""
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.guards as guards
    import torch._dynamo.output_graph as output_graph
    from torch.fx._lazy_graph_module import _LazyGraphModule

    _time_calls(convert_frame, "_compile", result, "dynamo")
    build_guards = guards.CheckFunctionManager.__init__

    def timed_guards(*args: object, **kwargs: object) -> None:
        begin = _clock()
        try:
            build_guards(*args, **kwargs)
        finally:
            result["guards"] += _clock() - begin

    guards.CheckFunctionManager.__init__ = timed_guards
    call_backend = output_graph.OutputGraph.call_user_compiler

    def timed_backend(*args: object, **kwargs: object) -> object:
        begin = _clock()
        compiled = call_backend(*args, **kwargs)
        owner = getattr(compiled, "__self__", None)
        if isinstance(owner, _LazyGraphModule) and compiled.__name__ == "_lazy_forward":
            _LazyGraphModule.force_recompile(owner)  # what TorchDynamo does next for an eager graph module
            compiled = owner.forward
        result["backend"] += _clock() - begin
        calls = 0

        def first_call_timed(*args: object, **kwargs: object) -> object:
            nonlocal calls
            calls += 1
            if calls > 1:
                return compiled(*args, **kwargs)
            begin = _clock()
            try:
                return compiled(*args, **kwargs)
            finally:
                result["fw"] += _clock() - begin

        return first_call_timed

    output_graph.OutputGraph.call_user_compiler = timed_backend


def _time_calls(module: object, name: str, result: dict[str, float], column: str) -> None:
    """Add the seconds spent in ``module.name`` (called through the module's global) to ``result[column]``."""
    function = getattr(module, name)

    def timed(*args: object, **kwargs: object) -> object:
        begin = _clock()
        try:
            return function(*args, **kwargs)
        finally:
            result[column] += _clock() - begin

    setattr(module, name, timed)


#: perf_counter() at the step's start, its end, the backward's start and end (the timeline's spans)
_STEP = [0.0, 0.0, 0.0, 0.0]


def _first_step(row: str, mode: str, result: dict[str, float]) -> dict[str, float]:
    """``result`` with "seconds": torch.compile of the row's model and its first training step."""
    import torch

    from bench_models import ROWS

    _, factory, make_input, _ = ROWS[row]
    torch.manual_seed(0)
    model = factory().train(True)
    x = make_input()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    start = _STEP[0] = time.perf_counter()
    backend = mode if mode in ("eager", "aot_eager") else "neuron"
    run = torch.compile(model, backend=backend, dynamic=False)
    optimizer.zero_grad(set_to_none=True)
    loss = run(x).pow(2).mean()
    backward = _clock()
    _STEP[2] = time.perf_counter()
    loss.backward()
    _STEP[3] = time.perf_counter()
    result["bw"] = _clock() - backward
    optimizer.step()
    _STEP[1] = time.perf_counter()
    result["seconds"] = _STEP[1] - start
    # TorchDynamo's compile includes the guards and the backend's call; the forward's first call follows it
    result["dynamo"] -= result["guards"] + result["backend"]
    return result


def _after_first_step(mode: str, artifacts: Path, result: dict[str, float]) -> dict[str, float]:
    """``result`` with the neuroncc modes' counters (and the cold run's cache artifacts saved, untimed)."""
    import torch

    if mode == "cold":
        import neuroncc

        saved = torch.compiler.save_cache_artifacts()
        assert saved is not None, "nothing saved"
        artifacts.write_bytes(saved[0])
        result["compiled"] = neuroncc.stats()["cache_misses"]
    elif mode != "eager" and mode != "aot_eager":
        import neuroncc

        result["compiled"] = neuroncc.stats()["cache_misses"]
    if mode not in ("eager", "aot_eager"):
        import neuroncc

        result["aot_runs"] = neuroncc.stats()["aot_autograd_runs"]
    if mode in ("warm", "prewarmed"):  # compile_aten_graph's time from neuroncc's records (none on a hit)
        from neuroncc.frontend.stats import compile_records

        result["own"] = sum(r.import_seconds + r.record.seconds for r in compile_records())
    return result


def spawn(row: str, mode: str, cache: Path, artifacts: Path, timeline: bool = False) -> dict[str, Any]:
    env = {**os.environ, **MALLOC_ENV, "NEURONCC_CACHE_DIR": str(cache), "NEURONCC_CACHE_ARTIFACTS_KEY": SECRET}
    env.pop("NEURONCC_DISABLE_CACHE", None)
    env.pop("NEURONCC_DISABLE_GRAPH_CACHE", None)
    if mode == "warm_aot":
        env["NEURONCC_DISABLE_GRAPH_CACHE"] = "1"
    out = subprocess.run([sys.executable, __file__, "--first-call", row, mode, str(artifacts),
                          *(["--timeline"] if timeline else [])], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--row", default="f2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--first-call", nargs=3, metavar=("ROW", "MODE", "ARTIFACTS"))
    parser.add_argument("--no-bytecode", action="store_true", help="do not compile neuroncc's bytecode first")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="the modes to time (comma-separated; the cold run that fills the cache always runs)")
    parser.add_argument("--shuffle", action="store_true",
                        help="a fresh order of the modes each round (seeded), cold first: a mode's time depends "
                             "on the process before it by 30-60 ms")
    parser.add_argument("--timeline", action="store_true",
                        help="instead of the tables: --rounds cold first calls (fresh processes, empty caches), "
                             "each recorded as a timeline of what every thread does when (the imports, each "
                             "graph's compile and planner, its LLVM modules per tier on the workers, the link, "
                             "the helpers, each first call's wait for its code, the cache writer, the optimizer), "
                             "printed as medians (first_call_timeline.py)")
    args = parser.parse_args()
    if args.first_call:
        row, mode, artifacts = args.first_call
        print(json.dumps(first_call(row, mode, Path(artifacts), args.timeline)))
        return
    if not args.no_bytecode:
        import compileall

        import neuroncc

        compileall.compile_dir(Path(neuroncc.__file__).parent, quiet=1)
    if args.timeline:
        print_timeline(args.row, args.rounds)
        return
    modes = [mode for mode in MODES if mode in args.modes.split(",") or mode == "cold"]
    order = random.Random(0x5EED)
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as root:
            artifacts = Path(root) / "artifacts.bin"
            rest = [mode for mode in modes if mode != "cold"]
            if args.shuffle:
                order.shuffle(rest)
            for mode in ["cold", *rest]:
                cache = Path(root) / ("prewarmed" if mode == "prewarmed" else "cache")
                runs[mode].append(spawn(args.row, mode, cache, artifacts))
                print(mode, json.dumps(runs[mode][-1]), flush=True)
    floor = statistics.median(r["seconds"] for r in runs["eager"]) if "eager" in runs else 0.0
    rows = []
    for mode in modes:
        seconds = [r["seconds"] for r in runs[mode]]
        median = statistics.median(seconds)
        paired = (statistics.median(r["seconds"] - e["seconds"] for r, e in zip(runs[mode], runs["eager"]))
                  if "eager" in runs else 0.0)  # the same round's eager run: less of the machine's drift
        rows.append([mode, f"{median:.2f}", f"{min(seconds):.2f}", f"{median - floor:+.2f}", f"{paired:+.2f}",
                     f"{statistics.median(r['own'] for r in runs[mode]):.2f}",
                     f"{statistics.median(r['load'] for r in runs[mode]):.2f}",
                     f"{statistics.median(r.get('lookup', 0.0) for r in runs[mode]):.3f}",
                     f"{statistics.median(r.get('key', 0.0) for r in runs[mode]):.3f}",
                     f"{statistics.median(r.get('artifacts', 0.0) for r in runs[mode]):.3f}",
                     f"{statistics.median(r.get('import', 0.0) for r in runs[mode]):.3f}",
                     f"{statistics.median(r.get('shared', 0.0) for r in runs[mode]):.3f}",
                     str(runs[mode][-1].get("compiled", "-")), str(runs[mode][-1].get("aot_runs", "-"))])
    print(f"row {args.row}, {args.rounds} rounds of fresh processes; load {os.getloadavg()[0]:.1f}; "
          f"neuroncc bytecode {'not ' if args.no_bytecode else ''}compiled first")
    print(table(rows, ["mode", "first call s (median)", "min s", "vs eager floor s", "per round vs eager s", "own s", "load s", "lookup s",
                       "key s", "artifacts s", "import s", "shared s", "graphs compiled", "aot runs"]))
    if "eager" in runs:
        print("where the first call goes: each part's seconds minus the same round's eager run's, medians over the "
              "rounds (the parts add up to the first call; see PHASES)")
        print(table(_breakdown_rows(runs, modes), ["mode", "first call", *BREAKDOWN]))


def print_timeline(row: str, rounds: int) -> None:
    """``--timeline``: medians of ``rounds`` cold first calls' timelines."""
    runs = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as root:
            result = spawn(row, "cold", Path(root) / "cache", Path(root) / "artifacts.bin", timeline=True)
        runs.append(result.pop("spans"))
        print("cold", json.dumps(result), flush=True)
    print(f"row {row}, cold first call, timeline of {rounds} fresh processes (medians; seconds from the start of "
          f"the first call's timed imports); load {os.getloadavg()[0]:.1f}")
    print(table(first_call_timeline.timeline_rows(runs), first_call_timeline.TIMELINE_HEADER))


#: The parts of a first call, in the order they happen (import: the backend's, and shared: see the docstring).
BREAKDOWN = ("import", "shared", "dynamo", "guards", "backend", "fw", "bw", "gc", "other")


def _parts(run: dict[str, float]) -> dict[str, float]:
    parts = {name: run.get(name, 0.0) for name in BREAKDOWN[:-1]}
    parts["other"] = run["seconds"] - sum(parts.values())
    return parts


def _breakdown_rows(runs: dict[str, list[dict[str, float]]], modes: list[str]) -> list[list[str]]:
    rows = []
    for mode in modes:
        pairs = list(zip(runs[mode], runs["eager"]))
        gaps = [statistics.median(_parts(r)[name] - _parts(e)[name] for r, e in pairs) for name in BREAKDOWN]
        total = statistics.median(r["seconds"] - e["seconds"] for r, e in pairs)
        if mode == "eager":  # the floor's own parts, medians
            gaps = [statistics.median(_parts(r)[name] for r in runs[mode]) for name in BREAKDOWN]
            total = statistics.median(r["seconds"] for r in runs[mode])
        rows.append([mode, f"{total:+.3f}" if mode != "eager" else f"{total:.3f}",
                     *(f"{g:+.3f}" if mode != "eager" else f"{g:.3f}" for g in gaps)])
    return rows


if __name__ == "__main__":
    main()
