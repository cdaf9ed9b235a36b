"""The ``kernel`` op: a fused region isolated from above. Type inference, verification, semantics, text form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuroncc.errors import TypeInferenceError, VerifyError
from neuroncc.ir import REGISTRY, Attrs, Builder, DType, Function, Op, TensorType, Value, interpret, parse, verify

from .support import round_trip

F32 = DType.f32
T = TensorType((2, 3), F32)


def gelu_region(t: TensorType = T) -> Function:
    """x * sigmoid(1.702 * x) + bias, as a fusion pass would outline it."""
    rb = Builder("fused_gelu")
    x, bias = rb.param(t, "x"), rb.param(t, "bias")
    scale = rb.op("full", shape=t.shape, dtype=t.dtype, value=1.702)
    y = rb.op("mul", x, rb.op("sigmoid", rb.op("mul", x, scale)))
    return rb.build([rb.op("add", y, bias), y])


def kernel_graph() -> tuple[Function, Function]:
    """The same computation inlined and as a kernel (two results)."""
    b = Builder("inlined")
    x, bias = b.param(T, "x"), b.param(T, "bias")
    scale = b.op("full", shape=T.shape, dtype=F32, value=1.702)
    y = b.op("mul", x, b.op("sigmoid", b.op("mul", x, scale)))
    inlined = b.build([b.op("add", y, bias), y])
    k = Builder("fused")
    x, bias = k.param(T, "x"), k.param(T, "bias")
    out, y = k.op("kernel", x, bias, name="fused_gelu", target="cpu", regions=[gelu_region()])
    return inlined, k.build([out, y])


def test_kernel_result_types_are_the_regions_output_types():
    _, fused = kernel_graph()
    assert [v.type for v in fused.outputs] == [T, T]
    verify(fused)


def test_kernel_runs_its_region():
    inlined, fused = kernel_graph()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(T.shape).astype(np.float32) for _ in range(2)]
    for ours, theirs in zip(interpret(fused, inputs), interpret(inlined, inputs)):
        np.testing.assert_array_equal(ours, theirs)
    x, bias = map(torch.from_numpy, inputs)
    torch.testing.assert_close(torch.from_numpy(interpret(fused, inputs)[0]), x * torch.sigmoid(1.702 * x) + bias)


def test_nested_kernels_run():
    inner = Builder("inner")
    a = inner.param(T, "a")
    inner_fn = inner.build([inner.op("exp", a)])
    outer = Builder("outer")
    p = outer.param(T, "p")
    outer_fn = outer.build([outer.op("neg", outer.op("kernel", p, name="inner", regions=[inner_fn]))])
    b = Builder()
    x = b.param(T, "x")
    fn = b.build([b.op("kernel", x, name="outer", regions=[outer_fn])])
    data = np.linspace(-1, 1, 6, dtype=np.float32).reshape(T.shape)
    np.testing.assert_allclose(interpret(fn, [data])[0], -np.exp(data), rtol=1e-6)
    round_trip(fn)


def test_kernel_operand_strides_may_differ_from_the_region_parameters():
    b = Builder()
    x = b.param(TensorType((2, 3), F32, strides=(1, 2)), "x")  # a transposed input: layout is an annotation
    bias = b.param(T, "bias")
    b.op("kernel", x, bias, name="k", regions=[gelu_region()])


@pytest.mark.parametrize("operands, regions, message", [
    ([T], [gelu_region()], "region takes 2 parameters but the op has 1 operands"),
    ([T, TensorType((3, 2), F32)], [gelu_region()], "operand #1 is tensor<3x2xf32> but the region expects"),
    ([T, T.with_dtype(DType.bf16)], [gelu_region()], "operand #1 is tensor<2x3xbf16>"),
    ([T, T], [], "needs exactly one region, got 0"),
    ([T, T], [gelu_region(), gelu_region()], "needs exactly one region, got 2"),
])
def test_kernel_type_errors(operands, regions, message):
    b = Builder()
    params = [b.param(t) for t in operands]
    with pytest.raises(TypeInferenceError, match=f"op 'kernel'.*{message}"):
        b.emit("kernel", params, Attrs(name="k"), regions)


def test_kernel_needs_a_name():
    b = Builder()
    x = b.param(T)
    with pytest.raises(TypeInferenceError, match="op 'kernel': missing required attribute 'name'"):
        b.emit("kernel", [x, x], Attrs(), [gelu_region()])


def _kernel_op(operands, region: Function, results) -> Op:
    attrs = REGISTRY.get("kernel").normalize_attrs(Attrs(name="k"))  # with every default filled in
    return Op("kernel", tuple(operands), tuple(results), attrs, (region,))


def test_a_region_capturing_an_outer_value_is_refused():
    x, y, a, r, out = (Value(T, n) for n in ("x", "y", "a", "r", "out"))
    region = Function("r", (a,), (Op("add", (a, y), (r,)),), (r,))  # y belongs to the enclosing function
    fn = Function("f", (x, y), (_kernel_op([x], region, [out]),), (out,))
    with pytest.raises(VerifyError, match="op 'kernel' defining %out region: op 'add' defining %r: "
                                          "operand #1 %y is not defined before its use"):
        verify(fn)


def test_a_region_value_used_outside_is_refused():
    x, a, r, out, z = (Value(T, n) for n in ("x", "a", "r", "out", "z"))
    region = Function("r", (a,), (Op("relu", (a,), (r,)),), (r,))
    fn = Function("f", (x,), (_kernel_op([x], region, [out]), Op("neg", (r,), (z,))), (z,))
    with pytest.raises(VerifyError, match="op 'neg' defining %z: operand #0 .* is not defined before its use"):
        verify(fn)


def test_a_region_returning_an_undefined_value_is_refused():
    x, a, out, ghost = (Value(T, n) for n in ("x", "a", "out", "ghost"))
    region = Function("r", (a,), (), (ghost,))
    fn = Function("f", (x,), (_kernel_op([x], region, [out]),), (out,))
    with pytest.raises(VerifyError, match="region: returned value #0 .* is not defined"):
        verify(fn)


def test_declared_kernel_results_must_match_the_region():
    x, a, out = Value(T, "x"), Value(T, "a"), Value(T.with_dtype(DType.i64), "out")
    fn = Function("f", (x,), (_kernel_op([x], Function("r", (a,), (), (a,)), [out]),), (out,))
    with pytest.raises(VerifyError, match="result %out is declared tensor<2x3xi64> but the op produces tensor<2x3x"):
        verify(fn)


def test_kernel_text_form():
    _, fused = kernel_graph()
    text = round_trip(fused)
    assert 'kernel %x, %bias {name = "fused_gelu", target = "cpu"} : tensor<2x3xf32>, tensor<2x3xf32> ' \
           "region(%x_1: tensor<2x3xf32>, %bias_1: tensor<2x3xf32>) {" in text
    assert parse(text) == fused
