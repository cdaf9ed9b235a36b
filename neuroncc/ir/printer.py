"""The text form of the IR (``.nir``). Printing is deterministic; :mod:`neuroncc.ir.parser` reads it back.

    func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>) -> (tensor<8x32xf32>) {
      %0 = mm %x, %w : tensor<8x32xf32>
      %1 = relu %0 : tensor<8x32xf32>
      return %1
    }

Values print as ``%hint`` when they carry a usable hint and ``%N`` otherwise. ``canonical=True`` ignores hints
and numbers every value in definition order, so two graphs that differ only in names print the same: that
text is what the compile cache hashes. Attributes print sorted by name. Dense constants of up to
``INLINE_ELEMENT_LIMIT`` elements print inline; larger ones print as ``resource<2048x2048xf32: "c_<sha>">``
and their data travels beside the text (see :func:`collect_resources`).
"""

from __future__ import annotations

import json
import re

import numpy as np

from neuroncc.ir.attrs import AttrValue, DenseAttr
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.types import TensorType

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def format_float(value: float) -> str:
    """Shortest text that reads back as the same float (repr), with inf/nan spelled as keywords."""
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
    from neuroncc.ir.ops import REGISTRY

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
        lines.append(f"{text} region({params}) {{")
        _print_body(region, namer, indent + "  ", lines)
        text = f"{indent}}}"
    lines.append(text)


def print_function(fn: Function, *, canonical: bool = False) -> str:
    namer = _Namer(canonical)
    params = ", ".join(f"{namer.define(p)}: {format_type(p.type)}" for p in fn.params)
    outputs = ", ".join(format_type(v.type) for v in fn.outputs)
    meta = f" attributes{format_attrs(fn.metadata)}" if fn.metadata else ""
    lines = [f"func @{format_symbol(fn.name)}({params}) -> ({outputs}){meta} {{"]
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
