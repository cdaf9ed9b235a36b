"""convolution_backward's numpy reference is the adjoint of convolution's (checked without torch)."""

import numpy as np
import pytest

from neuroncc.ir.ops.linalg import _conv, _conv_backward


@pytest.mark.parametrize("groups", [1, 2])
def test_conv_backward_is_the_adjoint_of_conv(groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 7))
    w = rng.standard_normal((6, 4 // groups, 3, 3))
    attrs = dict(stride=(2,), padding=(1,), dilation=(1,), transposed=False, output_padding=(), groups=groups)
    y = _conv(x, w, **attrs)
    g = rng.standard_normal(y.shape)
    gx, gw, gb = _conv_backward(g, x, w, **attrs, output_mask=(1, 1, 1))
    inner = float(np.sum(y * g))  # <conv(x, w), g> is linear in x and in w
    assert np.isclose(inner, float(np.sum(x * gx)))
    assert np.isclose(inner, float(np.sum(w * gw)))
    np.testing.assert_allclose(gb, g.sum(axis=(0, 2, 3)))
