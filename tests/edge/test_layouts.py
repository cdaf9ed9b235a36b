"""Non-contiguous, transposed, expanded (stride 0) and offset inputs; outputs keep eager's layout."""

import pytest
import torch

from .helpers import assert_same, assert_same_grads


def _transposed():
    return torch.randn(4, 3).t()


def _strided_slice():
    return torch.randn(6, 8)[::2, 1::3]


def _expanded():
    return torch.randn(3, 1).expand(3, 4)


def _expanded_leading():
    return torch.randn(4).expand(3, 4)


def _offset():
    return torch.randn(20)[5:17].view(3, 4)


def _permuted_3d():
    return torch.randn(2, 3, 4).permute(2, 0, 1)[:3]


def _channels_last():
    return torch.randn(1, 3, 2, 2).to(memory_format=torch.channels_last).reshape(3, 4)


INPUTS = {
    "transposed": _transposed, "strided_slice": _strided_slice, "expanded": _expanded,
    "expanded_leading": _expanded_leading, "storage_offset": _offset, "permuted_3d": _permuted_3d,
    "channels_last_view": _channels_last,
}

PROGRAMS = {
    "elementwise": lambda x: torch.sigmoid(x) * 3 - x,
    "row_reduction": lambda x: x.sum(-1),
    "column_reduction": lambda x: x.amax(0),
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "matmul": lambda x: x @ x.transpose(-1, -2),
    "view_ops": lambda x: x.transpose(0, 1).reshape(-1)[1:5] * 2,
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("layout", sorted(INPUTS))
def test_layout(layout, program, target):
    assert_same(PROGRAMS[program], INPUTS[layout](), target=target)


@pytest.mark.parametrize("layout", ["transposed", "expanded", "storage_offset"])
def test_layout_gradients(layout, target):
    assert_same_grads(lambda x, w: torch.tanh(x * w).sum(0), INPUTS[layout](), torch.randn(4), target=target)


OUTPUT_LAYOUTS = {
    "transposed_output": lambda x: (x + 1).t(),
    "expanded_output": lambda x: x.sum(0, keepdim=True).expand(5, 4),
    "permuted_output": lambda x: (x * 2).reshape(2, 2, 5).permute(2, 0, 1),
    "sliced_output": lambda x: (x - 1)[:, ::2],
}


@pytest.mark.parametrize("name", sorted(OUTPUT_LAYOUTS))
def test_output_keeps_eager_strides(name, target):
    assert_same(OUTPUT_LAYOUTS[name], torch.randn(5, 4), target=target)
