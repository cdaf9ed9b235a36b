"""Running generated phases on several threads.

Generated phase functions take ``(args, start, end)``. Two runners split [0, n) across threads:

- :class:`OpenMPTeam` (the default, option ``threading="openmp"``): the OpenMP runtime that ATen itself uses
  (the ``libgomp`` bundled with torch, found without importing torch). ``GOMP_parallel`` runs the process's
  team entry (``neuroncc_team``, compiled once: codegen/llvm/entries.py, or from an artifact: helpers.py), which calls the phase, on ATen's own
  thread team, so neuroncc kernels and ATen matmuls share one set of
  threads instead of oversubscribing the cores, and waking the team costs about a microsecond. Measured on a
  quiet machine (2 threads, kernels interleaved with eager calls as in a model): softmax [4096, 1024] 1.09 ms
  vs 2.22 ms with the pool, whose second thread competes with ATen's OpenMP workers still spinning after the
  previous ATen call.
- :class:`ThreadPool` (option ``threading="python"``, and the fallback without libgomp): persistent Python
  threads woken by a lock handoff; ctypes releases the GIL for the call, so they run truly in parallel. On an
  overloaded machine OpenMP's spinning barriers make the team far slower than the pool (measured: 4M-element
  erf, 2 threads, load 10 on 2 cores: 17.7 ms vs 3.9 ms; ATen itself: 21 ms).

Both take chunks from a shared counter, so one descheduled thread delays one chunk, not half of the loop;
small loops run on the calling thread alone.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any
from pathlib import Path

from neuroncc.codegen.llvm.team_entry import TEAM_ENTRY, team_entry_ir
from neuroncc.executors.cpu.helpers import TEAM, helper_module
from neuroncc.hardware.host import available_cores
from neuroncc.codegen.llvm.fork_safety import in_child, renew_in_child

#: Below this much work a phase runs on one thread. Work is elements touched, times 8 for a phase that computes
#: a transcendental function (``codegen/llvm/launch_cost.py``). Waking a pool worker costs 40-50 us on this
#: 2-core host (the worker needs the GIL before its ctypes call releases it again): exp+add over 8K..1M f32
#: elements, load ~4, 1 vs 2 threads: 9 vs 51 us (8K), 32 vs 79 us (64K), 106 vs 159 us (256K), 528 vs 590
#: us (1M). At 32K elements (the former bound) the demo classifier's layer norms ran 4x slower on 2 threads.
#: (256K transcendental elements, as before the weighting; plain phases from 2M elements.)
PARALLEL_MIN_WORK = 1 << 21
#: The OpenMP team wakes in about a microsecond, so it splits loops from this much work on: 32K elements of a
#: transcendental phase (GELU's gradient over [512, 128]: 455 vs 219 us on 1 vs 2 threads), 256K of a plain
#: one (a layer norm over [512, 64], 131K: 94 vs 111 us).
TEAM_MIN_WORK = 1 << 18


def default_threads() -> int:
    """torch's intra-op thread count when torch is loaded (so neuroncc and ATen agree), else the CPU count."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(int(torch.get_num_threads()), 1)
    return available_cores()


#: Chunks per thread: threads take chunks from a shared counter, so one descheduled thread (a busy or
#: oversubscribed machine) delays at most one chunk instead of half of the loop.
CHUNKS_PER_THREAD = 4
#: A guided schedule's take (``OpenMPTeam.split``): the items left over this many times the team's size.
GUIDED_SPREAD = 2


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True, name="neuroncc-worker")
        self.wake = threading.Lock()
        self.wake.acquire()
        self.finished = threading.Lock()
        self.finished.acquire()
        self.task: Callable[[], None] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        while True:
            self.wake.acquire()
            try:
                self.task()  # type: ignore[misc]
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                self.error = exc
            self.finished.release()


class ThreadPool:
    """``threads - 1`` persistent workers plus the calling thread."""

    def __init__(self, threads: int):
        self.threads = max(threads, 1)
        self._workers: list[_Worker] = []
        self._lock = renew_in_child(threading.Lock())

    def forget_workers(self) -> None:
        """In a forked child: the workers were the parent's threads (the child has none of them; waking one would
        wait forever), so the next region starts new ones."""
        self._workers = []

    def _ensure_workers(self) -> None:
        while len(self._workers) < self.threads - 1:
            worker = _Worker()
            worker.start()
            self._workers.append(worker)

    def runs_inline(self, n: int, work_per_item: int = 1) -> bool:
        """Whether :meth:`parallel_for` runs this loop on the calling thread in one piece."""
        return self.threads <= 1 or n < 2 or n * max(work_per_item, 1) < PARALLEL_MIN_WORK

    def parallel_for(self, fn: Callable[[int, int, int], None], args: int, n: int, work_per_item: int = 1) -> None:
        """Run fn(args, start, end) over [0, n), split across threads when the work is big enough."""
        total = n * max(work_per_item, 1)
        if self.runs_inline(n, work_per_item):
            if n > 0:
                fn(args, 0, n)
            return
        chunks = min(n, self.threads * CHUNKS_PER_THREAD, max(total // (PARALLEL_MIN_WORK // 2), 2))
        bounds = [n * i // chunks for i in range(chunks + 1)]
        counter = itertools.count()  # next() is atomic under the GIL

        def drain() -> None:
            while (i := next(counter)) < chunks:
                fn(args, bounds[i], bounds[i + 1])

        with self._lock:  # one parallel region at a time per pool
            self._ensure_workers()
            busy = self._workers[: min(self.threads, chunks) - 1]
            for worker in busy:
                worker.task = drain
                worker.error = None
                worker.wake.release()
            drain()
            for worker in busy:
                worker.finished.acquire()
            for worker in busy:
                if worker.error is not None:
                    raise worker.error


_POOLS: dict[int, ThreadPool] = {}
in_child(lambda: [pool.forget_workers() for pool in _POOLS.values()])


def get_pool(threads: int) -> ThreadPool:
    """The process-wide pool with ``threads`` threads (pools are shared by all executables)."""
    pool = _POOLS.get(threads)
    if pool is None:
        pool = _POOLS.setdefault(threads, ThreadPool(threads))
    return pool


def find_libgomp() -> str | None:
    """Path of the libgomp shipped with torch (without importing torch), or None."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    matches = sorted((Path(list(spec.submodule_search_locations)[0]) / "lib").glob("libgomp*.so*"))
    return str(matches[0]) if matches else None


def _team_module() -> Any:
    """The team entry's code: one small LLVM module per process, compiled on first use or taken from a loaded
    artifact (helpers.py), kept mapped for the process."""
    return helper_module(TEAM, team_entry_ir)


@functools.cache
def team_entry() -> int:
    """The address of the team entry (``neuroncc_team``, see codegen/llvm/entries.py), looked up once."""
    return _team_module().address(TEAM_ENTRY)


class OpenMPTeam:
    """Runs a phase on ATen's OpenMP team through the team entry and ``GOMP_parallel`` (see the module
    docstring)."""

    def __init__(self, library: str, threads: int):
        self.threads = max(threads, 1)
        self._gomp_parallel = ctypes.CDLL(library).GOMP_parallel  # CDLL calls release the GIL
        self._gomp_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self._gomp_parallel.restype = None
        #: ``GOMP_parallel``'s address: a native launch sequence calls it straight (native_sequence.py's TEAM)
        self.gomp_parallel_address = ctypes.cast(self._gomp_parallel, ctypes.c_void_p).value

    def runs_inline(self, n: int, work_per_item: int = 1) -> bool:
        """Whether :meth:`run` runs this loop on the calling thread in one piece."""
        return self.threads <= 1 or n < 2 or n * max(work_per_item, 1) < TEAM_MIN_WORK

    def run(self, fn: Callable[[int, int, int], None], fn_address: int, args: int, start: int, end: int,
            work_per_item: int = 1, guided_chunks: int = 0) -> None:
        """Run fn(args, lo, hi) over [start, end): on the team when big enough, else on this thread.
        ``fn_address``: the address of ``fn``'s code (the team entry calls it); ``guided_chunks``: see
        :meth:`split`."""
        n = end - start
        if self.runs_inline(n, work_per_item):
            if n > 0:
                fn(args, start, end)
            return
        chunk, threads, spread = self.split(n, work_per_item, guided_chunks)
        task = (ctypes.c_int64 * 7)(fn_address, args, start, end, chunk, 0, spread)  # team_entry.TEAM_TASK_FIELDS
        self._gomp_parallel(team_entry(), ctypes.addressof(task), threads, 0)

    def split(self, n: int, work_per_item: int = 1, guided_chunks: int = 0) -> tuple[int, int, int]:
        """``(chunk, threads, spread)``: the chunk length, the team size and the team entry's ``spread``
        (``team_entry.team_entry_ir``) of a loop of ``n`` items that does not run inline. ``guided_chunks`` 0:
        :data:`CHUNKS_PER_THREAD` chunks per thread of one length (spread 0); G > 0: a guided schedule, each take
        the items left over twice the team's size (:data:`GUIDED_SPREAD`), at least ``n / (threads * G)``. No
        chunk below half of :data:`TEAM_MIN_WORK`."""
        total = n * max(work_per_item, 1)
        per_thread = guided_chunks or CHUNKS_PER_THREAD
        chunks = min(n, self.threads * per_thread, max(total // (TEAM_MIN_WORK // 2), 2))
        threads = min(self.threads, chunks)
        return -(-n // chunks), threads, GUIDED_SPREAD * threads if guided_chunks else 0


_TEAMS: dict[int, OpenMPTeam | None] = {}


def get_team(threads: int) -> OpenMPTeam | None:
    """The OpenMP team runner for ``threads`` threads, or None when libgomp is unavailable."""
    if threads not in _TEAMS:
        library = find_libgomp()
        try:
            _TEAMS[threads] = OpenMPTeam(library, threads) if library else None
        except (OSError, AttributeError):
            _TEAMS[threads] = None
    return _TEAMS[threads]
