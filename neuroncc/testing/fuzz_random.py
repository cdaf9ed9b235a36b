"""Random statements in fuzz programs, checked exactly by replaying the compiled run's draws in eager.

A compiled program's random numbers are not eager's (another generator), so a program with random
statements is checked in two parts:

* **everything downstream of the draws, exactly**: each random statement returns its draw as an extra program
  output; eager then runs the same source with :class:`Replay` bound to ``_random``, which hands back the
  compiled run's draws instead of drawing, and the usual comparison (outputs, gradients, float64 judgement)
  applies. A dropout's backward must zero exactly where the compiled forward dropped, a fused consumer must
  compute exactly what eager computes from the same mask, and so on;
* **the draws themselves, by distribution**: each draw against eager's own draw of the same statement
  (two-sample Kolmogorov-Smirnov, :func:`neuroncc.testing.distributions.check_same_distribution`).

A random statement transforms one float input ``x`` into the value later statements read in its place:
``x * rand``, ``x + randn``, ``x * bernoulli(p)``, or ``native_dropout(x, p)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

KINDS = ("rand", "randn", "bernoulli", "dropout")
#: Draws are compared with eager's at this false-alarm rate (programs are small: this catches gross errors).
DRAW_ALPHA = 1e-4


@dataclass(frozen=True, slots=True)
class RandomStmt:
    """``name, name_draw = _random.<kind>(source[, p])``: ``name`` replaces ``source`` downstream."""

    name: str
    kind: str
    source: str
    p: float = 0.5

    @property
    def draw(self) -> str:
        return f"{self.name}_draw"

    def line(self) -> str:
        extra = f", {self.p!r}" if self.kind in ("bernoulli", "dropout") else ""
        return f"{self.name}, {self.draw} = _random.{self.kind}({self.source}{extra})"


class Draw:
    """What ``_random`` is in compiled runs (and eager's own): real draws from torch's generator."""

    @staticmethod
    def rand(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        draw = torch.rand_like(x)
        return x * draw, draw

    @staticmethod
    def randn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        draw = torch.randn_like(x)
        return x + draw, draw

    @staticmethod
    def bernoulli(x: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
        draw = torch.bernoulli(torch.full_like(x, p))
        return x * draw, draw

    @staticmethod
    def dropout(x: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.native_dropout(x, p, True)


class Replay:
    """``_random`` for the eager replay: hands back recorded draws (in statement order) and computes each
    statement's value from its draw exactly as eager computes it."""

    def __init__(self, draws: Sequence[torch.Tensor]):
        self._draws: Iterator[torch.Tensor] = iter(draws)

    def _next(self, like: torch.Tensor) -> torch.Tensor:
        draw = next(self._draws).detach()
        return draw if draw.dtype is torch.bool else draw.to(like.dtype)

    def rand(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        draw = self._next(x)
        return x * draw, draw

    def randn(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        draw = self._next(x)
        return x + draw, draw

    def bernoulli(self, x: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
        draw = self._next(x)
        return x * draw, draw

    def dropout(self, x: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
        mask = self._next(x)
        return x * mask * (1.0 / (1.0 - p)), mask  # eager's native_dropout: input * mask, then * scale


def add_randomness(stmt_operands: Sequence[Sequence[str]], float_inputs: Sequence[str], seed: int, index: int,
                   probability: float) -> tuple[RandomStmt, ...]:
    """The random statements of program ``index`` of stream ``seed``: one, with ``probability``, on a float
    input some statement reads. Drawn from a stream of their own, so the programs without them stay as they
    were."""
    rng = random.Random(f"neuroncc-fuzz-random:{seed}:{index}")
    if rng.random() >= probability:
        return ()
    read = [name for name in float_inputs if any(name in operands for operands in stmt_operands)]
    if not read:
        return ()
    return (RandomStmt("r0", rng.choice(KINDS), rng.choice(read), rng.choice((0.1, 0.3, 0.5))),)


def draws_of(outputs: Sequence[torch.Tensor], count: int) -> list[torch.Tensor]:
    """The draws a program returned (its last ``count`` outputs)."""
    return list(outputs[len(outputs) - count:]) if count else []
