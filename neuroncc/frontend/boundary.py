"""Where a compiled graph's tensors live, when not on CPU: a device whose memory is host memory.

By default the backend computes CPU tensors, handing them to the executable as numpy views (convert.py). A
layer above the front end that owns such a device (the ``neuron`` device, neuroncc/device) passes its
:class:`HostDevice` to ``neuron_backend(..., device=...)``; graphs on its tensors then accept them as inputs
and every :class:`~neuroncc.frontend.compiled.CompiledGraph` call goes through ``device.run``, which reads and
writes the device's memory in place.
"""

from __future__ import annotations

from typing import Any, Protocol


class HostDevice(Protocol):
    """A torch device whose tensors live in host memory the executables can read and write directly."""

    #: ``torch.device.type`` of its tensors
    device_type: str

    def run(self, compiled: Any, args: list[Any]) -> list[Any]:
        """Run ``compiled`` (a CompiledGraph) on ``args`` (AOTAutograd's boxed inputs) -> its outputs."""
        ...
