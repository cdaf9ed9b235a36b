"""bf16-product-words: bf16 products take and give bf16 words (i16), bit for bit what they computed before, and the
cpu pipeline's graphs lose the kernels that only widened words for a product."""

import numpy as np
import pytest

from neuroncc.errors import VerifyError
from neuroncc.ir import DType, interpret, parse
from neuroncc.passes import Bf16ProductWords, Canonicalize, PassContext, default_pipeline, run_pipeline
from neuroncc.testing.semantics import assert_pass_preserves_semantics

# An autocast Linear's backward: bf16 values that crossed the boundary as words (i16 parameters), a product of
# them, one through a transpose, and a product whose operand a kernel computes (gelu) and whose result is an output.
BACKWARD = """func @bwd(%g: tensor<8x16xi16>, %w: tensor<32x16xi16>, %x: tensor<8x32xf32>)
    -> (tensor<8x32xf32>, tensor<16x32xi16>) {
  %gb = bitcast %g {dtype = bf16} : tensor<8x16xbf16>
  %wb = bitcast %w {dtype = bf16} : tensor<32x16xbf16>
  %wt = permute %wb {dims = [1, 0]} : tensor<16x32xbf16>
  %dx = mm %gb, %wt : tensor<8x32xbf16>
  %dxf = cast %dx {dtype = f32} : tensor<8x32xf32>
  %xb = cast %x {dtype = bf16} : tensor<8x32xbf16>
  %h = gelu %xb : tensor<8x32xbf16>
  %gt = permute %gb {dims = [1, 0]} : tensor<16x8xbf16>
  %dw = mm %gt, %h : tensor<16x32xbf16>
  %dww = bitcast %dw {dtype = i16} : tensor<16x32xi16>
  return %dxf, %dww
}"""

ADDMM = """func @addmm(%b: tensor<4xbf16>, %a: tensor<3x5xbf16>, %m: tensor<5x4xbf16>) -> (tensor<3x4xbf16>) {
  %y = addmm %b, %a, %m {alpha = 0.5, beta = 2.0} : tensor<3x4xbf16>
  return %y
}"""

BMM = """func @bmm(%a: tensor<2x3x5xbf16>, %m: tensor<2x5x4xbf16>) -> (tensor<2x3x4xbf16>) {
  %y = bmm %a, %m : tensor<2x3x4xbf16>
  return %y
}"""


def _words(values: np.ndarray) -> np.ndarray:
    """bf16 values (float32 storage) as their words."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


def _backward_inputs(seed: int):
    rng = np.random.default_rng(seed)
    bf16 = lambda *shape: _words(rng.standard_normal(shape).astype(np.float32))  # noqa: E731 (high halves)
    g, w = bf16(8, 16), bf16(32, 16)
    g.reshape(-1)[:3] = _words(np.array([np.nan, np.inf, -0.0], np.float32))  # special values cross as they are
    return [g, w, rng.standard_normal((8, 32)).astype(np.float32)]


def test_products_take_words_and_widening_bitcasts_go():
    after = Bf16ProductWords().apply(parse(BACKWARD), PassContext())
    products = [op for op in after.ops if op.name == "mm"]
    assert len(products) == 2 and all(op.attrs["words"] for op in products)
    assert all(op.result.type.dtype is DType.i16 for op in products)
    g, w, _ = after.params
    assert products[0].operands[0] is g  # bitcast(g) read as g itself
    transposed = next(op for op in after.ops if op.result is products[0].operands[1])
    assert transposed.name == "permute" and transposed.operands[0] is w  # the permute taken through
    assert after.outputs[1] is products[1].result  # the output's bitcast cancels the result's


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pass_keeps_every_bit(seed):
    for text, inputs in ((BACKWARD, _backward_inputs(seed)), (ADDMM, None), (BMM, None)):
        assert_pass_preserves_semantics(Bf16ProductWords(), parse(text), inputs, seeds=(seed,))


def test_the_cpu_pipeline_keeps_every_bit_and_leaves_no_widening_kernel():
    fn = parse(BACKWARD)
    after = assert_pass_preserves_semantics(default_pipeline("cpu"), fn, _backward_inputs(0))
    widening_only = [op for op in after.ops if op.name == "kernel"
                     and [o.name for o in op.regions[0].ops] == ["bitcast"]]
    assert widening_only == []
    products = [op for top in after.ops for op in (top.regions[0].ops if top.regions else (top,)) if op.name == "mm"]
    assert sorted((op.attrs["transpose_a"], op.attrs["transpose_b"], op.attrs["words"]) for op in products) == \
        [(False, True, True), (True, False, True)]  # the layout folded both permutes into transpose flags
    without = run_pipeline(default_pipeline("cpu").replace("bf16-product-words,", ""), fn, PassContext())
    assert any(op.name == "kernel" and [o.name for o in op.regions[0].ops] == ["bitcast"] for op in without.ops)


def test_float32_products_are_left_alone():
    text = BMM.replace("bf16", "f32")
    assert Bf16ProductWords().apply(parse(text), PassContext()) == Canonicalize().apply(parse(text), PassContext())


def test_a_words_product_of_bf16_operands_is_a_typed_error():
    text = BMM.replace("bmm %a, %m :", "bmm %a, %m {words = true} :")
    with pytest.raises(VerifyError, match="words: operands must be i16"):
        parse(text)


def test_a_bitcast_and_its_inverse_cancel():
    fn = parse("""func @f(%x: tensor<4xi16>, %y: tensor<4xf32>) -> (tensor<4xi16>, tensor<4xf32>) {
  %a = bitcast %x {dtype = bf16} : tensor<4xbf16>
  %b = bitcast %a {dtype = i16} : tensor<4xi16>
  %c = bitcast %y {dtype = i32} : tensor<4xi32>
  %d = bitcast %c {dtype = f32} : tensor<4xf32>
  return %b, %d
}""")
    after = Canonicalize().apply(fn, PassContext())
    assert after.ops == () and after.outputs == after.params
    nan_payloads = np.array([0x7FC00001, 0xFFC00002, 0x00000001, 0x80000000], np.uint32).view(np.float32)
    words = np.array([0x7FC1, -0x3F, 1, -0x8000], np.int16)
    got = interpret(fn, [words, nan_payloads])
    assert np.array_equal(got[0], words) and np.array_equal(got[1].view(np.uint32), nan_payloads.view(np.uint32))
