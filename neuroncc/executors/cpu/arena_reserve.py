"""A process-wide arena reserve: memory whose pages are faulted in beside AOTAutograd's trace, for the arena of the
next large cpu executable built.

An executable's arena (launcher.py) is fresh memory, and the first call's kernels fault its pages in. numpy asks
for transparent huge pages on arrays of 4 MB and more, and the kernel zeroes (and may compact for) each huge
page at its fault: the transformer block's forward and backward arenas (21.0 and 25.4 MB) cost ~46 ms of their
first calls that way (docs/performance-history.md, session 23 firstcall23). Faulting them while the first call
waits for its code took the core LLVM's workers needed (zero-sum, dropped). AOTAutograd's trace is ~1 s of
single-threaded Python before the first graph's build, with this machine's second core idle: the front end's
miss path starts a reserve there (:func:`reserve`, from ``helper_start.load_helpers_soon``) whose pages its
background thread faults in after the helpers (a strided numpy write: it releases the GIL, so the trace's thread
keeps its core). The reserve is an anonymous mapping of its own, asked for huge pages: in the heap (``np.empty``,
under the benchmarks' ``MALLOC_MMAP_THRESHOLD_``) it measured the same first calls, less clearly (one alternated
run of 12 rounds: both first calls -22 ms (9/12) against -38 (11/12) off the heap), and a reserve let go there
would stay in the heap.

The first executable whose fresh arena is between half the reserve and all of it takes the whole reserve as its
arena (:func:`take`: the backward graph is then built over the forward's, launcher.py's ``sharing_arena``). One
taker only: an arena is never shared by executables whose calls may overlap (another graph, another model), only
by those that share its lock. A reserve nothing took by the time an executable's code is bound (the compile's
first call) is let go (:func:`release`), so a small model holds no memory for it.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable

import numpy as np

from neuroncc.codegen.llvm.fork_safety import renew_in_child

#: Bytes of a reserve when no build of this process has asked for an arena yet: the transformer block's larger
#: arena (25.4 MB, its backward's) with room; a larger first arena does not take it (and a later compile's
#: reserve is sized by the largest arena seen, :data:`MAX_RESERVE_BYTES` at most).
DEFAULT_RESERVE_BYTES = 32 << 20
#: The largest reserve made: faulting in a huge page costs ~2 ms of the idle core here, 256 MiB ~0.26 s, well
#: inside the ~1 s of AOTAutograd's trace.
MAX_RESERVE_BYTES = 256 << 20
#: Bytes between two writes of the fault-in: a small page (the writes fault huge pages where numpy's madvise
#: gave them, small ones elsewhere).
PAGE_BYTES = 4096

class _Reserve:
    """A reserve: its buffer once allocated and faulted in (None until then)."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer: np.ndarray | None = None


_LOCK = renew_in_child(threading.Lock())
#: the reserve being faulted in, or ready and untaken; None: no reserve
_reserve: _Reserve | None = None
#: the largest arena an executable of this process asked for (the next reserve's size)
_largest_arena = 0


def reserve() -> Callable[[], None] | None:
    """Register a reserve and return the function that allocates it and faults its pages in, for the caller to
    run on a background thread; None when a reserve is pending or untaken already."""
    global _reserve
    with _LOCK:
        if _reserve is not None:
            return None
        _reserve = entry = _Reserve()
        nbytes = min(max(DEFAULT_RESERVE_BYTES, _largest_arena, PAGE_BYTES), MAX_RESERVE_BYTES)
    return lambda: _fill(entry, nbytes)


def _fill(entry: _Reserve, nbytes: int) -> None:
    """Allocate ``entry``'s buffer and fault its pages in; it is ready (can be taken) once its buffer is set. Memory
    the system refuses leaves no reserve (builds make their arenas fresh, as without one), and the next compile
    may register another."""
    global _reserve
    try:
        memory = mmap.mmap(-1, nbytes)  # its own mapping, off the heap: unmapped when the last arena over it goes
    except OSError:
        with _LOCK:
            if _reserve is entry:
                _reserve = None
        return
    if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux: as numpy asks for its arrays of 4 MB and more (an arena's np.empty)
        memory.madvise(mmap.MADV_HUGEPAGE)
    buffer = np.frombuffer(memory, dtype=np.uint8)  # page-aligned, so ALIGN-aligned
    buffer[::PAGE_BYTES] = 0  # one write a page; numpy's scalar assignment releases the GIL for it
    with _LOCK:
        entry.buffer = buffer


def take(nbytes: int) -> np.ndarray | None:
    """The reserve's whole buffer (page-aligned) for an arena of ``nbytes``, handed to this caller alone; None
    when there is none ready, or ``nbytes`` is more than it holds or less than half of it."""
    global _reserve, _largest_arena
    with _LOCK:
        _largest_arena = max(_largest_arena, nbytes)
        buffer = _reserve.buffer if _reserve is not None else None
        if buffer is None or not buffer.nbytes // 2 <= nbytes <= buffer.nbytes:
            return None
        _reserve = None
        return buffer


def release() -> None:
    """Let an untaken ready reserve go (one still being faulted in stays: its thread finishes it)."""
    global _reserve
    with _LOCK:
        if _reserve is not None and _reserve.buffer is not None:
            _reserve = None


__all__ = ["DEFAULT_RESERVE_BYTES", "MAX_RESERVE_BYTES", "release", "reserve", "take"]
