"""A small Python source writer for the emitted kernels: indentation, stable names and literals."""

from __future__ import annotations

import builtins
import keyword
import math
import re
from dataclasses import dataclass, field

from neuroncc.ir.dtypes import DType

INDENT = "    "

#: How each IR element type is held on the device (int64 is narrowed to int32: NKI has no 64-bit integers).
NKI_DTYPES: dict[DType, str] = {
    DType.f32: "float32",
    DType.bf16: "bfloat16",
    DType.f16: "float16",
    DType.i64: "int32",
    DType.i32: "int32",
    DType.i16: "int16",
    DType.i8: "int8",
    DType.u8: "uint8",
    DType.bool: "bool_",
}


def nki_dtype(dtype: DType) -> str:
    return NKI_DTYPES[dtype]


@dataclass
class SourceWriter:
    """Lines of Python with a current indentation; ``open`` starts a block, ``close`` ends it."""

    lines: list[str] = field(default_factory=list)
    depth: int = 0

    def line(self, text: str = "") -> None:
        self.lines.append(INDENT * self.depth + text if text else "")

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    def open(self, header: str) -> None:
        self.line(header)
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1

    def extend(self, other: SourceWriter) -> None:
        """Append ``other``'s lines at the current indentation."""
        for text in other.lines:
            self.lines.append(INDENT * self.depth + text if text else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class Names:
    """Deterministic unique identifiers: ``fresh("exp")`` gives ``exp``, then ``exp_1``, ``exp_2``..."""

    def __init__(self, taken: set[str] | None = None):
        self.taken: set[str] = set(taken or ()) | {"nki", "nl", "nisa", "np"} | set(dir(builtins))
        self.counts: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        base = identifier(base)
        name = base
        while name in self.taken:
            count = self.counts.get(base, 0) + 1
            self.counts[base] = count
            name = f"{base}_{count}"
        self.taken.add(name)
        return name


def identifier(text: str) -> str:
    """``text`` made into a Python identifier (hints like ``primals_1`` stay as they are)."""
    name = re.sub(r"\W", "_", text) or "v"
    if name[0].isdigit():
        name = f"v{name}"
    if keyword.iskeyword(name):
        name += "_"
    return name


def literal(value: float | int | bool) -> str:
    """A Python literal for a scalar operand (floats keep full precision; inf and nan spelled out)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


def shape_tuple(extents: list[str] | tuple[str, ...]) -> str:
    if not extents:
        return "()"
    return f"({extents[0]},)" if len(extents) == 1 else f"({', '.join(extents)})"
