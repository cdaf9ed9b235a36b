"""A kernel whose index check failed names the op of it that failed and the value (executors/cpu/check_failure.py):
found on the failure path only, by rerunning the kernel's ops in the reference interpreter on copies of its inputs."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.driver.compile import compile_graph
from neuroncc.errors import InterpreterIndexError, KernelIndexError
from neuroncc.ir import Builder, DType, TensorType


def _two_selects():
    b = Builder("two_checks")
    x = b.param(TensorType((4, 8), DType.f32), "x")
    y = b.param(TensorType((6, 8), DType.f32), "y")
    j = b.param(TensorType((3,), DType.i64), "j")
    k = b.param(TensorType((3,), DType.i64), "k")
    return b.build([b.op("add", b.op("index_select", x, j, dim=0), b.op("index_select", y, k, dim=0))])


def test_a_fused_kernel_names_which_of_its_index_checks_failed():
    exe = compile_graph(_two_selects(), target="cpu", cache=None)
    (kernel,) = [op for op in exe.function.ops if op.regions]
    assert [o.name for o in kernel.regions[0].ops].count("index_select") == 2  # one kernel, two checks
    x, y = np.ones((4, 8), np.float32), np.ones((6, 8), np.float32)
    j, k = np.array([0, 5, 1]), np.array([0, 1, 2])
    before = [x.copy(), y.copy(), j.copy(), k.copy()]
    with pytest.raises(KernelIndexError) as caught:
        exe(x, y, j, k)
    error = caught.value
    assert error.op == "index_select" and error.kernel == kernel.attrs["name"]
    assert error.detail == "index 5 is out of bounds for dimension 0 with size 4"
    assert str(error) == f"kernel '{error.kernel}': op 'index_select': {error.detail}"
    assert isinstance(error, IndexError) and isinstance(error, RuntimeError)
    for array, saved in zip((x, y, j, k), before):  # the rerun ran on copies
        np.testing.assert_array_equal(array, saved)
    # the other check (operand 1: size 6)
    with pytest.raises(KernelIndexError, match="op 'index_select': index -7 is out of bounds for dimension 0 with "
                                               "size 6"):
        exe(x, y, np.array([0, 1, 2]), np.array([0, -7, 2]))
    np.testing.assert_array_equal(exe(x, y, np.array([0, 1, 2]), np.array([5, 1, -6]))[0], np.full((3, 8), 2.0))


def test_the_interpreter_names_the_op_and_the_value():
    exe = compile_graph(_two_selects(), target="interp", cache=None)
    with pytest.raises(InterpreterIndexError) as caught:
        exe(np.ones((4, 8), np.float32), np.ones((6, 8), np.float32), np.array([0, 5, 1]), np.array([0, 1, 2]))
    assert caught.value.op == "index_select"
    assert caught.value.detail == "index 5 is out of bounds for dimension 0 with size 4"  # "axis" in numpy's words


def test_the_errors_keep_their_fields_through_pickling():  # a worker process's error reaches its parent whole
    import pickle

    for kind in (KernelIndexError, InterpreterIndexError):
        error = kind("message", op="gather", detail="index 9 is out of bounds", kernel="k", location="f.py:3")
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is kind and str(back) == "message"
        assert (back.op, back.detail, back.kernel, back.location) == \
            ("gather", "index 9 is out of bounds", "k", "f.py:3")
