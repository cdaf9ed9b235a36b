"""The transpose_a / transpose_b flags of mm, bmm and addmm: types, numpy semantics, text form."""

import numpy as np
import pytest

from neuroncc.errors import TypeInferenceError
from neuroncc.ir import Builder, DType, TensorType, interpret, parse, print_function

F32 = DType.f32


def _rand(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mm_transpose_flags_match_numpy(ta, tb):
    a, b = _rand(3, 5), _rand(5, 4)
    stored_a, stored_b = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    bld = Builder("f")
    pa, pb = bld.param(TensorType(stored_a.shape, F32)), bld.param(TensorType(stored_b.shape, F32))
    out = bld.op("mm", pa, pb, transpose_a=ta, transpose_b=tb)
    assert out.type.shape == (3, 4)
    (got,) = interpret(bld.build([out]), [stored_a, stored_b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-6)


def test_bmm_and_addmm_transpose_flags():
    a, b, bias = _rand(2, 3, 5), _rand(2, 4, 5), _rand(4)
    bld = Builder("f")
    pa, pb = bld.param(TensorType(a.shape, F32)), bld.param(TensorType(b.shape, F32))
    out = bld.op("bmm", pa, pb, transpose_b=True)
    (got,) = interpret(bld.build([out]), [a, b])
    np.testing.assert_allclose(got, a @ b.transpose(0, 2, 1), rtol=1e-6)

    x, w = _rand(3, 5), _rand(4, 5)
    bld = Builder("g")
    pbias, px, pw = (bld.param(TensorType(t.shape, F32)) for t in (bias, x, w))
    out = bld.op("addmm", pbias, px, pw, transpose_b=True, alpha=0.5)
    (got,) = interpret(bld.build([out]), [bias, x, w])
    np.testing.assert_allclose(got, bias + 0.5 * (x @ w.T), rtol=1e-6)


def test_transpose_flags_check_the_transposed_shapes():
    bld = Builder("f")
    a, b = bld.param(TensorType((3, 5), F32)), bld.param(TensorType((3, 4), F32))
    with pytest.raises(TypeInferenceError, match="contraction sizes differ"):
        bld.op("mm", a, b)
    assert bld.op("mm", a, b, transpose_a=True).type.shape == (5, 4)


def test_transpose_flags_print_and_parse():
    text = """func @f(%a: tensor<5x3xf32>, %b: tensor<4x5xf32>) -> (tensor<3x4xf32>) {
  %0 = mm %a, %b {transpose_a = true, transpose_b = true} : tensor<3x4xf32>
  return %0
}
"""
    fn = parse(text)
    assert print_function(fn) == text
    # Default (false) flags are elided, so graphs built before the flags existed print as before.
    plain = parse("func @g(%a: tensor<3x5xf32>, %b: tensor<5x4xf32>) -> (tensor<3x4xf32>) {\n"
                  "  %0 = mm %a, %b : tensor<3x4xf32>\n  return %0\n}\n")
    assert "transpose" not in print_function(plain)
