"""Malformed ``.nir`` input gives one typed, one-line error at the right line:col, whatever the damage.

A table of hand-made cases (``malformed.py``) pins the message and location of each kind of mistake; a
hypothesis fuzz truncates and mutates valid texts and requires that the parser either accepts the result (and
then round-trips it) or refuses it with a ParseError/VerifyError, never another exception.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuroncc import errors
from neuroncc.errors import NeuronccError, ParseError, VerifyError
from neuroncc.ir import Builder, DenseAttr, DType, TensorType, collect_resources, parse_module, print_function

from .malformed import GOOD, KERNEL, MALFORMED
from .support import fuzz_settings


@pytest.mark.parametrize("text, kind, location, fragment", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_input(text, kind, location, fragment):
    with pytest.raises(NeuronccError) as info:
        parse_module(text, source="bad.nir")
    error = info.value
    assert type(error) is getattr(errors, kind) or type(error).__mro__[1] is getattr(errors, kind), repr(error)
    message = str(error)
    assert "\n" not in message and len(message) < 400, message
    assert fragment in message
    if location is not None:
        assert message.startswith(f"bad.nir:{location}: "), message
    if isinstance(error, ParseError):
        assert f"{error.line}:{error.column}" == (location or f"{error.line}:{error.column}")


def test_module_with_two_functions_parses_but_parse_wants_one():
    from neuroncc.ir import parse

    assert len(parse_module(GOOD + GOOD.replace("@f", "@g"))) == 2
    with pytest.raises(ParseError, match="expected one function, found 2"):
        parse(GOOD + GOOD.replace("@f", "@g"))


# ---- fuzz ----------------------------------------------------------------------------------------------


def _corpus() -> list[tuple[str, dict]]:
    b = Builder("consts", metadata={"source": "model.py:12"})
    x = b.param(TensorType((3, 3), DType.bf16), "x")
    big = b.op("constant", value=DenseAttr(np.arange(81, dtype=np.float32).reshape(9, 9) / 7, DType.bf16))
    small = b.op("constant", value=DenseAttr(np.array([np.nan, -0.0, np.inf, 1e-45], np.float32)))
    parts = b.op("split", b.op("slice", big, dim=0, start=0, end=3), dim=1, sizes=(3, 6))
    fn = b.build([b.op("add", x, parts[0]), small, b.op("sum", parts[1], dims=(0, 1), keepdim=True)])
    return [(GOOD, {}), (KERNEL, {}), (print_function(fn), collect_resources(fn))]


CORPUS = _corpus()
_TOKENS = ["%", "{", "}", "[", "]", "<", ">", "(", ")", ",", ":", "=", '"', "\\", "x", "0", "-", "\n", "//", "@",
           "region", "func", "return", "nan", "-inf", "1e999", "dense", "resource", "tensor", "strides", "kernel",
           "none", "true", "\u00fc", "\x00", "99999999999999999999", "%0", "f32", "bool"]


@st.composite
def _damaged(draw: st.DrawFn) -> tuple[str, dict]:
    text, resources = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["truncate", "delete", "insert", "replace", "duplicate-line"]))
        if action == "truncate":
            text = text[:pos]
        elif action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 8)):]
        elif action == "insert":
            text = text[:pos] + draw(st.sampled_from(_TOKENS)) + text[pos:]
        elif action == "replace":
            text = text[:pos] + draw(st.sampled_from(_TOKENS)) + text[pos + 1:]
        else:
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            text = "\n".join(lines[:i + 1] + lines[i:])
    return text, resources


_LOCATED = re.compile(r"^<nir>:\d+:\d+: ")


@fuzz_settings(300)
@given(_damaged())
def test_damaged_text_is_refused_cleanly_or_round_trips(damaged):
    text, resources = damaged
    try:
        functions = parse_module(text, resources=resources)
    except (ParseError, VerifyError) as exc:
        message = str(exc)
        assert "\n" not in message
        if isinstance(exc, ParseError):
            assert _LOCATED.match(message), message
        return
    for fn in functions:  # whatever parses must print and parse back to itself
        printed = print_function(fn)
        (again,) = parse_module(printed, resources=collect_resources(fn))
        assert print_function(again) == printed
