"""bf16-product-words: bf16 products take and give bf16 words (i16), bit for bit what they computed before, and the
cpu pipeline's graphs lose the kernels that only widened words for a product."""

import numpy as np
import pytest

from neuroncc.errors import VerifyError
from neuroncc.ir import DType, interpret, parse, print_function
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


def _widening_only_kernels(fn):
    """The kernels of ``fn`` that only bitcast (widen an input's words into a float32 buffer)."""
    return [op for op in fn.ops if op.name == "kernel" and [o.name for o in op.regions[0].ops] == ["bitcast"]]


def test_the_cpu_pipeline_keeps_every_bit_and_leaves_no_widening_kernel():
    fn = parse(BACKWARD)
    after = assert_pass_preserves_semantics(default_pipeline("cpu"), fn, _backward_inputs(0))
    assert _widening_only_kernels(after) == []
    products = [op for top in after.ops for op in (top.regions[0].ops if top.regions else (top,)) if op.name == "mm"]
    assert sorted((op.attrs["transpose_a"], op.attrs["transpose_b"], op.attrs["words"]) for op in products) == \
        [(False, True, True), (True, False, True)]  # the layout folded both permutes into transpose flags
    without = run_pipeline(default_pipeline("cpu").replace("bf16-product-words,", ""), fn, PassContext())
    assert _widening_only_kernels(without) != []


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


# An autocast conv net's backward: the saved input, weight and gradient crossed the boundary as words; the stride-2
# convolution's input gradient goes on through a ReLU's backward to the first convolution's weight and bias
# gradients (output_mask = [0, 1, 1]), which leave as float32; a computed bias operand for the forward beside it.
CONV_BACKWARD = """func @conv_bwd(%g: tensor<2x4x4x4xi16>, %h: tensor<2x4x8x8xi16>, %w2: tensor<4x4x3x3xi16>,
    %x: tensor<2x3x8x8xi16>, %w1: tensor<4x3x3x3xi16>, %mask: tensor<2x4x8x8xbool>)
    -> (tensor<4x3x3x3xf32>, tensor<4xf32>, tensor<4x4x3x3xi16>) {
  %gb = bitcast %g {dtype = bf16} : tensor<2x4x4x4xbf16>
  %hb = bitcast %h {dtype = bf16} : tensor<2x4x8x8xbf16>
  %wb = bitcast %w2 {dtype = bf16} : tensor<4x4x3x3xbf16>
  %xb = bitcast %x {dtype = bf16} : tensor<2x3x8x8xbf16>
  %w1b = bitcast %w1 {dtype = bf16} : tensor<4x3x3x3xbf16>
  %dh, %dw2, %db2 = convolution_backward %gb, %hb, %wb {dilation = [1], padding = [1], stride = [2]}
    : tensor<2x4x8x8xbf16>, tensor<4x4x3x3xbf16>, tensor<4xbf16>
  %zero = full {dtype = bf16, shape = [2, 4, 8, 8], value = 0.0} : tensor<2x4x8x8xbf16>
  %dr = where %mask, %zero, %dh : tensor<2x4x8x8xbf16>
  %dw1, %db1 = convolution_backward %dr, %xb, %w1b {dilation = [1], output_mask = [0, 1, 1], padding = [1],
    stride = [1]} : tensor<4x3x3x3xbf16>, tensor<4xbf16>
  %dw1f = cast %dw1 {dtype = f32} : tensor<4x3x3x3xf32>
  %db1f = cast %db1 {dtype = f32} : tensor<4xf32>
  %dw2w = bitcast %dw2 {dtype = i16} : tensor<4x4x3x3xi16>
  return %dw1f, %db1f, %dw2w
}"""

CONV_FORWARD = """func @conv(%x: tensor<2x3x9x9xf32>, %w: tensor<6x1x3x3xbf16>, %b: tensor<6xf32>)
    -> (tensor<2x6x4x4xbf16>) {
  %xb = cast %x {dtype = bf16} : tensor<2x3x9x9xbf16>
  %bb = cast %b {dtype = bf16} : tensor<6xbf16>
  %y = convolution %xb, %w, %bb {dilation = [1], groups = 3, padding = [0], stride = [2]} : tensor<2x6x4x4xbf16>
  %r = relu %y : tensor<2x6x4x4xbf16>
  return %r
}"""


def _conv_backward_inputs(seed: int):
    rng = np.random.default_rng(seed)
    bf16 = lambda *shape: _words(rng.standard_normal(shape).astype(np.float32))  # noqa: E731 (high halves)
    g = bf16(2, 4, 4, 4)
    g.reshape(-1)[:2] = _words(np.array([np.nan, -np.inf], np.float32))
    return [g, bf16(2, 4, 8, 8), bf16(4, 4, 3, 3), bf16(2, 3, 8, 8), bf16(4, 3, 3, 3), rng.random((2, 4, 8, 8)) < 0.5]


def test_convolutions_and_their_backward_take_words_and_each_result_is_a_bitcast_of_them():
    after = Bf16ProductWords().apply(parse(CONV_BACKWARD), PassContext())
    backward = [op for op in after.ops if op.name == "convolution_backward"]
    assert len(backward) == 2 and all(op.attrs["words"] for op in backward)
    assert all(r.type.dtype is DType.i16 for op in backward for r in op.results)
    g, h, w2, x, w1, _ = after.params
    assert backward[0].operands == (g, h, w2)  # the widening bitcasts read as the words themselves
    assert backward[1].operands[1:] == (x, w1)
    assert after.outputs[2] is backward[0].results[1]  # the output's bitcast cancels the weight gradient's
    users = {op.operands[0]: op for op in after.ops if op.name == "bitcast"}
    assert users[backward[0].results[0]].attrs["dtype"] is DType.bf16  # the input gradient, read as bf16 by where
    assert all(users[r].attrs["dtype"] is DType.bf16 for r in backward[1].results)  # cast to f32 from bf16
    forward = Bf16ProductWords().apply(parse(CONV_FORWARD), PassContext())
    conv = next(op for op in forward.ops if op.name == "convolution")
    assert conv.attrs["words"] and conv.attrs["groups"] == 3 and conv.result.type.dtype is DType.i16
    assert [next(op for op in forward.ops if v in op.results).name for v in conv.operands] == ["bitcast"] * 3


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pass_keeps_every_bit_of_convolutions(seed):
    assert_pass_preserves_semantics(Bf16ProductWords(), parse(CONV_BACKWARD), _conv_backward_inputs(seed))
    assert_pass_preserves_semantics(Bf16ProductWords(), parse(CONV_FORWARD), seeds=(seed,))


def test_the_cpu_pipeline_keeps_every_bit_of_convolutions_and_leaves_no_widening_kernel():
    fn = parse(CONV_BACKWARD)
    after = assert_pass_preserves_semantics(default_pipeline("cpu"), fn, _conv_backward_inputs(0))
    assert _widening_only_kernels(after) == []
    convolutions = [op for top in after.ops for op in (top.regions[0].ops if top.regions else (top,))
                    if op.name == "convolution_backward"]
    assert len(convolutions) == 2 and all(op.attrs["words"] for op in convolutions)
    without = run_pipeline(default_pipeline("cpu").replace("bf16-product-words,", ""), fn, PassContext())
    assert _widening_only_kernels(without) != []


def test_float32_convolutions_are_left_alone():
    text = CONV_FORWARD.replace("bf16", "f32")
    assert Bf16ProductWords().apply(parse(text), PassContext()) == parse(text)


@pytest.mark.parametrize("text", [
    CONV_FORWARD.replace("stride = [2]}", "stride = [2], words = true}"),  # bf16 operands
    CONV_BACKWARD.replace("stride = [2]}", "stride = [2], words = true}"),
])
def test_a_words_convolution_of_bf16_operands_is_a_typed_error(text):
    with pytest.raises(VerifyError, match="words: operands must be i16"):
        parse(text)


def test_a_words_convolution_prints_and_parses_back():
    after = Bf16ProductWords().apply(parse(CONV_BACKWARD), PassContext())
    text = print_function(after)
    assert "words = true" in text and parse(text) == after
