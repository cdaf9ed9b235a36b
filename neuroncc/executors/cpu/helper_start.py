"""When the process-wide native helpers are made: after a graph's kernels, or beside AOTAutograd's trace.

The launcher's helpers (the OpenMP team entry, the native sequence interpreter: helpers.py) depend on no
graph, and every cpu executable's first call needs them. A torch.compile graph's build loaded them on its
finishing thread after the kernels (``then=load_helpers``, deferred_code.py), so their LLVM (~45 ms of CPU at
O3 here, two links) ran beside the forward graph's first call, whose OpenMP team wants both of this machine's
two cores. The front end's miss path (frontend/aot_compile.py) calls :func:`load_helpers_soon` before
AOTAutograd traces (~1 s of Python, the other core idle): they are made on a thread of their own meanwhile,
and an arena reserve's pages faulted in after them (arena_reserve.py).

Only the compile runs on that thread: the LLVM bindings are imported and the IR made on the calling thread,
in the front end's import pause (``aten_compiler.imports_gc_paused``: what the import makes moves to the
oldest generation without counting toward the next full collection). Under the compile's ordinary pause
(a young collection at its end) the import's objects counted, and a second full collection (~0.3 s) fell due
inside AOTAutograd in 5 of 5 first calls (docs/performance-history.md, session 22 first22).
"""

from __future__ import annotations

from collections.abc import Mapping

from neuroncc.codegen.llvm.team_entry import team_entry_ir
from neuroncc.executors.cpu import arena_reserve
from neuroncc.executors.cpu.deferred_code import finish_in_background
from neuroncc.executors.cpu.helpers import SEQUENCE, TEAM, helper_module, helper_requested
from neuroncc.executors.cpu.native_sequence import interpreter_ir

#: The process-wide helpers an artifact carries (runtime.json, helpers.py), with their IR generators.
HELPERS = {TEAM: team_entry_ir, SEQUENCE: interpreter_ir}


def load_helpers(texts: Mapping[str, str] | None = None) -> None:
    """Load the process-wide helpers a first call needs, compiling them if no artifact offered them (``texts``:
    the IR of some, made already): on a background thread, beside the caller."""
    for name, ir in HELPERS.items():
        helper_module(name, ir if texts is None or name not in texts else lambda text=texts[name]: text)


def load_helpers_soon() -> None:
    """Start making the helpers not loaded or being made yet on a thread of their own (the LLVM bindings
    imported and the IR made on the calling thread: see the module docstring), then an arena reserve's pages
    faulted in on the same thread (arena_reserve.py: the first large executable's arena, ready before it is
    built). At the default GIL switch interval: the thread's ~25 LLVM calls a module each wait up to 5 ms for
    the GIL beside AOTAutograd's Python (~0.24 s of wall time for ~45 ms of work, well inside AOTAutograd's
    ~1 s), and AOTAutograd is not made to hand the GIL over ten times as often."""
    missing = {name: ir for name, ir in HELPERS.items() if not helper_requested(name)}
    fill = arena_reserve.reserve()
    if not missing and fill is None:
        return
    texts = None
    if missing:
        import neuroncc.codegen.llvm.jit  # noqa: F401 - here, not on the thread (see the module docstring)

        texts = {name: ir() for name, ir in missing.items()}

    def make() -> None:
        try:
            if texts:
                load_helpers(texts)
        finally:
            if fill is not None:
                fill()

    finish_in_background(make)


__all__ = ["HELPERS", "load_helpers", "load_helpers_soon"]
