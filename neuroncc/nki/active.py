"""Which kernel launch is running: the one piece of ambient state NKI's module-level API needs.

NKI's functions (``nl.ndarray``, ``nisa.nc_matmul``) take no context argument, so the running launch is found
here. ``launch`` activates a ``SimulationContext`` for the duration of a kernel; everything else calls
``current()``. The context carries ``api``, the ``nki.language`` module the launch runs with, which is how a
tensor's operators (``a + b``, ``t[...] = v``) reach the language without this leaf importing it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from neuroncc.nki.errors import NKISimulationError

_ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("nki_simulation", default=None)


def current() -> Any:
    """The launch being simulated (a ``SimulationContext``); NKI calls outside a kernel launch are an error."""
    context = _ACTIVE.get()
    if context is None:
        raise NKISimulationError(
            "NKI language and ISA calls must run inside a kernel launched with nki.simulate / nki.benchmark "
            "(or a call of an @nki.jit kernel)")
    return context


def active() -> Any:
    """The running launch's context, or None outside a launch."""
    return _ACTIVE.get()


@contextlib.contextmanager
def activate(context: Any) -> Iterator[Any]:
    token = _ACTIVE.set(context)
    try:
        yield context
    finally:
        _ACTIVE.reset(token)
