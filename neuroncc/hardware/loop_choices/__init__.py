"""How the CPU code generator shapes its row loops on a CPU: each decision a property, measured where it was
made (the numbers and the session in its docstring), read through :class:`~neuroncc.hardware.host.CpuTarget`,
which takes them from :class:`LoopChoices`.

These are the choices that differ between CPUs of one instruction set family only by what was measured: how a
bf16 value is rounded, which rows a loop keeps widened or cached, where prefetches and delayed writes go, how an
online log-sum-exp is chunked, how many polynomial evaluations are interleaved. The CPU's facts themselves (its
vector width, registers, the products it hands to oneDNN, its last-level cache) stay in ``host.py``. A choice
made on AVX2 alone says so and keeps AVX-512's code as it was where it was not measured there.

The decisions are grouped by what they shape, one module each (``bf16``, ``rows``, ``streams``, ``polynomials``,
over ``base``); :class:`LoopChoices` joins them.

May import: errors and this package (``host`` imports this package, so not ``host``).
"""

from __future__ import annotations

from neuroncc.hardware.loop_choices.base import MEMORY_BURST_LINES, ChoiceBase
from neuroncc.hardware.loop_choices.bf16 import Bf16Choices
from neuroncc.hardware.loop_choices.polynomials import PolynomialChoices
from neuroncc.hardware.loop_choices.rows import RowLoopChoices
from neuroncc.hardware.loop_choices.streams import StreamChoices


class LoopChoices(Bf16Choices, RowLoopChoices, StreamChoices, PolynomialChoices):
    """The row-loop decisions of :class:`~neuroncc.hardware.host.CpuTarget` (its base class): each reads the
    CPU's features through ``has`` and ``vector_bits``, which the target defines. A decision shadowed on this class
    (a test's or a benchmark's switch) overrides its group's."""

    __slots__ = ()


__all__ = ["MEMORY_BURST_LINES", "ChoiceBase", "LoopChoices"]
