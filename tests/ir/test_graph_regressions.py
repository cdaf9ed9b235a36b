"""Regression tests for bugs in the graph API (Builder, Function) found while writing the IR tests."""

from __future__ import annotations

from neuroncc.ir import Builder, DType, TensorType


def test_builder_op_accepts_an_attribute_called_name():
    # b.op("kernel", x, name="k") raised "got multiple values for argument 'name'"
    rb = Builder("region")
    a = rb.param(TensorType((2,), DType.f32))
    region = rb.build([rb.op("exp", a)])
    b = Builder()
    x = b.param(TensorType((2,), DType.f32))
    y = b.op("kernel", x, name="fused", regions=[region])
    assert b.ops[-1].attrs["name"] == "fused" and y.type == x.type
