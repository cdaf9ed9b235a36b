"""``neuroncc compile A.pt2 B.pt2 models/ --jobs N``: precompile many programs in parallel worker processes.

What ``neuron_parallel_compile`` does for Neuron: fill the compile cache (local, and the remote tier when
``$NEURONCC_REMOTE_CACHE`` is set) ahead of a training run, so that every rank and machine starts warm.

Each program is compiled in its own process, forked from a warm server (``forkserver``, with torch and the
front end imported once), at most N at a time. A process per program isolates programs from each other: one
that fails (bad input, a graph neuroncc cannot compile, a crash of the process) is reported with its reason and
the others go on. Programs that share graphs compile each graph once (the cache's per-key locks). The parent
only schedules and reports: it never imports torch.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuroncc.cli.progress import ProgressBar, format_seconds
from neuroncc.driver.cache import CompileCache
from neuroncc.errors import InputError, NeuronccError

EXIT_OK, EXIT_FAILED = 0, 2
#: Modules every worker needs, imported once in the fork server instead of once per worker.
PRELOAD = ["torch", "neuroncc.frontend.exported", "neuroncc.cli.compile"]
_TICK_S = 0.2

#: ``work(task) -> report``: compiles one program in a worker (``neuroncc.cli.compile.compile_in_worker``).
Work = Callable[["Task"], dict[str, Any]]


@dataclass(frozen=True)
class Task:
    """One program to compile, with everything the worker needs (the fork server does not share the parent's
    later environment, so the NEURONCC_* variables travel with the task)."""

    model: str
    options: dict[str, Any]  # the command's flags, with a per-program output directory
    environ: dict[str, str] = field(default_factory=dict)


def find_programs(paths: list[str]) -> list[Path]:
    """The .pt2 files named, directories expanded to the .pt2 files below them (sorted); each file once."""
    found: dict[Path, Path] = {}
    for text in paths:
        path = Path(text)
        if path.is_dir():
            below = sorted(p for p in path.rglob("*.pt2") if p.is_file())
            if not below:
                raise InputError(f"{text}: is a directory with no .pt2 files in it")
        elif not path.exists():
            raise InputError(f"{text}: no such file")
        else:
            below = [path]
        for program in below:
            found.setdefault(program.resolve(), program)
    return list(found.values())


def _output_names(models: list[Path]) -> list[str]:
    """A distinct directory name per program under ``--output`` (the file stem, numbered when stems repeat)."""
    names, seen = [], {}
    for model in models:
        stem = model.stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names


def _worker(work: Work, task: Task, connection: multiprocessing.connection.Connection) -> None:
    """A worker process: compile one program, send back its report (or the error, one line)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    for name in [n for n in os.environ if n.startswith("NEURONCC_")]:
        del os.environ[name]
    os.environ.update(task.environ)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            report = {"ok": True, **work(task)}
        except NeuronccError as exc:
            report = {"ok": False, "error": "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())}
        except Exception as exc:  # a bug: say which program, keep the others going
            report = {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()}
    report["warnings"] = [" ".join(str(w.message).split()) for w in caught]
    connection.send(report)
    connection.close()


@dataclass
class _Running:
    index: int
    process: multiprocessing.process.BaseProcess
    connection: multiprocessing.connection.Connection
    started: float


def run_jobs(tasks: list[Task], work: Work, jobs: int, bar: ProgressBar,
             describe: Callable[[Task, dict[str, Any]], str]) -> list[dict[str, Any]]:
    """Run ``work`` for every task in at most ``jobs`` processes at once; the reports in task order."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    reports: list[dict[str, Any] | None] = [None] * len(tasks)
    pending = list(range(len(tasks)))
    running: dict[Any, _Running] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                index = pending.pop(0)
                receive, send = context.Pipe(duplex=False)
                process = context.Process(target=_worker, args=(work, tasks[index], send),
                                          name=f"neuroncc-compile-{index}")
                process.start()
                send.close()
                running[receive] = _Running(index, process, receive, time.perf_counter())
                bar.start(tasks[index].model)
            for connection in multiprocessing.connection.wait(list(running), timeout=_TICK_S):
                job = running.pop(connection)
                try:
                    report = connection.recv()
                except EOFError:  # the process died without a word (a crash, a kill)
                    job.process.join()
                    report = {"ok": False, "error": f"the compile process died ({_exit_reason(job.process)})",
                              "warnings": []}
                connection.close()
                job.process.join()
                report.update(model=tasks[job.index].model, seconds=time.perf_counter() - job.started)
                reports[job.index] = report
                bar.finish(tasks[job.index].model, describe(tasks[job.index], report))
            bar.tick()
    finally:
        for job in running.values():  # interrupted: stop what is still running
            job.process.kill()
            job.process.join()
        bar.close()
    return [r for r in reports if r is not None]


def _exit_reason(process: multiprocessing.process.BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _describe(task: Task, report: dict[str, Any]) -> str:
    if not report["ok"]:
        return f"FAILED {task.model}: {report['error']}"
    graphs = report["graphs"]
    compiled = sum(g["cache"] != "hit" for g in graphs)
    return (f"{task.model}: {len(graphs)} graph{'s' if len(graphs) != 1 else ''} "
            f"({compiled} compiled, {len(graphs) - compiled} cache hit{'s' if len(graphs) - compiled != 1 else ''})"
            f"  {format_seconds(report['seconds'])}")


def run_precompile(args: argparse.Namespace, work: Work) -> int:
    """``neuroncc compile`` with several programs or ``--jobs``: compile each in a worker process."""
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {args.jobs}")
    models = find_programs(args.models)
    jobs = min(args.jobs or os.cpu_count() or 1, len(models))
    environ = {k: v for k, v in os.environ.items() if k.startswith("NEURONCC_")}
    cache_dir = None if args.no_cache else Path(args.cache_dir).expanduser() if args.cache_dir else \
        CompileCache.directory_from_environ(os.environ)
    tasks = []
    for model, name in zip(models, _output_names(models)):
        options = {"program": args.program, "target": args.target, "train": args.train, "pipeline": args.pipeline,
                   "cache_dir": str(cache_dir) if cache_dir else None, "no_cache": args.no_cache,
                   "output": str(Path(args.output) / name) if args.output else None}
        tasks.append(Task(str(model), options, environ))
    bar = ProgressBar(len(tasks), enabled=not args.quiet)
    started = time.perf_counter()
    reports = run_jobs(tasks, work, jobs, bar, _describe)
    total = time.perf_counter() - started
    failed = [r for r in reports if not r["ok"]]
    graphs = [g for r in reports if r["ok"] for g in r["graphs"]]
    summary = {"programs": len(reports), "failed": len(failed), "graphs": len(graphs),
               "compiles": sum(g["cache"] != "hit" for g in graphs), "cache_hits": sum(g["cache"] == "hit"
                                                                                      for g in graphs),
               "jobs": jobs, "seconds": total, "cache_dir": str(cache_dir) if cache_dir else None}
    if args.json:
        print(json.dumps({**summary, "results": reports}, indent=2))
    else:
        for report in reports:
            for warning in report.get("warnings", []):
                print(f"neuroncc: warning: {report['model']}: {warning}", file=sys.stderr)
        print(f"{summary['programs']} programs, {summary['graphs']} graphs: {summary['compiles']} compiled, "
              f"{summary['cache_hits']} cache hits, {summary['failed']} failed; {format_seconds(total)} with "
              f"{jobs} job{'s' if jobs != 1 else ''}" + (f", cache {cache_dir}" if cache_dir else ""))
        for report in failed:
            print(f"  FAILED {report['model']}: {report['error']}")
    return EXIT_FAILED if failed else EXIT_OK
