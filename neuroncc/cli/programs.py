"""What ``neuroncc compile/run/inspect`` share: the common flags, loading a .pt2, compiling through the cache.

    load_model(args, progress)            the .pt2, loaded without unpickling
    inference_graph(args, program, ...)   decomposed and imported to IR
    served_inference(args, program, ...)  that graph compiled through the cache and served as
                                          neuroncc.compile_program serves it (how ``run`` calls a program);
                                          a program cache hit neither decomposes nor imports it
    training_graphs(args, program, ...)   forward + backward through AOTAutograd's joint export
    compile_function(fn, kind, ...)       one IR function through driver.compile_graph and the cache,
                                          reporting its key and whether it was a hit

Environment variables (``NEURONCC_CACHE_DIR``, ``NEURONCC_DISABLE_CACHE``, ``NEURONCC_REMOTE_CACHE*``) are read
here, at the boundary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from neuroncc.cli.cpu_option import add_cpu_argument
from neuroncc.cli.progress import Progress
from neuroncc.errors import InputError
from neuroncc.ir import Function
from neuroncc.driver.cache import cache_from_environ
from neuroncc.driver.compile import DEFAULT_TARGET, compile_graph, make_request
from neuroncc.driver.remote import remote_tier_from_environ
from neuroncc.executors.executable import TARGETS
from neuroncc.executors.interpreter_executable import InterpreterExecutable
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import PROCESS_MEMORY, CacheStats
from neuroncc.driver.artifact import write_graph
from neuroncc.driver.records import CompileRecord

TARGET_HELP = ("where the code runs: cpu (LLVM, native code), nki-sim (NKI kernels in the bundled simulator), "
               "interp (the reference interpreter); default: {default}")


def add_model_arguments(parser: argparse.ArgumentParser, *, train: bool = True, several: bool = False) -> None:
    """MODEL.pt2 (``several``: one or more, into ``args.models``) and the flags every model command takes."""

    if several:
        parser.add_argument("models", nargs="+", metavar="MODEL.pt2",
                            help="programs saved with torch.export.save, or directories of them")
    else:
        parser.add_argument("model", metavar="MODEL.pt2", help="a program saved with torch.export.save")
    parser.add_argument("--program", metavar="NAME", default=None,
                        help="which program of an archive holding several (default: its only one)")
    parser.add_argument("--target", choices=sorted(TARGETS), default=DEFAULT_TARGET,
                        help=TARGET_HELP.format(default=DEFAULT_TARGET))
    if train:
        parser.add_argument("--train", action="store_true",
                            help="compile the forward and the backward graph (AOTAutograd joint export, "
                                 "min-cut partition) instead of the inference graph")
    parser.add_argument("--pipeline", metavar="P", default=None,
                        help="a pass pipeline overriding the target's default (see neuroncc opt --help)")
    parser.add_argument("--cache-dir", metavar="DIR", default=None,
                        help="the compile cache (default: $NEURONCC_CACHE_DIR or ~/.cache/neuroncc)")
    parser.add_argument("--no-cache", action="store_true", help="compile without reading or writing the cache")
    add_cpu_argument(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")


def help_epilog(module_doc: str, exit_codes: str) -> str:
    """A command's ``--help`` epilog: its module docstring after the first paragraph (examples and details),
    without reST markup, then its exit codes."""
    return module_doc.split("\n\n", 1)[1].replace("``", "").rstrip() + f"\n\nExit codes: {exit_codes}."


def add_command(subparsers: argparse._SubParsersAction, name: str, module_doc: str, *, help: str,
                description: str, exit_codes: str) -> argparse.ArgumentParser:
    """The parser of the command ``name``, whose ``--help`` ends with :func:`help_epilog`."""
    return subparsers.add_parser(name, help=help, description=description,
                                 epilog=help_epilog(module_doc, exit_codes),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def progress_for(args: argparse.Namespace) -> Progress:
    return Progress(enabled=not getattr(args, "quiet", False))


def open_cache(args: argparse.Namespace):
    """The cache the flags and environment ask for (a CompileCache with its own counters), or None."""

    if getattr(args, "no_cache", False):
        return None
    if getattr(args, "cache_dir", None):
        return CompileCache(Path(args.cache_dir).expanduser(), stats=CacheStats(), memory=PROCESS_MEMORY,
                            remote=remote_tier_from_environ(os.environ))
    return cache_from_environ(os.environ, stats=CacheStats())


def graph_name(model_path: str) -> str:
    """An IR function name from the model's file name: ``my-model.pt2`` -> ``my_model``."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(model_path).stem) or "model"
    return stem if not stem[0].isdigit() else f"m_{stem}"


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Warnings raised while a command runs print as one ``neuroncc: warning:`` line each."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        print(f"neuroncc: warning: {text}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def load_model(args: argparse.Namespace, progress: Progress):
    """The .pt2 named by ``args.model`` (an InputError names what is wrong with it)."""
    check_readable_file(args.model, "a .pt2 file from torch.export.save")
    from neuroncc.frontend.exported import load_program  # imports torch: a second or more

    with progress.step(f"load {args.model}"):
        return load_program(args.model, getattr(args, "program", None))


def check_readable_file(path: str, expected: str) -> None:
    """The cheap checks, made before torch is imported, so a mistyped path is answered at once."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: no such file")
    if file.is_dir():
        raise InputError(f"{path}: is a directory, expected {expected}")
    if not file.is_file():  # a FIFO or a device: opening it could block or never end
        raise InputError(f"{path}: not a regular file, expected {expected}")
    try:
        with open(file, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def inference_graph(args: argparse.Namespace, program, progress: Progress):
    from neuroncc.frontend.exported import import_inference

    with progress.step("decompose and import to IR") as step:
        graph = import_inference(program, graph_name(args.model), args.target)
        step.detail = f"{len(graph.imported.function.ops)} ops"
    return graph


def served_inference(args: argparse.Namespace, program, progress: Progress):
    """``program``'s inference graph compiled through the cache (:func:`compile_function`) and served as
    ``neuroncc.compile_program`` serves it: a :class:`~neuroncc.frontend.serving.CompiledProgram` holding the
    program's state, called with the program's own signature (one guard and a data-pointer call per call). The
    one way the CLI runs an exported program. Returns (the served program, how it was compiled)."""
    import neuroncc.frontend.program_cache as program_cache  # imports torch
    from neuroncc.frontend.serving import CompiledProgram

    cache = open_cache(args)
    with progress.step("look up the program in the compile cache") as step:
        start = time.perf_counter()
        key = program_cache.key_for(program, graph_name(args.model), args.target, args.pipeline, None, cache)
        hit = program_cache.lookup(cache, key, program, args.target) if key is not None else None
        step.detail = "hit" if hit is not None else "miss" if key is not None else "not cached"
    if hit is not None:  # nothing decomposed, imported or compiled
        executable = hit.executable
        compiled = CompiledFunction("inference", executable.function, executable, args.target, hit.artifact, "hit",
                                    time.perf_counter() - start, cache.entry_dir(hit.artifact))
        return CompiledProgram(hit.graph, executable, program_hit=hit.artifact), compiled
    graph = inference_graph(args, program, progress)
    compiled = compile_function(graph.imported.function, "inference", target=args.target, pipeline=args.pipeline,
                                cache=cache, progress=progress)
    if key is not None and compiled.key is not None:
        program_cache.store(cache, key, program, graph, compiled.key, args.target)
    return CompiledProgram(graph, compiled.executable, compiled.record), compiled


@dataclass(frozen=True)
class CompiledFunction:
    """One compiled graph and how it was obtained."""

    kind: str  # inference | forward | backward
    function: Function  # the imported IR (before the pipeline)
    executable: object
    target: str
    key: str | None  # the cache key (None: compiled without the cache)
    cache: str  # "hit", "compiled" (a miss, now stored) or "uncached"
    seconds: float
    artifact: Path | None  # the cache entry holding it
    record: CompileRecord | None = None  # what compile_graph reported (None: it reported nothing)

    @property
    def ran_function(self) -> Function:
        """The form the executable runs (after the pipeline), for kernel summaries."""
        return getattr(self.executable, "function", None) or self.function


def compile_function(fn: Function, kind: str, *, target: str, pipeline: str | None, cache,
                     progress: Progress) -> CompiledFunction:
    """Compile ``fn`` through the compile cache (``cache`` None: uncached) and say what happened."""

    key = cache.key_of(make_request(fn, target=target, pipeline=pipeline)).key if cache is not None else None
    before = cache.stats.snapshot() if cache is not None else {}
    with progress.step(f"compile {kind} for {target}", log=True) as step:
        start = time.perf_counter()
        records: list[CompileRecord] = []
        try:
            executable = compile_graph(fn, target=target, pipeline=pipeline, cache=cache, on_compiled=records.append,
                                       on_progress=lambda status: setattr(step, "status", status))
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("neuroncc"):
                raise
            raise InputError(f"target '{target}' is not available in this build ({exc.name} is missing)") from None
        seconds = time.perf_counter() - start
        status = _cache_status(cache, before)
        step.detail = {"hit": "cache hit", "compiled": "compiled, cached", "uncached": "not cached"}[status]
    artifact = cache.entry_dir(key) if cache is not None and key and cache.entry_dir(key).is_dir() else None
    return CompiledFunction(kind, fn, executable, target, key if status != "uncached" else None, status, seconds,
                            artifact, records[0] if records else None)


def _cache_status(cache, before: dict[str, float]) -> str:
    if cache is None:
        return "uncached"
    after = cache.stats.snapshot()
    if after["hits"] > before.get("hits", 0):
        return "hit"
    if after["uncached"] > before.get("uncached", 0) or after["publish_failures"] > before.get("publish_failures", 0):
        return "uncached"
    return "compiled"


def training_graphs(args: argparse.Namespace, program, *, cache, progress: Progress,
                    compile_graphs: bool = True):
    """Forward and backward graphs of ``program``; compiled through the cache unless ``compile_graphs`` is
    False (then they run on the reference interpreter, for ``inspect``). Returns (TrainingGraphs, compiled)."""
    from neuroncc.frontend.exported import trace_training

    compiled: list[CompiledFunction] = []

    def compile_imported(kind: str, imported):
        if not compile_graphs:
            return InterpreterExecutable(imported.function)
        result = compile_function(imported.function, kind, target=args.target, pipeline=args.pipeline,
                                  cache=cache, progress=progress)
        compiled.append(result)
        return result.executable

    with progress.step("joint export (forward + backward) and import to IR") as step:
        graphs = trace_training(program, graph_name(args.model), compile_imported, args.target)
        step.detail = f"{len(graphs.forward.function.ops)} + {len(graphs.backward.function.ops)} ops"
    return graphs, compiled


def copy_artifact(compiled: CompiledFunction, directory: Path) -> Path:
    """Copy ``compiled``'s cache entry to ``directory/<graph name>``; without one, write its IR there."""

    destination = directory / compiled.function.name
    if destination.exists():
        shutil.rmtree(destination)
    if compiled.artifact is not None:
        shutil.copytree(compiled.artifact, destination)
    else:
        destination.mkdir(parents=True)
        write_graph(compiled.ran_function, destination)
    return destination


def check_output_directory(path: str) -> Path:
    """Refuse an output path that cannot be a directory, before any work is done: an existing non-directory,
    or a path below a file or in a directory this process may not write (its nearest existing ancestor)."""
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{path}: exists and is not a directory")
    ancestor = directory.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{path}: cannot create the output directory ('{ancestor}' is not a directory)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{path}: cannot create the output directory ('{ancestor}' is not writable)")
    return directory


def check_output_file(path: str) -> None:
    """Refuse an output file path whose directory does not exist or that names a directory, or that this process
    may not write, before any work."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise InputError(f"{path}: is a directory, expected a file name to write")
    if not file.parent.is_dir():
        raise InputError(f"{path}: no such directory '{file.parent}'")
    if not os.access(file if file.exists() else file.parent, os.W_OK):
        raise InputError(f"{path}: cannot write it (permission denied)")


def write_json(path: str, document: object) -> None:
    """Write ``document`` as JSON to ``path`` (checked beforehand with :func:`check_output_file`)."""
    try:
        Path(path).expanduser().write_text(json.dumps(document) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot write it ({exc.strerror or exc})") from None


def ensure_output_directory(path: str) -> Path:
    directory = check_output_directory(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{path}: cannot create the output directory ({exc.strerror or exc})") from None
    return directory
