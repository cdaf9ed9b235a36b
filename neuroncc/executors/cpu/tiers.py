"""Quick code first, optimized code in the background: the cpu target's answer to a caller that waits.

The eager ``neuron`` device compiles each op signature on its first call, and that call waits for the compile;
most of a one-op compile is LLVM's O3 pipeline and O3 code generation. A build asked for with the option
``quick_first=True`` therefore returns an executable whose kernels LLVM compiled at the quick tier
(:class:`neuroncc.codegen.llvm.jit.Tier`: ~6x cheaper to make, slower to run) when :func:`quick_tier_applies`,
and queues the optimized build of the same modules here, on one background thread. The optimized executable is
``executable.optimized`` (a ``concurrent.futures.Future``): the device swaps it into its kernels when it is
done, and saving the executable (the compile cache's artifact) waits for it and saves it, never the quick code.

The decision is made here, once per build: the quick tier applies when every module computes bitwise the same
results at both tiers (``jit.tier_independent``: no reassociated sums, no assumptions about NaNs, infinities or
reciprocals), so a kernel's results never depend on which code ran, and when the executable's work is small
(``QUICK_MAX_WORK``), so the slower code costs less on the calls it runs than the compile it saves.

torch.compile's graphs ask with ``quick_first="modules"``: the decision is per module (the launcher's
:class:`~neuroncc.codegen.llvm.jit.KernelCompiler` compiles each tier-independent module at the quick tier and
the others optimized at once), without the work limit: such a graph's time goes mostly to matrix products and
reductions, which stay optimized, and its elementwise kernels at the quick tier ran the transformer block's
training step ~15% slower (CPU time), against ~0.2 s of LLVM work saved in its first step. The optimized
build compiles the quick modules again and reuses the others' objects (``jit.reoptimize``).

The optimizer works when the compiler is idle: it starts a build only once no quick build has been queued for
``QUIET_SECONDS``. A burst of first calls (a model's first step) thus compiles quick code back to back, without
the optimizer's LLVM calls and Python work taking turns with it (llvmlite's process-wide lock, the GIL), and
the optimized code follows the burst.

The background thread is not a daemon and exits when it has nothing left to do: the interpreter waits for
pending optimizations at exit (the cache writer waits for them anyway, and LLVM must not be torn down under a
running compile). After ``fork`` the child runs the jobs the parent had not finished again.

Nothing waits out a quiet period once someone waits for the builds (:meth:`BackgroundOptimizer.wait`) or the
interpreter is exiting: no burst of first calls can follow, so the idle second was only time lost (a process
that compiled a graph and exited slept up to ``GRAPH_QUIET_SECONDS`` before its optimized build started: each
CLI command, each fresh process of the test suite).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from neuroncc.codegen.llvm import fork_safety
from neuroncc.codegen.llvm.launch_plan import CpuLaunchPlan, StepKind

#: Most work (sum over native phases of outer iterations x work per iteration, ~elements) an executable may
#: have to run at the quick tier first. Unvectorized O0 code runs elementwise kernels several times slower:
#: at this size that is tens of microseconds a call, against ~15 ms of compile the quick tier saves.
QUICK_MAX_WORK = 1 << 18
#: Seconds without a new quick build before the optimizer starts its next build (see the module docstring).
QUIET_SECONDS = 0.05
#: The same for a graph's build with quick modules (``quick_first="modules"``, torch.compile's graphs). A model's
#: first step compiles its forward graph, runs it for a few hundred milliseconds, then compiles its backward
#: graph: with the eager device's 50 ms, the forward's optimized build would start inside that first step and
#: take the cores the step runs on (2 here). With 0.5 s it still started between the transformer block's two
#: graph builds on a loaded machine (forward run + backward import and emission took 0.6 s there).
GRAPH_QUIET_SECONDS = 1.0


def plan_work(plan: CpuLaunchPlan) -> int:
    """The native work of ``plan``: sum over its kernels' phases of outer iterations x work per iteration."""
    return sum(phase.n_outer * max(phase.work, 1) for step in plan.steps if step.kind == StepKind.KERNEL
               for phase in step.phases)


def quick_tier_applies(plan: CpuLaunchPlan, texts: Sequence[str]) -> bool:
    """Whether a ``quick_first`` build of ``plan`` (its kernels' LLVM modules ``texts``) starts at the quick
    tier: there are native kernels, every one computes the same bits at both tiers, and the work is small."""
    import neuroncc.codegen.llvm.jit as jit  # a build's (loading an artifact never imports LLVM's bindings)

    return bool(texts) and plan_work(plan) <= QUICK_MAX_WORK and all(jit.tier_independent(t) for t in texts)


class _Job:
    __slots__ = ("build", "future")

    def __init__(self, build: Callable[[], Any], future: Future):
        self.build, self.future = build, future


class BackgroundOptimizer:
    """Runs queued optimized builds in order on one background thread (see the module docstring)."""

    def __init__(self) -> None:
        self._exiting = False
        self._reset()
        fork_safety.hold_across_fork(lambda: self._lock, fork_safety.QUEUES)  # taken last (fork_safety.py)
        fork_safety.in_child(self._after_fork_in_child)
        # called when the interpreter starts exiting, before it joins the non-daemon threads (this one among them);
        # a private hook (concurrent.futures' too): where a Python lacks it, an exiting process waits out the quiet
        # period as before
        register_at_exit = getattr(threading, "_register_atexit", None)
        if register_at_exit is not None:
            try:
                register_at_exit(self._hurry_at_exit)
            except RuntimeError:  # (made while the interpreter exits: nothing is left to hurry)
                pass

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[_Job] = collections.deque()
        self._running: _Job | None = None
        self._thread: threading.Thread | None = None
        self._quiet_at = 0.0  # time.monotonic() from which the compiler counts as idle
        self._woken = threading.Event()  # ends the thread's quiet period early (``_hurry``)

    def _hurry(self) -> None:
        """No quiet period for the builds queued so far: the thread starts them now."""
        with self._lock:
            self._quiet_at = 0.0
        self._woken.set()

    def _hurry_at_exit(self) -> None:
        self._exiting = True
        self._hurry()

    def submit(self, build: Callable[[], Any], quiet: float = QUIET_SECONDS) -> Future:
        """Run ``build()`` in the background, not before ``quiet`` seconds without another submission (a
        shorter quiet period never shortens the one a previous submission asked for); its result (or
        exception) becomes the returned future's."""
        job = _Job(build, Future())
        with self._lock:
            if not self._exiting:
                self._quiet_at = max(self._quiet_at, time.monotonic() + quiet)
            self._queue.append(job)
            self._start_locked()
        return job.future

    def _start_locked(self) -> None:
        if self._thread is not None or not self._queue:
            return
        self._thread = threading.Thread(target=self._drain, name="neuroncc-optimizer", daemon=False)
        try:
            self._thread.start()
        except RuntimeError:  # no new threads at interpreter shutdown: the jobs run on the caller's thread
            self._thread = None
            while self._queue:
                self._run(self._queue.popleft())

    def pending(self) -> int:
        """Builds queued or running."""
        with self._lock:
            return len(self._queue) + (self._running is not None)

    def wait(self) -> None:
        """Return once every build submitted so far has finished (tests; a benchmark's quiet point); they start
        at once, with no quiet period left to wait out."""
        self._hurry()
        with self._lock:
            futures = [job.future for job in self._queue] + ([self._running.future] if self._running else [])
        for future in futures:
            future.exception()  # waits; the job's own error belongs to whoever reads the future

    def _drain(self) -> None:
        while True:
            while (idle_in := self._quiet_at - time.monotonic()) > 0:
                self._woken.wait(idle_in)
                self._woken.clear()
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                job = self._running = self._queue.popleft()
            self._run(job)
            with self._lock:
                self._running = None

    @staticmethod
    def _run(job: _Job) -> None:
        # (a job the parent was running when it forked is already marked running in the child's copy)
        if not job.future.running() and not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.build()
        except BaseException as exc:  # noqa: BLE001 - handed to the future's reader (the cache writer warns)
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def _after_fork_in_child(self) -> None:
        # the parent's thread finishes these there; the child's copies of their futures need a run of their own
        jobs = ([self._running] if self._running is not None else []) + list(self._queue)
        self._reset()
        self._queue.extend(job for job in jobs if not job.future.done())
        with self._lock:
            self._start_locked()


#: The process's optimizer: every quick-first build queues its optimized build here.
OPTIMIZER = BackgroundOptimizer()
