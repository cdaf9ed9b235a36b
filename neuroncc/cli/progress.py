"""Progress of long commands on stderr: a live step list on a terminal, plain lines otherwise.

On a terminal each step shows a spinner and its running time, then stays as a finished line (``✓ step  1.2 s``);
a failing step's line is erased, so the error message stands alone. When stderr is not a terminal (a log,
a pipe, a test), only steps marked ``log=True`` (compiles, the slow part) print one plain line when they end,
and nothing is printed before a step fails: a bad input still gives exactly one line on stderr.
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


@dataclass
class Step:
    """A running step; set ``detail`` to add a note to its finished line (``cache hit``, ``114 ops``)."""

    title: str
    started: float = field(default_factory=time.perf_counter)
    detail: str = ""
    seconds: float = 0.0


class Progress:
    """Reports steps to ``stream``. ``interactive`` defaults to whether the stream is a terminal; ``transient``
    erases finished steps too (for a command whose report on stdout already says what was done)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True, interactive: bool | None = None,
                 transient: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.transient = transient  # erase finished steps too (a command that prints its own report)
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def step(self, title: str, *, log: bool = False) -> Iterator[Step]:
        """Run the body as one step. ``log``: also report it when stderr is not a terminal."""
        step = Step(title)
        if not self.enabled:
            yield step
            step.seconds = time.perf_counter() - step.started
            return
        stop = threading.Event()
        spinner = None
        if self.interactive:
            spinner = threading.Thread(target=self._spin, args=(step, stop), daemon=True)
            spinner.start()
        try:
            yield step
        except BaseException:
            self._finish(stop, spinner)
            if self.interactive:
                self._write("\r\x1b[2K")
            raise
        self._finish(stop, spinner)
        step.seconds = time.perf_counter() - step.started
        line = f"{step.title}{f' ({step.detail})' if step.detail else ''}  {format_seconds(step.seconds)}"
        if self.interactive:
            self._write("\r\x1b[2K" if self.transient else f"\r\x1b[2K  done  {line}\n")
        elif log and not self.transient:
            self._write(f"neuroncc: {line}\n")

    def _finish(self, stop: threading.Event, spinner: threading.Thread | None) -> None:
        stop.set()
        if spinner is not None:
            spinner.join()

    def _spin(self, step: Step, stop: threading.Event) -> None:
        tick = 0
        while not stop.is_set():
            elapsed = time.perf_counter() - step.started
            self._write(f"\r\x1b[2K  {_SPINNER[tick % len(_SPINNER)]}     {step.title}  {format_seconds(elapsed)}")
            tick += 1
            stop.wait(_TICK_SECONDS)

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()


def format_seconds(seconds: float) -> str:
    """``0.0042`` -> ``4.2 ms``; ``12.34`` -> ``12.3 s``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
