"""Neuron tensors as the CPU tensors gloo moves: the device's memory is host memory, so a dense neuron tensor
is handed to gloo as a CPU tensor over the same bytes (``device.memory.host_view``: no copy, and results land
in the neuron tensor as gloo writes them). A tensor gloo cannot take as it is (not contiguous) goes through a
contiguous staging copy, written back when the collective completes (:meth:`Staging.finish`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from neuroncc.device.memory import host_view


@dataclass
class Staging:
    """The host tensors of one collective and what to do when it completes: copy staged outputs back, scale
    outputs (AVG as SUM / world size)."""

    copy_back: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (staged, user's host view)
    scale: list[torch.Tensor] = field(default_factory=list)
    divisor: int = 1
    copies: int = 0  # staging copies made (observability: dense tensors make none)

    def host(self, tensor: torch.Tensor, *, output: bool) -> torch.Tensor:
        """The CPU tensor gloo reads (and, for an ``output``, writes) in place of ``tensor``."""
        view = host_view(tensor)
        if view.is_contiguous():
            if output and self.divisor != 1:
                self.scale.append(view)
            return view
        staged = view.contiguous()
        self.copies += 1
        if output:
            self.copy_back.append((staged, view))
            if self.divisor != 1:
                self.scale.append(staged)
        return staged

    def hosts(self, tensors: Sequence[torch.Tensor], *, output: bool) -> list[torch.Tensor]:
        return [self.host(t, output=output) for t in tensors]

    def finish(self) -> None:
        """After the bytes arrived: AVG's division, then staged outputs copied into the caller's tensors."""
        for tensor in self.scale:
            if tensor.is_floating_point() or tensor.is_complex():
                tensor.div_(self.divisor)
            else:
                tensor.floor_divide_(self.divisor)
        for staged, view in self.copy_back:
            view.copy_(staged)
