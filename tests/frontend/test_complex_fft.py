"""Complex tensors and torch.fft through ``torch.compile(backend="neuron")``: forward and gradients match eager,
and a spectral-filter layer (rfft, complex multiply, irfft) trains matching eager on cpu and nki-sim."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import neuroncc
from neuroncc.frontend.diagnostics import Float64Warning

TOL = {"rtol": 1e-4, "atol": 1e-5}


class SpectralFilter(nn.Module):
    """A learned filter in frequency space (as in FNO / GFNet layers), then a linear map."""

    def __init__(self, n: int = 16, width: int = 8):
        super().__init__()
        self.n = n
        self.weight = nn.Parameter(torch.randn(width, n // 2 + 1, 2) * 0.3)
        self.proj = nn.Linear(width, width)

    def forward(self, x):  # x: [batch, width, n]
        spectrum = torch.fft.rfft(x, dim=-1, norm="ortho")
        filtered = spectrum * torch.view_as_complex(self.weight)
        y = torch.fft.irfft(filtered, n=self.n, dim=-1, norm="ortho")
        return self.proj(y.transpose(1, 2)).transpose(1, 2) + x


@pytest.mark.parametrize("target", ["cpu", "nki-sim"])
def test_spectral_filter_trains_matching_eager(target):
    torch.manual_seed(0)
    eager = SpectralFilter()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron", options={"target": target})
    eager_opt, our_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager, ours))
    x = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(1))
    target_y = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        losses = []
        for model, opt in ((eager, eager_opt), (compiled, our_opt)):
            opt.zero_grad()
            loss = (model(x) - target_y).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **TOL)
    for (name, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(p_ours, p_eager, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    counts = neuroncc.stats()
    assert counts["fallback_ops"] == 0 and counts["backward_graphs"] == 1


FFT_CASES = {
    "fft": lambda x, norm: torch.fft.fft(x, norm=norm),
    "ifft": lambda x, norm: torch.fft.ifft(x, n=10, norm=norm),
    "rfft_irfft": lambda x, norm: torch.fft.irfft(torch.fft.rfft(x, norm=norm), n=x.shape[-1], norm=norm),
    "irfft_odd": lambda x, norm: torch.fft.irfft(torch.fft.rfft(x, dim=0, norm=norm), n=7, dim=0, norm=norm),
    "fft2_ifft2": lambda x, norm: torch.fft.ifft2(torch.fft.fft2(x, norm=norm) * 2j, norm=norm),
    "rfft2": lambda x, norm: torch.fft.rfft2(x, norm=norm),
    "irfft2": lambda x, norm: torch.fft.irfft2(torch.fft.rfft2(x), s=(6, 8), norm=norm),
    "fftn_dim0": lambda x, norm: torch.fft.fftn(x, dim=(0,), norm=norm),
    "hfft": lambda x, norm: torch.fft.hfft(torch.fft.ifft(x), n=8, norm=norm),
}


def _real_loss(y: torch.Tensor) -> torch.Tensor:
    if y.is_complex():
        return torch.view_as_real(y.resolve_conj()).sin().sum()  # (eager ifft of a real tensor is a conj view)
    return y.sin().sum()


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", FFT_CASES)
def test_torch_fft_forward_and_gradient_match_eager(name, norm):
    fn = FFT_CASES[name]
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(3), requires_grad=True)
    x_ours = x.detach().clone().requires_grad_()
    expected = fn(x, norm)
    got = torch.compile(lambda t: fn(t, norm), backend="neuron")(x_ours)
    torch.testing.assert_close(got, expected, **TOL)
    _real_loss(expected).backward()
    _real_loss(got).backward()
    torch.testing.assert_close(x_ours.grad, x.grad, **TOL)


def test_complex_inputs_outputs_and_arithmetic():
    def fn(a, b, r):
        c = a * b / (b.conj() + 2) - r  # complex arithmetic, a real tensor promoted
        polar = torch.polar(r.abs() + 0.5, r)
        return c, c.abs(), c.angle(), c.real + c.imag, torch.complex(r, r * 2) * polar, (c * 1j).exp().real

    g = torch.Generator().manual_seed(4)
    a, b = (torch.randn(3, 5, dtype=torch.complex64, generator=g) for _ in range(2))
    r = torch.randn(5, generator=g)
    got = torch.compile(fn, backend="neuron")(a, b, r)
    for ours, theirs in zip(got, fn(a, b, r)):
        assert ours.dtype == theirs.dtype
        torch.testing.assert_close(ours, theirs, **TOL)


def test_complex_gradients_through_arithmetic():
    def loss(w, x):
        z = torch.view_as_complex(w) * x
        return (z * z.conj()).real.sum() + (z / (z.abs() + 1)).imag.sum()

    w = torch.randn(4, 2, requires_grad=True, generator=torch.Generator().manual_seed(5))
    x = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(6))
    w_ours = w.detach().clone().requires_grad_()
    loss(w, x).backward()
    torch.compile(loss, backend="neuron")(w_ours, x).backward()
    torch.testing.assert_close(w_ours.grad, w.grad, **TOL)


def test_complex128_computes_in_complex64_with_a_warning():
    x = torch.randn(8, dtype=torch.complex128)
    with pytest.warns(Float64Warning):
        y = torch.compile(lambda t: torch.fft.fft(t) * 2, backend="neuron")(x)
    assert y.dtype == torch.complex128
    torch.testing.assert_close(y, torch.fft.fft(x) * 2, rtol=1e-5, atol=1e-5)
