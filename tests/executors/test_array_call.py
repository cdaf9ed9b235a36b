"""The common call of a cpu executable on numpy arrays (``executors/cpu/array_call.py``): taken for contiguous
inputs of the planned shape and dtype, and every other call left to the full path, which converts, copies and
raises exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.errors import InputError
from neuroncc.codegen.llvm.launch_plan import StepKind
from neuroncc.executors.cpu.array_call import array_call
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, CACHE_LINE_BYTES, aliased_distances
from neuroncc.ir import Builder, DType, TensorType

ROWS, COLS = 512, 512  # 1 MiB of float32: placed outputs


def _scale_shift(rows: int = ROWS, cols: int = COLS):
    b = Builder("scale_shift")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    return fuse_whole_function(b.build([b.op("add", b.op("mul", x, w), x), b.op("mul", x, w)]))


class _FullPathCounter:
    """Counts the calls of ``exe``'s full path (``CpuExecutable._call``)."""

    def __init__(self, exe, monkeypatch):
        self.calls, full = 0, exe._call

        def counted(*args):
            self.calls += 1
            return full(*args)
        monkeypatch.setattr(exe, "_call", counted)


def _inputs(rows: int = ROWS, cols: int = COLS):
    rng = np.random.default_rng(0)
    return rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)


def test_contiguous_inputs_of_the_planned_type_take_the_common_call(monkeypatch):
    exe = build_cpu_executable(_scale_shift(), {"threads": 1})
    full = _FullPathCounter(exe, monkeypatch)
    x, w = _inputs()
    first, second = exe(x, w)
    assert full.calls == 0
    np.testing.assert_array_equal(first, x * w + x)
    np.testing.assert_array_equal(second, x * w)
    for out in (first, second):
        assert out.shape == (ROWS, COLS) and out.dtype == np.float32 and out.flags.c_contiguous
        assert out.flags.writeable and out.ctypes.data % CACHE_LINE_BYTES == 0
    # placed as the full path places them: not 1..window-1 bytes past an input or an earlier output
    near = [x.ctypes.data, w.ctypes.data]
    for out in (first, second):
        assert not any((out.ctypes.data - a) % ALIAS_PERIOD_BYTES in aliased_distances() for a in near)
        near.append(out.ctypes.data)
    again, _ = exe(x, w)  # fresh arrays on every call
    assert again.ctypes.data != first.ctypes.data
    np.testing.assert_array_equal(again, first)


def test_the_common_call_returns_what_the_full_path_returns():
    exe = build_cpu_executable(_scale_shift(8, 16), {"threads": 1})
    x, w = _inputs(8, 16)
    for common, full in zip(exe(x, w), exe._call((x, w), exe._calls)):
        assert common.shape == full.shape and common.strides == full.strides and common.dtype == full.dtype
        np.testing.assert_array_equal(common, full)


@pytest.mark.parametrize("change", ["float64", "fortran", "strided", "list", "read-only"])
def test_other_inputs_take_the_full_path_and_give_the_same_result(change, monkeypatch):
    exe = build_cpu_executable(_scale_shift(8, 16), {"threads": 1})
    x, w = _inputs(8, 16)
    given = {"float64": lambda: x.astype(np.float64), "fortran": lambda: np.asfortranarray(x),
             "strided": lambda: np.repeat(x, 2, axis=1)[:, ::2], "list": lambda: x.tolist(),
             "read-only": lambda: x}[change]()
    if change == "read-only":
        given = x.copy()
        given.flags.writeable = False
    full = _FullPathCounter(exe, monkeypatch)
    first, second = exe(given, w)
    assert full.calls == (0 if change == "read-only" else 1)  # a read-only array is read where it is
    np.testing.assert_allclose(first, x * w + x, rtol=1e-6)
    np.testing.assert_allclose(second, x * w, rtol=1e-6)


def test_bad_inputs_raise_the_full_paths_typed_errors(monkeypatch):
    exe = build_cpu_executable(_scale_shift(8, 16), {"threads": 1})
    full = _FullPathCounter(exe, monkeypatch)
    x, w = _inputs(8, 16)
    with pytest.raises(InputError, match=r"func @scale_shift takes 2 inputs, got 1"):
        exe(x)
    with pytest.raises(InputError, match=r"input #0 has shape \[8, 15\], the graph expects \[8, 16\]"):
        exe(x[:, :15].copy(), w)
    with pytest.raises(InputError, match=r"input #1 has shape \[8\], the graph expects \[16\]"):
        exe(x, w[:8].copy())
    assert full.calls == 3


@pytest.mark.parametrize("change", ["extern step", "interpreted kernel", "output in place"])
def test_plans_outside_the_common_case_have_no_common_call(change):
    exe = build_cpu_executable(_scale_shift(8, 16), {"threads": 1})
    assert array_call(exe) is not None
    step = exe.plan.steps[0]
    if change == "extern step":  # may read numpy views of the call's buffers
        exe.plan.steps[0] = step._replace(kind=StepKind.EXTERN)
    elif change == "interpreted kernel":
        exe.plan.steps[0] = step._replace(native=False)
    else:  # returned as a view of the donated input
        exe.in_place = {0: 0}
    assert array_call(exe) is None
