"""canonicalize: rules fire exactly when they keep types and values; DCE, CSE, folding; random graphs."""

import numpy as np
import pytest
from hypothesis import given

from neuroncc.ir import Builder, DenseAttr, DType, TensorType, interpret, parse
from neuroncc.passes import Canonicalize, PassContext
from neuroncc.passes.rewrite import Rule, rewrite_to_fixed_point
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

F32 = DType.f32


def canonicalize(text: str, **options):
    return Canonicalize(**options).apply(parse(text), PassContext(verify_each=True))


def op_names(fn):
    return [op.name for op in fn.ops]


def unary_graph(op_text: str, x_type="tensor<3x4xf32>", out_type=None) -> str:
    out_type = out_type or x_type
    return f"""func @f(%x: {x_type}) -> ({out_type}) {{
{op_text}
  return %r
}}"""


@pytest.mark.parametrize("body", [
    "  %c = full {dtype = f32, shape = [], value = 1.0} : tensor<f32>\n  %r = mul %x, %c : tensor<3x4xf32>",
    "  %c = full {dtype = f32, shape = [4], value = 1.0} : tensor<4xf32>\n  %r = mul %c, %x : tensor<3x4xf32>",
    "  %c = full {dtype = f32, shape = [], value = -0.0} : tensor<f32>\n  %r = add %x, %c : tensor<3x4xf32>",
    "  %c = full {dtype = f32, shape = [], value = 0.0} : tensor<f32>\n  %r = sub %x, %c : tensor<3x4xf32>",
    "  %c = full {dtype = f32, shape = [], value = 1.0} : tensor<f32>\n  %r = div %x, %c : tensor<3x4xf32>",
    "  %n = neg %x : tensor<3x4xf32>\n  %r = neg %n : tensor<3x4xf32>",
    "  %p = permute %x {dims = [1, 0]} : tensor<4x3xf32>\n  %r = permute %p {dims = [1, 0]} : tensor<3x4xf32>",
    "  %p = reshape %x {shape = [12]} : tensor<12xf32>\n  %r = reshape %p {shape = [3, 4]} : tensor<3x4xf32>",
    "  %r = cast %x {dtype = f32} : tensor<3x4xf32>",
    "  %r = expand %x {shape = [3, 4]} : tensor<3x4xf32>",
    "  %r = slice %x {dim = 1, end = 4, start = 0} : tensor<3x4xf32>",
    "  %r = sum %x {dims = []} : tensor<3x4xf32>",
    "  %r = copy %x : tensor<3x4xf32>",
    "  %r = clamp %x : tensor<3x4xf32>",
])
def test_identities_reduce_to_the_input(body):
    fn = canonicalize(unary_graph(body))
    assert fn.ops == () and fn.outputs == fn.params


@pytest.mark.parametrize("body,out_type", [
    # x + 0 where the zero broadcasts x to a bigger shape is not x
    ("  %c = full {dtype = f32, shape = [2, 3, 4], value = -0.0} : tensor<2x3x4xf32>\n"
     "  %r = add %x, %c : tensor<2x3x4xf32>", "tensor<2x3x4xf32>"),
    # x + 0.0 is not x for x = -0.0 (IEEE), so it stays unless signed zeros are ignored
    ("  %c = full {dtype = f32, shape = [], value = 0.0} : tensor<f32>\n  %r = add %x, %c : tensor<3x4xf32>", None),
    # x - (-0.0) turns -0.0 into 0.0
    ("  %c = full {dtype = f32, shape = [], value = -0.0} : tensor<f32>\n  %r = sub %x, %c : tensor<3x4xf32>", None),
    # floor(x / 1) is floor(x), not x
    ("  %c = full {dtype = f32, shape = [], value = 1.0} : tensor<f32>\n"
     "  %r = div %x, %c {rounding_mode = \"floor\"} : tensor<3x4xf32>", None),
    # NaN * 0 is NaN: no float x * 0 -> 0
    ("  %c = full {dtype = f32, shape = [], value = 0.0} : tensor<f32>\n  %r = mul %x, %c : tensor<3x4xf32>", None),
    # a reduction over a dim of size > 1 is real work
    ("  %r = sum %x {dims = [1], keepdim = true} : tensor<3x1xf32>", "tensor<3x1xf32>"),
])
def test_non_identities_are_kept(body, out_type):
    fn = canonicalize(unary_graph(body, out_type=out_type))
    assert fn.ops, "the rewrite would have changed the result"


def test_signed_zeros_option_folds_x_plus_zero():
    body = "  %c = full {dtype = f32, shape = [], value = 0.0} : tensor<f32>\n  %r = add %x, %c : tensor<3x4xf32>"
    assert canonicalize(unary_graph(body), signed_zeros=False).ops == ()
    x = np.array([[-0.0, 1.0, 2.0, 3.0]] * 3, dtype=np.float32)
    (kept,) = interpret(canonicalize(unary_graph(body)), [x])
    assert not np.signbit(kept[0, 0])  # -0.0 + 0.0 = +0.0, which is why the default keeps the add


def test_integer_times_zero_and_pow_two():
    fn = canonicalize(unary_graph(
        "  %c = full {dtype = i32, shape = [], value = 0} : tensor<i32>\n  %r = mul %x, %c : tensor<3x4xi32>",
        x_type="tensor<3x4xi32>"))
    assert op_names(fn) == ["full"] and fn.ops[0].attrs["value"] == 0
    fn = canonicalize(unary_graph(
        "  %c = full {dtype = f32, shape = [], value = 2.0} : tensor<f32>\n  %r = pow %x, %c : tensor<3x4xf32>"))
    assert op_names(fn) == ["mul"]


def test_views_compose():
    fn = canonicalize(unary_graph(
        "  %a = permute %x {dims = [1, 0]} : tensor<4x3xf32>\n"
        "  %b = unsqueeze %a {dim = 0} : tensor<1x4x3xf32>\n"
        "  %c = squeeze %b {dims = [0]} : tensor<4x3xf32>\n"
        "  %d = slice %c {dim = 0, start = 1, end = 4} : tensor<3x3xf32>\n"
        "  %r = slice %d {dim = 0, start = 0, end = 3, step = 2} : tensor<2x3xf32>",
        out_type="tensor<2x3xf32>"))
    assert op_names(fn) == ["permute", "slice"]
    assert fn.ops[1].attrs["start"] == 1 and fn.ops[1].attrs["step"] == 2


def test_constant_folding_through_the_interpreter():
    b = Builder("f")
    x = b.param(TensorType((3,), F32), "x")
    table = b.op("constant", value=DenseAttr(np.array([1.0, 2.0, 4.0], dtype=np.float32)))
    folded = b.op("sum", b.op("exp", table), dims=(0,))
    big = b.op("mul", b.op("full", shape=(1000, 1000), dtype=F32, value=3.0),
               b.op("full", shape=(), dtype=F32, value=0.5))
    fn = b.build([b.op("mul", x, folded), big])
    out = Canonicalize().apply(fn, PassContext())
    assert sorted(op_names(out)) == ["full", "full", "mul"]
    assert {op.attrs["value"] for op in out.ops if op.name == "full" and op.attrs["shape"] == (1000, 1000)} == {1.5}
    assert_pass_preserves_semantics(Canonicalize(), fn)


def test_cse_dce_and_kernel_operand_pruning():
    fn = canonicalize("""func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>) {
  %dead = tanh %y : tensor<4xf32>
  %a = exp %x : tensor<4xf32>
  %b = exp %x : tensor<4xf32>
  %k = kernel %a, %b, %y {name = "k"} : tensor<4xf32> region(%p: tensor<4xf32>, %q: tensor<4xf32>, %unused: tensor<4xf32>) {
    %c = full {dtype = f32, shape = [], value = 1.0} : tensor<f32>
    %m = mul %p, %c : tensor<4xf32>
    %s = add %m, %q : tensor<4xf32>
    return %s
  }
  return %k
}""")
    assert op_names(fn) == ["exp", "kernel"]
    kernel = fn.ops[1]
    assert len(kernel.operands) == 1 and op_names(kernel.regions[0]) == ["add"]


def test_cse_merges_kernels_by_region_text_printing_each_region_once(monkeypatch):
    from neuroncc.passes import rewrite

    fn = parse("""func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %k1 = kernel %x {name = "k"} : tensor<4xf32> region(%p: tensor<4xf32>) {
    %e = exp %p : tensor<4xf32>
    return %e
  }
  %k2 = kernel %x {name = "k"} : tensor<4xf32> region(%p: tensor<4xf32>) {
    %e = exp %p : tensor<4xf32>
    return %e
  }
  %k3 = kernel %x {name = "k"} : tensor<4xf32> region(%p: tensor<4xf32>) {
    %e = tanh %p : tensor<4xf32>
    return %e
  }
  return %k1, %k2, %k3
}""")
    printed = []
    real_print = rewrite.print_function
    monkeypatch.setattr(rewrite, "print_function", lambda f, **kw: printed.append(f) or real_print(f, **kw))
    texts = rewrite.RegionTexts()
    out = rewrite.cse(fn, texts)
    assert op_names(out) == ["kernel", "kernel"]  # k2's region prints as k1's: merged; k3's differs
    assert out.outputs[0] is out.outputs[1] and out.outputs[2] is not out.outputs[0]
    assert rewrite.cse(out, texts) is out and len(printed) == 3  # the second CSE reprinted nothing


def test_driver_rejects_a_rule_that_changes_a_type():
    def bad(site):
        return site.operands[0] if site.op.name == "add" else None  # ignores broadcasting

    fn = parse(unary_graph(
        "  %c = full {dtype = f32, shape = [2, 3, 4], value = 1.0} : tensor<2x3x4xf32>\n"
        "  %r = add %x, %c : tensor<2x3x4xf32>", out_type="tensor<2x3x4xf32>"))
    with pytest.raises(AssertionError, match="rewrite rule bad replaced a tensor<2x3x4xf32> result"):
        rewrite_to_fixed_point(fn, [Rule("add", bad)])


@given(graphs())
def test_canonicalize_preserves_semantics(fn):
    assert_pass_preserves_semantics(Canonicalize(), fn, seeds=(0, 1))


def test_folding_rounds_splat_operands_to_their_type_first():
    # full(0.3) holds bf16(0.3) = 0.30078125; folding 0.3 * 0.3 unrounded would give another bf16 value
    b = Builder("f")
    x = b.param(TensorType((3,), DType.bf16))
    c = b.op("full", shape=(), dtype=DType.bf16, value=0.3)
    fn = b.build([b.op("mul", x, b.op("mul", c, c))])
    out = assert_pass_preserves_semantics(Canonicalize(), fn)
    assert [op.name for op in out.ops] == ["full", "mul"]
