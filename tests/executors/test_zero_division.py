"""A native kernel that divides integers by zero sets its error flag (FailedCheck.ZERO_DIVISOR) and the launcher
raises KernelZeroDivisionError naming the kernel's op, as eager raises ``RuntimeError: ZeroDivisionError``: for
division with every rounding mode, remainder and fmod, signed and unsigned, a divisor in the loop or broadcast
(hoisted) and a divisor of zero anywhere in a large kernel run by two threads. Float division keeps IEEE."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from neuroncc.driver.compile import compile_graph
from neuroncc.errors import (InterpreterZeroDivisionError, KernelIndexError, KernelZeroDivisionError,
                             RuntimeCheckError, RuntimeZeroDivisionError)
from neuroncc.ir import Builder, DType, TensorType

DIVISIONS = [("div", {"rounding_mode": "floor"}), ("div", {"rounding_mode": "trunc"}), ("remainder", {}),
             ("fmod", {})]


def _divide(name: str, attrs: dict, dtype: DType, shape=(3, 5), divisor_shape=(3, 5)):
    b = Builder("divide")
    x = b.param(TensorType(shape, dtype), "x")
    y = b.param(TensorType(divisor_shape, dtype), "y")
    return b.build([b.op("add", b.op(name, x, y, **attrs), x)])  # fused with the add: one kernel


@pytest.mark.parametrize("name,attrs", DIVISIONS)
@pytest.mark.parametrize("dtype", [DType.i64, DType.i32, DType.i8, DType.u8])
@pytest.mark.parametrize("target", ["cpu", "interp", "nki-sim"])
def test_integer_division_by_zero_raises_and_the_program_runs_on(name, attrs, dtype, target):
    exe = compile_graph(_divide(name, attrs, dtype), target=target, cache=None)
    x = np.arange(15, dtype=dtype.numpy).reshape(3, 5)
    y = np.full((3, 5), 3, dtype=dtype.numpy)
    good = exe(x, y)[0]
    y[2, 4] = 0
    with pytest.raises(RuntimeZeroDivisionError) as caught:
        exe(x, y)
    error = caught.value
    assert isinstance(error, RuntimeError) and isinstance(error, ZeroDivisionError) and \
        isinstance(error, RuntimeCheckError)
    assert error.op == name and error.detail == "integer division by zero"
    if target == "cpu":
        assert isinstance(error, KernelZeroDivisionError) and error.kernel
        assert str(error) == f"kernel '{error.kernel}': op '{name}': integer division by zero"
    else:
        assert isinstance(error, InterpreterZeroDivisionError)
    y[2, 4] = 3
    np.testing.assert_array_equal(exe(x, y)[0], good)  # the flag was cleared: the next call succeeds


@pytest.mark.parametrize("dtype", [DType.i64, DType.i32])
def test_a_broadcast_divisor_of_zero_raises(dtype):  # the divisor's check is hoisted out of the loop with it
    exe = compile_graph(_divide("div", {"rounding_mode": "floor"}, dtype, (64, 33), (1, 33)), target="cpu",
                        cache=None)
    x = np.arange(64 * 33, dtype=dtype.numpy).reshape(64, 33)
    y = np.arange(1, 34, dtype=dtype.numpy).reshape(1, 33)
    np.testing.assert_array_equal(exe(x, y)[0], x // y + x)
    y[0, 7] = 0
    with pytest.raises(KernelZeroDivisionError, match="op 'div': integer division by zero"):
        exe(x, y)


def test_a_zero_anywhere_in_a_large_kernel_on_two_threads_raises():
    exe = compile_graph(_divide("remainder", {}, DType.i32, (512, 256), (512, 256)), target="cpu", cache=None,
                        options={"threads": 2})
    x = np.arange(512 * 256, dtype=np.int32).reshape(512, 256)
    y = np.full((512, 256), 7, np.int32)
    np.testing.assert_array_equal(exe(x, y)[0], x % y + x)
    for row, column in ((0, 0), (511, 255), (300, 17)):
        y[row, column] = 0
        with pytest.raises(KernelZeroDivisionError):
            exe(x, y)
        y[row, column] = 7


def test_float_division_by_zero_is_ieee_and_sets_no_flag():
    exe = compile_graph(_divide("div", {"rounding_mode": "floor"}, DType.f32), target="cpu", cache=None)
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    out = exe(x, np.zeros((3, 5), np.float32))[0]
    assert np.isnan(out[0, 0]) and np.isinf(out[1:]).all()


def test_a_kernel_with_both_checks_names_the_one_that_failed():
    b = Builder("both")
    x = b.param(TensorType((4, 8), DType.i64), "x")
    j = b.param(TensorType((3,), DType.i64), "j")
    y = b.param(TensorType((3, 8), DType.i64), "y")
    exe = compile_graph(b.build([b.op("remainder", b.op("index_select", x, j, dim=0), y)]), target="cpu",
                        cache=None)
    x, y = np.arange(32).reshape(4, 8), np.full((3, 8), 5)
    with pytest.raises(KernelIndexError, match="index 9 is out of bounds"):
        exe(x, np.array([0, 9, 1]), y)
    y[1, 1] = 0
    with pytest.raises(KernelZeroDivisionError, match="op 'remainder': integer division by zero"):
        exe(x, np.array([0, 2, 1]), y)


def test_the_division_errors_keep_their_fields_through_pickling():
    for kind in (KernelZeroDivisionError, InterpreterZeroDivisionError):
        error = kind("message", op="div", detail="integer division by zero", kernel="k", location="f.py:3")
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is kind and str(back) == "message"
        assert (back.op, back.detail, back.kernel, back.location) == ("div", "integer division by zero", "k", "f.py:3")


@pytest.mark.parametrize("divisor", [2, -3, 0])
def test_a_constant_divisor_is_checked_only_when_it_is_zero(divisor):
    """``x // 2``'s divisor is a ``full`` made in the kernel: nothing to check, so the kernel's step is not marked
    ``may_fail`` and its call keeps the fast path (a [16, 16] int64 ``x // 2 + x % 3`` torch.compile call 16.0 ->
    13.3 us on Zen 4, session 44); a constant zero divisor is still checked and raises."""
    b = Builder("constant_divisor")
    x = b.param(TensorType((4, 8), DType.i64), "x")
    full = b.op("full", shape=(4, 8), dtype=DType.i64, value=divisor)
    b_out = b.op("add", b.op("div", x, full, rounding_mode="floor"), x)
    exe = compile_graph(b.build([b_out]), target="cpu", cache=None)
    (step,) = [s for s in exe.plan.steps if s.kind == "kernel"] or [None]
    values = np.arange(-16, 16, dtype=np.int64).reshape(4, 8)
    if divisor:
        assert step is not None and not step.may_fail
        np.testing.assert_array_equal(exe(values)[0], values // divisor + values)
    else:
        assert step is not None and step.may_fail
        with pytest.raises(KernelZeroDivisionError):
            exe(values)
