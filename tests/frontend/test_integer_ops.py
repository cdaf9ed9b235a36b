"""Integer ops under torch.compile: bit shifts (every overload, integer dtype and edge amount against eager,
PyTorch's type promotion, the int4 unpacking of quantized weights) and the float functions PyTorch defines on
integers (rounding: the identity; isnan/isinf: False; nansum; heaviside; sign of bool), gcd and lcm."""

from __future__ import annotations

import pytest
import torch

import neuroncc

INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _compiled(fn):
    return torch.compile(fn, backend="neuron", dynamic=False)


def _amounts(dtype: torch.dtype) -> torch.Tensor:
    bits = torch.iinfo(dtype).bits
    return torch.tensor([-bits - 1, -1, 0, 1, 3, bits - 1, bits, bits + 1, 2 * bits + 3], dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_every_shift_overload_matches_eager_at_the_edge_amounts(dtype):
    info = torch.iinfo(dtype)
    x = torch.tensor([info.min, info.min + 1, -1 if info.min else 7, 0, 1, 0x35, info.max], dtype=torch.int64)
    x = x.to(dtype).reshape(-1, 1)
    amounts = _amounts(dtype)

    def fn(a, s):
        return (a << s, a >> s, torch.bitwise_left_shift(a, s), torch.bitwise_right_shift(a, s), a << 3, a >> 5,
                torch.bitwise_left_shift(a, 2), torch.bitwise_right_shift(a, 7), torch.bitwise_left_shift(3, s),
                torch.bitwise_right_shift(-100 if info.min else 200, s), a >> -1, a << info.bits)

    got, want = _compiled(fn)(x, amounts), fn(x, amounts)
    for position, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and torch.equal(g, w), f"result #{position}: {g} != {w}"
    assert neuroncc.stats()["fallback_ops"] == 0


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_in_place_shifts_in_a_compiled_function(dtype):
    def fn(a, s):
        a <<= 2
        a >>= s
        a.bitwise_left_shift_(1)
        return a.bitwise_right_shift_(s)

    x = torch.randint(-100 if dtype != torch.uint8 else 0, 100, (4, 9)).to(dtype)
    s = torch.randint(-2, 10, (9,)).to(dtype)
    assert torch.equal(_compiled(fn)(x.clone(), s), fn(x.clone(), s))


def test_shift_type_promotion_follows_eager():
    u8 = torch.tensor([200, 3, 255, 16], dtype=torch.uint8)
    i8 = torch.tensor([-8, 1, 100, -128], dtype=torch.int8)
    wide = torch.tensor([1, 9, 2, 62])

    def fn(u, i, w):
        # a Python number does not promote (uint8 << 2 stays uint8; 260 wraps to 4 in int8), tensors do
        return u << 2, u << w, i >> w, i << 260, 1 << w, torch.bitwise_right_shift(u, i)

    for position, (g, w) in enumerate(zip(_compiled(fn)(u8, i8, wide), fn(u8, i8, wide))):
        assert g.dtype == w.dtype and torch.equal(g, w), f"result #{position}: {g} != {w}"


def test_the_reported_float_to_int_shift_and_mask():
    f = lambda a: ((a * 100).to(torch.int64) >> 2) & 7  # noqa: E731
    x = torch.randn(4, 16, 32)
    assert torch.equal(_compiled(f)(x), f(x))


def int4_dequantize(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """Two int4 weights per byte (low nibble first), each dequantized as (q - zero) * scale per output row."""
    low, high = packed & 0xF, (packed >> 4) & 0xF
    q = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)
    return (q.to(torch.float32) - zero) * scale


def int4_pack(q: torch.Tensor) -> torch.Tensor:
    return (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)


def test_int4_unpack_and_dequantize_compiled():
    q = torch.randint(0, 16, (32, 64), dtype=torch.uint8)
    packed = int4_pack(q)
    scale, zero = torch.rand(32, 1) + 0.5, torch.full((32, 1), 8.0)
    x = torch.randn(8, 64)

    def linear(x, packed, scale, zero):
        return x @ int4_dequantize(packed, scale, zero).t()

    assert torch.equal(_compiled(int4_pack)(q), packed)
    assert torch.equal(_compiled(int4_dequantize)(packed, scale, zero), int4_dequantize(packed, scale, zero))
    torch.testing.assert_close(_compiled(linear)(x, packed, scale, zero), linear(x, packed, scale, zero))


@pytest.mark.parametrize("dtype", INTEGERS + [torch.bool], ids=str)
def test_float_functions_of_integers_compile(dtype):
    def fn(x):
        out = [torch.isnan(x), torch.isinf(x), torch.nansum(x, 1), torch.heaviside(x, x[:1]), torch.sign(x)]
        if dtype != torch.bool:  # PyTorch's CPU kernels refuse to round bool
            out += [torch.ceil(x), torch.floor(x), torch.round(x), torch.trunc(x)]
        return out

    x = torch.randint(-5 if dtype not in (torch.uint8, torch.bool) else 0, 6 if dtype != torch.bool else 2, (4, 7))
    x = x.to(dtype)
    for position, (g, w) in enumerate(zip(_compiled(fn)(x), fn(x))):
        assert g.dtype == w.dtype and torch.equal(g, w), f"result #{position}: {g} != {w}"


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_gcd_and_lcm_compile_to_euclid_bounded_by_the_dtype(dtype):
    info = torch.iinfo(dtype)
    # the extremes (|min| wraps), 0, and Fibonacci neighbours: Euclid's longest runs for their size
    values = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 12, 18, 89, 55]
    if info.bits >= 32:
        values += [1836311903, 1134903170] + ([7540113804746346429, 4660046610375530309] if info.bits == 64 else [])
    v = torch.tensor(values, dtype=torch.int64).to(dtype)
    a, b = v.reshape(-1, 1), v

    def fn(a, b):
        return torch.gcd(a, b), torch.lcm(a, b)

    assert torch.equal(_compiled(fn)(a, b)[0], torch.gcd(a, b))
    # PyTorch's own lcm traps (SIGFPE) dividing min by a gcd of -1 in int32/int64: compared without min
    a, b = a[1:], b[1:]
    assert torch.equal(_compiled(fn)(a, b)[1], torch.lcm(a, b))
