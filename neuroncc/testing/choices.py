"""Overriding the CPU code generator's decisions for one test: ``choose(monkeypatch, small_mm_max_macs=0)``.

Each keyword names a property of :class:`~neuroncc.hardware.host.CpuTarget` (its own or one of the
:class:`~neuroncc.hardware.loop_choices.LoopChoices` it inherits) and gives the value every target reads from it
until the test ends (``monkeypatch`` undoes it). A name the target does not have fails, naming it, so that a
renamed or removed decision cannot leave a test overriding nothing. :func:`choose_by` takes a function of the
target instead of a constant, for a decision that still depends on the CPU (``lambda target: not
target.has("avx512f")``).

May import: everything in neuroncc (it sits above every layer).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol

from neuroncc.hardware.host import CpuTarget


class MonkeyPatch(Protocol):
    """What these helpers use of pytest's ``monkeypatch`` fixture (which undoes each setattr when the test
    ends); this package does not import pytest."""

    def setattr(self, target: object, name: str, value: object) -> None: ...


def choose(monkeypatch: MonkeyPatch, **choices: Any) -> None:
    """Every target reads ``value`` from its decision ``name``, for each ``name=value``, until the test ends."""
    choose_by(monkeypatch, **{name: _constant(value) for name, value in choices.items()})


def choose_by(monkeypatch: MonkeyPatch, **rules: Callable[[CpuTarget], Any]) -> None:
    """Every target reads ``rule(target)`` from its decision ``name``, for each ``name=rule``, until the test
    ends."""
    for name in rules:
        _check_decision(name)
    for name, rule in rules.items():
        monkeypatch.setattr(CpuTarget, name, property(rule))


def _constant(value: Any) -> Callable[[CpuTarget], Any]:
    return lambda target: value


def _check_decision(name: str) -> None:
    try:
        found = inspect.getattr_static(CpuTarget, name)
    except AttributeError:
        raise AttributeError(f"CpuTarget has no decision {name!r} to choose") from None
    if not isinstance(found, property):
        raise TypeError(f"CpuTarget.{name} is not a property (a decision), so it cannot be chosen")
