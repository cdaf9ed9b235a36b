"""``nki.compiler``: NKI 0.1's compiler hints, accepted and checked the way NKI documents them.

- Direct allocation (``sbuf.mod_alloc``, ``psum.mod_alloc``, ``sbuf.alloc``, ``psum.alloc``,
  ``*.auto_alloc``): ``buffer=`` values. Their arguments are checked against NKI's rules (bank and partition
  ranges, alignment, one PSUM bank per tile, tuple lengths per block dimension); the simulator then places
  tiles itself, by live range, as for automatic allocation, so the cost model sees the compiler's placement,
  not the hinted addresses.
- Kernel decorators (``skip_middle_end_transformations``, ``enable_stack_allocator``, ``force_auto_alloc``) and
  loop directives (``no_reorder()``, ``multi_buffer(factor)``): accepted, no effect on simulation or cost
  (the cost model's scheduler already fills gaps with later independent work, as the compiler does).

May import: the rest of ``neuroncc.nki``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from neuroncc.nki.compiler import psum, sbuf
from neuroncc.nki.errors import NKISimulationError


def _decorator(name: str, func: Any) -> Any:
    if func is None:
        return lambda f: f
    if not callable(func):
        raise NKISimulationError(f"nki.compiler.{name} decorates a kernel function")
    return func


def skip_middle_end_transformations(func: Callable[..., Any] | None = None) -> Any:
    """Decorator: skip the compiler's middle-end passes (no effect in the simulator)."""
    return _decorator("skip_middle_end_transformations", func)


def enable_stack_allocator(func: Callable[..., Any] | None = None, log_level: int = 50) -> Any:
    """Decorator: allocate SBUF/PSUM with a stack allocator (no effect: the simulator places by live range)."""
    return _decorator("enable_stack_allocator", func)


def force_auto_alloc(func: Callable[..., Any] | None = None) -> Any:
    """Decorator: ignore direct allocations (the simulator always places tiles itself)."""
    return _decorator("force_auto_alloc", func)


@dataclass(frozen=True)
class Directive:
    """A loop directive (``nl.sequential_range(n, directives=ncc.no_reorder())``); also usable with ``with``."""

    kind: str
    factor: int = 1

    def __enter__(self) -> Directive:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def no_reorder() -> Directive:
    """Keep the program order of the instructions in a loop (accepted; not modelled)."""
    return Directive("no_reorder")


def multi_buffer(factor: int = 2) -> Directive:
    """Multi-buffer a loop's allocations ``factor`` ways (accepted; the simulator rotates buffers anyway)."""
    if not isinstance(factor, int) or factor < 1:
        raise NKISimulationError(f"multi_buffer factor must be a positive int, got {factor!r}")
    return Directive("multi_buffer", factor)


@contextlib.contextmanager
def allocation_scope() -> Iterator[None]:
    """A scope for allocations (accepted; tiles are placed by live range)."""
    yield


__all__ = [
    "Directive", "allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer", "no_reorder",
    "psum", "sbuf", "skip_middle_end_transformations",
]
