"""A Python float the device lifts into a kernel parameter, where the op's decomposition or lowering branches
in Python on its value (``if beta == 0``, bf16 ``pow``'s ``if exponent == 3``): each value gets the branch eager
takes (neuroncc/device/stand_ins.py), and a kernel still serves every value that branches alike."""

import pytest
import torch

import neuroncc

NAN = float("nan")


def _on_device(fn, *tensors):
    return fn(*[t.to("neuron") for t in tensors]).cpu()


def _same(expected, got):
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


CASES = {  # HF-style attention scores: torch.baddbmm(torch.empty(...), q, k, beta=0.0, alpha=scale)
    "baddbmm": lambda s, a, b, beta: torch.baddbmm(s.expand(2, 3, 4), a.expand(2, 3, 5), b.expand(2, 5, 4),
                                                   beta=beta, alpha=0.125),
    "addbmm": lambda s, a, b, beta: torch.addbmm(s, a.expand(2, 3, 5), b.expand(2, 5, 4), beta=beta),
    "addmv": lambda s, a, b, beta: torch.addmv(s[:, 0], a, b[:, 0], beta=beta),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("betas", [(0.0, 0.5, 0.0), (0.5, 0.0, 0.75)], ids=["zero first", "zero after"])
def test_beta_zero_ignores_nan_in_self_after_any_other_beta(name, betas):
    torch.manual_seed(0)
    s, a, b = torch.full((3, 4), NAN), torch.randn(3, 5), torch.randn(5, 4)
    for beta in betas:
        _same(CASES[name](s, a, b, beta), _on_device(lambda s, a, b: CASES[name](s, a, b, beta), s, a, b))


@pytest.mark.parametrize("exponent", [3.0, -2.0, 2.5])
def test_bf16_pow_by_a_float_takes_eagers_special_exponents(exponent):
    x = (torch.linspace(0.3, 7.0, 257)).to(torch.bfloat16)
    expected = torch.pow(x, exponent)
    got = _on_device(lambda x: torch.pow(x, exponent), x)
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))


def test_a_kernel_serves_every_value_that_branches_alike():
    """The lifted kernel is kept: new values of alpha (all != 1, as the first) compile nothing new."""
    x, y = torch.randn(64).to("neuron"), torch.randn(64).to("neuron")
    torch.add(x, y, alpha=0.25)
    before = neuroncc.stats()["eager_kernels_compiled"]
    for alpha in (0.5, -3.0, 1e-3, 7.0):
        _same(torch.add(x.cpu(), y.cpu(), alpha=alpha), torch.add(x, y, alpha=alpha).cpu())
    assert neuroncc.stats()["eager_kernels_compiled"] == before
