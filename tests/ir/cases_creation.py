"""Test table entries for ops without operands: constant, full, iota."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, DenseAttr

from .cases_elementwise import KINDS
from .spec import OpSpec
from .support import TORCH_DTYPES, Case, random_array, rngs, shapes

ANY = KINDS["any"]


@st.composite
def _constant_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(ANY))
    shape = draw(st.one_of(shapes(), st.just((9, 9))))  # 81 elements: printed as a resource
    return Case([], {"value": DenseAttr(random_array(rng, shape, dtype, specials=draw(st.booleans())), dtype)})


def _constant_torch(xs, a):
    value = a["value"]
    return torch.from_numpy(np.array(value.array)).to(TORCH_DTYPES[value.dtype])


@st.composite
def _full_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from(ANY))
    if dtype.is_float:
        value = draw(st.one_of(st.floats(-1e4, 1e4, width=32), st.integers(-100, 100),
                               st.sampled_from([math.inf, -math.inf, math.nan, -0.0])))
    elif dtype.is_bool:
        value = draw(st.sampled_from([0, 1, 2, -1]))  # a "number" attribute holds no bools
    else:
        info = np.iinfo(dtype.numpy)
        value = draw(st.one_of(st.integers(int(info.min), int(info.max)),
                               st.integers(max(int(info.min), -3), 3).map(float)))
    return Case([], {"shape": draw(shapes()), "dtype": dtype, "value": value})


def _full_torch(xs, a):
    return torch.full(a["shape"], a["value"], dtype=TORCH_DTYPES[a["dtype"]])


@st.composite
def _iota_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from(KINDS["numeric"]))
    number = st.integers(-5, 5)
    if dtype.is_float:
        number = st.one_of(number, st.sampled_from([0.5, -0.25, 1.5]))
    attrs = {"length": draw(st.integers(0, 10)), "dtype": dtype}
    for key in ("start", "step"):
        if draw(st.booleans()):
            attrs[key] = draw(number)
    if attrs.get("step") == 0:
        attrs["step"] = 1
    if dtype == DType.u8 and (attrs.get("start", 0) < 0 or attrs.get("step", 1) < 0):
        attrs["start"], attrs["step"] = 0, 1
    return Case([], attrs)


def _iota_torch(xs, a):
    start, step, length = a["start"], a["step"], a["length"]
    # torch.arange counts ceil((end - start) / step) elements; with a float step, stop half a step after the
    # last element so that rounding cannot add or drop one
    exact = isinstance(start, int) and isinstance(step, int)
    end = start + step * length if exact else start + step * (length - 0.5) if length else start
    return torch.arange(start, end, step, dtype=TORCH_DTYPES[a["dtype"]])


SPECS = {
    "constant": OpSpec(_constant_cases, _constant_torch, invalid=(
        ((), {}),
        ((), {"value": 1.0}),
        ((), {"value": DenseAttr(np.zeros(2, np.float32)), "extra": 1}),
    )),
    "full": OpSpec(_full_cases, _full_torch, invalid=(
        ((), {"shape": (2,), "dtype": DType.i64, "value": 0.5}),
        ((), {"shape": (2,), "dtype": DType.u8, "value": 300}),
        ((), {"shape": (2,), "dtype": DType.i32, "value": math.inf}),
        ((), {"shape": (2,), "dtype": DType.i32, "value": math.nan}),
        ((), {"shape": (-2,), "dtype": DType.f32, "value": 0}),
        ((), {"shape": (2,), "dtype": DType.f32}),
    )),
    "iota": OpSpec(_iota_cases, _iota_torch, invalid=(
        ((), {"length": -1, "dtype": DType.i64}),
        ((), {"length": 3}),
        ((), {"length": 3, "dtype": DType.i64, "step": "1"}),
    )),
}
