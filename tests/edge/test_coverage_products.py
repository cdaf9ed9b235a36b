"""cdist, pdist and bilinear (neuroncc/frontend/lowering/coverage_products.py) against eager on every target, for every
kind of p (0, 1, 2, inf, fractional, large) and with the gradients ATen defines at ties."""

import math

import pytest
import torch
import torch.nn.functional as F

from .helpers import assert_same, assert_same_grads

PS = [0.0, 0.5, 1.0, 2.0, 3.0, math.inf]


@pytest.mark.parametrize("p", PS)
def test_cdist_and_pdist(p, target):
    x1, x2 = torch.randn(2, 4, 3), torch.randn(1, 5, 3)  # batch dims broadcast
    rows = torch.randn(5, 3)
    rows[3] = rows[1]  # a zero distance
    assert_same(lambda a, b, r: (torch.cdist(a, b, p=p), F.pdist(r, p=p)), x1, x2, rows, target=target,
                rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, math.inf])
def test_distance_gradients(p):
    assert_same_grads(lambda a, b: torch.cdist(a, b, p=p), torch.randn(2, 4, 3), torch.randn(1, 5, 3))
    assert_same_grads(lambda r: F.pdist(r, p=p), torch.randn(6, 3))


def test_bilinear(target):
    x1, x2, w, b = torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(6, 4, 5), torch.randn(6)
    assert_same(F.bilinear, x1, x2, w, b, target=target, rtol=1e-5, atol=1e-5)
    assert_same_grads(F.bilinear, x1, x2, w, b, rtol=1e-5, atol=1e-5)
