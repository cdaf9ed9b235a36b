"""The device's lock for making signature entries and compiling kernels at call time, in a module of its own so
that every module making them (dispatch.py, entries.py, the optimizers' steps) imports it from below.

The order it takes its locks in, and why calls of kernels compiled before take none of them:
``neuroncc/frontend/tracing.py``.

A build that may trace takes TorchDynamo's compile lock before :data:`LOCK` (:func:`building`). Most first
calls of a warm process trace nothing (their kernels come from the compile cache: ``signature_index.py``), and
taking that lock means importing ``torch._dynamo`` (0.7 s, with sympy 1.0 s). So while TorchDynamo is not
imported, a first call builds lightly (:func:`building_lightly`): under :data:`LOCK` alone. No TorchDynamo
compile can be under way then, and one starting meanwhile on another thread waits for :data:`LOCK` only if it
meets a device op, which this thread makes without waiting for it. A light build that turns out to need a trace,
or a nested full build, raises :class:`TraceLockNeeded` instead of taking the compile lock below :data:`LOCK`
(the order above); its outermost caller (``dispatch.DeviceOp._prepare``) lets go of :data:`LOCK` and builds again
under both. What the first try made stays made: entries of other signatures are complete when stored.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from neuroncc.codegen.llvm import fork_safety

#: The device's handlers and signature entries (lock 3 of ``frontend/tracing.py``'s order). Held across a fork
#: (``codegen/llvm/fork_safety.py``): a build leaves the tables half-made, so a fork waits for it, and the child,
#: which has no thread of the parent's, can build.
LOCK = threading.RLock()
fork_safety.hold_across_fork(LOCK, fork_safety.DEVICE_BUILD)

T = TypeVar("T")

#: How deep this thread is in light builds (``depth``) and in full ones (``full``).
_builds = threading.local()


class TraceLockNeeded(BaseException):
    """A light build needs TorchDynamo's compile lock (to trace, or for a nested full build). A BaseException:
    the build's own ``except Exception`` clauses (a trace that does not apply becomes a CPU fallback) must not
    take it for a failure."""


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Held while an entry is made or a kernel compiled for a call (the first call of a signature, a new
    float value's or optimizer variant's kernel): TorchDynamo's compile lock, then :data:`LOCK`."""
    if in_light_build():
        raise TraceLockNeeded
    from neuroncc.frontend.tracing import exclusive  # with the first op, as the compiler's modules

    with exclusive(), LOCK, _counted("full"):
        yield


def builds_lightly() -> bool:
    """Whether a first call on this thread builds under :data:`LOCK` alone: TorchDynamo is not imported and
    the thread is in no full build, or it is in a light one already."""
    if in_light_build():
        return True
    return not getattr(_builds, "full", 0) and "torch._dynamo.convert_frame" not in sys.modules


def in_light_build() -> bool:
    return bool(getattr(_builds, "depth", 0))


@contextlib.contextmanager
def building_lightly() -> Iterator[None]:
    """:data:`LOCK` alone, for a build that traces nothing (see the module docstring)."""
    with LOCK, _counted("depth"):
        yield


@contextlib.contextmanager
def _counted(kind: str) -> Iterator[None]:
    """This thread one build of ``kind`` (``depth``: light, ``full``) deeper while it runs."""
    setattr(_builds, kind, getattr(_builds, kind, 0) + 1)
    try:
        yield
    finally:
        setattr(_builds, kind, getattr(_builds, kind) - 1)


def before_tracing() -> None:
    """Called before the device traces an op: a light build cannot (:class:`TraceLockNeeded`)."""
    if in_light_build():
        raise TraceLockNeeded


def built(make: Callable[[], T]) -> T:
    """``make()`` (an entry or a kernel for a first call) under a light build while one may be made, else (or
    when it gives way) under :func:`building`; a light build nested in another gives way to the outermost."""
    if builds_lightly():
        try:
            with building_lightly():
                return make()
        except TraceLockNeeded:
            if in_light_build():
                raise
    with building():
        return make()
