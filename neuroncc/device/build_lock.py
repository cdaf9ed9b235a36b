"""The device's lock for making signature entries and compiling kernels at call time, in a module of its own so
that every module making them (dispatch.py, entries.py, the optimizers' steps) imports it from below.

The order it takes its locks in, and why calls of kernels compiled before take none of them:
``neuroncc/frontend/tracing.py``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from neuroncc.codegen.llvm import fork_safety

#: The device's handlers and signature entries (lock 3 of ``frontend/tracing.py``'s order). Held across a fork
#: (``codegen/llvm/fork_safety.py``): a build leaves the tables half-made, so a fork waits for it, and the child,
#: which has no thread of the parent's, can build.
LOCK = threading.RLock()
fork_safety.hold_across_fork(LOCK, fork_safety.DEVICE_BUILD)


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Held while an entry is made or a kernel compiled for a call (the first call of a signature, a new
    float value's or optimizer variant's kernel): TorchDynamo's compile lock, then :data:`LOCK`."""
    from neuroncc.frontend.tracing import exclusive  # with the first op, as the compiler's modules

    with exclusive(), LOCK:
        yield
