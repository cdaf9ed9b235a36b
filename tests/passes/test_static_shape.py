"""static-shape: rejects what is not static and concrete; folds values the shapes alone determine."""

import numpy as np
import pytest
from hypothesis import given

from neuroncc.errors import PassError, VerifyError
from neuroncc.ir import Builder, DType, Function, TensorType, interpret, parse
from neuroncc.passes import PassContext, StaticShape
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

F32 = DType.f32


def test_ops_producing_empty_tensors_become_full():
    b = Builder("f")
    x = b.param(TensorType((0, 4), F32), "x")
    y = b.op("exp", b.op("relu", x))
    fn = b.build([y])
    out = assert_pass_preserves_semantics(StaticShape(), fn)
    assert [op.name for op in out.ops] == ["full"] and out.ops[0].attrs["shape"] == (0, 4)


@pytest.mark.parametrize("name,dtype,expected", [
    ("sum", F32, 0.0), ("prod", F32, 1.0), ("mean", F32, np.nan), ("var", F32, np.nan),
    ("any", DType.bool, False), ("all", DType.bool, True), ("sum", DType.i32, 0),
])
def test_reductions_over_empty_extents_become_their_identity(name, dtype, expected):
    b = Builder("f")
    x = b.param(TensorType((3, 0), dtype), "x")
    fn = b.build([b.op(name, x, dims=(1,))])
    out = assert_pass_preserves_semantics(StaticShape(), fn)
    assert [op.name for op in out.ops] == ["full"]
    (value,) = interpret(out, [np.zeros((3, 0), dtype=dtype.numpy)])
    np.testing.assert_array_equal(value, np.full((3,), expected, dtype=dtype.numpy))


def test_empty_contraction_is_zeros():
    b = Builder("f")
    a, w = b.param(TensorType((3, 0), F32)), b.param(TensorType((0, 5), F32))
    fn = b.build([b.op("mm", a, w)])
    out = assert_pass_preserves_semantics(StaticShape(), fn)
    assert [op.name for op in out.ops] == ["full"] and out.ops[0].attrs["value"] == 0.0


def test_dynamic_metadata_is_rejected():
    b = Builder("f", metadata={"dynamic_dims": (0,)})
    x = b.param(TensorType((4,), F32), "x")
    fn = b.build([b.op("exp", x)])
    with pytest.raises(PassError, match="func @f is marked dynamic_dims"):
        StaticShape().apply(fn, PassContext())
    StaticShape().apply(Function(fn.name, fn.params, fn.ops, fn.outputs), PassContext())


def test_absurd_sizes_and_strides_name_the_value():
    fn = parse("""func @f(%x: tensor<4x100000xf32>) -> (tensor<4x100000xf32>) {
  %big = exp %x : tensor<4x100000xf32>
  return %big
}""")
    with pytest.raises(PassError, match=r"func @f: %x has a dimension of size 100000"):
        StaticShape(max_dim=65536).apply(fn, PassContext())
    wide = parse("""func @g(%x: tensor<4x1xf32>) -> (tensor<4x100000xf32>) {
  %big = expand %x {shape = [4, 100000]} : tensor<4x100000xf32>
  return %big
}""")
    with pytest.raises(PassError, match=r"func @g: op 'expand': %big has 400000 elements"):
        StaticShape(max_numel=100000).apply(wide, PassContext())
    strided = parse("""func @g(%x: tensor<4x4xf32, strides=[-4, 1]>) -> (tensor<4x4xf32>) {
  %0 = exp %x : tensor<4x4xf32>
  return %0
}""")
    with pytest.raises(PassError, match="negative strides"):
        StaticShape().apply(strided, PassContext())


def test_invalid_ir_is_a_verify_error():
    b = Builder("f")
    x = b.param(TensorType((4,), F32))
    fn = b.build([b.op("exp", x)])
    broken = Function("f", (), fn.ops, fn.outputs)
    with pytest.raises(VerifyError, match="not defined before its use"):
        StaticShape().apply(broken, PassContext())


@given(graphs())
def test_static_shape_preserves_semantics(fn):
    assert_pass_preserves_semantics(StaticShape(), fn, seeds=(0, 1))
