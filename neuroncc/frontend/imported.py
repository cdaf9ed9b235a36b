"""What the importer makes of an aten graph (:class:`ImportedGraph`: the IR function and how the FX graph's
calling convention maps onto it), and the per-call random key of a graph that draws random numbers.

Its own module so that running a compiled graph (``compiled.py``, the graph cache's hits, the ``neuron``
device) does not import the importer and its lowering rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from neuroncc.frontend.convert import TensorSpec
from neuroncc.ir import Function


@dataclass(frozen=True, slots=True)
class ComputedOutput:
    """Graph output computed by the IR function: its output number and eager's layout for it."""

    index: int
    spec: TensorSpec


@dataclass(frozen=True, slots=True)
class InputOutput:
    """Graph output that is graph input ``position`` itself (returned as the same tensor object)."""

    position: int


@dataclass(frozen=True, slots=True)
class ConstantOutput:
    """Graph output that is not a tensor (``None`` for a missing gradient, or a Python number)."""

    value: Any


GraphOutput = ComputedOutput | InputOutput | ConstantOutput


@dataclass(frozen=True, slots=True)
class ImportedGraph:
    """An IR function plus how to feed it from, and return its results to, the FX graph's calling convention.

    ``param_positions[i]`` is the graph input that IR parameter ``i`` reads (unused inputs are not passed);
    ``mutations`` lists ``(graph input, IR output)`` pairs for in-place updates of inputs (``copy_`` into a
    placeholder), written back after the call as eager would (unless the executable computed the output in
    the input's own memory: imported with ``donate``, see :func:`import_graph`). With ``bf16_bits`` every bf16
    graph input is an i16 parameter holding the tensor's bits, and every bf16 result an i16 output (see
    :func:`import_graph`).
    ``rng_key``: the function's last parameter is the per-call random key (a graph with random ops;
    frontend/lowering/random.py), which no graph input feeds.
    """

    function: Function
    param_positions: tuple[int, ...]
    outputs: tuple[GraphOutput, ...]
    mutations: tuple[tuple[int, int], ...] = ()
    bf16_bits: bool = False
    rng_key: bool = False


def draw_key(generator: torch.Generator | None = None) -> int:
    """A fresh 64-bit key from PyTorch's (default) CPU generator: what each call of a compiled graph with
    ``rng_key`` reads (frontend/lowering/random.py)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64, generator=generator))
