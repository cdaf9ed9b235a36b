"""The device's lock for making signature entries and compiling kernels at call time, in a module of its own so
that every module making them (dispatch.py, entries.py, the optimizers' steps) imports it from below.

The order it takes its locks in, and why calls of kernels compiled before take none of them:
``neuroncc/frontend/tracing.py``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

#: The device's handlers and signature entries (lock 3 of ``frontend/tracing.py``'s order)
LOCK = threading.RLock()


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Held while an entry is made or a kernel compiled for a call (the first call of a signature, a new
    float value's or optimizer variant's kernel): TorchDynamo's compile lock, then :data:`LOCK`."""
    from neuroncc.frontend.tracing import exclusive  # with the first op, as the compiler's modules

    with exclusive(), LOCK:
        yield
