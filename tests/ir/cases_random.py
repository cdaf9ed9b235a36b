"""Test table entries for the random ops, checked against an independent Philox 4x32-10 written in torch.

The torch side below shares nothing with the numpy reference but the published algorithm: it multiplies in
int64 (two's-complement wrap-around keeps the low 64 bits of the 32x32 product exact) and masks words with
``& 0xFFFFFFFF``. Known answers from Random123's kat_vectors pin both to the specification
(tests/ir/test_random_ops.py).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .spec import OpSpec
from .support import Case, shapes

MASK = 0xFFFFFFFF
I64 = TensorType((), DType.i64)


def torch_philox(counter: tuple[torch.Tensor, ...], key: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """Philox 4x32-10 on int64 tensors holding uint32 words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_number in range(10):
        if round_number:
            k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
        p0, p1 = c0 * 0xD2511F53, c2 * 0xCD9E8D57  # wraps in int64; the low 64 bits are the exact product
        c0, c1, c2, c3 = ((p1 >> 32) & MASK) ^ c1 ^ k0, p1 & MASK, ((p0 >> 32) & MASK) ^ c3 ^ k1, p0 & MASK
    return c0, c1, c2, c3


def torch_words(seed: int, offset: int, count: int) -> tuple[torch.Tensor, ...]:
    seed, offset = seed & (2**64 - 1), offset & (2**64 - 1)
    n = [(offset + i) & (2**64 - 1) for i in range(count)]
    low = torch.tensor([v & MASK for v in n], dtype=torch.int64)
    high = torch.tensor([v >> 32 for v in n], dtype=torch.int64)
    zero = torch.zeros(count, dtype=torch.int64)
    return torch_philox((low, high, zero, zero), (seed & MASK, seed >> 32))


def _state_operands(draw: st.DrawFn) -> list:
    import numpy as np

    seed = draw(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**32 - 1, 2**32])))
    offset = draw(st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-40, 40)))
    return [(np.asarray(seed, dtype=np.int64), I64), (np.asarray(offset, dtype=np.int64), I64)]


@st.composite
def _bits_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([DType.i32, DType.i64]))
    word = draw(st.integers(0, 3 if dtype is DType.i32 else 2))
    return Case(_state_operands(draw), {"shape": draw(shapes(max_size=5)), "dtype": dtype, "word": word})


@st.composite
def _uniform_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([DType.f32, DType.bf16, DType.f16]))
    return Case(_state_operands(draw), {"shape": draw(shapes(max_size=5)), "dtype": dtype,
                                        "word": draw(st.integers(0, 3))})


def _numel(shape) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _bits_torch(xs, a):
    seed, offset = int(xs[0]), int(xs[1])
    words = torch_words(seed, offset, _numel(a["shape"]))
    word = a["word"]
    if a["dtype"] is DType.i32:
        value = words[word] - ((words[word] >> 31) << 32)  # reinterpret as signed 32-bit
        return value.to(torch.int32).reshape(a["shape"])
    return (words[word] | (words[word + 1] << 32)).reshape(a["shape"])  # the shift wraps into the sign bit


def _uniform_torch(xs, a):
    bits = {DType.f32: 24, DType.bf16: 8, DType.f16: 11}[a["dtype"]]
    words = torch_words(int(xs[0]), int(xs[1]), _numel(a["shape"]))
    value = (words[a["word"]] >> (32 - bits)).to(torch.float64) / 2.0**bits
    dtype = {DType.f32: torch.float32, DType.bf16: torch.bfloat16, DType.f16: torch.float16}[a["dtype"]]
    return value.to(dtype).reshape(a["shape"])


_SHAPE = {"shape": (2, 3)}
SPECS = {
    "philox_bits": OpSpec(_bits_cases, _bits_torch, invalid=(
        ((I64, I64), {**_SHAPE, "dtype": DType.f32}),
        ((I64, I64), {**_SHAPE, "dtype": DType.i64, "word": 3}),
        ((I64, I64), {**_SHAPE, "dtype": DType.i32, "word": -1}),
        ((TensorType((1,), DType.i64), I64), {**_SHAPE, "dtype": DType.i32}),
        ((I64, TensorType((), DType.i32)), {**_SHAPE, "dtype": DType.i32}),
        ((I64, I64), {"shape": (2, -1), "dtype": DType.i32}),
        ((I64,), {**_SHAPE, "dtype": DType.i32}),
    )),
    "philox_uniform": OpSpec(_uniform_cases, _uniform_torch, invalid=(
        ((I64, I64), {**_SHAPE, "dtype": DType.i32}),
        ((I64, I64), {**_SHAPE, "dtype": DType.f32, "word": 4}),
        ((TensorType((), DType.f32), I64), {**_SHAPE, "dtype": DType.f32}),
        ((I64, I64), {"dtype": DType.f32}),
    )),
}
