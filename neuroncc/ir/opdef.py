"""Op definitions: what an op takes, what it returns, what it means, and what it is.

Every op is one :class:`OpDef` value: its operands (arity), its attributes (:class:`AttrSpec`), a type rule
(``infer``: operand types + attributes -> result types), a numpy reference (``reference``: arrays +
attributes -> arrays) that is the op's semantics, and its :class:`Trait` s: the properties passes and code
generators ask about (``op.has(Trait.STRIDED_VIEW)``). The reference interpreter, the verifier, every pass
and every backend read these definitions; nothing else defines what an op does or is.

Op modules export a tuple ``OPS``; :mod:`neuroncc.ir.ops` gathers them into one :class:`OpRegistry` in one
visible place (no registration by import side effect).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuroncc.errors import TypeInferenceError
from neuroncc.ir.attrs import Attrs, DenseAttr, freeze_attr
from neuroncc.ir.dtypes import DType
from neuroncc.ir.types import TensorType


class Category(enum.Enum):
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    MATMUL = "matmul"
    MOVEMENT = "movement"  # views and data movement: reshape, permute, slice, cat, pad, ...
    INDEX = "index"  # data-dependent addressing: gather, scatter, index_select, index_put, ...
    CONSTANT = "constant"  # constant, full, iota
    EXTERN = "extern"
    RANDOM = "random"  # counter-based random numbers: a pure function of (seed, offset, element index)
    KERNEL = "kernel"  # an op owning a fused region


class Trait(enum.Enum):
    """A property of an op, declared once on its :class:`OpDef` and asked by its consumers.

    A pass or code generator asks the op (``op.has(Trait.VIEW)``, ``REGISTRY.get(name).has(...)``,
    ``REGISTRY.having(trait)`` for the set) and keeps no list of op names of its own. Each trait is one
    question some consumer asks; ``tests/test_op_traits.py`` checks each against the ops' numpy references.
    """

    #: Result element ``i`` reads each operand at the broadcast of ``i`` only (numpy broadcasting) and is
    #: computed from those elements alone: every ELEMENTWISE op, and ``copy``. It fuses into any loop nest
    #: over its result (a matmul epilogue, a tile stage).
    POINTWISE = "pointwise"
    #: A binary op whose result does not change when its two operands swap (add, mul, maximum, eq, ...).
    COMMUTATIVE = "commutative"
    #: Evaluates a transcendental function per element (exp, log, tanh, erf, sin, pow, ...): a polynomial or
    #: a libm call, tens of instructions where an add is one. Cost decisions count these (stores that
    #: bypass the cache, values worth caching per row instead of recomputing).
    TRANSCENDENTAL = "transcendental"
    #: A reduction whose result is the sum of the reduced elements, possibly times a constant (sum, mean):
    #: partial results over pieces of the reduced dims add up, so they can be accumulated piece by piece.
    SUM_REDUCTION = "sum-reduction"
    #: The result may share storage with operand 0 in PyTorch's semantics (an aliasing view): its elements
    #: are operand 0's elements at positions the attributes alone fix (reshape, permute, slice, split, ...).
    VIEW = "view"
    #: A VIEW with one result that is a strided window (shape, strides, offset) on any strided operand,
    #: unless a reshape merges dims that are not laid out contiguously (:mod:`neuroncc.ir.view_windows`).
    #: These stay at the top level and in kernel operands as views. (split has several results;
    #: as_strided indexes the operand's logical row-major order, so only a contiguous operand is a window.)
    STRIDED_VIEW = "strided-view"
    #: The result holds operand 0's elements in the same row-major order, only the dims regrouped (reshape,
    #: squeeze, unsqueeze): flat element ``i`` of the result is flat element ``i`` of the operand.
    RESHAPE = "reshape"
    #: Result element ``i`` is operand 0's element at the broadcast of ``i``: operand 0 broadcast to the
    #: result's shape (expand).
    BROADCAST = "broadcast"
    #: A VIEW that reads operand 0's storage as another element type (view_as_real: c64 as f32 (re, im) pairs;
    #: view_as_complex: back). It stays at the top level (kernels never see c64), where the launcher
    #: reinterprets the buffer; its strides count its own elements (:func:`neuroncc.ir.strides.
    #: reinterpreted_strides`).
    REINTERPRET = "reinterpret"
    #: A (batched) matrix product of the last two operands, [b,] m x k @ k x n, each read transposed when
    #: ``transpose_a`` / ``transpose_b`` is set; a third, leading operand is a bias added to the product
    #: (addmm: beta * bias + alpha * product). What BLAS gemm and TensorE compute.
    MATRIX_PRODUCT = "matrix-product"
    #: The result is operand 0 with elements written or accumulated at data-dependent positions (scatter,
    #: index_put): every element may depend on any input element, and the writes happen in an order.
    INDEXED_WRITE = "indexed-write"
    #: The result is the operands laid end to end along attribute ``dim`` (cat): each operand is a slice of the
    #: result, so a kernel writing the result can write each operand into its slice instead of selecting one
    #: operand per element.
    CONCATENATION = "concatenation"
    #: The result is data held in an attribute (``constant``'s dense value): stored with the compiled program
    #: and read from memory, not computed.
    STORED = "stored"


_REQUIRED = object()


@dataclass(frozen=True, slots=True)
class AttrSpec:
    """One attribute: its kind and default (attributes without a default are required)."""

    kind: str  # int | float | number | bool | str | dtype | ints | numbers | dense | optional-X
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def accepts(self, value: Any) -> bool:
        kind = self.kind
        if kind.startswith("optional-"):
            return value is None or _KIND_CHECKS[kind.removeprefix("optional-")](value)
        return _KIND_CHECKS[kind](value)


#: attribute kind -> does a (frozen) value have that kind
_KIND_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dtype": lambda v: isinstance(v, DType),
    "ints": lambda v: isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
    "numbers": lambda v: isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v),
    "dense": lambda v: isinstance(v, DenseAttr),
}


InferFn = Callable[[tuple[TensorType, ...], Attrs], "TensorType | tuple[TensorType, ...]"]
ReferenceFn = Callable[..., Any]
#: A reduction's rule: (attributes, rank of operand 0) -> the operand dims it reduces over, sorted.
ReducedDimsFn = Callable[[Attrs, int], tuple[int, ...]]
#: A creation op's rule: attributes -> the one value every element of the result holds, or None.
SplatFn = Callable[[Attrs], Any]


@dataclass(frozen=True, slots=True)
class OpDef:
    """The definition of one op (see the module docstring)."""

    name: str
    category: Category
    arity: tuple[int, int | None]  # (min operands, max operands or None for variadic)
    infer: InferFn
    reference: ReferenceFn | None
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    doc: str = ""
    traits: frozenset[Trait] = frozenset()
    # the reference takes ``out_dtype=`` (the result's DType): for ops whose PyTorch kernels round an
    # intermediate to bf16/f16 (the reference otherwise sees float32 compute arrays only)
    wants_out_dtype: bool = False
    #: reductions: which operand dims the op reduces over (``dims``, or argmax's ``dim``)
    reduces: ReducedDimsFn | None = None
    #: creation ops: the one value every element holds, when the attributes decide it (else None)
    splat: SplatFn | None = None
    #: float attributes the op also takes as 0-d operands of its element type (after its own operands, in this
    #: order; its ``lifted`` attribute lists which, by position here): the device's lifting
    #: (``device/programs._lift``) makes a Python float held in one a kernel argument, so one kernel serves every
    #: value (``clamp``'s bounds), where a value built into the code would compile once per value. (Chosen over
    #: lowering clamp to maximum/minimum of a ``full``: those order -0.0 below 0.0 where eager's clamp compares
    #: them equal, and torch.compile's constant clamp keeps its IR and generated code unchanged this way.)
    operand_attrs: tuple[str, ...] = ()

    def has(self, trait: Trait) -> bool:
        """Whether the op declares ``trait``."""
        return trait in self.traits

    def reduced_dims(self, attrs: Attrs, rank: int) -> tuple[int, ...]:
        """The dims of operand 0 (of rank ``rank``) that this reduction reduces over, sorted."""
        if self.reduces is None:
            raise TypeError(f"op '{self.name}' is not a reduction")
        return self.reduces(attrs, rank)

    def splat_value(self, attrs: Attrs) -> Any:
        """The one value every element of the result holds, when the attributes decide it; else None."""
        return self.splat(attrs) if self.splat is not None else None
    # rules across attribute values (after each value's kind is checked); raises TypeInferenceError
    check_attrs: Callable[[Attrs], None] | None = None

    #: the op takes complex (c64) operands or results. Movement, indexing and kernel ops always do (they move
    # elements whatever their type); elementwise ops, reductions and library ops say so one by one.
    takes_complex: bool = False

    @property
    def accepts_complex(self) -> bool:
        return self.takes_complex or self.category in (Category.MOVEMENT, Category.INDEX, Category.KERNEL)

    def normalize_attrs(self, attrs: Mapping[str, Any]) -> Attrs:
        """Check attribute names and kinds and fill in defaults."""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise TypeInferenceError(f"op '{self.name}': unknown attribute '{unknown[0]}'")
        values = dict(Attrs(attrs))
        for key, spec in self.attrs.items():
            if key not in values:
                if spec.required:
                    raise TypeInferenceError(f"op '{self.name}': missing required attribute '{key}'")
                values[key] = spec.default
            value = freeze_attr(values[key])
            if spec.kind in ("float", "optional-float") and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not spec.accepts(value):
                raise TypeInferenceError(
                    f"op '{self.name}': attribute '{key}' must be {spec.kind}, got {value!r}"
                )
            values[key] = value
        normalized = Attrs(values)
        if self.check_attrs is not None:
            self.check_attrs(normalized)
        return normalized

    def infer_types(self, operand_types: tuple[TensorType, ...], attrs: Attrs,
                    regions: tuple[Any, ...] = ()) -> tuple[TensorType, ...]:
        low, high = self.arity
        count = len(operand_types)
        if count < low or (high is not None and count > high):
            expected = f"{low}" if low == high else f"{low}..{high if high is not None else ''}"
            raise TypeInferenceError(f"op '{self.name}' takes {expected} operands, got {count}")
        if self.category is Category.KERNEL:
            return _infer_kernel(self.name, operand_types, regions)
        result = self.infer(operand_types, attrs)
        results = result if isinstance(result, tuple) else (result,)
        if not self.accepts_complex and any(t.dtype.is_complex for t in operand_types + results):
            raise TypeInferenceError(f"op '{self.name}' does not take complex (c64) operands")
        return results


def _infer_kernel(name: str, operand_types: tuple[TensorType, ...], regions: tuple[Any, ...]) -> tuple[TensorType, ...]:
    if len(regions) != 1:
        raise TypeInferenceError(f"op '{name}' needs exactly one region, got {len(regions)}")
    region = regions[0]
    params = tuple(v.type for v in region.params)
    if len(params) != len(operand_types):
        raise TypeInferenceError(
            f"op '{name}': region takes {len(params)} parameters but the op has {len(operand_types)} operands"
        )
    for index, (have, want) in enumerate(zip(operand_types, params)):
        if have.shape != want.shape or have.dtype != want.dtype:
            raise TypeInferenceError(f"op '{name}': operand #{index} is {have} but the region expects {want}")
    return tuple(v.type for v in region.outputs)


class OpRegistry:
    """All ops by name. Built once from the op modules' ``OPS`` tuples; extended only by ``with_ops``."""

    def __init__(self, opdefs: Iterable[OpDef]):
        self._ops: dict[str, OpDef] = {}
        for opdef in opdefs:
            if opdef.name in self._ops:
                raise ValueError(f"op '{opdef.name}' defined twice")
            self._ops[opdef.name] = opdef

    def get(self, name: str) -> OpDef:
        try:
            return self._ops[name]
        except KeyError:
            raise TypeInferenceError(f"unknown op '{name}'") from None

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def __iter__(self):
        return iter(self._ops.values())

    def __len__(self) -> int:
        return len(self._ops)

    def names(self) -> list[str]:
        return sorted(self._ops)

    def by_category(self, category: Category) -> list[OpDef]:
        return [d for d in self._ops.values() if d.category is category]

    def having(self, trait: Trait) -> frozenset[str]:
        """The names of the ops that declare ``trait`` (a named group of ops, for a consumer that needs the set)."""
        return frozenset(name for name, d in self._ops.items() if trait in d.traits)


# ---- helpers shared by the op modules' type rules ------------------------------------------------------


def fail(op: str, message: str) -> TypeInferenceError:
    return TypeInferenceError(f"op '{op}': {message}")


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy/PyTorch broadcasting of several shapes, with an error naming the op and both shapes."""
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        for i, size in enumerate(padded):
            if size == result[i] or size == 1:
                continue
            if result[i] == 1:
                result[i] = size
            else:
                listed = " and ".join(str(list(s)) for s in shapes)
                raise fail(op, f"shapes {listed} cannot be broadcast together (dimension {i})")
    return tuple(result)


def normalize_dim(op: str, dim: int, rank: int, *, what: str = "dim") -> int:
    """A dimension index in range for ``rank`` (negative counts from the end); 0-dim tensors accept 0/-1."""
    bound = max(rank, 1)
    if not -bound <= dim < bound:
        raise fail(op, f"{what} {dim} is out of range for a tensor of rank {rank}")
    return dim % bound


def same_dtype(op: str, types: tuple[TensorType, ...]) -> DType:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        listed = ", ".join(str(t) for t in types)
        raise fail(op, f"operands must have one element type, got {listed}")
    return types[0].dtype


#: The largest finite value of each float type (bf16 keeps float32's exponent range with 8 significant bits).
_FLOAT_MAX = {DType.f32: float(np.finfo(np.float32).max), DType.bf16: 3.3895313892515355e38, DType.f16: 65504.0,
              DType.c64: float(np.finfo(np.float32).max)}


def check_scalar(op: str, what: str, value: int | float, dtype: DType) -> None:
    """Refuse a scalar attribute that ``dtype`` cannot hold, as PyTorch does ("value cannot be converted to type
    ... without overflow"): integers must be integral and in range, floats must not overflow to inf.
    Any number converts to bool (non-zero is true).
    """
    if dtype.is_bool:
        return
    if dtype.is_int:
        if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
            raise fail(op, f"{what} {value} is not representable in {dtype.value}")
        info = np.iinfo(dtype.numpy)
        if not int(info.min) <= int(value) <= int(info.max):
            raise fail(op, f"{what} {value} is out of range for {dtype.value} [{info.min}, {info.max}]")
        return
    if math.isfinite(value) and abs(value) > _FLOAT_MAX[dtype]:
        raise fail(op, f"{what} {value} overflows {dtype.value}")
