"""Runs the OpInfo sweep over many ops in worker processes, with a hard time limit per op.

Each worker is a fresh interpreter (``spawn``) that imports ``op_db`` once and then runs one op at a time
(every requested mode). The parent kills a worker whose op runs past ``op_timeout_s`` (a hang in C code that
the per-sample alarm cannot interrupt), records the op's unfinished modes as timeouts and starts a new
worker. Workers are also recycled every ``ops_per_worker`` ops to bound memory growth in dynamo's caches.
"""

from __future__ import annotations

import importlib
import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from neuroncc.testing.opinfo import TIMEOUT, ModeResult, SweepConfig
import logging
import warnings


@dataclass(frozen=True)
class Task:
    key: str
    modes: tuple[str, ...]
    known: Mapping[str, str]  # mode -> letters from the previous table (may be empty)


#: What runs one (op, mode) in a worker: the torch.compile sweep's, or the device sweep's (opinfo_device).
COMPILE_SWEEP = "neuroncc.testing.opinfo:run_mode"


def _worker_main(connection: Connection, config: SweepConfig, mode_runner: str = COMPILE_SWEEP) -> None:
    import torch

    from neuroncc.testing.opinfo import op_key, opinfos_for

    module, _, name = mode_runner.partition(":")
    run_mode = getattr(importlib.import_module(module), name)

    warnings.simplefilter("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    ops = {op_key(op): op for op in opinfos_for(getattr(torch, config.dtype or "float32"))}
    connection.send(("ready", None))
    while True:
        message = connection.recv()
        if message is None:
            return
        task: Task = message
        for mode in task.modes:
            result = run_mode(ops[task.key], mode, config, task.known.get(mode))
            connection.send(("result", asdict(result)))
        connection.send(("done", task.key))


@dataclass
class _Worker:
    process: Any
    connection: Connection
    ready: bool = False
    task: Task | None = None
    started: float = 0.0
    finished_modes: tuple[str, ...] = ()
    ops_run: int = 0


def run_ops(tasks: Sequence[Task], config: SweepConfig, *, jobs: int = 1, op_timeout_s: float = 900.0,
            ops_per_worker: int = 40, on_result: Callable[[ModeResult], None] = lambda r: None,
            mode_runner: str = COMPILE_SWEEP) -> list[ModeResult]:
    """Run every task in ``jobs`` worker processes; returns the results in completion order.
    ``mode_runner`` (``module:function``) runs one (op, mode) in a worker."""
    context = multiprocessing.get_context("spawn")
    pending = list(reversed(tasks))
    results: list[ModeResult] = []
    workers: list[_Worker] = []

    def start_worker() -> _Worker:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_worker_main, args=(child_end, config, mode_runner), daemon=True)
        process.start()
        child_end.close()
        return _Worker(process, parent_end)

    def deliver(result: ModeResult) -> None:
        results.append(result)
        on_result(result)

    def assign(worker: _Worker) -> None:
        worker.task = pending.pop() if pending else None
        worker.finished_modes = ()
        worker.started = time.monotonic()
        worker.connection.send(worker.task)

    def retire(worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        workers.remove(worker)

    for _ in range(min(jobs, len(tasks))):
        workers.append(start_worker())
    while workers:
        for worker in list(workers):  # kill workers stuck on one op
            if worker.task and time.monotonic() - worker.started > op_timeout_s:
                for mode in worker.task.modes:
                    if mode not in worker.finished_modes:
                        deliver(ModeResult(worker.task.key, mode, TIMEOUT, f"op ran past {op_timeout_s:g}s",
                                           op_timeout_s))
                retire(worker)
                if pending:
                    workers.append(start_worker())
        ready = wait([w.connection for w in workers], timeout=5.0)
        for worker in [w for w in workers if w.connection in ready]:
            try:
                kind, payload = worker.connection.recv()
            except EOFError:  # the worker died (segfault, OOM kill): its op's unfinished modes crash
                if worker.task:
                    for mode in worker.task.modes:
                        if mode not in worker.finished_modes:
                            deliver(ModeResult(worker.task.key, mode, "C", "worker process died", 0.0))
                retire(worker)
                if pending:
                    workers.append(start_worker())
                continue
            if kind == "result":
                result = ModeResult(**payload)
                worker.finished_modes += (result.mode,)
                deliver(result)
                continue
            if kind == "done":
                worker.ops_run += 1
            if not pending or (kind == "done" and worker.ops_run >= ops_per_worker):
                worker.connection.send(None)
                retire(worker)
                if pending:
                    workers.append(start_worker())
                continue
            assign(worker)
    return results
