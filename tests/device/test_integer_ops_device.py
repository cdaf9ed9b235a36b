"""Integer ops on the neuron device, compiled per op (no CPU fallback): bit shifts for every integer dtype, their
in-place and operator forms, the int4 unpacking of quantized weights, and the float functions PyTorch defines on
integers (rounding, isnan/isinf, nansum, heaviside, sign of bool), gcd and lcm; and float16 signbit, copysign
and frexp (read exactly in float32)."""

from __future__ import annotations

import pytest
import torch

import neuroncc

INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.fixture(autouse=True)
def _no_fallback():
    neuroncc.set_fallback_mode("error")  # a CPU fallback raises DeviceFallbackError (conftest restores "cpu")


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_shifts_run_on_the_device(dtype):
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (6, 9), dtype=torch.int64).to(dtype)
    s = torch.tensor([-1, 0, 1, 3, info.bits - 1, info.bits, info.bits + 5, 2, 7], dtype=torch.int64).to(dtype)
    d, ds = a.to("neuron"), s.to("neuron")
    cases = {
        "x >> 3": (d >> 3, a >> 3),
        "x << s": (d << ds, a << s),
        "x >> s": (d >> ds, a >> s),
        "bitwise_left_shift(x, 2)": (torch.bitwise_left_shift(d, 2), torch.bitwise_left_shift(a, 2)),
        "bitwise_right_shift(5, s)": (torch.bitwise_right_shift(5, ds), torch.bitwise_right_shift(5, s)),
    }
    in_place = d.clone()
    in_place <<= 2
    in_place >>= ds
    cases["<<= 2, >>= s"] = (in_place, (a << 2) >> s)
    method = d.clone().bitwise_left_shift_(ds).bitwise_right_shift_(1)
    cases["bitwise_*_shift_"] = (method, a.bitwise_left_shift(s).bitwise_right_shift(1))
    for what, (got, want) in cases.items():
        assert got.device.type == "neuron" and got.dtype == want.dtype, what
        assert torch.equal(got.cpu(), want), what
    assert neuroncc.get_fallback_ops() == {}


def test_int4_unpack_and_dequantize_on_the_device():
    q = torch.randint(0, 16, (16, 32), dtype=torch.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    scale = torch.rand(16, 1) + 0.5

    def dequantize(packed, scale):
        q = torch.stack([packed & 0xF, (packed >> 4) & 0xF], dim=-1).reshape(packed.shape[0], -1)
        return (q.to(torch.float32) - 8) * scale

    got = dequantize(packed.to("neuron"), scale.to("neuron"))
    assert torch.equal(got.cpu(), dequantize(packed, scale))
    repacked = (q.to("neuron")[:, 0::2] | (q.to("neuron")[:, 1::2] << 4)).to(torch.uint8)
    assert torch.equal(repacked.cpu(), packed)
    assert neuroncc.get_fallback_ops() == {}


FLOAT_FUNCTIONS_OF_INTEGERS = {
    "ceil": torch.ceil, "floor": torch.floor, "round": torch.round, "trunc": torch.trunc, "isnan": torch.isnan,
    "isinf": torch.isinf, "nansum": lambda x: torch.nansum(x, 0), "nansum all": torch.nansum,
    "heaviside": lambda x: torch.heaviside(x, x[1:2]),
}


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_float_functions_of_integers_run_on_the_device(dtype):
    x = torch.randint(-5 if dtype != torch.uint8 else 0, 6, (4, 7)).to(dtype)
    for what, fn in FLOAT_FUNCTIONS_OF_INTEGERS.items():
        got, want = fn(x.to("neuron")), fn(x)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), what
    assert neuroncc.get_fallback_ops() == {}


def test_bool_sign_nansum_and_heaviside_run_on_the_device():
    x = torch.rand(3, 8) < 0.5
    for what, fn in {"sign": torch.sign, "sgn": torch.sgn, "isnan": torch.isnan, "nansum": torch.nansum,
                     "heaviside": lambda t: torch.heaviside(t, t[:1])}.items():
        got, want = fn(x.to("neuron")), fn(x)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), what
    assert neuroncc.get_fallback_ops() == {}


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_gcd_and_lcm_run_on_the_device(dtype):
    info = torch.iinfo(dtype)
    a = torch.randint(info.min + 1, info.max, (3, 40), dtype=torch.int64).to(dtype)
    b = torch.randint(-30 if info.min else 0, 30, (40,)).to(dtype)
    assert torch.equal(torch.gcd(a.to("neuron"), b.to("neuron")).cpu(), torch.gcd(a, b))
    assert torch.equal(torch.lcm(a.to("neuron"), b.to("neuron")).cpu(), torch.lcm(a, b))
    assert neuroncc.get_fallback_ops() == {}


def test_float16_sign_bits_and_frexp_run_on_the_device():
    # signed zeros, NaN of either sign, infinities, float16 subnormals (float32 normals), the largest value
    bits = torch.tensor([0x0000, 0x8000, 0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0x3C00,
                         0xC500], dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.float16)
    y = x.flip(0)
    d, dy = x.to("neuron"), y.to("neuron")
    assert torch.equal(torch.signbit(d).cpu(), torch.signbit(x))
    assert torch.equal(torch.copysign(d, dy).cpu().view(torch.int16), torch.copysign(x, y).view(torch.int16))
    assert torch.equal(torch.copysign(d, -1.0).cpu().view(torch.int16), torch.copysign(x, -1.0).view(torch.int16))
    (mantissa, exponent), (want_mantissa, want_exponent) = torch.frexp(d), torch.frexp(x)
    torch.testing.assert_close(mantissa.cpu(), want_mantissa, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(exponent.cpu(), want_exponent)
    assert neuroncc.get_fallback_ops() == {}
