"""0-d tensors through the unary math references (np.frompyfunc returns a Python float for 0-d input)."""

import math

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret


@pytest.mark.parametrize("name", ["erf", "gelu"])
def test_erf_and_gelu_on_0d_tensors(name):
    b = Builder("f")
    x = b.param(TensorType((), DType.f32))
    (out,) = interpret(b.build([b.op(name, x)]), [np.float32(0.5)])
    want = math.erf(0.5) if name == "erf" else 0.5 * 0.5 * (1 + math.erf(0.5 / math.sqrt(2)))
    assert out.shape == () and out.dtype == np.float32
    assert out == np.float32(want)
