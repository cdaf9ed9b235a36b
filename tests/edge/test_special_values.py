"""NaN and +-inf propagate as in eager (max/min/clamp keep NaN, softmax of -inf rows, inf - inf, ...)."""

import math

import pytest
import torch

from .helpers import assert_same


def _specials():
    return torch.tensor([[1.0, math.nan, -2.0, 0.5],
                         [math.inf, 3.0, -math.inf, 0.0],
                         [-0.0, 2.0, 1.0, math.nan],
                         [-1.0, -3.0, 4.0, 2.5]])


PROGRAMS = {
    "amax": lambda x: x.amax(1),
    "amin": lambda x: x.amin(0),
    "max_dim": lambda x: torch.max(x, dim=1),
    "min_dim": lambda x: torch.min(x, dim=0),
    "max_all": lambda x: x.max(),
    "maximum": lambda x: torch.maximum(x, x.flip(0)),
    "minimum": lambda x: torch.minimum(x, torch.zeros(4)),
    "clamp": lambda x: torch.clamp(x, -1.0, 1.0),
    "clamp_min": lambda x: torch.clamp(x, min=0.0),
    "relu": lambda x: torch.relu(x),
    "argmax": lambda x: torch.argmax(x, dim=1),
    "argmin": lambda x: torch.argmin(x, dim=0),
    "sum": lambda x: x.sum(1),
    "mean": lambda x: x.mean(0),
    "softmax": lambda x: torch.softmax(x, dim=1),
    "sign": lambda x: torch.sign(x),
    "where_isnan": lambda x: torch.where(torch.isnan(x), torch.zeros_like(x), x),
    "isinf": lambda x: torch.isinf(x),
    "comparisons": lambda x: (x > 0, x == x, x != x),
    "exp_log": lambda x: (torch.exp(x), torch.log(x)),
    "div_by_zero": lambda x: x / torch.zeros(4),
    "sigmoid_tanh": lambda x: (torch.sigmoid(x), torch.tanh(x)),
    # gelu(+inf) is not here: eager itself gives inf for a 0-dim tensor and NaN in its vectorized kernel.
    "gelu_nan_and_minus_inf": lambda x: torch.nn.functional.gelu(torch.where(x == float("inf"), 0.0, x)),
    "inf_minus_inf": lambda x: x - x,
    "to_bf16": lambda x: x.to(torch.bfloat16),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_special_values(name, target):
    assert_same(PROGRAMS[name], _specials(), target=target)


def test_masked_softmax_row_of_minus_inf_is_nan(target):
    scores = torch.randn(3, 4)
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    assert_same(lambda s, m: torch.softmax(s.masked_fill(~m, -math.inf), dim=-1), scores, mask, target=target)


def test_bf16_special_values(target):
    assert_same(lambda x: (x * 2).amax(1) + x.sum(1), _specials().to(torch.bfloat16), target=target)
