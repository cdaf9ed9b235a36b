"""Regression tests for bugs the op-vs-torch tests found in the references and type rules.

Each test pins one bug with the smallest input that showed it, compared with PyTorch where PyTorch defines
the answer. The hypothesis tests in test_ops_torch.py / test_ops_invalid.py cover the ops broadly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuroncc.errors import TypeInferenceError
from neuroncc.ir import Attrs, Builder, DType, TensorType, interpret

F32 = DType.f32
TORCH = {DType.f32: torch.float32, DType.bf16: torch.bfloat16, DType.f16: torch.float16}


def run(name: str, operands: list[tuple[np.ndarray, DType]], **attrs) -> list[np.ndarray]:
    b = Builder()
    params = [b.param(TensorType(np.shape(a), dtype)) for a, dtype in operands]
    op = b.emit(name, params, Attrs(attrs))
    return interpret(b.build(list(op.results)), [a for a, _ in operands])


def infer(name: str, *types: TensorType, **attrs):
    b = Builder()
    return b.emit(name, [b.param(t) for t in types], Attrs(attrs)).results


@pytest.mark.parametrize("name", ["erf", "gelu"])
def test_erf_and_gelu_accept_0_dim_tensors(name):
    x = np.array(1.25, np.float32)
    (out,) = run(name, [(x, F32)])
    expected = getattr(torch.special if name == "erf" else torch.nn.functional, name)(torch.tensor(x))
    torch.testing.assert_close(torch.from_numpy(out), expected)


def test_gelu_refuses_unknown_approximation():
    with pytest.raises(TypeInferenceError, match="op 'gelu': approximate must be none or tanh"):
        infer("gelu", TensorType((2,), F32), approximate="fast")


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_sign_of_nan_is_zero_as_in_torch(dtype):
    x = np.array([np.nan, -np.nan, -0.0, 0.0, -2.0, np.inf], np.float32)
    (out,) = run("sign", [(x, dtype)])
    expected = torch.sign(torch.from_numpy(x)).to(torch.float32).numpy()
    np.testing.assert_array_equal(out.astype(np.float32), expected)


@pytest.mark.parametrize("dtype", [DType.i64, DType.i32, DType.i8])
def test_integer_pow_with_negative_exponents_matches_torch(dtype):
    a = np.array([2, 1, -1, -1, 0, 3, -2], dtype.numpy)
    b = np.array([-1, -5, -3, -2, -1, 2, 3], dtype.numpy)
    (out,) = run("pow", [(a, dtype), (b, dtype)])
    np.testing.assert_array_equal(out, torch.pow(torch.from_numpy(a), torch.from_numpy(b)).numpy())


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_float_floor_division_matches_torch(dtype):
    # 1 / 0.1 rounds to 10.0 but 1 // 0.1 is 9; floor division of inf is NaN; division by zero is IEEE.
    a = np.array([1.0, -1.0, 3.3374302, np.inf, -np.inf, 5.0, 0.0, -0.0, 7.0, 1.0, 3e38], np.float32)
    b = np.array([0.1, 0.1, -0.47677574, 2.0, 3.0, 0.0, 0.0, 5.0, -np.inf, np.inf, 1e-5], np.float32)
    ta, tb = (torch.from_numpy(v).to(TORCH[dtype]) for v in (a, b))
    expected = torch.div(ta, tb, rounding_mode="floor")
    (out,) = run("div", [(ta.float().numpy(), dtype), (tb.float().numpy(), dtype)], rounding_mode="floor")
    torch.testing.assert_close(torch.from_numpy(out).to(expected.dtype), expected, equal_nan=True, rtol=0, atol=0)


def test_squeeze_with_negative_dims():
    x = np.arange(6, dtype=np.float32).reshape(1, 6, 1)
    (out,) = run("squeeze", [(x, F32)], dims=(0, -1))
    assert out.shape == tuple(torch.from_numpy(x).squeeze((0, -1)).shape) == (6,)


def test_constant_pad_of_a_0_dim_tensor_is_a_copy():
    (out,) = run("constant_pad", [(np.array(3.0, np.float32), F32)], pad=())
    assert out.shape == () and out == 3.0


@pytest.mark.parametrize("pad", [(-4, 5), (-2, -2), (1, -4)])
def test_constant_pad_refuses_to_crop_more_than_the_dimension_holds(pad):
    with pytest.raises(RuntimeError):
        torch.nn.functional.pad(torch.zeros(3), pad)
    with pytest.raises(TypeInferenceError, match="op 'constant_pad'"):
        infer("constant_pad", TensorType((3,), F32), pad=pad)


@pytest.mark.parametrize("name, operand, attrs", [
    ("full", None, {"shape": (2,), "dtype": DType.u8, "value": 300}),
    ("full", None, {"shape": (2,), "dtype": DType.i32, "value": float("inf")}),
    ("full", None, {"shape": (2,), "dtype": DType.i32, "value": float("nan")}),
    ("full", None, {"shape": (2,), "dtype": DType.f16, "value": 1e6}),
    ("constant_pad", TensorType((2,), DType.u8), {"pad": (1, 1), "value": -1}),
    ("clamp", TensorType((2,), DType.u8), {"min": -1}),
    ("clamp", TensorType((2,), DType.i32), {"max": 2**40}),
    ("clamp", TensorType((2,), DType.i64), {"min": 0.5}),  # torch would return a float tensor
])
def test_scalar_attributes_must_fit_the_element_type(name, operand, attrs):
    # numpy wrapped these around, overflowed or raised OverflowError/ValueError at run time
    with pytest.raises(TypeInferenceError, match=f"op '{name}'"):
        infer(name, *([operand] if operand else []), **attrs)


def test_flip_of_a_0_dim_tensor():
    (out,) = run("flip", [(np.array(3.0, np.float32), F32)], dims=(0,))
    assert out.shape == () and out == torch.flip(torch.tensor(3.0), [0]).item()


@pytest.mark.parametrize("dims", [(0, 0), (1, -1)])
def test_flip_refuses_repeated_dims(dims):
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.flip(torch.zeros(2, 3), dims)
    with pytest.raises(TypeInferenceError, match="op 'flip'"):
        infer("flip", TensorType((2, 3), F32), dims=dims)


@pytest.mark.parametrize("name, attrs", [
    ("expand", {"shape": (-1,)}),
    ("expand", {"shape": (2, -1)}),
    ("as_strided", {"shape": (-2,), "strides": (1,)}),
])
def test_negative_sizes_are_type_errors(name, attrs):
    # TensorType's own ValueError escaped from these type rules
    with pytest.raises(TypeInferenceError, match=f"op '{name}'.*negative size"):
        infer(name, TensorType((2, 1)[: len(attrs["shape"])] or (), F32), **attrs)


def test_gather_with_an_index_smaller_than_the_input():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    index = np.array([[1, 2, 3], [0, 0, -1]])
    (out,) = run("gather", [(x, F32), (index, DType.i64)], dim=0)
    expected = torch.gather(torch.from_numpy(x), 0, torch.from_numpy(index % 4))
    np.testing.assert_array_equal(out, expected.numpy())


def test_gather_index_out_of_range_is_an_error_not_a_wrap():
    from neuroncc.ir import InterpreterError

    with pytest.raises(InterpreterError, match="op 'gather': index out of range.*index 5"):
        run("gather", [(np.zeros((3, 2), np.float32), F32), (np.array([[5, 0]]), DType.i64)], dim=0)


def test_gather_refuses_an_index_larger_than_the_input_outside_dim():
    with pytest.raises(TypeInferenceError, match="op 'gather'"):
        infer("gather", TensorType((2, 3), F32), TensorType((2, 4), DType.i64), dim=0)


def test_scatter_refuses_an_index_larger_than_the_input_outside_dim():
    with pytest.raises(RuntimeError):
        torch.scatter(torch.zeros(2, 3), 0, torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 4))
    with pytest.raises(TypeInferenceError, match="op 'scatter'"):
        infer("scatter", TensorType((2, 3), F32), TensorType((2, 4), DType.i64), TensorType((2, 4), F32), dim=0)


def test_scatter_into_a_0_dim_tensor():
    x, src = np.array(1.0, np.float32), np.array(5.0, np.float32)
    for reduce, fn in (("none", torch.scatter), ("add", torch.scatter_add)):
        (out,) = run("scatter", [(x, F32), (np.array(0), DType.i64), (src, F32)], dim=0, reduce=reduce)
        assert out == fn(torch.tensor(1.0), 0, torch.tensor(0), torch.tensor(5.0)).item()


def test_split_refuses_0_dim_tensors():
    # the type rule indexed the shape of a 0-dim tensor (IndexError)
    with pytest.raises(TypeInferenceError, match="op 'split'"):
        infer("split", TensorType((), F32), dim=0, sizes=(1,))


def test_split_into_no_pieces():
    b = Builder()
    x = b.param(TensorType((2, 0), F32))
    op = b.emit("split", [x], Attrs(dim=1, sizes=()))
    assert op.results == () and len(torch.split_with_sizes(torch.zeros(2, 0), [], 1)) == 0
    from neuroncc.ir.interpreter import run_op

    assert run_op(op, [np.zeros((2, 0), np.float32)]) == ()


@pytest.mark.parametrize("name, types", [
    ("addmm", [TensorType((), F32)] * 3),
    ("convolution_backward",
     [TensorType((1, 3, 4), F32), TensorType((1, 2, 5), F32), TensorType((3, 2, 2), DType.f16)]),
])
def test_errors_of_shared_type_rules_name_the_op_itself(name, types):
    # they named 'mm' and 'convolution', whose rules they reuse
    with pytest.raises(TypeInferenceError, match=f"^op '{name}'"):
        infer(name, *types, **({"stride": (1,), "padding": (0,), "dilation": (1,)} if "conv" in name else {}))


@pytest.mark.parametrize("groups, channels, out_channels", [(1, 2, 3), (2, 2, 4), (1, 3, 3)])
def test_convolution_backward_input_gradient_matches_torch(groups, channels, out_channels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, channels, 6, 5)).astype(np.float32)
    w = rng.standard_normal((out_channels, channels // groups, 2, 3)).astype(np.float32)
    conv = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=groups)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    out = torch.nn.functional.conv2d(tx, tw, None, **conv)
    grad = torch.from_numpy(rng.standard_normal(out.shape).astype(np.float32))
    out.backward(grad)
    gx, gw, gb = run("convolution_backward", [(grad.numpy(), F32), (x, F32), (w, F32)], **conv)
    torch.testing.assert_close(torch.from_numpy(gx), tx.grad)
    torch.testing.assert_close(torch.from_numpy(gw), tw.grad)
    torch.testing.assert_close(torch.from_numpy(gb), grad.sum((0, 2, 3)))


def test_addmm_with_beta_zero_ignores_nan_in_the_bias():
    bias = np.array([[np.nan, np.inf]], np.float32)
    a, b = np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)
    (out,) = run("addmm", [(bias, F32), (a, F32), (b, F32)], beta=0.0)
    expected = torch.addmm(*map(torch.from_numpy, (bias, a, b)), beta=0)
    np.testing.assert_array_equal(out, expected.numpy())


@pytest.mark.parametrize("name, types, attrs", [
    ("mm", [TensorType((2, 2), DType.bool)] * 2, {}),
    ("bmm", [TensorType((1, 2, 2), DType.bool)] * 2, {}),
    ("addmm", [TensorType((2, 2), DType.bool)] * 3, {}),
    ("addmm", [TensorType((2, 2), DType.i64)] * 3, {"alpha": 0.5}),
    ("convolution", [TensorType((1, 2, 5), DType.i64), TensorType((3, 2, 2), DType.i64)],
     {"stride": (1,), "padding": (0,), "dilation": (1,)}),
])
def test_contractions_refuse_what_torch_has_no_kernel_for(name, types, attrs):
    # numpy happily multiplies bools (logical and/or) and truncates float alphas on integer products
    with pytest.raises(TypeInferenceError, match=f"op '{name}'"):
        infer(name, *types, **attrs)


@pytest.mark.parametrize("name, types, attrs", [
    ("div", [TensorType((), F32)] * 2, {"rounding_mode": "x\ny"}),
    ("gelu", [TensorType((), F32)], {"approximate": "x\ny"}),
    ("scatter", [TensorType((2,), F32), TensorType((2,), DType.i64), TensorType((2,), F32)],
     {"dim": 0, "reduce": "x\ny"}),
])
def test_errors_quote_string_attributes_on_one_line(name, types, attrs):
    with pytest.raises(TypeInferenceError, match=f"op '{name}'") as info:
        infer(name, *types, **attrs)
    assert "\n" not in str(info.value) and "'x\\ny'" in str(info.value)


_C1 = {"padding": (0,), "dilation": (1,)}


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 2, 5), (3, 2, 2), {**_C1, "stride": (0,)}),  # ZeroDivisionError in the type rule
    ((1, 2, 5), (3, 2, 2), {**_C1, "stride": (1,), "dilation": (0,)}),
    ((1, 2, 5), (3, 2, 2), {**_C1, "stride": (1,), "padding": (-1,)}),
    ((1, 2, 5), (2, 3, 2), {**_C1, "stride": (2,), "transposed": True, "output_padding": (2,)}),
    ((1, 2, 3, 0), (2, 1, 1, 3), {"stride": (1,), "padding": (0,), "dilation": (1,), "transposed": True}),
    ((1, 2, 5), (3, 2, 0), {**_C1, "stride": (1,)}),
    ((1, 2, 5), (0, 2, 1), {**_C1, "stride": (1,)}),
])
def test_convolution_refuses_what_torch_refuses(x, w, attrs):
    args = [[*attrs.get(k, d)] for k, d in (("stride", (1,)), ("padding", (0,)), ("dilation", (1,)))]
    spatial = len(x) - 2
    args = [a * spatial if len(a) == 1 else a for a in args]
    with pytest.raises(RuntimeError):
        torch.ops.aten.convolution(torch.zeros(x), torch.zeros(w), None, *args, attrs.get("transposed", False),
                                   [*attrs.get("output_padding", (0,))] * spatial, 1)
    with pytest.raises(TypeInferenceError, match="op 'convolution'"):
        infer("convolution", TensorType(x, F32), TensorType(w, F32), **attrs)


@pytest.mark.parametrize("name", ["mean", "var"])
def test_reducing_an_empty_dimension_is_nan_without_a_warning(name):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" RuntimeWarning escaped
        (out,) = run(name, [(np.zeros((0, 3), np.float32), F32)], dims=(0,))
    expected = getattr(torch, name)(torch.zeros(0, 3), dim=0) if name == "mean" else torch.full((3,), float("nan"))
    np.testing.assert_array_equal(out, expected.numpy())


@pytest.mark.parametrize("dtype, torch_dtype", [(DType.u8, torch.uint8), (DType.i8, torch.int8),
                                                (DType.i16, torch.int16)])
def test_float_to_narrow_integer_casts_wrap_like_torch(dtype, torch_dtype):
    # The reference converted float -> uint8 directly, which C leaves undefined (numpy on ARM saturates).
    x = np.array([-1.5, 300.7, -129.0, 70000.2, -0.9, 255.99], np.float32)
    (out,) = run("cast", [(x, F32)], dtype=dtype)
    np.testing.assert_array_equal(out, torch.from_numpy(x).to(torch_dtype).numpy())
