"""Neuron tensors as the CPU tensors gloo moves: the device's memory is host memory, so a dense neuron tensor
is handed to gloo as a CPU tensor over the same bytes (``device.memory.host_view``: no copy, and results land
in the neuron tensor as gloo writes them). A tensor gloo cannot take as it is (not contiguous) goes through a
contiguous staging copy, written back when the collective completes (:meth:`Staging.finish`). What gloo does
not reduce by itself is done here, around its SUM: AVG's division after, PREMUL_SUM's factor before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from neuroncc.device.memory import host_view


@dataclass
class Staging:
    """The host tensors of one collective and what to do when it completes: copy staged outputs back, scale
    outputs (AVG as SUM / world size). ``factor``: PREMUL_SUM's, which multiplies every input before the SUM."""

    copy_back: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (staged, user's host view)
    scale: list[torch.Tensor] = field(default_factory=list)
    divisor: int = 1
    factor: float | torch.Tensor | None = None
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

    def reduced(self, tensor: torch.Tensor) -> torch.Tensor:
        """The CPU tensor gloo reduces from ``tensor``, the input of a reduce-scatter (never written): with a
        PREMUL_SUM factor, a copy multiplied by it (the caller's input stays as it was)."""
        if self.factor is None:
            return self.host(tensor, output=False)
        self.copies += 1
        return torch.mul(host_view(tensor), self._host_factor()).contiguous()

    def reduced_in_place(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The CPU tensors gloo reduces in place (all-reduce, reduce: each tensor is its own input), multiplied
        by a PREMUL_SUM factor first."""
        hosts = self.hosts(tensors, output=True)
        if self.factor is not None:
            for host in hosts:
                host.mul_(self._host_factor())
        return hosts

    def _host_factor(self) -> float | torch.Tensor:
        factor = self.factor
        if isinstance(factor, torch.Tensor) and factor.device.type != "cpu":
            return host_view(factor)
        return factor

    def finish(self) -> None:
        """After the bytes arrived: AVG's division, then staged outputs copied into the caller's tensors."""
        for tensor in self.scale:
            if tensor.is_floating_point() or tensor.is_complex():
                tensor.div_(self.divisor)
            else:
                tensor.floor_divide_(self.divisor)
        for staged, view in self.copy_back:
            view.copy_(staged)
