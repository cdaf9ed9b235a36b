"""The torch <-> numpy boundary: no copies where the dtype allows, eager's layouts on the way back."""

from __future__ import annotations

import numpy as np
import torch

from neuroncc.frontend.convert import TensorSpec, to_numpy, to_torch, with_strides


def test_inputs_cross_without_a_copy_even_when_strided():
    base = torch.randn(4, 6)
    view = base[1:, ::2].t()
    array = to_numpy(view)
    assert np.shares_memory(array, base.numpy())
    np.testing.assert_array_equal(array, view.numpy())


def test_bfloat16_and_float64_cross_as_float32():
    for dtype in (torch.bfloat16, torch.float64):
        array = to_numpy(torch.tensor([1.5, -2.25], dtype=dtype))
        assert array.dtype == np.float32
        np.testing.assert_array_equal(array, [1.5, -2.25])


def test_outputs_wrap_the_array_without_a_copy():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = to_torch(array, TensorSpec((2, 3), (3, 1), torch.float32))
    assert tensor.data_ptr() == array.ctypes.data


def test_outputs_get_eager_dtype_and_strides():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    transposed = to_torch(array, TensorSpec((2, 3), (1, 2), torch.bfloat16))
    assert transposed.dtype == torch.bfloat16 and transposed.stride() == (1, 2)
    torch.testing.assert_close(transposed.float(), torch.from_numpy(array))
    expanded = with_strides(torch.ones(4, 3) * torch.arange(3.0), (0, 1))
    assert expanded.stride() == (0, 1)
    torch.testing.assert_close(expanded, torch.arange(3.0).expand(4, 3))
    gapped = with_strides(torch.randn(4, 3), (8, 1))  # a slice of a wider tensor in eager
    assert gapped.stride() == (8, 1)
