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


class UnencodableOutput(ValueError):
    """A graph output :func:`encode_output` cannot write as JSON (a constant that is not None, a bool, an int or
    a finite float), or stored data :func:`decode_output` does not read as one."""


def encode_output(output: GraphOutput) -> list[Any]:
    """``output`` as JSON data (the graph cache's entries and the device's signature index store outputs so)."""
    if isinstance(output, ComputedOutput):
        spec = output.spec
        return ["computed", output.index, list(spec.shape), list(spec.stride), str(spec.dtype).removeprefix("torch.")]
    if isinstance(output, InputOutput):
        return ["input", output.position]
    value = output.value
    if value is None or type(value) in (bool, int) or (
            type(value) is float and value == value and abs(value) != float("inf")):
        return ["constant", value]
    raise UnencodableOutput(f"a graph output constant {value!r}")


def decode_output(data: Any) -> GraphOutput:
    """The output :func:`encode_output` wrote; raises :class:`UnencodableOutput` for anything else."""
    if type(data) is not list or not data:
        raise UnencodableOutput(f"graph output {data!r}")
    kind, *rest = data
    if kind == "computed" and len(rest) == 4:
        index, shape, stride, dtype = rest
        value = getattr(torch, dtype, None) if type(dtype) is str and dtype.isidentifier() else None
        if type(index) is not int or type(value) is not torch.dtype or not _ints(shape) or not _ints(stride):
            raise UnencodableOutput(f"computed output {data!r}")
        return ComputedOutput(index, TensorSpec(tuple(shape), tuple(stride), value))
    if kind == "input" and len(rest) == 1 and type(rest[0]) is int:
        return InputOutput(rest[0])
    if kind == "constant" and len(rest) == 1 and (rest[0] is None or type(rest[0]) in (bool, int, float)):
        return ConstantOutput(rest[0])
    raise UnencodableOutput(f"graph output {data!r}")


def _ints(data: Any) -> bool:
    return type(data) is list and all(type(v) is int for v in data)


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
