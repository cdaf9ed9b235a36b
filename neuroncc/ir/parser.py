"""Reads the ``.nir`` text form (see :mod:`neuroncc.ir.graph`) back into functions.

A hand-written recursive-descent parser over the raw text; every error is a :class:`ParseError` naming the
line and column. ``//`` starts a comment (lit ``RUN:`` and FileCheck ``CHECK:`` lines live in comments).
After parsing, the verifier runs; its errors are reported at the offending op's line and column.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

import numpy as np

from neuroncc.errors import ParseError, TypeInferenceError, VerifyError
from neuroncc.ir.attrs import EMPTY_ATTRS, Attrs, DenseAttr
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import TensorType
from neuroncc.ir.verifier import verify as verify_function

_DTYPES = {d.value: d for d in DType}
_NAME = re.compile(r"[A-Za-z0-9_.]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NUMBER = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")
_SHAPE_DTYPE = re.compile(r"((?:\d+x)*)([a-z][a-z0-9]*)")
#: A tensor's byte size must fit a signed 64-bit offset (the code generators index with i64).
_BYTE_LIMIT = 2 ** 63
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_BLANK = re.compile(r"(?:[ \t\r\n]+|//[^\n]*)*")
_BLANK_START = frozenset(" \t\r\n/")  # the characters _BLANK can start with
_INTEGER = re.compile(r"-?\d+")
#: An op's attribute list as text: ``{`` to the first ``}`` outside a string literal (attribute values nest in
#: ``[...]`` and ``<...>``, never in braces). Only used to find a repeat of a list parsed before (parse_op).
_ATTR_TEXT = re.compile(r'\{(?:[^{}"]|"(?:[^"\\\n]|\\.)*")*\}')
#: How deeply attribute lists and regions may nest (deeper input is refused instead of exhausting Python's stack).
MAX_NESTING = 64


class _Parser:
    def __init__(self, text: str, source: str, resources: Mapping[str, np.ndarray]):
        self.text, self.source, self.resources = text, source, resources
        self.pos = 0
        self.region_depth = 0
        self.op_positions: dict[int, int] = {}  # id(op) -> offset of its text; line:col computed on error only
        self.declared_outputs: list[tuple[tuple[TensorType, ...], int]] = []
        #: the text of each type parsed (``tensor<...>``, nothing else in it) -> the type: a graph spells its few
        #: types over and over (142 types, 30 distinct, in the transformer block's backward), and types are
        #: immutable, so a repeat is a lookup (a fifth of parsing a stored graph when a warm start loads it)
        self.types: dict[str, TensorType] = {}
        #: (op name, its attribute text) -> the op's normalized attributes: region ops repeat the same few
        #: (``sum {dims = [2], keepdim = true}``), attributes are immutable, and checking them and filling in the
        #: defaults was a quarter of parsing a stored graph (3 of 12 ms for the transformer block's two graphs)
        self.normalized: dict[tuple[str, str], Attrs] = {}

    # ---- low-level scanning --------------------------------------------------------------------------

    def location(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, column

    def error(self, message: str, pos: int | None = None) -> ParseError:
        line, column = self.location(pos)
        return ParseError(message, line, column, self.source)

    def skip(self) -> None:
        """Skip whitespace and ``//`` comments."""
        pos = self.pos
        if pos < len(self.text) and self.text[pos] not in _BLANK_START:
            return  # most tokens follow one another directly: no regex match (a third of a parse's time)
        self.pos = _BLANK.match(self.text, pos).end()

    def peek(self, token: str) -> bool:
        text, pos = self.text, self.pos
        if pos < len(text) and text[pos] in _BLANK_START:  # skip(), inline: a parse peeks ~50 times per op
            pos = self.pos = _BLANK.match(text, pos).end()
        return text.startswith(token, pos)

    def accept(self, token: str) -> bool:
        text, pos = self.text, self.pos
        if pos < len(text) and text[pos] in _BLANK_START:
            pos = self.pos = _BLANK.match(text, pos).end()
        if text.startswith(token, pos):
            self.pos = pos + len(token)
            return True
        return False

    def expect(self, token: str, what: str | None = None) -> None:
        if not self.accept(token):
            raise self.error(f"expected {what or repr(token)}, found {self.describe_next()}")

    def describe_next(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            return "end of input"
        snippet = self.text[self.pos:self.pos + 12].split("\n")[0]
        return repr(snippet)

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip()
        found = pattern.match(self.text, self.pos)
        if not found:
            raise self.error(f"expected {what}, found {self.describe_next()}")
        self.pos = found.end()
        return found.group(0)

    def keyword(self, word: str) -> bool:
        self.skip()
        found = _IDENT.match(self.text, self.pos)
        if found and found.group(0) == word:
            self.pos = found.end()
            return True
        return False

    # ---- grammar -------------------------------------------------------------------------------------

    def parse_module(self) -> list[Function]:
        functions = []
        while True:
            self.skip()
            if self.pos >= len(self.text):
                break
            functions.append(self.parse_function())
        if not functions:
            raise self.error("expected 'func', found end of input")
        return functions

    def parse_function(self) -> Function:
        if not self.keyword("func"):
            raise self.error(f"expected 'func', found {self.describe_next()}")
        self.expect("@", "'@' and a function name")
        name = self.parse_string("a function name") if self.peek('"') else self.match(_NAME, "function name")
        scope: dict[str, Value] = {}
        params = self.parse_params(scope)
        self.expect("->", "'->' and the result types")
        self.expect("(")
        declared_outputs = self.parse_type_list(")")
        self.expect(")")
        metadata = Attrs()
        if self.keyword("attributes"):
            metadata = self.parse_attrs()
        ops, outputs, return_pos = self.parse_block(scope)
        self.declared_outputs.append((declared_outputs, return_pos))
        return Function(name, params, ops, outputs, metadata)

    def check_return_types(self, index: int, fn: Function) -> None:
        declared, return_pos = self.declared_outputs[index]
        if fn.output_types != declared:
            raise self.error(
                f"return types ({', '.join(map(str, fn.output_types))}) differ from the declared result types "
                f"({', '.join(map(str, declared))})", return_pos)

    def parse_params(self, scope: dict[str, Value]) -> tuple[Value, ...]:
        self.expect("(")
        params: list[Value] = []
        if not self.accept(")"):
            while True:
                self.skip()
                name_pos = self.pos
                name = self.parse_value_name()
                self.expect(":")
                value = Value(self.parse_type(), hint=None if name.isdigit() else name)
                self.define(scope, name, value, name_pos)
                params.append(value)
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        return tuple(params)

    def parse_block(self, scope: dict[str, Value]) -> tuple[tuple[Op, ...], tuple[Value, ...], int]:
        self.expect("{")
        ops: list[Op] = []
        while True:
            self.skip()
            start = self.pos
            if self.keyword("return"):
                outputs: list[Value] = []
                if self.peek("%"):
                    outputs.append(self.parse_use(scope))
                    while self.accept(","):
                        outputs.append(self.parse_use(scope))
                self.expect("}", "'}' after return")
                return tuple(ops), tuple(outputs), start
            if self.pos >= len(self.text):
                raise self.error("unexpected end of input inside a function body (missing 'return' and '}')")
            ops.append(self.parse_op(scope))

    def parse_op(self, scope: dict[str, Value]) -> Op:
        start = self.pos
        result_names: list[tuple[str, int]] = []
        if self.peek("%"):
            while True:
                self.skip()
                name_pos = self.pos
                result_names.append((self.parse_value_name(), name_pos))
                if not self.accept(","):
                    break
            self.expect("=", "'=' after the result names")
        self.skip()
        name_pos = self.pos
        op_name = self.match(_IDENT, "an op name")
        if op_name not in REGISTRY:
            raise self.error(f"unknown op '{op_name}'", name_pos)
        operands: list[Value] = []
        if self.peek("%"):
            operands.append(self.parse_use(scope))
            while self.accept(","):
                operands.append(self.parse_use(scope))
        self.skip()
        attrs_pos = self.pos
        # a repeat of an attribute list parsed before (the same op name and text; parsing is a function of the
        # text): its normalized attributes, without parsing it again (a list that is not matched is parsed)
        spelled_text: str | None = ""  # no attribute list
        if self.text.startswith("{", attrs_pos):
            listed = _ATTR_TEXT.match(self.text, attrs_pos)
            spelled_text = listed.group(0) if listed else None
        if spelled_text is not None and (known := self.normalized.get((op_name, spelled_text))) is not None:
            attrs = known
            self.pos += len(spelled_text)
        else:
            attrs = self.parse_attrs() if self.peek("{") else EMPTY_ATTRS
            spelled = (op_name, self.text[attrs_pos:self.pos])
            try:
                attrs = REGISTRY.get(op_name).normalize_attrs(attrs)  # fills in the defaults the printer elides
            except TypeInferenceError as exc:
                raise self.error(str(exc), attrs_pos) from None
            self.normalized[spelled] = attrs
        result_types: tuple[TensorType, ...] = ()
        if result_names:
            self.expect(":", "':' and the result types")
            result_types = self.parse_type_list(None)
            if len(result_types) != len(result_names):
                raise self.error(f"{len(result_names)} results named but {len(result_types)} types given", start)
        results = []
        for (name, pos), rtype in zip(result_names, result_types):
            value = Value(rtype, hint=None if name.isdigit() else name)
            self.define(scope, name, value, pos)
            results.append(value)
        regions = []
        while self.keyword("region"):
            if self.region_depth >= MAX_NESTING:
                raise self.error(f"regions nested more than {MAX_NESTING} levels deep")
            self.region_depth += 1
            region_scope: dict[str, Value] = {}  # regions are isolated from above: a fresh scope
            params = self.parse_params(region_scope)
            metadata = self.parse_attrs() if self.keyword("attributes") else Attrs()
            body, outputs, _ = self.parse_block(region_scope)
            self.region_depth -= 1
            regions.append(Function(f"{op_name}_region", params, body, outputs, metadata))
        op = Op(op_name, tuple(operands), tuple(results), attrs, tuple(regions))
        self.op_positions[id(op)] = start
        return op

    def define(self, scope: dict[str, Value], name: str, value: Value, pos: int) -> None:
        if name in scope:
            raise self.error(f"value %{name} is defined twice", pos)
        scope[name] = value

    def parse_value_name(self) -> str:
        self.expect("%", "a value name '%...'")
        found = _NAME.match(self.text, self.pos)
        if not found:
            raise self.error("expected a value name after '%'")
        self.pos = found.end()
        return found.group(0)

    def parse_use(self, scope: dict[str, Value]) -> Value:
        self.skip()
        pos = self.pos
        name = self.parse_value_name()
        if name not in scope:
            raise self.error(f"use of undefined value %{name}", pos)
        return scope[name]

    def parse_type_list(self, closer: str | None) -> tuple[TensorType, ...]:
        if closer is not None and self.peek(closer):
            return ()
        types = [self.parse_type()]
        while self.accept(","):
            types.append(self.parse_type())
        return tuple(types)

    def parse_type(self) -> TensorType:
        self.skip()
        start = self.pos
        end = self.text.find(">", start) + 1
        known = self.types.get(self.text[start:end]) if end else None
        if known is not None:
            self.pos = end
            return known
        parsed = self._parse_type(start)
        if self.pos == end:
            self.types[self.text[start:end]] = parsed
        return parsed

    def _parse_type(self, start: int) -> TensorType:
        if not self.keyword("tensor"):
            raise self.error(f"expected a tensor type, found {self.describe_next()}")
        self.expect("<")
        shape, dtype = self.parse_shape_dtype()
        strides = None
        if self.accept(","):
            if not self.keyword("strides"):
                raise self.error(f"expected 'strides', found {self.describe_next()}")
            self.expect("=")
            strides = self.parse_int_list()
        self.expect(">", "'>' closing the tensor type")
        try:
            return TensorType(shape, dtype, strides)
        except ValueError as exc:
            raise self.error(str(exc), start) from None

    def parse_shape_dtype(self) -> tuple[tuple[int, ...], DType]:
        self.skip()
        found = _SHAPE_DTYPE.match(self.text, self.pos)
        if not found:
            raise self.error(f"expected a shape and element type like 4x8xf32, found {self.describe_next()}")
        dims, dtype_name = found.group(1), found.group(2)
        if dtype_name not in _DTYPES:
            raise self.error(f"unknown element type '{dtype_name}' (known: {', '.join(_DTYPES)})",
                             self.pos + len(dims))
        shape = tuple(int(d) for d in dims.split("x") if d)
        if math.prod(shape) * _DTYPES[dtype_name].itemsize >= _BYTE_LIMIT:  # its offsets would overflow i64
            raise self.error(f"tensor of {dims}{dtype_name} has {math.prod(shape)} elements, more bytes than a "
                             "64-bit offset can address")
        self.pos = found.end()
        return shape, _DTYPES[dtype_name]

    def parse_int_list(self) -> tuple[int, ...]:
        self.expect("[")
        values: list[int] = []
        if not self.accept("]"):
            while True:
                values.append(int(self.match(_INTEGER, "an integer")))
                if self.accept("]"):
                    break
                self.expect(",", "',' or ']'")
        return tuple(values)

    def parse_attrs(self) -> Attrs:
        self.expect("{")
        values: dict[str, object] = {}
        if not self.accept("}"):
            while True:
                pos = self.pos
                quoted = self.peek('"')
                key = self.parse_string("an attribute name") if quoted else self.match(_IDENT, "an attribute name")
                if key in values:
                    raise self.error(f"attribute '{key}' given twice", pos)
                self.expect("=", "'=' after the attribute name")
                values[key] = self.parse_attr_value()
                if self.accept("}"):
                    break
                self.expect(",", "',' or '}' in the attribute list")
        return Attrs(values)

    def parse_string(self, what: str) -> str:
        """A JSON string literal (the printer writes strings with json.dumps)."""
        self.skip()
        pos = self.pos
        literal = self.match(_STRING, what)
        try:
            return json.loads(literal)
        except ValueError as exc:  # a bad escape such as \q or a truncated \u12
            raise self.error(f"malformed string literal: {exc.msg}", pos) from None

    def parse_attr_value(self, depth: int = 0) -> object:
        self.skip()
        pos = self.pos
        if depth > MAX_NESTING:
            raise self.error(f"attribute value nested more than {MAX_NESTING} levels deep")
        if self.peek('"'):
            return self.parse_string("a string")
        if self.accept("["):
            items: list[object] = []
            if not self.accept("]"):
                while True:
                    items.append(self.parse_attr_value(depth + 1))
                    if self.accept("]"):
                        break
                    self.expect(",", "',' or ']'")
            return tuple(items)
        number = _NUMBER.match(self.text, self.pos)
        if number and not _IDENT.match(self.text, number.end()):
            self.pos = number.end()
            text = number.group(0)
            if _INTEGER.fullmatch(text):
                return int(text)
            return float(text)
        word = self.match(_IDENT, "an attribute value")
        if word in ("true", "false"):
            return word == "true"
        if word == "none":
            return None
        if word in _DTYPES:
            return _DTYPES[word]
        if word in ("dense", "resource"):
            return self.parse_dense(word, pos)
        raise self.error(f"unknown attribute value '{word}'", pos)

    def parse_dense(self, kind: str, pos: int) -> DenseAttr:
        self.expect("<")
        shape, dtype = self.parse_shape_dtype()
        self.expect(":")
        if kind == "resource":
            name = self.parse_string("a resource name")
            self.expect(">")
            if name not in self.resources:
                raise self.error(f"unknown resource {name!r} (its data was not supplied)", pos)
            data = np.asarray(self.resources[name])
            if data.dtype.kind not in "biuf":
                raise self.error(f"resource {name!r} holds {data.dtype} data, not numbers", pos)
            if data.shape != shape:
                raise self.error(f"resource '{name}' has shape {list(data.shape)}, expected {list(shape)}", pos)
            return DenseAttr(data, dtype)
        values = self.parse_attr_value()
        self.expect(">", "'>' closing the dense constant")
        if not isinstance(values, tuple):
            raise self.error("dense values must be a [...] list", pos)
        if len(values) != int(np.prod(shape)):
            raise self.error(f"dense constant has {len(values)} values but its shape {list(shape)} needs "
                             f"{int(np.prod(shape))}", pos)
        for index, value in enumerate(values):
            if not _fits_dense(value, dtype):
                raise self.error(f"dense element #{index} ({value!r}) is not a {dtype.value} value", pos)
        return DenseAttr(np.array(values, dtype=dtype.compute).reshape(shape), dtype)


def _fits_dense(value: object, dtype: DType) -> bool:
    """Whether one element of an inline dense constant is a value of ``dtype`` (no silent truncation or wrap)."""
    if dtype.is_bool:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if dtype.is_float:
        return True
    info = np.iinfo(dtype.numpy)
    return isinstance(value, int) and int(info.min) <= value <= int(info.max)


def parse_module(text: str, *, source: str = "<nir>", resources: Mapping[str, np.ndarray] | None = None,
                 verify: bool = True) -> list[Function]:
    """Parse every function in ``text``. Raises :class:`ParseError` (or a located :class:`VerifyError`)."""
    parser = _Parser(text, source, resources or {})
    functions = parser.parse_module()
    for index, fn in enumerate(functions):
        if verify:
            try:
                verify_function(fn)
            except VerifyError as exc:
                op = getattr(exc, "op", None)
                if op is not None and id(op) in parser.op_positions:
                    line, column = parser.location(parser.op_positions[id(op)])
                    raise VerifyError(f"{source}:{line}:{column}: {exc}") from None
                raise
        parser.check_return_types(index, fn)
    return functions


def parse(text: str, *, source: str = "<nir>", resources: Mapping[str, np.ndarray] | None = None,
          verify: bool = True) -> Function:
    """Parse text holding exactly one function."""
    functions = parse_module(text, source=source, resources=resources, verify=verify)
    if len(functions) != 1:
        raise ParseError(f"expected one function, found {len(functions)}", 1, 1, source)
    return functions[0]
