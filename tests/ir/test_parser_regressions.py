"""Regression tests for parser and printer bugs found by the round-trip and malformed-input tests."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.errors import ParseError
from neuroncc.ir import parse


def _constant(value: str, type_: str = "tensor<2xf32>") -> str:
    return f"func @f() -> ({type_}) {{\n  %0 = constant {{value = {value}}} : {type_}\n  return %0\n}}\n"


def _kernel_named(literal: str) -> str:
    return ("func @f(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n"
            f"  %0 = kernel %x {{name = {literal}}} : tensor<2xf32> region(%a: tensor<2xf32>) {{\n"
            "    return %a\n  }\n  return %0\n}\n")


@pytest.mark.parametrize("literal", [r'"\q"', r'"\u12"', r'"\ud80"'])
def test_bad_string_escapes_are_parse_errors(literal):
    # json.loads' JSONDecodeError escaped from the parser
    with pytest.raises(ParseError, match=r"2:\d+: malformed string literal"):
        parse(_kernel_named(literal))


@pytest.mark.parametrize("value, type_", [
    ('dense<2xf32: ["a", "b"]>', "tensor<2xf32>"),  # ValueError from numpy
    ("dense<2xi32: [1099511627776, 2]>", "tensor<2xi32>"),  # OverflowError
    ("dense<2xi32: [nan, 2]>", "tensor<2xi32>"),  # ValueError
    ("dense<2xi32: [1.5, 2]>", "tensor<2xi32>"),  # silently truncated to 1
    ("dense<2xi32: [[1], [2]]>", "tensor<2xi32>"),  # nested lists were accepted
    ("dense<2xbool: [true, 2]>", "tensor<2xbool>"),
    ("dense<2xf32: [true, 1.0]>", "tensor<2xf32>"),
    ("dense<1xu8: [-1]>", "tensor<1xu8>"),  # wrapped to 255
])
def test_dense_elements_must_be_values_of_the_element_type(value, type_):
    with pytest.raises(ParseError, match=r"2:\d+: dense element #\d"):
        parse(_constant(value, type_))


def test_deeply_nested_attribute_lists_are_a_parse_error():
    # RecursionError escaped from the recursive-descent parser
    with pytest.raises(ParseError, match="nested more than 64 levels"):
        parse(_constant("dense<2xf32: " + "[" * 5000 + ">"))


def test_deeply_nested_regions_are_a_parse_error():
    depth = 400
    head = "func @f(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n"
    body = "".join(f'%r{i} = kernel %{"x" if i == 0 else f"a{i - 1}"} {{name = "k"}} : tensor<2xf32> '
                   f"region(%a{i}: tensor<2xf32>) {{\n" for i in range(depth))
    with pytest.raises(ParseError, match="regions nested more than 64 levels"):
        parse(head + body)


@pytest.mark.parametrize("data", [np.array(["a", "b"]), np.array([None, 1], dtype=object)])
def test_resources_must_hold_numbers(data):
    with pytest.raises(ParseError, match="resource 'c' holds"):
        parse(_constant('resource<2xf32: "c">'), resources={"c": data})


@pytest.mark.parametrize("name", ["my func", "", "f\n", "1x", "ünï", 'q"uote'])
def test_function_names_and_metadata_keys_that_are_not_identifiers_round_trip(name):
    from neuroncc.ir import Builder, DType, TensorType, print_function

    b = Builder(name, metadata={name or "k": 1, "torch-version": "2.13"})
    x = b.param(TensorType((2,), DType.f32), "x")
    fn = b.build([b.op("relu", x)])
    text = print_function(fn)  # printed "func @my func(" before, which does not parse
    again = parse(text)
    assert again.name == name and dict(again.metadata) == dict(fn.metadata)
    assert print_function(again) == text


@pytest.mark.parametrize("text, location", [
    ("func @f(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n  %x = relu %x : tensor<2xf32>\n  return %x\n}\n", "2:3"),
    ("func @f(%x: tensor<2xf32>,  %x: tensor<2xf32>) -> () {\n  return\n}\n", "1:29"),
])
def test_value_defined_twice_points_at_the_second_definition(text, location):
    # the column pointed past the name (results) or at the whitespace before it (parameters)
    with pytest.raises(ParseError, match=f"<nir>:{location}: value %x is defined twice"):
        parse(text)


def test_parsing_computes_line_and_column_only_for_errors(monkeypatch):
    # Every op used to record its line:col by counting newlines from the start of the text: quadratic time
    # (a 20k-op graph took 30 s to parse). Locations are now computed only when an error is reported.
    from neuroncc.ir import Builder, DType, TensorType, print_function
    from neuroncc.ir.parser import _Parser

    b = Builder()
    v = b.param(TensorType((2,), DType.f32), "x")
    for _ in range(50):
        v = b.op("relu", v)
    text = print_function(b.build([v]))
    calls = []
    original = _Parser.location
    monkeypatch.setattr(_Parser, "location", lambda self, pos=None: calls.append(pos) or original(self, pos))
    parse(text)
    assert calls == []
    with pytest.raises(Exception, match=r"<nir>:51:3: "):
        parse(text.replace("%49 = relu %48 : tensor<2xf32>", "%49 = relu %48 : tensor<3xf32>"))
    assert len(calls) == 1


def test_a_type_spelled_again_is_the_same_type_and_a_bad_one_still_an_error():
    """Each type's text is parsed once per parse (a repeat is looked up); an error in a later, different
    spelling is reported where it is."""
    fn = parse("func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<2x3xf32, strides = [1, 2]>)"
               " -> (tensor<2x3xf32>) {\n  %0 = add %a, %b : tensor<2x3xf32>\n  return %0\n}\n")
    a, b, c = (p.type for p in fn.params)
    assert a is b is fn.ops[0].results[0].type and c is not a and c.strides == (1, 2)
    with pytest.raises(ParseError, match=r"2:32: unknown element type 'f31'"):
        parse("func @f(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>) {\n"
              "  %0 = add %a, %a : tensor<2x3xf31>\n  return %0\n}\n")


def test_the_same_attribute_text_on_two_ops_gets_each_ops_defaults():
    # the parser reuses an op's normalized attributes for a repeat of the same op and attribute text: keyed by
    # the op too, so var (which has a correction attribute) is not given sum's attributes
    fn = parse("func @f(%x: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {\n"
               "  %0 = sum %x {dims = [0]} : tensor<3xf32>\n"
               "  %1 = var %x {dims = [0]} : tensor<3xf32>\n"
               "  %2 = sum %x {dims = [0]} : tensor<3xf32>\n"
               "  return %0, %1, %2\n}\n")
    first, var, repeat = fn.ops
    assert dict(var.attrs) == {"dims": (0,), "keepdim": False, "correction": 1.0}
    assert dict(first.attrs) == dict(repeat.attrs) == {"dims": (0,), "keepdim": False}


def test_a_repeated_attribute_list_is_reused_whole_with_braces_in_strings_and_comments():
    # a repeat of an op's attribute text is found by matching the list's text up to its first '}' outside a
    # string literal (parser._ATTR_TEXT) and not parsed again: a '}' inside a string or a comment must neither
    # cut the list short nor reuse another list's attributes
    kernel = ("  %{n} = kernel %x {{name = \"a}}b\", target = \"cpu\"}} : tensor<2xf32> region(%a: tensor<2xf32>) {{\n"
              "    return %a\n  }}\n")
    fn = parse("func @f(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {\n"
               + kernel.format(n=0) + kernel.format(n=1) + "  return %0, %1\n}\n")
    first, repeat = fn.ops
    assert first.attrs["name"] == "a}b" and repeat.attrs is first.attrs
    fn = parse("func @f(%x: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<1x3xf32>, tensor<1x3xf32>) {\n"
               "  %0 = sum %x {dims = [0]} : tensor<3xf32>\n"
               "  %1 = sum %x {dims = [0], // keep } the dim\n keepdim = true} : tensor<1x3xf32>\n"
               "  %2 = sum %x {dims = [0], // keep } the dim\n keepdim = true} : tensor<1x3xf32>\n"
               "  return %0, %1, %2\n}\n")
    plain, kept, again = fn.ops
    assert dict(plain.attrs) == {"dims": (0,), "keepdim": False}
    assert dict(kept.attrs) == dict(again.attrs) == {"dims": (0,), "keepdim": True}
