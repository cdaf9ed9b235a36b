"""Regression tests for graphs the verifier accepted although they break an IR rule."""

from __future__ import annotations

import pytest

from neuroncc.errors import VerifyError
from neuroncc.ir import REGISTRY, Attrs, DType, Function, Op, TensorType, Value, verify

T = TensorType((2,), DType.f32)
KERNEL_ATTRS = REGISTRY.get("kernel").normalize_attrs(Attrs(name="k"))


def test_a_value_defined_in_a_region_and_outside_it_is_refused():
    # printed as "%r = kernel ... { %r_1 = relu ... } return %r_1", which does not parse back
    x, a, r = Value(T, "x"), Value(T, "a"), Value(T, "r")
    region = Function("r", (a,), (Op("relu", (a,), (r,)),), (r,))
    fn = Function("f", (x,), (Op("kernel", (x,), (r,), KERNEL_ATTRS, (region,)),), (r,))
    with pytest.raises(VerifyError, match="value %r.* is defined twice"):
        verify(fn)


def test_a_value_that_is_both_an_outer_and_a_region_parameter_is_refused():
    x, y = Value(T, "x"), Value(T, "y")
    region = Function("r", (x,), (), (x,))
    fn = Function("f", (x,), (Op("kernel", (x,), (y,), KERNEL_ATTRS, (region,)),), (y,))
    with pytest.raises(VerifyError, match="is defined twice"):
        verify(fn)


def test_value_names_are_found_only_for_an_error_message(monkeypatch):
    # naming every value costs as much as printing the graph: a valid graph must not pay for it
    from neuroncc.ir import graph, verifier

    x, a, r, y = Value(T, "x"), Value(T, "a"), Value(T, "r"), Value(T, "y")
    region = Function("r", (a,), (Op("relu", (a,), (r,)),), (r,))
    valid = Function("f", (x,), (Op("kernel", (x,), (y,), KERNEL_ATTRS, (region,)),), (y,))
    calls = []
    monkeypatch.setattr(verifier, "value_names", lambda fn: calls.append(fn) or graph.value_names(fn))
    verify(valid)
    assert calls == []
    broken = Function("r", (a,), (Op("relu", (x,), (r,)),), (r,))  # reads the outer %x
    with pytest.raises(VerifyError, match="op 'kernel' defining %y region: op 'relu' defining %r: operand #0 %x"):
        verify(Function("f", (x,), (Op("kernel", (x,), (y,), KERNEL_ATTRS, (broken,)),), (y,)))
    assert len(calls) == 1
