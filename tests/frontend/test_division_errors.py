"""Integer division by zero raises like eager (``RuntimeError: ZeroDivisionError``) on every path of a compiled
graph, as a typed error naming the aten op, the divisor operand and the user's file:line (located as index
errors are: frontend/run_errors.py): torch.compile on every target, an exported program's first and direct
calls, a graph-cache hit. True division of integers promotes to float and stays inf / NaN."""

from __future__ import annotations

import inspect

import pytest
import torch

import neuroncc
from neuroncc.errors import (InterpreterZeroDivisionError, KernelZeroDivisionError, RuntimeCheckError,
                             RuntimeZeroDivisionError)

HERE = __file__


def _line_of(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    return f"{HERE}:{first + next(n for n, line in enumerate(lines) if text in line)}"


def _floor_then_scale(x, y):
    q = x // y
    return q * 3 + 1


@pytest.mark.parametrize("target,kind", [("cpu", KernelZeroDivisionError), ("interp", InterpreterZeroDivisionError),
                                         ("nki-sim", InterpreterZeroDivisionError)])
def test_forward_division_by_zero_names_the_op_the_divisor_and_the_line(target, kind):
    compiled = torch.compile(_floor_then_scale, backend="neuron", options={"target": target})
    x, y = torch.tensor([[7, -7, 3], [1, 2, 9]]), torch.tensor([[2, 3, 4], [5, 6, 7]])
    assert torch.equal(compiled(x, y), _floor_then_scale(x, y))
    y[1, 2] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _floor_then_scale(x, y)
    with pytest.raises(kind) as caught:
        compiled(x, y)
    error = caught.value
    message = str(error)
    assert message.startswith(f"aten.div.Tensor_mode at {_line_of(_floor_then_scale, 'x // y')} "
                              "(in _floor_then_scale): integer division by zero (divisor: operand 'other', "
                              "int64[2, 3])"), message
    assert "q = x // y" in message
    assert isinstance(error, RuntimeError) and isinstance(error, ZeroDivisionError)  # what eager's code catches
    assert error.location == _line_of(_floor_then_scale, "x // y")
    assert isinstance(error.__cause__, RuntimeZeroDivisionError)  # the kernel's / interpreter's own report
    if target == "cpu":
        assert f"in neuroncc kernel '{error.kernel}' (its op 'div')" in message
    y[1, 2] = 1
    assert torch.equal(compiled(x, y), _floor_then_scale(x, y))  # runs on after


def _remainder_by_number(x):
    return (x + 1) % 0


def test_a_number_divisor_of_zero_is_named():
    with pytest.raises(KernelZeroDivisionError) as caught:
        torch.compile(_remainder_by_number, backend="neuron")(torch.tensor([1, 2]))
    assert f"at {_line_of(_remainder_by_number, '% 0')}" in str(caught.value)
    assert "integer division by zero" in str(caught.value)


def _true_divide(x, y):
    return x / y, torch.div(x, y)


@pytest.mark.parametrize("target", ["cpu", "interp", "nki-sim"])
def test_true_division_of_integers_stays_ieee(target):
    x, y = torch.tensor([5, 0, -3]), torch.tensor([0, 0, 0])
    got = torch.compile(_true_divide, backend="neuron", options={"target": target})(x, y)
    for actual, expected in zip(got, _true_divide(x, y)):
        torch.testing.assert_close(actual, expected, equal_nan=True)


def test_graph_cache_hit_locates_division_errors_in_dynamo_graph():
    x, y = torch.tensor([[7, 8, 9]]), torch.tensor([[1, 2, 3]])
    torch.compile(_floor_then_scale, backend="neuron")(x, y)
    torch._dynamo.reset()
    hits = neuroncc.stats()["graph_cache_hits"]
    compiled = torch.compile(_floor_then_scale, backend="neuron")
    compiled(x, y)
    assert neuroncc.stats()["graph_cache_hits"] == hits + 1
    with pytest.raises(KernelZeroDivisionError) as caught:
        compiled(x, torch.tensor([[1, 0, 3]]))
    assert f"at {_line_of(_floor_then_scale, 'x // y')}" in str(caught.value)
    assert "integer division by zero (divisor: operand " in str(caught.value)


class _Buckets(torch.nn.Module):
    def forward(self, values, width):
        return torch.remainder(values, width) + torch.div(values, width, rounding_mode="trunc")


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_exported_program_names_the_input_the_divisor_came_from(target):
    args = (torch.tensor([10, 11, 12], dtype=torch.int32), torch.tensor([3, 4, 5], dtype=torch.int32))
    compiled = neuroncc.compile_program(torch.export.export(_Buckets(), args), target=target)
    for _ in range(3):  # the first call, then the direct calls
        with pytest.raises(RuntimeZeroDivisionError) as caught:
            compiled(args[0], torch.tensor([3, 0, 5], dtype=torch.int32))
        message = str(caught.value)
        assert message.startswith(f"aten.remainder.Tensor at {_line_of(_Buckets.forward, 'torch.remainder')}"), \
            message
        assert "integer division by zero (divisor: operand 'other', the input 'width', int32[3])" in message
        assert isinstance(caught.value, RuntimeCheckError)
        torch.testing.assert_close(compiled(*args), _Buckets()(*args))
