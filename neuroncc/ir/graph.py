"""The dataflow graph: SSA values, ops, and functions.

A :class:`Function` is a flat, topologically ordered list of :class:`Op` s over SSA :class:`Value` s, like a
jaxpr. Values are compared by identity and carry their type; textual names are chosen by the printer (an
optional ``hint`` keeps user-facing names such as argument names readable). Ops may own regions: nested
functions that are isolated from above (they see only their own parameters), which is how fused kernels are
represented after the fusion pass.

Graphs are immutable values. Passes build new graphs with :class:`Builder` (or ``dataclasses.replace``), so a
graph handed to a pass is never changed behind anyone's back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neuroncc.ir.attrs import EMPTY_ATTRS, Attrs
from neuroncc.ir.types import TensorType


class Value:
    """An SSA value. Identity is the value; ``type`` is fixed at creation."""

    __slots__ = ("type", "hint")

    def __init__(self, type: TensorType, hint: str | None = None):
        if not isinstance(type, TensorType):
            raise TypeError(f"Value type must be a TensorType, got {type!r}")
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        name = f"%{self.hint}" if self.hint else f"<value {id(self):#x}>"
        return f"{name}: {self.type}"


@dataclass(frozen=True, slots=True, eq=False)
class Op:
    """One operation: ``results = name(operands) {attrs}``, optionally owning regions."""

    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attrs: Attrs = EMPTY_ATTRS
    regions: tuple[Function, ...] = ()

    @property
    def result(self) -> Value:
        """The single result; an error for ops with several."""
        if len(self.results) != 1:
            raise ValueError(f"op {self.name} has {len(self.results)} results, not 1")
        return self.results[0]

    def __repr__(self) -> str:
        return f"Op({self.name}, {len(self.operands)} operands, {len(self.results)} results)"


@dataclass(frozen=True, slots=True, eq=False)
class Function:
    """A graph: typed parameters, ops in topological order, and the values it returns.

    Equality is structural: two functions are equal when they print to the same text.
    """

    name: str
    params: tuple[Value, ...]
    ops: tuple[Op, ...]
    outputs: tuple[Value, ...]
    metadata: Attrs = field(default=EMPTY_ATTRS)

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return tuple(v.type for v in self.params)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(v.type for v in self.outputs)

    def walk(self) -> Iterator[Op]:
        """Every op, nested regions included, in pre-order."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()

    def producers(self) -> dict[Value, Op]:
        """Map from each op result to the op that defines it (this function's top level only)."""
        return {r: op for op in self.ops for r in op.results}

    def users(self) -> dict[Value, list[tuple[Op, int]]]:
        """Use lists: for each value, the (op, operand index) pairs that read it (top level only).

        Function outputs are not ops; see :meth:`output_uses`.
        """
        uses: dict[Value, list[tuple[Op, int]]] = {}
        for op in self.ops:
            for index, operand in enumerate(op.operands):
                uses.setdefault(operand, []).append((op, index))
        return uses

    def output_uses(self) -> dict[Value, list[int]]:
        uses: dict[Value, list[int]] = {}
        for index, value in enumerate(self.outputs):
            uses.setdefault(value, []).append(index)
        return uses

    def replace_uses(self, mapping: Mapping[Value, Value]) -> Function:
        """A copy with every use of a key value (in operands and outputs) replaced by its mapped value.

        Chains are followed (a -> b, b -> c replaces a by c); a cycle is a ValueError rather than a hang.
        """
        def sub(v: Value) -> Value:
            seen = set()
            while v in mapping:
                if v in seen:
                    raise ValueError(f"replace_uses: the mapping has a cycle through {v!r}")
                seen.add(v)
                v = mapping[v]
            return v
        ops = tuple(
            Op(op.name, tuple(sub(v) for v in op.operands), op.results, op.attrs, op.regions) for op in self.ops
        )
        return Function(self.name, self.params, ops, tuple(sub(v) for v in self.outputs), self.metadata)

    def with_ops(self, ops: Iterable[Op], outputs: Sequence[Value] | None = None) -> Function:
        return Function(
            self.name, self.params, tuple(ops), tuple(outputs) if outputs is not None else self.outputs,
            self.metadata,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Function):
            return NotImplemented
        from neuroncc.ir.printer import print_function

        return print_function(self) == print_function(other)

    def __hash__(self) -> int:
        from neuroncc.ir.printer import print_function

        return hash(print_function(self, canonical=True))

    def __str__(self) -> str:
        from neuroncc.ir.printer import print_function

        return print_function(self)


class Builder:
    """Builds a :class:`Function` op by op, inferring each result type from the op registry.

    >>> b = Builder("f")
    >>> x = b.param(TensorType((4, 8), DType.f32), "x")
    >>> y = b.op("relu", x)
    >>> fn = b.build([y])
    """

    def __init__(self, name: str = "main", metadata: Mapping[str, Any] | None = None):
        self.name = name
        self.params: list[Value] = []
        self.ops: list[Op] = []
        self.metadata = Attrs(metadata or {})

    def param(self, type: TensorType, hint: str | None = None) -> Value:
        value = Value(type, hint)
        self.params.append(value)
        return value

    def op(self, name: str, /, *operands: Value, regions: Sequence[Function] = (), hint: str | None = None,
           **attrs: Any) -> Any:
        """Append op ``name``; returns its result, or a tuple of results for multi-result ops.

        ``name`` is positional-only, so an attribute called ``name`` (the ``kernel`` op's) passes as a keyword.
        """
        results = self.emit(name, operands, Attrs(attrs), regions, hint=hint).results
        return results[0] if len(results) == 1 else results

    def emit(self, name: str, operands: Sequence[Value], attrs: Attrs = EMPTY_ATTRS,
             regions: Sequence[Function] = (), result_types: Sequence[TensorType] | None = None,
             hint: str | None = None) -> Op:
        """Append an op and return it. Result types are inferred unless given (for ops like ``kernel``)."""
        from neuroncc.ir.ops import REGISTRY

        opdef = REGISTRY.get(name)
        attrs = opdef.normalize_attrs(attrs)
        operand_types = tuple(v.type for v in operands)
        if result_types is None:
            result_types = opdef.infer_types(operand_types, attrs, tuple(regions))
        results = tuple(Value(t, hint) for t in result_types)
        op = Op(name, tuple(operands), results, attrs, tuple(regions))
        self.ops.append(op)
        return op

    def append(self, op: Op) -> Op:
        """Append an already-built op (its results are reused as they are)."""
        self.ops.append(op)
        return op

    def build(self, outputs: Sequence[Value]) -> Function:
        return Function(self.name, tuple(self.params), tuple(self.ops), tuple(outputs), self.metadata)


def clone_function(fn: Function, name: str | None = None) -> Function:
    """A deep copy with fresh values (useful when one graph must appear twice, e.g. inlined regions)."""
    mapping: dict[Value, Value] = {}

    def fresh(v: Value) -> Value:
        mapping[v] = Value(v.type, v.hint)
        return mapping[v]

    params = tuple(fresh(v) for v in fn.params)
    ops = []
    for op in fn.ops:
        operands = tuple(mapping[v] for v in op.operands)
        results = tuple(fresh(r) for r in op.results)
        regions = tuple(clone_function(r) for r in op.regions)
        ops.append(Op(op.name, operands, results, op.attrs, regions))
    return Function(name or fn.name, params, tuple(ops), tuple(mapping[v] for v in fn.outputs), fn.metadata)
