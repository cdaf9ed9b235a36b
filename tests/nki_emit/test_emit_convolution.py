"""Convolutions: rewritten into pad + strided im2col DMA + TensorE matmuls, against the interpreter."""

from __future__ import annotations

import pytest

from emit_helpers import F32, check_against_interpreter, graph
from neuroncc.errors import UnsupportedOpError
from neuroncc.executors.nki_sim.executable import NkiUnsupportedError

CASES = {  # stride, padding, dilation, groups
    "plain": ([1, 1], [1, 1], [1, 1], 1),
    "strided": ([2, 2], [1, 0], [1, 1], 1),
    "dilated_grouped": ([1, 1], [2, 1], [2, 1], 2),
    "depthwise": ([2, 1], [1, 1], [1, 1], 4),
}


@pytest.mark.parametrize("case", CASES)
def test_convolution_and_its_gradients(case, rng):
    stride, padding, dilation, groups = CASES[case]
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    b, (x, w, bias) = graph("conv", ((2, 4, 7, 6), F32), ((8, 4 // groups, 3, 3), F32), ((8,), F32))
    y = b.op("convolution", x, w, bias, **attrs)
    check_against_interpreter(b.build([b.op("relu", y)]), rng)
    b, (grad, x, w) = graph("conv_backward", (y.type.shape, F32), ((2, 4, 7, 6), F32), ((8, 4 // groups, 3, 3), F32))
    grads = b.op("convolution_backward", grad, x, w, output_mask=[1, 1, 1], **attrs)
    check_against_interpreter(b.build(list(grads)), rng)


def test_conv1d(rng):
    b, (x, w) = graph("conv1d", ((2, 3, 9), F32), ((4, 3, 3), F32))
    check_against_interpreter(b.build([b.op("convolution", x, w, stride=[2], padding=[1], dilation=[1])]), rng)


def test_transposed_convolution_is_refused_naming_the_op(rng):
    b, (x, w) = graph("deconv", ((1, 4, 5, 5), F32), ((4, 2, 3, 3), F32))
    fn = b.build([b.op("convolution", x, w, stride=[1], padding=[0], dilation=[1], transposed=True)])
    with pytest.raises(NkiUnsupportedError, match="'convolution' with transposed=true") as caught:
        check_against_interpreter(fn, rng)
    assert isinstance(caught.value, UnsupportedOpError)
