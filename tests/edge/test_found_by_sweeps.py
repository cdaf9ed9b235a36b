"""Front-end bugs found by the OpInfo sweep and the fuzzer, each checked through torch.compile vs eager."""

import pytest
import torch

from .helpers import compile_neuron


@pytest.mark.parametrize("op", [torch.add, torch.sub])
def test_add_sub_with_alpha_and_a_tensor_operand(op):
    # alpha * other was computed as an IR value and then handed back to the scalar path: refused.
    fn = compile_neuron(lambda a, b: op(a, b, alpha=2))
    a, b = torch.randn(3, 4), torch.randn(1, 1)
    torch.testing.assert_close(fn(a, b), op(a, b, alpha=2))
