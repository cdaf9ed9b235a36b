"""Shared helpers for the IR tests: dtype tables, random operands, one-op graphs, torch comparison, round trips.

Random data comes from a numpy generator seeded by a hypothesis-drawn integer: hypothesis explores the
structure (shapes, dtypes, attributes, whether special values appear), numpy fills the arrays cheaply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from hypothesis import settings
from hypothesis import strategies as st

from neuroncc.ir import (
    Attrs, Builder, DType, Function, TensorType, collect_resources, interpret, parse, print_function, round_to_bf16,
)
from neuroncc.ir.dtypes import to_storage

TORCH_DTYPES: dict[DType, torch.dtype] = {
    DType.f32: torch.float32, DType.bf16: torch.bfloat16, DType.f16: torch.float16, DType.i64: torch.int64,
    DType.i32: torch.int32, DType.i16: torch.int16, DType.i8: torch.int8, DType.u8: torch.uint8,
    DType.bool: torch.bool, DType.c64: torch.complex64,
}
FROM_TORCH = {v: k for k, v in TORCH_DTYPES.items()}

FLOATS = (DType.f32, DType.bf16, DType.f16)
INTS = (DType.i64, DType.i32)
#: The dtypes every op is exercised with (where it accepts them).
MAIN = FLOATS + INTS + (DType.bool,)
NUMERIC = FLOATS + INTS
INTEGRAL = INTS + (DType.bool,)
#: The narrow integer types, exercised where wrap-around semantics matter (cast, bitwise ops).
NARROW_INTS = (DType.i16, DType.i8, DType.u8)
#: complex64, drawn by the ops that take it (``OpDef.accepts_complex``).
COMPLEX = (DType.c64,)

#: torch.testing.assert_close's own defaults per dtype (rtol, atol); ops scale them with ``Tol``.
DEFAULT_TOLERANCE = {
    DType.f32: (1.3e-6, 1e-5), DType.bf16: (1.6e-2, 1e-5), DType.f16: (1e-3, 1e-5), DType.c64: (1.3e-6, 1e-5),
}

SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, 1e-40, 3.0e38, -3.0e38, 0.5, -2.5],
                    dtype=np.float32)
#: Special values without the huge finite ones: for accumulating ops, whose intermediate overflow depends on the
#: order of accumulation (the reference accumulates in float64, torch in float32, in its own order).
SPECIALS_NOT_HUGE = SPECIALS[np.abs(SPECIALS) < 1e38]


@dataclass(frozen=True)
class Tol:
    """Per-op tolerance: multiplies the dtype's default rtol/atol (floats only; ints compare exactly)."""

    rtol: float = 1.0
    atol: float = 1.0
    #: An absolute tolerance for bf16/f16 results replacing the scaled default (for accumulating ops, whose
    #: half-precision rounding of large intermediate sums shows up as absolute error near zero).
    half_atol: float | None = None

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        ir = FROM_TORCH.get(dtype)
        if ir is None or not (ir.is_float or ir.is_complex):
            return (0.0, 0.0)
        rtol, atol = DEFAULT_TOLERANCE[ir]
        if ir is not DType.f32 and self.half_atol is not None:
            return rtol * self.rtol, self.half_atol
        return rtol * self.rtol, atol * self.atol


@dataclass
class Case:
    """One op application: operand arrays (storage form) with their IR types, and attributes."""

    operands: list[tuple[np.ndarray, TensorType]]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def types(self) -> tuple[TensorType, ...]:
        return tuple(t for _, t in self.operands)

    @property
    def arrays(self) -> list[np.ndarray]:
        return [a for a, _ in self.operands]


def fuzz_settings(count: int) -> settings:
    """Hypothesis settings for ``count`` examples: derandomized (the same examples every CI run, so a failure
    is never a flake), or for a soak run (NEURONCC_TEST_EXAMPLES_SCALE, see __init__.py) scaled and random."""
    scale = float(os.environ.get("NEURONCC_TEST_EXAMPLES_SCALE", "1"))
    return settings(max_examples=max(1, round(count * scale)), derandomize=scale == 1)


# ---- random operands ----------------------------------------------------------------------------------


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: DType, *, low: float = -4.0,
                 high: float = 4.0, specials: bool | np.ndarray = False) -> np.ndarray:
    """Random storage-form data. ``specials`` sprinkles NaN, +-inf, -0.0, subnormals and huge values (or the
    values of the array given)."""
    shape = tuple(shape)
    if dtype.is_complex:
        real = random_array(rng, shape, DType.f32, low=low, high=high, specials=specials)
        imag = random_array(rng, shape, DType.f32, low=low, high=high, specials=specials)
        out = np.empty(shape, dtype=np.complex64)
        out.real, out.imag = real, imag
        return out
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        lo, hi = max(int(low), info.min), min(int(high), info.max)
        return rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(dtype.numpy)
    values = rng.uniform(low, high, size=shape).astype(np.float32)
    if specials is not False and values.size:
        mask = rng.random(shape) < 0.5
        pool = SPECIALS if specials is True else specials
        values = np.where(mask, rng.choice(pool, size=shape), values).astype(np.float32)
    return to_storage(values, dtype)


def operand(rng: np.random.Generator, shape: Sequence[int], dtype: DType, **kw: Any) -> tuple[np.ndarray, TensorType]:
    return random_array(rng, shape, dtype, **kw), TensorType(tuple(shape), dtype)


@st.composite
def rngs(draw: st.DrawFn) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


def shapes(*, min_rank: int = 0, max_rank: int = 3, min_size: int = 0, max_size: int = 4) -> st.SearchStrategy:
    return st.lists(st.integers(min_size, max_size), min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def broadcast_pair(draw: st.DrawFn, max_rank: int = 3) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: one full shape, the other with leading dims dropped and some dims set to 1."""
    full = draw(shapes(max_rank=max_rank))
    drop = draw(st.integers(0, len(full)))
    other = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in full[drop:])
    return (full, other) if draw(st.booleans()) else (other, full)


# ---- running one op ------------------------------------------------------------------------------------


def one_op_graph(name: str, case: Case, *, regions: Sequence[Function] = ()) -> Function:
    b = Builder(f"single_{name}")
    params = [b.param(t, f"x{i}") for i, t in enumerate(case.types)]
    op = b.emit(name, params, Attrs(case.attrs), regions)
    return b.build(list(op.results))


def to_torch(array: np.ndarray, dtype: DType) -> torch.Tensor:
    """Storage-form numpy -> torch tensor of the IR dtype (bf16 storage values are exact in bf16)."""
    tensor = torch.from_numpy(np.array(array, copy=True))
    return tensor.to(TORCH_DTYPES[dtype])


def from_ir(array: np.ndarray, t: TensorType) -> torch.Tensor:
    return to_torch(array, t.dtype)


def as_tuple(value: Any) -> tuple:
    return value if isinstance(value, (tuple, list)) else (value,)


def assert_types_match(fn: Function, expected: Sequence[torch.Tensor]) -> None:
    got = [(v.type.shape, v.type.dtype) for v in fn.outputs]
    want = [(tuple(t.shape), FROM_TORCH[t.dtype]) for t in expected]
    assert got == want, f"type inference {got} != torch {want}"


def assert_close_to_torch(ours: Sequence[np.ndarray], fn: Function, theirs: Sequence[torch.Tensor],
                          tol: Tol) -> None:
    assert len(ours) == len(theirs)
    for index, (array, value, expected) in enumerate(zip(ours, fn.outputs, theirs)):
        actual = from_ir(array, value.type)
        rtol, atol = tol.for_dtype(expected.dtype)
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, i=index: f"result #{i}: {m}")


def round_trip(fn: Function) -> str:
    """Assert the printer/parser round trip on ``fn`` (resources included) and return the text."""
    text = print_function(fn)
    resources = collect_resources(fn)
    again = parse(text, resources=resources)
    assert again == fn
    assert print_function(again) == text
    assert print_function(again, canonical=True) == print_function(fn, canonical=True)
    return text


def run_ir(fn: Function, case: Case) -> list[np.ndarray]:
    return interpret(fn, case.arrays)


TorchFn = Callable[[list[torch.Tensor], Mapping[str, Any]], Any]

__all__ = [
    "COMPLEX", "Case", "FLOATS", "FROM_TORCH", "INTEGRAL", "INTS", "MAIN", "NARROW_INTS", "NUMERIC", "TORCH_DTYPES", "Tol",
    "TorchFn", "as_tuple", "fuzz_settings", "assert_close_to_torch", "assert_types_match", "broadcast_pair", "one_op_graph",
    "operand", "random_array", "rngs", "round_to_bf16", "round_trip", "run_ir", "shapes", "to_torch",
]
