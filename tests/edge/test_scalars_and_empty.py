"""0-dim tensors and tensors with a size-0 dimension, through torch.compile(backend="neuron") vs eager."""

import pytest
import torch

from .helpers import assert_both_raise, assert_same, assert_same_grads

SCALAR_PROGRAMS = {
    "elementwise": lambda x, y: torch.tanh(x) * y + 1,
    "broadcast_with_matrix": lambda x, y: x * torch.ones(3, 4) - y,
    "sum_and_mean": lambda x, y: (x.sum(), y.mean(), x.amax()),
    "softmax": lambda x, y: torch.softmax(x, dim=0) + torch.log_softmax(y, dim=-1),
    "reshape_roundtrip": lambda x, y: x.reshape(1, 1).expand(2, 3) + y.unsqueeze(0),
    "dot_product_gives_0dim": lambda x, y: torch.dot(x.expand(4), y.expand(4)),
    "where": lambda x, y: torch.where(x > y, x, y),
    "argmax": lambda x, y: torch.argmax(x),
    "cast": lambda x, y: (x * 10).to(torch.int64) + y.to(torch.int64),
}


@pytest.mark.parametrize("name", sorted(SCALAR_PROGRAMS))
def test_0dim(name, target):
    assert_same(SCALAR_PROGRAMS[name], torch.tensor(0.75), torch.tensor(-1.5), target=target)


def test_0dim_gradients(target):
    assert_same_grads(lambda x, w: torch.sigmoid(x * w).sum() + (x * x), torch.tensor(0.3), torch.randn(3),
                      target=target)


def test_max_over_dim_0_of_a_0dim_tensor_backward(target):
    # The backward scatters into a 0-dim tensor.
    assert_same_grads(lambda x: torch.max(x, dim=0).values * 2, torch.tensor(1.5), target=target)


EMPTY_PROGRAMS = {
    "elementwise": lambda x: torch.exp(x) * 2 + 1,
    "sum_over_empty_dim": lambda x: x.sum(0),
    "sum_all": lambda x: x.sum(),
    "mean_over_empty_dim_is_nan": lambda x: x.mean(0),
    "prod_over_empty_dim_is_one": lambda x: x.prod(0),
    "reduce_the_nonempty_dim": lambda x: x.amax(1),
    "cat_with_empty": lambda x: torch.cat([x, torch.ones(2, 3)], dim=0),
    "matmul_k0": lambda x: x.t() @ x,
    "transpose_reshape": lambda x: x.t().reshape(3, 0) + 1,
    "softmax_nonempty_dim": lambda x: torch.softmax(x, dim=1),
}


@pytest.mark.parametrize("name", sorted(EMPTY_PROGRAMS))
def test_size0(name, target):
    assert_same(EMPTY_PROGRAMS[name], torch.randn(0, 3), target=target)


def test_size0_gradients(target):
    assert_same_grads(lambda x, y: (x * 2).sum(0) + y, torch.randn(0, 3), torch.randn(3), target=target)


def test_amax_over_an_empty_dim_raises_like_eager(target):
    assert_both_raise(lambda x: x.amax(0), torch.randn(0, 3), target=target)
