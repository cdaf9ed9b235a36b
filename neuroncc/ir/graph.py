"""The dataflow graph: SSA values, ops, and functions.

A :class:`Function` is a flat, topologically ordered list of :class:`Op` s over SSA :class:`Value` s, like a
jaxpr. Values are compared by identity and carry their type; textual names are chosen by the printer (an
optional ``hint`` keeps user-facing names such as argument names readable). Ops may own regions: nested
functions that are isolated from above (they see only their own parameters), which is how fused kernels are
represented after the fusion pass.

Graphs are immutable values. Passes build new graphs with :class:`Builder` (or ``dataclasses.replace``), so a
graph handed to a pass is never changed behind anyone's back.

The text form (``.nir``) lives here too, because it is a function's identity: two functions are equal when
they print to the same text, and the compile cache hashes the canonical text. :mod:`neuroncc.ir.parser`
reads it back::

    func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>) -> (tensor<8x32xf32>) {
      %0 = mm %x, %w : tensor<8x32xf32>
      %1 = relu %0 : tensor<8x32xf32>
      return %1
    }

Values print as ``%hint`` when they carry a usable hint and ``%N`` otherwise. ``canonical=True`` ignores hints
and numbers every value in definition order, so two graphs that differ only in names print the same.
Attributes print sorted by name; those equal to their op's declared default are left out (the parser fills
them back in). Dense constants of up to ``INLINE_ELEMENT_LIMIT`` elements print inline; larger ones print as
``resource<2048x2048xf32: "c_<sha>">`` and their data travels beside the text (see :func:`collect_resources`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuroncc.ir.attrs import EMPTY_ATTRS, Attrs, AttrValue, DenseAttr
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import OpDef, Trait
from neuroncc.ir.ops import REGISTRY
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

    @property
    def opdef(self) -> OpDef:
        """The op's definition: category, attributes, traits, type rule and numpy reference."""
        return REGISTRY.get(self.name)

    def has(self, trait: Trait) -> bool:
        """Whether the op's definition declares ``trait``: ``op.has(Trait.STRIDED_VIEW)``."""
        return trait in REGISTRY.get(self.name).traits

    def __repr__(self) -> str:
        return f"Op({self.name}, {len(self.operands)} operands, {len(self.results)} results)"


@dataclass(frozen=True, slots=True, eq=False)
class Function:
    """A graph: typed parameters, ops in topological order, and the values it returns.

    Equality is structural: two functions are equal when they print to the same text. ``metadata`` holds
    facts about the whole function; one of them changes what an executable may do: ``donated = ((o, p),
    ...)`` says the caller stores output ``o`` into parameter ``p``'s tensor after the call and never reads
    ``p``'s old value again (an optimizer's ``param.copy_(new)``), so an executable may compute ``o`` straight
    into ``p``'s buffer (the cpu launch plan does where its kernels allow: ``codegen/llvm/in_place.py``). The
    verifier checks each pair names an output and a parameter of one shape and dtype, each at most once.
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
        return print_function(self) == print_function(other)

    def __hash__(self) -> int:
        return hash(print_function(self, canonical=True))

    def __str__(self) -> str:
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


# ---- the text form ------------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def format_float(value: float) -> str:
    """Shortest text that reads back as the same float (repr), with inf/nan spelled as keywords (a NaN with its
    sign bit set as ``-nan``: clamp_min's NaN bound is returned as it is)."""
    if math.isnan(value) and math.copysign(1.0, value) < 0:
        return "-nan"
    return repr(float(value))  # 'inf', '-inf', 'nan', '1e-05', '0.5'


def format_type(t: TensorType) -> str:
    return str(t)


def format_shape_dtype(shape: tuple[int, ...], dtype: DType) -> str:
    return "".join(f"{s}x" for s in shape) + dtype.value


def _format_scalar(value: object, dtype: DType) -> str:
    if dtype.is_bool:
        return "true" if value else "false"
    if dtype.is_float:
        return format_float(float(value))  # type: ignore[arg-type]
    return str(int(value))  # type: ignore[call-overload]


def format_dense(attr: DenseAttr) -> str:
    head = format_shape_dtype(attr.array.shape, attr.dtype)
    if not attr.is_inline:
        return f'resource<{head}: "{attr.resource_name}">'
    values = ", ".join(_format_scalar(v, attr.dtype) for v in attr.array.reshape(-1).tolist())
    return f"dense<{head}: [{values}]>"


def format_attr(value: AttrValue) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, DType):
        return value.value
    if isinstance(value, DenseAttr):
        return format_dense(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def format_symbol(name: str) -> str:
    """A function name or attribute key: bare when it is an identifier, else a quoted string."""
    return name if _IDENTIFIER.match(name) else json.dumps(name)


def format_attrs(attrs) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{format_symbol(k)} = {format_attr(v)}" for k, v in attrs.items()) + "}"


def _non_default_attrs(op: Op) -> dict:
    """The op's attributes minus those equal to their declared default (the parser fills those back in)."""
    if op.name not in REGISTRY:
        return dict(op.attrs)
    specs = REGISTRY.get(op.name).attrs
    return {
        key: value for key, value in op.attrs.items()
        if key not in specs or specs[key].required or not _same_attr(specs[key].default, value)
    }


def _same_attr(default: object, value: object) -> bool:
    return type(default) is type(value) and default == value


class _Namer:
    def __init__(self, canonical: bool):
        self.canonical = canonical
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, value: Value) -> str:
        name = None
        hint = value.hint
        if not self.canonical and hint and _IDENTIFIER.match(hint):
            name, suffix = hint, 1
            while name in self.used:
                name, suffix = f"{hint}_{suffix}", suffix + 1
        if name is None:
            name = str(self.counter)
            self.counter += 1
        self.used.add(name)
        self.names[value] = name
        return "%" + name

    def use(self, value: Value) -> str:
        try:
            return "%" + self.names[value]
        except KeyError:
            return f"%<undefined {value.type}>"


def _print_body(fn: Function, namer: _Namer, indent: str, lines: list[str]) -> None:
    for op in fn.ops:
        _print_op(op, namer, indent, lines)
    lines.append(f"{indent}return " + ", ".join(namer.use(v) for v in fn.outputs) if fn.outputs else f"{indent}return")


def _print_op(op: Op, namer: _Namer, indent: str, lines: list[str]) -> None:
    operands = ", ".join(namer.use(v) for v in op.operands)
    results = ", ".join(namer.define(v) for v in op.results)
    types = ", ".join(format_type(v.type) for v in op.results)
    head = f"{results} = " if op.results else ""
    text = f"{indent}{head}{op.name}"
    if operands:
        text += " " + operands
    text += format_attrs(_non_default_attrs(op))
    if op.results:
        text += " : " + types
    if not op.regions:
        lines.append(text)
        return
    for region in op.regions:
        params = ", ".join(f"{namer.define(p)}: {format_type(p.type)}" for p in region.params)
        lines.append(f"{text} region({params}){_format_metadata(region)} {{")
        _print_body(region, namer, indent + "  ", lines)
        text = f"{indent}}}"
    lines.append(text)


def _format_metadata(fn: Function) -> str:
    """`` attributes {...}`` after a function's or a region's signature (a region's: the facts the fusion pass
    hands it about its parameters, ``ir/signs.py``), or nothing."""
    return f" attributes{format_attrs(fn.metadata)}" if fn.metadata else ""


def print_function(fn: Function, *, canonical: bool = False) -> str:
    namer = _Namer(canonical)
    params = ", ".join(f"{namer.define(p)}: {format_type(p.type)}" for p in fn.params)
    outputs = ", ".join(format_type(v.type) for v in fn.outputs)
    lines = [f"func @{format_symbol(fn.name)}({params}) -> ({outputs}){_format_metadata(fn)} {{"]
    _print_body(fn, namer, "  ", lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_module(functions: list[Function] | tuple[Function, ...], *, canonical: bool = False) -> str:
    return "\n".join(print_function(fn, canonical=canonical) for fn in functions)


def collect_resources(fn: Function) -> dict[str, np.ndarray]:
    """The large constants that print as resources, by resource name (to be saved beside the text)."""
    found: dict[str, np.ndarray] = {}
    for op in fn.walk():
        for value in op.attrs.values():
            if isinstance(value, DenseAttr) and not value.is_inline:
                found[value.resource_name] = value.array
    return found


def value_names(fn: Function) -> dict[Value, str]:
    """The ``%name`` each value of ``fn`` (regions included) gets when ``fn`` is printed."""
    namer = _Namer(canonical=False)
    for p in fn.params:
        namer.define(p)
    _print_body(fn, namer, "", [])
    return {v: "%" + n for v, n in namer.names.items()}
