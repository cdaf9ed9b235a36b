"""TorchDynamo without the ``neuron`` accelerator's current stream in every frame it traces.

TorchDynamo asks ``torch.accelerator.is_available()`` when it starts tracing a frame; when an accelerator is
there (the ``neuron`` device registers itself as PyTorch's accelerator when torch is imported), it registers that
accelerator's current stream for the frame, and every call of the compiled frame then runs bytecode that fetches
the stream and stores a weak reference to it before the graph runs:
``store_user_object_weakrefs(get_current_stream(torch.device("neuron", 0)))``. After a large kernel has emptied
the caches that costs 110-140 us a call, the largest single piece of the compiled call above neuroncc's own
(``benchmarks/bench_call_path.py --cold rms``), on every frame compiled in the process, whatever its backend.

The neuron device is synchronous: its streams order nothing, so there is nothing to track. With neuron as the
accelerator, Dynamo traces as it does with none (a CPU-only build): code that asks for the current stream inside
a compiled frame runs eagerly (a graph break), as there. Any other accelerator keeps Dynamo's own behaviour.
Installed when the backend is imported (backend.py), which the ``neuron`` entry point does before the first
frame it compiles is traced.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import torch


def neuron_is_the_accelerator() -> bool:
    """Whether PyTorch's current accelerator is the ``neuron`` device (PrivateUse1 under that name)."""
    accelerator = torch._C._accelerator_getAccelerator()
    return accelerator is not None and accelerator.type == "neuron" == torch._C._get_privateuse1_backend_name()


def untrack_current_stream() -> None:
    """Dynamo's per-frame stream state starts empty when neuron is the accelerator (idempotent)."""
    from torch._dynamo.variables import streams

    state = streams.SymbolicStreamState
    if getattr(state.__init__, "__neuroncc_untracked__", False):
        return
    original = state.__init__

    @functools.wraps(original)
    def init(self: Any) -> None:
        if neuron_is_the_accelerator():
            self.cur_stream_stack = collections.deque()  # what Dynamo starts with when no accelerator is there
            return
        original(self)

    init.__neuroncc_untracked__ = True  # type: ignore[attr-defined]
    state.__init__ = init
