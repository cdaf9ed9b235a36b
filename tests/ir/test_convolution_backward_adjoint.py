"""convolution_backward's input gradient is the adjoint of convolution: <conv(x), g> == <x, grad_input(g)>."""

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret

CASES = [  # x shape, weight shape, stride, padding, dilation, groups
    ((2, 4, 5, 5), (3, 4, 3, 3), (1,), (1,), (1,), 1),  # in != out channels
    ((2, 4, 4, 4), (4, 4, 3, 3), (1,), (1,), (1,), 1),  # in == out (a transposed weight hides here)
    ((1, 4, 7, 6), (6, 2, 3, 2), (2,), (1,), (1,), 2),  # groups, stride, rectangular kernel
    ((1, 2, 8, 8), (2, 2, 3, 3), (1,), (2,), (2,), 1),  # dilation
    ((2, 3, 9), (5, 3, 3), (2,), (1,), (1,), 1),  # 1-d
]


@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "dilation", "groups"), CASES)
def test_input_gradient_is_the_adjoint_of_convolution(x_shape, w_shape, stride, padding, dilation, groups):
    rng = np.random.default_rng(0)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    b = Builder("conv")
    x = b.param(TensorType(x_shape, DType.f32), "x")
    w = b.param(TensorType(w_shape, DType.f32), "w")
    y = b.op("convolution", x, w, **attrs)
    g = b.param(y.type, "g")
    grad_x, grad_w = b.op("convolution_backward", g, x, w, output_mask=(1, 1, 0), **attrs)
    fn = b.build([y, grad_x, grad_w])
    xs = rng.standard_normal(x_shape).astype(np.float32)
    ws = rng.standard_normal(w_shape).astype(np.float32)
    gs = rng.standard_normal(y.type.shape).astype(np.float32)
    ys, gx, gw = interpret(fn, [xs, ws, gs])
    np.testing.assert_allclose(np.vdot(ys, gs), np.vdot(xs, gx), rtol=1e-4)
    # and the weight gradient is the adjoint with respect to w
    np.testing.assert_allclose(np.vdot(ys, gs), np.vdot(ws, gw), rtol=1e-4)
