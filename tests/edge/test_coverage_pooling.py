"""Pooling ops added for OpInfo coverage (neuroncc/frontend/lowering/coverage_pooling.py) against eager on every target:
ceil_mode overhangs, padding counted or not, divisor_override, uneven adaptive windows, and the gradients."""

import pytest
import torch
import torch.nn.functional as F

from .helpers import assert_same, assert_same_grads

AVG_CASES = {
    "2d_ceil_pad_excluded": (F.avg_pool2d, (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                            count_include_pad=False)),
    "2d_divisor_unbatched": (F.avg_pool2d, (3, 5, 5), dict(kernel_size=(2, 3), stride=1, divisor_override=4)),
    "1d_ceil": (F.avg_pool1d, (2, 3, 9), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    "3d_pad_counted": (F.avg_pool3d, (1, 2, 5, 4, 6), dict(kernel_size=(3, 2, 3), stride=2, padding=1)),
    "3d_ceil": (F.avg_pool3d, (2, 4, 5, 5), dict(kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False)),
}


@pytest.mark.parametrize("name", sorted(AVG_CASES))
def test_avg_pool(name, target):
    fn, shape, kwargs = AVG_CASES[name]
    assert_same(lambda x: fn(x, **kwargs), torch.randn(shape), target=target)


@pytest.mark.parametrize("name", ["2d_ceil_pad_excluded", "3d_pad_counted"])
def test_avg_pool_gradient(name):
    fn, shape, kwargs = AVG_CASES[name]
    assert_same_grads(lambda x: fn(x, **kwargs), torch.randn(shape))


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_adaptive_pools_with_uneven_windows(dims, target):
    avg = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[dims - 1]
    mx = (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[dims - 1]
    x = torch.randn((2, 3) + (7, 5, 6)[:dims])
    out = (3, 4, 4)[:dims]  # 7 -> 3 and 5 -> 4 windows overlap unevenly
    assert_same(lambda t: (avg(t, out), mx(t, out, return_indices=True)), x, target=target)


def test_pool_gradients():
    x = torch.randn(1, 2, 5, 7, 6)
    assert_same_grads(lambda t: F.adaptive_avg_pool3d(t, (2, 3, 4)), x)
    assert_same_grads(lambda t: F.adaptive_max_pool3d(t, (2, 3, 4)), x)
    assert_same_grads(lambda t: F.adaptive_max_pool2d(t[0], (3, 4)), x)
    assert_same_grads(lambda t: F.max_pool3d(t, 3, stride=2, padding=1, ceil_mode=True), x)


def test_conv3d_and_its_transpose(target):
    # 3-d convolutions run as extern kernels on cpu; nki-sim refuses them cleanly (UnsupportedOpError)
    x, w, b = torch.randn(1, 4, 4, 5, 3), torch.randn(6, 2, 2, 3, 1), torch.randn(6)
    assert_same(lambda t, u, v: F.conv3d(t, u, v, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), groups=2),
                x, w, b, target=target, rtol=1e-4, atol=1e-5)
    assert_same(lambda t, u: F.conv_transpose3d(t, u, stride=2, padding=1, output_padding=1), x,
                torch.randn(4, 3, 3, 2, 2), target=target, rtol=1e-4, atol=1e-5)


def test_conv3d_gradient():
    assert_same_grads(lambda t, u: F.conv3d(t, u, stride=2, padding=1), torch.randn(2, 3, 5, 4, 4),
                      torch.randn(2, 3, 3, 2, 3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [(3, 9), (11, 4)])
def test_antialiased_bilinear_resize(size, target):
    # down in one dim and up in the other: the filter stretches only when downsampling
    x = torch.randn(2, 3, 7, 6)
    assert_same(lambda t: F.interpolate(t, size=size, mode="bilinear", antialias=True), x, target=target)
    assert_same(lambda t: F.interpolate(t, scale_factor=0.6, mode="bilinear", antialias=True, align_corners=True),
                x, target=target)


def test_antialiased_bilinear_gradient():
    assert_same_grads(lambda t: F.interpolate(t, size=(3, 9), mode="bilinear", antialias=True),
                      torch.randn(1, 2, 7, 6))


@pytest.mark.parametrize("mode,padding_mode,align_corners", [("bilinear", "zeros", False),
                                                               ("bilinear", "reflection", True),
                                                               ("nearest", "border", False)])
def test_grid_sample_3d(mode, padding_mode, align_corners, target):
    x, grid = torch.randn(2, 3, 4, 5, 3), torch.rand(2, 2, 3, 4, 3) * 2.6 - 1.3  # some points fall outside
    assert_same(lambda t, g: F.grid_sample(t, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
                x, grid, target=target)
