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


def test_parameter_views_are_kept_only_while_valid():
    from neuroncc.frontend.convert import ParameterViews

    weight = torch.nn.Parameter(torch.randn(3, 4))
    activation = torch.randn(3, 4, requires_grad=True) * 2  # not a leaf: never kept
    half = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.bfloat16))  # crosses as a float32 copy: never kept
    views = ParameterViews(3)
    first = views.arrays([weight, activation, half], [0, 1, 2])
    again = views.arrays([weight, activation, half], [0, 1, 2])
    assert again[0] is first[0] and again[1] is not first[1] and again[2] is not first[2]
    with torch.no_grad():
        weight.mul_(2)  # an optimizer step: in place, seen through the kept view
        half.mul_(2)
    np.testing.assert_array_equal(views.arrays([weight, activation, half], [0, 1, 2])[0], weight.detach().numpy())
    np.testing.assert_array_equal(views.arrays([weight, activation, half], [0, 1, 2])[2],
                                  half.detach().float().numpy())
    weight.data = torch.randn(4, 3)  # new storage and shape: a new view
    swapped = views.arrays([weight, activation, half], [0, 1, 2])[0]
    assert swapped.shape == (4, 3) and np.shares_memory(swapped, weight.detach().numpy())
    other = torch.nn.Parameter(torch.randn(4, 3))  # another tensor at that position
    assert np.shares_memory(views.arrays([other, activation, half], [0, 1, 2])[0], other.detach().numpy())
