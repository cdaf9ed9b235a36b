"""Counter-based random numbers: Philox 4x32-10 as pure functions of a seed, an offset and the element index.

``philox_bits %seed, %offset`` and ``philox_uniform %seed, %offset`` take two 0-dim i64 operands and produce a
tensor of the ``shape`` attribute. Element ``i`` (its row-major flat index) is computed from one Philox
4x32-10 block (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator Inductor's
Triton code and JAX's ``rbg`` keys use) with

    key     = (seed mod 2^32, seed div 2^32)                     the seed's 64 bits as two 32-bit words
    counter = (n mod 2^32, n div 2^32, 0, 0),  n = (offset + i) mod 2^64

so every element owns a block and its four 32-bit output words; ``word`` picks which one(s) the op reads.
Nothing is sequential: any element can be generated alone, in any order, by any backend, which is what lets
a random op fuse into the kernel that consumes it and a backward graph regenerate a dropout mask from the
(seed, offset) its forward used. Two ops with equal operands and attributes produce equal tensors (the IR
stays pure: CSE and constant folding are exact). The front end gives each random op of a graph its own
offset range, and a fresh seed per call drawn from PyTorch's generator (docs/torch-backend.md).

- ``philox_bits {shape, dtype = i32 | i64, word}``: i32 is word ``word`` as a two's-complement int32; i64 is
  word ``word`` (low half) and word ``word + 1`` (high half) as one int64.
- ``philox_uniform {shape, dtype = f32 | bf16 | f16, word}``: ``(w >> (32 - d)) * 2^-d`` for word ``w``, with
  ``d`` the dtype's significand bits (24, 8, 11): exactly representable values in [0, 1), never 1, as
  PyTorch's CPU ``uniform_`` draws ``d`` bits per value.

Distributions (normal by Box-Muller, bernoulli, randint, randperm, dropout) are compositions of these with
ordinary IR ops, built by the front end (``neuroncc/frontend/lowering/random.py``).
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, fail
from neuroncc.ir.types import TensorType

#: Philox 4x32 round multipliers and Weyl key increments (Random123's PHILOX_M4x32_0/1, PHILOX_W32_0/1).
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10
#: Significand bits (with the implicit one) of each float type: the bits a uniform value keeps.
UNIFORM_BITS = {DType.f32: 24, DType.bf16: 8, DType.f16: 11}

_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter: tuple[np.ndarray, ...], key: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """Philox 4x32-10 of counter words (four uint32-valued arrays) under a 2-word key: four uint32 arrays.

    Known answers (Random123's kat_vectors): counter 0, key 0 gives 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
    """
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in counter)
    k0, k1 = np.uint64(key[0] & 0xFFFFFFFF), np.uint64(key[1] & 0xFFFFFFFF)
    m0, m1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1)
    for round_number in range(PHILOX_ROUNDS):
        if round_number:
            k0 = (k0 + np.uint64(PHILOX_W0)) & _MASK32
            k1 = (k1 + np.uint64(PHILOX_W1)) & _MASK32
        p0, p1 = m0 * c0, m1 * c2  # exact: both factors are below 2^32
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK32
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def philox_words(seed: int, offset: int, count: int) -> tuple[np.ndarray, ...]:
    """The four output words of the blocks of elements ``0 .. count-1`` (uint32 arrays of length ``count``)."""
    seed, offset = int(seed) & 0xFFFFFFFFFFFFFFFF, int(offset) & 0xFFFFFFFFFFFFFFFF
    with np.errstate(over="ignore"):  # the counter wraps modulo 2^64, as the generated code's does
        n = np.uint64(offset) + np.arange(count, dtype=np.uint64)
    zeros = np.zeros(count, dtype=np.uint64)
    return philox4x32((n & _MASK32, n >> np.uint64(32), zeros, zeros), (seed & 0xFFFFFFFF, seed >> 32))


def _check_state(op: str, types: tuple[TensorType, ...], attrs: Attrs) -> None:
    for what, t in zip(("seed", "offset"), types):
        if t.shape != () or t.dtype is not DType.i64:
            raise fail(op, f"the {what} must be a 0-dim i64 tensor, got {t}")
    if any(s < 0 for s in attrs["shape"]):
        raise fail(op, f"negative size in shape {list(attrs['shape'])}")


def _infer_bits(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    _check_state("philox_bits", types, attrs)
    dtype, word = attrs["dtype"], attrs["word"]
    last = 3 if dtype is DType.i32 else 2 if dtype is DType.i64 else None
    if last is None:
        raise fail("philox_bits", f"dtype must be i32 or i64, got {dtype.value}")
    if not 0 <= word <= last:
        raise fail("philox_bits", f"word {word} is out of range for {dtype.value} (0..{last})")
    return TensorType(tuple(attrs["shape"]), dtype)


def _infer_uniform(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    _check_state("philox_uniform", types, attrs)
    if not attrs["dtype"].is_float:
        raise fail("philox_uniform", f"dtype must be a float type, got {attrs['dtype'].value}")
    if not 0 <= attrs["word"] <= 3:
        raise fail("philox_uniform", f"word {attrs['word']} is out of range (0..3)")
    return TensorType(tuple(attrs["shape"]), attrs["dtype"])


def _bits(seed, offset, shape, dtype, word):
    words = philox_words(seed, offset, int(np.prod(shape, dtype=np.int64)))
    if dtype is DType.i32:
        return words[word].view(np.int32).reshape(shape)
    wide = words[word].astype(np.uint64) | (words[word + 1].astype(np.uint64) << np.uint64(32))
    return wide.view(np.int64).reshape(shape)


def _uniform(seed, offset, shape, dtype, word):
    bits = UNIFORM_BITS[dtype]
    words = philox_words(seed, offset, int(np.prod(shape, dtype=np.int64)))
    top = (words[word] >> np.uint32(32 - bits)).astype(np.float32)  # < 2^24: exact in float32
    return (top * np.float32(2.0 ** -bits)).reshape(shape)


_STATE_ATTRS = {"shape": AttrSpec("ints"), "dtype": AttrSpec("dtype"), "word": AttrSpec("int", 0)}

OPS = (
    OpDef("philox_bits", Category.RANDOM, (2, 2), _infer_bits, _bits, _STATE_ATTRS,
          "random bits of Philox 4x32-10 (seed, offset + element index): word `word` as i32, or words "
          "`word`, `word + 1` as i64"),
    OpDef("philox_uniform", Category.RANDOM, (2, 2), _infer_uniform, _uniform, _STATE_ATTRS,
          "uniform in [0, 1) from Philox word `word`: its top 24 (f32), 8 (bf16) or 11 (f16) bits"),
)
