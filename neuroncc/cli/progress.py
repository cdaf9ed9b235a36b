"""Progress of long commands on stderr: a live step list on a terminal, plain lines otherwise.

On a terminal the innermost running step shows a spinner, what it is doing now (``Step.status``: a compile
shows its pass and then code generation) and its running time; a finished step stays as a
line (``  done  compile forward for cpu (cache hit)  41.0 ms``) unless the display is ``transient``; a failing
step's line is erased, so the error message stands alone. When stderr is not a terminal (a log, a pipe, a
test), only steps marked ``log=True`` (compiles, the slow part) print one plain line when they end, and
nothing is printed before a step fails: a bad input still gives exactly one line on stderr.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

_SPINNER = "|/-\\"
_TICK_SECONDS = 0.1
_CLEAR_LINE = "\r\x1b[2K"


@dataclass
class Step:
    """A running step; set ``detail`` to add a note to its finished line (``cache hit``, ``114 ops``)."""

    title: str
    started: float = field(default_factory=time.perf_counter)
    detail: str = ""
    seconds: float = 0.0
    status: str = ""  # what the step is doing now (``passes 3/9: fuse``), shown beside the spinner while it runs

    def line(self) -> str:
        return f"{self.title}{f' ({self.detail})' if self.detail else ''}  {format_seconds(self.seconds)}"


class Progress:
    """Reports steps to ``stream``. ``interactive`` defaults to whether the stream is a terminal; ``transient``
    erases finished steps too (for a command whose report on stdout already says what was done)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True, interactive: bool | None = None,
                 transient: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.transient = transient
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self._lock = threading.Lock()
        self._active: list[Step] = []  # running steps, outermost first; the spinner shows the last
        self._spinner: threading.Thread | None = None
        self._stop = threading.Event()

    @contextlib.contextmanager
    def step(self, title: str, *, log: bool = False) -> Iterator[Step]:
        """Run the body as one step (steps nest). ``log``: also report it when stderr is not a terminal."""
        step = Step(title)
        if not self.enabled:
            try:
                yield step
            finally:
                step.seconds = time.perf_counter() - step.started
            return
        self._start(step)
        try:
            yield step
        except BaseException:
            self._end(step, finished_line=None)
            raise
        step.seconds = time.perf_counter() - step.started
        if self.interactive:
            self._end(step, finished_line=None if self.transient else f"  done  {step.line()}\n")
        else:
            self._end(step, finished_line=f"neuroncc: {step.line()}\n" if log and not self.transient else None)

    def _start(self, step: Step) -> None:
        with self._lock:
            self._active.append(step)
            if self.interactive and self._spinner is None:
                self._stop.clear()
                self._spinner = threading.Thread(target=self._spin, daemon=True)
                self._spinner.start()

    def _end(self, step: Step, finished_line: str | None) -> None:
        spinner = None
        with self._lock:
            self._active.remove(step)
            if not self._active:
                spinner, self._spinner = self._spinner, None
                self._stop.set()
        if spinner is not None:
            spinner.join()
        with self._lock:
            if self.interactive:
                self.stream.write(_CLEAR_LINE)
            if finished_line:
                self.stream.write(finished_line)
            self.stream.flush()

    def _spin(self) -> None:
        tick = 0
        while not self._stop.is_set():
            with self._lock:
                if self._active:
                    step = self._active[-1]
                    elapsed = format_seconds(time.perf_counter() - step.started)
                    status = f": {step.status}" if step.status else ""
                    self.stream.write(f"{_CLEAR_LINE}  {_SPINNER[tick % len(_SPINNER)]}     {step.title}{status}  "
                                      f"{elapsed}")
                    self.stream.flush()
            tick += 1
            self._stop.wait(_TICK_SECONDS)


def format_seconds(seconds: float) -> str:
    """``0.0042`` -> ``4.2 ms``; ``12.34`` -> ``12.3 s``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def format_eta(done: int, total: int, elapsed: float) -> str:
    """``about 2.3 min left`` from the rate so far (long batch tools print it on each progress line)."""
    if done <= 0 or total <= done:
        return "done" if total <= done else "estimating"
    left = elapsed / done * (total - done)
    return f"about {format_seconds(left) if left < 120 else f'{left / 60:.1f} min'} left"


class ProgressBar:
    """Progress over ``total`` items finishing in any order, on ``stream``: on a terminal one live line
    (``[#########-----------]  3/8  12.3 s  running: a.pt2, b.pt2``) redrawn as items start and finish, with a
    line per finished item above it; on a log only the finished items' lines (``neuroncc: [3/8] a.pt2 ...``)."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO | None = None, *, enabled: bool = True,
                 interactive: bool | None = None):
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.running: list[str] = []
        self.started = time.perf_counter()

    def bar(self) -> str:
        filled = self.WIDTH * self.done // max(self.total, 1)
        running = f"  running: {', '.join(self.running)}" if self.running else ""
        elapsed = format_seconds(time.perf_counter() - self.started)
        return f"[{'#' * filled}{'-' * (self.WIDTH - filled)}]  {self.done}/{self.total}  {elapsed}{running}"

    def start(self, name: str) -> None:
        self.running.append(name)
        self._draw()

    def finish(self, name: str, line: str) -> None:
        """``name`` is done; ``line`` says how it went."""
        if name in self.running:
            self.running.remove(name)
        self.done += 1
        if not self.enabled:
            return
        if self.interactive:
            self.stream.write(f"{_CLEAR_LINE}  {line}\n")
        else:
            self.stream.write(f"neuroncc: [{self.done}/{self.total}] {line}\n")
        self._draw()

    def tick(self) -> None:
        """Redraw (the elapsed time) on a terminal."""
        self._draw()

    def close(self) -> None:
        if self.enabled and self.interactive:
            self.stream.write(_CLEAR_LINE)
            self.stream.flush()

    def _draw(self) -> None:
        if self.enabled and self.interactive:
            self.stream.write(f"{_CLEAR_LINE}{self.bar()}")
        if self.enabled:
            self.stream.flush()
