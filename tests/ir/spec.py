"""The per-op test table's entry type (see ``ops_table.py`` for the table itself)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from neuroncc.ir import TensorType

from .support import Case, Tol, TorchFn

#: An operand list and attributes that the op's type rule must refuse.
Invalid = tuple[tuple[TensorType, ...], Mapping[str, Any]]


@dataclass(frozen=True)
class OpSpec:
    """How to test one op against PyTorch.

    ``cases`` draws valid applications of the op; ``torch`` computes the same thing with PyTorch from torch
    tensors and the op's (normalized) attributes; ``tol`` scales the dtype's default tolerances; ``invalid``
    lists operand types and attributes that the type rule must refuse with a TypeInferenceError.
    """

    cases: Callable[[], st.SearchStrategy[Case]]
    torch: TorchFn
    tol: Tol = Tol()
    invalid: tuple[Invalid, ...] = ()
    #: Applied to both sides' results (torch tensors) before comparing: for results defined up to a choice
    #: the op leaves to its algorithm (the signs of singular and eigen vectors).
    canonical: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
