"""Inputs mutated inside the compiled region, and outputs that alias inputs exactly where eager's do."""

import pytest
import torch

from .helpers import assert_same

PROGRAMS = {
    "add_": lambda x, y: x.add_(y).mul(2),
    "mutate_then_read": lambda x, y: (x.mul_(2), y + x)[1],
    "relu_": lambda x, y: torch.relu_(x) + y,
    "index_assign": lambda x, y: x.__setitem__(0, 5.0) or x * y,
    "mutate_a_view": lambda x, y: x[:, 1].mul_(10).sum() + y,
    "copy_": lambda x, y: x.copy_(y * 3) + 1,
    "mutate_both": lambda x, y: (x.sub_(1), y.div_(2), x @ y.t())[2],
    "return_the_mutated_input": lambda x, y: x.add_(1),
    "fill_": lambda x, y: x.fill_(0.5) + y,
    "zero_": lambda x, y: x.zero_() + y,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_input_mutation(name, target):
    assert_same(PROGRAMS[name], torch.randn(3, 4), torch.randn(3, 4), target=target)


ALIASING = {
    "view_of_input": lambda x: x.view(4, 3),
    "transpose_of_input": lambda x: x.t(),
    "slice_of_input": lambda x: x[1:],
    "input_itself": lambda x: x,
    "fresh_output": lambda x: x + 0,
    "view_and_fresh": lambda x: (x.reshape(12), x * 2),
    "contiguous_of_contiguous_aliases": lambda x: x.contiguous(),
    "clone_does_not_alias": lambda x: x.clone(),
}


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_output_aliasing(name, target):
    assert_same(ALIASING[name], torch.randn(3, 4), target=target)


def test_mutating_an_aliased_output_reaches_the_input(target):
    from .helpers import compile_neuron

    x_eager, x_compiled = torch.zeros(2, 3), torch.zeros(2, 3)
    (lambda x: x.t())(x_eager).add_(1)
    compile_neuron(lambda x: x.t(), target=target)(x_compiled).add_(1)
    torch.testing.assert_close(x_compiled, x_eager)
