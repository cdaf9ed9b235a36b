"""Run-time index errors of compiled graphs name the op, the index operand, the value and the valid range (eager's
words) and the user's file:line, on every path: torch.compile forward and backward, the interpreter targets, a
graph-cache hit, an exported program; and a data-dependent scalar is refused with what to do."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import neuroncc
from neuroncc.errors import InterpreterIndexError, KernelIndexError, RuntimeIndexError, UnsupportedOpError
from torch._dynamo.exc import BackendCompilerFailed

HERE = __file__


def _line_of(fn, text: str) -> str:
    """``file:line`` of the line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return f"{HERE}:{first + next(n for n, line in enumerate(lines) if text in line)}"


def _gather_twice(x, i):
    y = x * 2
    return torch.gather(y, 1, i)


def _bad_index() -> torch.Tensor:
    i = torch.randint(0, 8, (4, 3), generator=torch.Generator().manual_seed(0))
    i[1, 2] = 11
    return i


def test_forward_index_error_names_op_operand_value_range_and_line():
    x = torch.randn(4, 8)
    compiled = torch.compile(_gather_twice, backend="neuron")
    assert torch.equal(compiled(x, _bad_index().clamp(max=7)), _gather_twice(x, _bad_index().clamp(max=7)))
    with pytest.raises(KernelIndexError) as caught:
        compiled(x, _bad_index())
    error = caught.value
    message = str(error)
    assert message.startswith(f"aten.gather.default at {_line_of(_gather_twice, 'torch.gather')} (in _gather_twice)")
    assert "index 11 is out of bounds for dimension 1 with size 8" in message
    assert "operand 'index', int64[4, 3]" in message and "return torch.gather(y, 1, i)" in message
    assert isinstance(error, IndexError) and isinstance(error, RuntimeError)  # what eager's code catches
    assert error.op == "aten.gather.default" and error.location == _line_of(_gather_twice, "torch.gather")
    # the kernel's own report is the cause: the kernel, its failing op, the value
    assert isinstance(error.__cause__, KernelIndexError)
    assert re.search(r"kernel '\w*gather\w*': op 'gather': index 11 is out of bounds", str(error.__cause__))
    assert torch.equal(compiled(x, _bad_index().clamp(max=7)), _gather_twice(x, _bad_index().clamp(max=7)))


def _two_index_ops(x, i, j):
    a = torch.gather(x, 1, i)
    b = torch.index_select(a, 0, j)
    return b.sum(1)


def test_fused_kernel_names_which_of_its_index_ops_failed():
    x, i = torch.randn(4, 8), torch.randint(0, 8, (4, 3))
    compiled = torch.compile(_two_index_ops, backend="neuron")
    with pytest.raises(KernelIndexError) as caught:
        compiled(x, i, torch.tensor([0, 5, 1]))
    message = str(caught.value)
    assert message.startswith(f"aten.index_select.default at {_line_of(_two_index_ops, 'index_select')}")
    # index_select's eager message leaves the value out ("index out of range in self"): the kernel's rerun has it
    assert "index 5 is out of bounds for dimension 0 with size 4" in message
    assert "operand 'index', int64[3]" in message


def _gather_sum(x, i):
    return torch.gather(x, 1, i).sum()


def test_backward_index_error_names_the_backward_op_and_the_forward_line():
    x = torch.randn(4, 8, requires_grad=True)
    compiled = torch.compile(_gather_sum, backend="neuron")

    def corrupt(saved):  # the backward reads an index the forward never saw (only a hook can do that)
        return saved.clone().fill_(20) if saved.dtype == torch.int64 else saved

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, corrupt):
        loss = compiled(x, torch.randint(0, 8, (4, 3)))
    with pytest.raises(RuntimeIndexError) as caught:
        loss.backward()
    message = str(caught.value)
    assert f"at {_line_of(_gather_sum, 'torch.gather')}" in message, message
    assert "index 20 is out of bounds for dimension 1 with size 8" in message, message


@pytest.mark.parametrize("target", ["interp", "nki-sim"])
def test_interpreted_targets_locate_index_errors(target):
    compiled = torch.compile(_gather_twice, backend="neuron", options={"target": target})
    with pytest.raises(InterpreterIndexError) as caught:
        compiled(torch.randn(4, 8), _bad_index())
    assert str(caught.value).startswith(f"aten.gather.default at {_line_of(_gather_twice, 'torch.gather')}")
    assert "index 11 is out of bounds for dimension 1 with size 8" in str(caught.value)


def test_graph_cache_hit_locates_index_errors_in_dynamo_graph():
    x = torch.randn(4, 8)
    torch.compile(_gather_twice, backend="neuron")(x, _bad_index().clamp(max=7))
    torch._dynamo.reset()
    hits = neuroncc.stats()["graph_cache_hits"]
    compiled = torch.compile(_gather_twice, backend="neuron")
    compiled(x, _bad_index().clamp(max=7))
    assert neuroncc.stats()["graph_cache_hits"] == hits + 1
    with pytest.raises(KernelIndexError) as caught:
        compiled(x, _bad_index())
    assert str(caught.value).startswith(f"torch.gather at {_line_of(_gather_twice, 'torch.gather')}")
    assert "index 11 is out of bounds for dimension 1 with size 8" in str(caught.value)


class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.table(ids).sum(-1)


def test_exported_program_names_the_input_the_index_came_from():
    program = torch.export.export(_Embed(), (torch.tensor([1, 2, 3]),))
    compiled = neuroncc.compile_program(program)
    for _ in range(3):  # the first call, then the direct call a call in the same form takes
        with pytest.raises(KernelIndexError) as caught:
            compiled(torch.tensor([1, 12, 3]))
        message = str(caught.value)
        assert message.startswith(f"aten.embedding.default at {_line_of(_Embed.forward, 'self.table')}"), message
        assert "index 12 is out of bounds for dimension 0 with size 10" in message
        assert "operand 'indices', the input 'ids', int64[3]" in message
        assert compiled(torch.tensor([1, 9, 3])).shape == (3,)  # the program runs on after


def _scalar_read(x, i):
    s = i.sum().item()
    return x * s


def test_captured_scalar_read_is_refused_with_what_to_do():
    with torch._dynamo.config.patch(capture_scalar_outputs=True), pytest.raises(BackendCompilerFailed) as caught:
        torch.compile(_scalar_read, backend="neuron")(torch.randn(3), torch.tensor([1, 2]))
    inner = caught.value.inner_exception
    assert isinstance(inner, UnsupportedOpError)
    assert f"aten._local_scalar_dense.default(int64[]) at {_line_of(_scalar_read, '.item()')}" in str(inner)
    assert "leave capture_scalar_outputs off" in str(inner)


def test_graph_break_at_a_scalar_read_runs_and_locates_errors_in_the_resumed_graph():
    def after_break(x, i):
        n = i.max().item()
        return torch.gather(x, 1, i) * n

    compiled = torch.compile(after_break, backend="neuron")
    x, good = torch.randn(4, 8), _bad_index().clamp(max=7)
    torch.testing.assert_close(compiled(x, good), after_break(x, good))
    with pytest.raises(KernelIndexError) as caught:
        compiled(x, _bad_index())
    # TorchDynamo's resume function is named as the user's function it continues
    assert str(caught.value).startswith(f"aten.gather.default at {_line_of(after_break, 'torch.gather')} "
                                        "(in after_break)")


def _one_hot(i):
    return torch.nn.functional.one_hot(i, 4) * 2


def test_a_run_time_assertion_is_refused_naming_it_and_the_line():
    # F.one_hot's decomposition checks the class range with _assert_async: a run-time assertion the IR lacks
    with pytest.raises(BackendCompilerFailed) as caught:
        torch.compile(_one_hot, backend="neuron")(torch.tensor([1, 2]))
    inner = caught.value.inner_exception
    assert isinstance(inner, UnsupportedOpError)
    assert f"aten._assert_async.msg(bool[], 'one_hot: Class values must be non-negative.') at " \
           f"{_line_of(_one_hot, 'functional.one_hot')}" in str(inner)
    assert "neuroncc's graphs have no run-time assertions" in str(inner)
