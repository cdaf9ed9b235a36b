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


def test_dense_constants_overflowing_half_precision_round_to_inf_silently():
    import warnings

    import numpy as np

    from neuroncc.ir import DenseAttr

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" RuntimeWarning
        attr = DenseAttr(np.array([1e6, -1e39], np.float64), DType.f16)
        bf = DenseAttr(np.array([3.4e38], np.float32), DType.bf16)
    assert np.isinf(attr.array).all() and np.isinf(bf.array).all()


def test_replace_uses_follows_chains_and_refuses_cycles():
    import pytest

    b = Builder()
    x, y = b.param(TensorType((2,), DType.f32), "x"), b.param(TensorType((2,), DType.f32), "y")
    z = b.op("add", x, y)
    fn = b.build([z])
    assert fn.replace_uses({x: y}).ops[0].operands == (y, y)
    w = b.param(TensorType((2,), DType.f32), "w")
    assert fn.replace_uses({x: y, y: w}).ops[0].operands == (w, w)
    with pytest.raises(ValueError, match="cycle"):  # looped forever
        fn.replace_uses({x: y, y: x})
