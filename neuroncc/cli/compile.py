"""``neuroncc compile MODEL.pt2``: compile an exported program through the compile cache.

    neuroncc compile model.pt2                      the inference graph, for the default target
    neuroncc compile model.pt2 --train              the forward and the backward graph (AOTAutograd joint export)
    neuroncc compile model.pt2 --target nki-sim -o build/
                                                    ... and copy each graph's artifact into build/<graph>/
    neuroncc compile model.pt2 --json               the same facts as one JSON object on stdout
    neuroncc compile models/ a.pt2 b.pt2 --jobs 4   precompile many programs (a directory: every .pt2 in it)
                                                    in 4 worker processes into the (local + remote) cache,
                                                    with a progress bar; exit 2 if any failed

For each graph it prints the cache key, whether the cache had it (a hit loads the stored artifact; a miss
compiles and stores it), the time taken and a kernel summary: kernels, extern matmuls, each kernel's ops.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from neuroncc.cli import cpu_option, precompile, programs
from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.progress import Progress, format_seconds
from neuroncc.cli.summary import summarize

EXIT_OK = 0


def run_compile(args: argparse.Namespace) -> int:
    if args.output:
        programs.check_output_directory(args.output)
    if len(args.models) > 1 or args.jobs is not None or Path(args.models[0]).is_dir():
        return precompile.run_precompile(args, compile_in_worker)
    args.model = args.models[0]
    progress = programs.progress_for(args)
    started = time.perf_counter()
    with programs.one_line_warnings():
        compiled, copies, cache = compile_model(args, progress)
    total = time.perf_counter() - started
    if args.json:
        print(json.dumps(compile_report(args, compiled, copies, cache, total), indent=2))
    else:
        print_report(args, compiled, copies, cache, total)
    return EXIT_OK


def compile_model(args: argparse.Namespace, progress) -> tuple[list[programs.CompiledFunction], list[Path], object]:
    """Compile ``args.model`` (its inference graph, or forward + backward with ``--train``) through the cache;
    copy the artifacts to ``--output``. Returns (compiled graphs, copies, the cache)."""
    program = programs.load_model(args, progress)
    cache = programs.open_cache(args)
    if args.train:
        _graphs, compiled = programs.training_graphs(args, program, cache=cache, progress=progress)
    else:
        graph = programs.inference_graph(args, program, progress)
        compiled = [programs.compile_function(graph.imported.function, "inference", target=args.target,
                                              pipeline=args.pipeline, cache=cache, progress=progress)]
    copies = []
    if args.output:
        directory = programs.ensure_output_directory(args.output)
        copies = [programs.copy_artifact(c, directory) for c in compiled]
    return compiled, copies, cache


def compile_in_worker(task: precompile.Task) -> dict[str, object]:
    """One program of ``neuroncc compile ... --jobs N``, in its worker process: the ``--json`` report."""
    args = argparse.Namespace(model=task.model, quiet=True, **task.options)
    started = time.perf_counter()
    compiled, copies, cache = compile_model(args, Progress(enabled=False))
    return compile_report(args, compiled, copies, cache, time.perf_counter() - started)


def compile_report(args: argparse.Namespace, compiled: list[programs.CompiledFunction], copies: list[Path],
                   cache, total: float) -> dict[str, object]:
    """What ``--json`` prints (``neuroncc demo`` reads it from a fresh process)."""
    return {
        "model": args.model,
        "target": args.target,
        "cpu": cpu_option.target_cpu_name() if args.target == "cpu" else None,
        "mode": "train" if args.train else "inference",
        "cache_dir": str(cache.root) if cache is not None else None,
        "seconds": total,
        "compiles": sum(c.cache == "compiled" or c.cache == "uncached" for c in compiled),
        "cache_hits": sum(c.cache == "hit" for c in compiled),
        "graphs": [
            {"kind": c.kind, "name": c.function.name, "key": c.key, "cache": c.cache, "seconds": c.seconds,
             "artifact": str(copy) if copy else (str(c.artifact) if c.artifact else None),
             "summary": summarize(c.ran_function).to_json()}
            for c, copy in zip(compiled, copies or [None] * len(compiled))
        ],
    }


def print_report(args: argparse.Namespace, compiled: list[programs.CompiledFunction], copies: list[Path],
                 cache, total: float) -> None:
    mode = "forward + backward (--train)" if args.train else "inference"
    print(f"{args.model}: {mode}, target {args.target}, {format_seconds(total)} in all")
    if args.target == "cpu":
        print(f"  cpu      code for {cpu_option.cpu_line()}")
    for index, c in enumerate(compiled):
        print(f"  {c.kind} @{c.function.name}")
        print(f"    key      {c.key or '- (compiled without the cache)'}")
        print(f"    cache    {_cache_line(c, cache)}")
        summary = summarize(c.ran_function).lines(limit=12)
        print(f"    kernels  {summary[0]}")
        for line in summary[1:]:
            print(f"           {line}")
        if copies:
            print(f"    output   {copies[index]}")


def _cache_line(c: programs.CompiledFunction, cache) -> str:
    if c.cache == "hit":
        return f"hit: loaded the stored artifact in {format_seconds(c.seconds)} ({c.artifact})"
    if c.cache == "compiled":
        return f"miss: compiled in {format_seconds(c.seconds)}, stored in {c.artifact or cache.root}"
    reason = "cache disabled" if cache is None else f"target {c.target} keeps no artifact"
    return f"not cached ({reason}): compiled in {format_seconds(c.seconds)}"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = programs.add_command(
        subparsers, "compile", __doc__,
        help=COMMANDS["compile"].help,
        description="Compile a torch.export program: decompose, import to neuroncc IR, run the target's pass "
                    "pipeline and code generator, through the compile cache. Prints each graph's cache key, "
                    "hit or miss, and its kernels.",
        exit_codes="0 ok, 2 bad input or a graph neuroncc cannot compile (one line on stderr), 3 internal error")
    programs.add_model_arguments(parser, several=True)
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="copy each compiled graph's artifact (manifest, IR, code) to DIR/<graph name>/ "
                             "(several programs: DIR/<program file name>/<graph name>/)")
    parser.add_argument("-j", "--jobs", type=int, metavar="N", default=None,
                        help="compile several programs in N worker processes (default: the CPU count)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run_compile)
