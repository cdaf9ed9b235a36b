"""Type rules refuse what does not fit, with a TypeInferenceError naming the op, and nothing else escapes.

Two kinds of tests: each op's hand-written invalid examples (``OpSpec.invalid``) must be refused by the type
rule (through the Builder) and by the verifier (on a hand-assembled op); and a fuzz test throws random operand
types and random attribute values at every op: the op must either refuse them with a TypeInferenceError naming
the op, or accept them and then its numpy reference must produce exactly the inferred types on random data
(an index out of range may fail at run time, as a typed InterpreterError).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuroncc.errors import TypeInferenceError, VerifyError
from neuroncc.ir import REGISTRY, Attrs, Builder, DenseAttr, DType, Function, Op, TensorType, Value, verify
from neuroncc.ir.interpreter import InterpreterError, interpret

from .ops_table import SPECS
from .support import fuzz_settings, random_array

INVALID = [(name, index) for name in sorted(SPECS) for index in range(len(SPECS[name].invalid))]


def test_every_op_has_invalid_examples():
    assert not [name for name, spec in SPECS.items() if not spec.invalid]


@pytest.mark.parametrize("name, index", INVALID, ids=[f"{n}-{i}" for n, i in INVALID])
def test_invalid_example_is_refused(name, index):
    types, attrs = SPECS[name].invalid[index]
    b = Builder()
    params = [b.param(t) for t in types]
    with pytest.raises(TypeInferenceError, match=f"op '{name}'"):
        b.emit(name, params, Attrs(attrs))
    # The verifier refuses the same op when it is assembled by hand (claiming some result type), for the same
    # reason (defaults filled in first, so that the problem is not merely unnormalized attributes).
    try:
        normalized = REGISTRY.get(name).normalize_attrs(attrs)
    except TypeInferenceError:
        normalized = Attrs(attrs)  # the attributes themselves are what is wrong
    op = Op(name, tuple(params), (Value(TensorType((), DType.f32)),), normalized)
    with pytest.raises(VerifyError, match=f"op '{name}'") as info:
        verify(Function("f", tuple(params), (op,), op.results))
    assert "not normalized" not in str(info.value)


# ---- fuzz ----------------------------------------------------------------------------------------------

_ATTR_VALUES = {
    "int": st.integers(-3, 6),
    "float": st.one_of(st.floats(-3, 3), st.sampled_from([math.nan, math.inf, -math.inf])),
    "number": st.one_of(st.integers(-300, 300), st.floats(-3, 3), st.sampled_from([math.nan, math.inf])),
    "bool": st.booleans(),
    "str": st.sampled_from(["none", "tanh", "add", "floor", "trunc", "mul", "", "x\ny"]),
    "dtype": st.sampled_from(list(DType)),
    "ints": st.lists(st.integers(-2, 5), max_size=4).map(tuple),
    "numbers": st.lists(st.one_of(st.integers(-2, 5), st.floats(-2, 2)), max_size=3).map(tuple),
    "dense": st.sampled_from([DenseAttr(np.arange(3, dtype=np.float32)), DenseAttr(np.zeros((), np.int64)),
                              DenseAttr(np.ones((2, 0), bool))]),
}
_ANY_VALUE = st.one_of(*_ATTR_VALUES.values(), st.none())


@st.composite
def _attrs(draw: st.DrawFn, name: str) -> dict:
    attrs = {}
    for key, spec in REGISTRY.get(name).attrs.items():
        if not spec.required and draw(st.booleans()):
            continue  # leave it to the default
        if draw(st.integers(0, 19)) == 0:
            continue  # a required attribute may go missing
        kind = spec.kind.removeprefix("optional-")
        if spec.kind.startswith("optional-") and draw(st.booleans()):
            attrs[key] = None
        elif draw(st.integers(0, 9)) == 0:
            attrs[key] = draw(_ANY_VALUE)  # possibly the wrong kind
        else:
            attrs[key] = draw(_ATTR_VALUES[kind])
    if draw(st.integers(0, 19)) == 0:
        attrs["bogus"] = 1
    return attrs


@st.composite
def _types(draw: st.DrawFn, name: str) -> list[TensorType]:
    low, high = REGISTRY.get(name).arity
    count = draw(st.integers(max(low - 1, 0), (high if high is not None else low + 2) + 1))
    first = None
    types = []
    for _ in range(count):
        if first is not None and draw(st.booleans()):
            shape = first.shape if draw(st.booleans()) else first.shape[draw(st.integers(0, first.rank)):]
            dtype = first.dtype if draw(st.integers(0, 3)) else draw(st.sampled_from(list(DType)))
        else:
            shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
            dtype = draw(st.sampled_from(list(DType)))
        types.append(TensorType(shape, dtype))
        first = first or types[0]
    return types


@st.composite
def _mutated(draw: st.DrawFn, name: str) -> tuple[list[TensorType], dict]:
    """A valid application of the op with one thing changed: an attribute, an operand's shape or dtype, the
    operand count. Random operands rarely get past an op's first checks; mutants probe the later ones."""
    case = draw(SPECS[name].cases())
    types, attrs = list(case.types), dict(case.attrs)
    specs = REGISTRY.get(name).attrs
    choices = ["attr"] * bool(specs) + ["shape", "dtype", "rank"] * bool(types) + ["arity"]
    mutation = draw(st.sampled_from(choices))
    if mutation == "attr":
        key = draw(st.sampled_from(sorted(specs)))
        kind = specs[key].kind.removeprefix("optional-")
        attrs[key] = draw(_ATTR_VALUES[kind]) if draw(st.integers(0, 4)) else draw(_ANY_VALUE)
    elif mutation == "arity":
        if types and draw(st.booleans()):
            types.pop(draw(st.integers(0, len(types) - 1)))
        else:
            types.append(types[0] if types else TensorType((2,), DType.f32))
    else:
        i = draw(st.integers(0, len(types) - 1))
        t = types[i]
        if mutation == "dtype":
            types[i] = t.with_dtype(draw(st.sampled_from(list(DType))))
        elif mutation == "rank":
            shape = t.shape[1:] if t.rank and draw(st.booleans()) else (draw(st.integers(0, 3)), *t.shape)
            types[i] = TensorType(shape, t.dtype)
        elif t.rank:
            d = draw(st.integers(0, t.rank - 1))
            types[i] = TensorType(t.shape[:d] + (draw(st.integers(0, 5)),) + t.shape[d + 1:], t.dtype)
    return types, attrs


FUZZED = sorted(name for name in REGISTRY.names() if name != "kernel")


@pytest.mark.parametrize("name", FUZZED)
@fuzz_settings(40)
@given(data=st.data())
def test_type_rule_and_reference_agree_on_random_operands(name, data):
    types = data.draw(_types(name), label="types")
    attrs = data.draw(_attrs(name), label="attrs")
    _check_refused_or_consistent(name, types, attrs, data)


@pytest.mark.parametrize("name", FUZZED)
@fuzz_settings(40)
@given(data=st.data())
def test_type_rule_and_reference_agree_on_mutated_cases(name, data):
    types, attrs = data.draw(_mutated(name), label="mutant")
    _check_refused_or_consistent(name, types, attrs, data)


def _check_refused_or_consistent(name: str, types: list[TensorType], attrs: dict, data: st.DataObject) -> None:
    b = Builder()
    params = [b.param(t) for t in types]
    try:
        op = b.emit(name, params, Attrs(attrs))
    except TypeInferenceError as exc:
        assert f"op '{name}'" in str(exc)
        assert "\n" not in str(exc)
        return
    fn = b.build(list(op.results))
    verify(fn)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    arrays = [random_array(rng, t.shape, t.dtype, low=-2, high=3) for t in types]
    try:
        outs = interpret(fn, arrays)
    except InterpreterError as exc:
        assert any(words in str(exc) for words in ("index out of range", "is singular", "integer division by zero")), \
            exc
        return
    assert [(o.shape, o.dtype) for o in outs] == [(v.type.shape, v.type.dtype.numpy) for v in fn.outputs]
