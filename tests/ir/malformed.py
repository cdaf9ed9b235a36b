"""A corpus of malformed ``.nir`` inputs with the error each must produce (shared by the parser and CLI tests).

Each entry: (id, text, error class name, "line:col" or None, a fragment of the message).
"""

from __future__ import annotations

GOOD = """func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
  %0 = add %x, %y : tensor<2x3xf32>
  return %0
}
"""

KERNEL = """func @f(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<2xf32>) {
  %0 = kernel %x {name = "k"} : tensor<2xf32> region(%a: tensor<2xf32>) {
    %1 = add %a, %a : tensor<2xf32>
    return %1
  }
  return %0
}
"""


def _good(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def _kernel(old: str, new: str) -> str:
    assert old in KERNEL
    return KERNEL.replace(old, new)


_LONG = 100_000

MALFORMED = [
    ("empty file", "", "ParseError", "1:1", "expected 'func', found end of input"),
    ("only a comment", "// nothing here\n", "ParseError", "2:1", "expected 'func'"),
    ("garbage bytes", "\x00\x01\x7f\ufffd garbage", "ParseError", "1:1", "expected 'func'"),
    ("truncated header", GOOD[:30], "ParseError", "1:31", "expected"),
    ("truncated body", GOOD[:90], "ParseError", None, "expected"),
    ("missing closing brace", GOOD.rstrip()[:-1], "ParseError", "4:1", "expected '}' after return"),
    ("unknown op", _good("add %x, %y", "frobnicate %x, %y"), "ParseError", "2:8", "unknown op 'frobnicate'"),
    ("result type mismatch", _good(": tensor<2x3xf32>\n  return", ": tensor<2x3xi64>\n  return"), "VerifyError",
     "2:3", "result %0 is declared tensor<2x3xi64> but the op produces tensor<2x3xf32>"),
    ("operand type mismatch", _good("%y: tensor<2x3xf32>", "%y: tensor<2x3xf16>"), "VerifyError", "2:3",
     "op 'add': operands must have one element type"),
    ("undefined value", _good("add %x, %y", "add %x, %w"), "ParseError", "2:16", "use of undefined value %w"),
    ("value defined twice", _good("%0 = add", "%x = add").replace("return %0", "return %x"), "ParseError", "2:3",
     "value %x is defined twice"),
    ("parameter defined twice", _good("%y: tensor", "%x: tensor"), "ParseError", "1:30", "value %x is defined twice"),
    ("too few operands", _good("add %x, %y", "add %x"), "VerifyError", "2:3", "op 'add' takes 2 operands, got 1"),
    ("too many operands", _good("add %x, %y", "add %x, %y, %x"), "VerifyError", "2:3", "takes 2 operands, got 3"),
    ("unknown attribute", _good("add %x, %y", "add %x, %y {alpha = 2}"), "ParseError", "2:19",
     "op 'add': unknown attribute 'alpha'"),
    ("bad attribute kind", _good("add %x, %y : tensor<2x3xf32>", "sum %x {dims = 1.5} : tensor<3xf32>"),
     "ParseError", "2:15", "attribute 'dims' must be ints, got 1.5"),
    ("missing attribute", _good("add %x, %y : tensor<2x3xf32>", "sum %x : tensor<3xf32>"), "ParseError", "2:15",
     "missing required attribute 'dims'"),
    ("attribute given twice", _good("add %x, %y : tensor<2x3xf32>", "sum %x {dims = [0], dims = [1]} : tensor<3xf32>"),
     "ParseError", "2:27", "attribute 'dims' given twice"),
    ("unknown attribute value", _good("add %x, %y : tensor<2x3xf32>", "sum %x {dims = maybe} : tensor<3xf32>"),
     "ParseError", "2:23", "unknown attribute value 'maybe'"),
    ("bad dtype name", _good("%y: tensor<2x3xf32>", "%y: tensor<2x3xf33>"), "ParseError", "1:45",
     "unknown element type 'f33'"),
    ("negative size", _good("%y: tensor<2x3xf32>", "%y: tensor<2x-3xf32>"), "ParseError", "1:41",
     "expected a shape and element type"),
    ("doubled x", _good("%y: tensor<2x3xf32>", "%y: tensor<2xx3xf32>"), "ParseError", "1:43", "unknown element type"),
    # its offsets overflowed i64 in the generated code (`opt --emit llvm` printed it without a word)
    ("size past 64-bit offsets", _good("%y: tensor<2x3xf32>", "%y: tensor<99999999999x99999999999xf32>"),
     "ParseError", "1:41", "has 9999999999800000000001 elements, more bytes than a 64-bit offset can address"),
    ("strides of the wrong rank", _good("%y: tensor<2x3xf32>", "%y: tensor<2x3xf32, strides=[1]>"), "ParseError",
     "1:34", "strides (1,) do not match rank"),
    ("unclosed type", _good("%y: tensor<2x3xf32>", "%y: tensor<2x3xf32"), "ParseError", "1:48",
     "'>' closing the tensor type"),
    ("mismatched return types", _good("-> (tensor<2x3xf32>)", "-> (tensor<2x3xi64>)"), "ParseError", "3:3",
     "return types (tensor<2x3xf32>) differ from the declared result types (tensor<2x3xi64>)"),
    ("return count", _good("-> (tensor<2x3xf32>)", "-> (tensor<2x3xf32>, tensor<2x3xf32>)"), "ParseError", "3:3",
     "differ from the declared result types"),
    ("results without types", _good("%0 = add", "%0, %1 = add"), "ParseError", "2:3", "2 results named but 1 types"),
    ("wrong result count",
     _good("add %x, %y : tensor<2x3xf32>", "split %x {dim = 0, sizes = [1, 1]} : tensor<1x3xf32>"),
     "VerifyError", "2:3", "has 1 results but the op produces 2"),
    ("unterminated string", _kernel('"k"', '"k'), "ParseError", "2:26", "expected a string"),
    ("bad escape", _kernel('"k"', r'"\k"'), "ParseError", "2:26", "malformed string literal"),
    ("region captures an outer value", _kernel("add %a, %a", "add %a, %y"), "ParseError", "3:18",
     "use of undefined value %y"),
    ("region parameter type", _kernel("region(%a: tensor<2xf32>)", "region(%a: tensor<3xf32>)").replace(
        "%1 = add %a, %a : tensor<2xf32>", "%1 = relu %a : tensor<3xf32>").replace("return %1", "return %a"),
     "VerifyError", "2:3", "operand #0 is tensor<2xf32> but the region expects tensor<3xf32>"),
    ("op inside a region", _kernel("add %a, %a : tensor<2xf32>", "add %a, %a : tensor<2xi64>"), "VerifyError", "3:5",
     "op 'kernel' defining %0 region: op 'add' defining %1: result %1 is declared tensor<2xi64>"),
    ("region without return", _kernel("    return %1\n", ""), "ParseError", "4:3", "expected an op name, found '}'"),
    ("kernel without region",
     _kernel(' region(%a: tensor<2xf32>) {\n    %1 = add %a, %a : tensor<2xf32>\n    return %1\n  }', ""),
     "VerifyError", "2:3", "needs exactly one region, got 0"),
    ("unknown resource", _good("add %x, %y : tensor<2x3xf32>",
                               'constant {value = resource<2x3xf32: "c_1">} : tensor<2x3xf32>'),
     "ParseError", "2:26", "unknown resource 'c_1'"),
    ("dense count", _good("add %x, %y : tensor<2x3xf32>", "constant {value = dense<2x3xf32: [1.0]>} : tensor<2x3xf32>"),
     "ParseError", "2:26", "dense constant has 1 values but its shape [2, 3] needs 6"),
    ("very long line", _good("add %x, %y", "add %x, " + " " * _LONG + "%w"), "ParseError", f"2:{16 + _LONG}",
     "use of undefined value %w"),
    ("very long garbage line", "x" * _LONG, "ParseError", "1:1", "expected 'func'"),
]
