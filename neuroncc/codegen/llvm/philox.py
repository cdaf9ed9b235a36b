"""Native lowering of the random ops (``philox_bits``, ``philox_uniform``): Philox 4x32-10 per element.

An element's value is a function of the seed, the offset and its flat index only (see
:mod:`neuroncc.ir.ops.random`), so the lowering is branch-free straight-line integer code in the loop body:
the counter from the index, ten rounds of two 32x32->64 multiplies (``mul`` of zero-extended i32 values, which
x86 vectorizes as ``vpmuludq``) and xors with a key schedule computed from the loop-invariant seed. The loop
vectorizer turns it into 8-lane AVX2 code with no call and no branch in the hot loop; the block's four words
are memoized per loop body, so ``randn`` (two uniforms of one block) computes the block once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext, Index
from neuroncc.codegen.llvm.scalars import F32, I32, I64, compute_type, round_to
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op, Value
from neuroncc.ir.ops.random import (
    PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1, UNIFORM_BITS,
)
from neuroncc.ir.types import contiguous_strides


def _i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value & 0xFFFFFFFF)


def philox_block(ctx: EmitContext, op: Op, idx: Index) -> tuple[ir.Value, ...]:
    """The four i32 output words of ``op``'s element at ``idx`` (memoized per loop body and operands)."""
    shape = op.results[0].type.shape
    flat: Any = 0
    for i, stride in zip(idx, contiguous_strides(shape)):
        flat = ctx.add(flat, ctx.mul(i, stride))
    seed_value, offset_value = op.operands
    key = ("philox", seed_value, offset_value, ctx.form(flat))  # one block per element, whichever op asks
    return ctx.memoized(key, lambda: _philox_words(ctx, seed_value, offset_value, flat))


def _philox_words(ctx: EmitContext, seed_value: Value, offset_value: Value, flat: Any) -> tuple[ir.Value, ...]:
    """Philox 4x32-10 of the seed and counter ``offset + flat``: the block's four i32 words."""
    b = ctx.b
    seed, offset = ctx.value_at(seed_value, []), ctx.value_at(offset_value, [])
    n = b.add(offset, ctx.ir_index(flat))  # wraps modulo 2^64, as the reference's counter does
    c0, c1 = b.trunc(n, I32), b.trunc(b.lshr(n, ir.Constant(I64, 32)), I32)
    c2 = c3 = _i32(0)
    k0, k1 = b.trunc(seed, I32), b.trunc(b.lshr(seed, ir.Constant(I64, 32)), I32)
    for number in range(PHILOX_ROUNDS):
        if number:
            k0, k1 = b.add(k0, _i32(PHILOX_W0)), b.add(k1, _i32(PHILOX_W1))
        hi0, lo0 = _mulhilo(b, PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(b, PHILOX_M1, c2)
        c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0
    return c0, c1, c2, c3


def _mulhilo(b: ir.IRBuilder, multiplier: int, value: ir.Value) -> tuple[ir.Value, ir.Value]:
    if isinstance(value, ir.Constant) and value.constant == 0:
        return _i32(0), _i32(0)  # the first round's c2 (and so its product) is zero
    product = b.mul(b.zext(value, I64), ir.Constant(I64, multiplier))
    return b.trunc(b.lshr(product, ir.Constant(I64, 32)), I32), b.trunc(product, I32)


def _bits(ctx: EmitContext, op: Op, index: int, idx: Index) -> ir.Value:
    words = philox_block(ctx, op, idx)
    word = op.attrs["word"]
    if op.attrs["dtype"] is DType.i32:
        return words[word]
    b = ctx.b
    high = b.shl(b.zext(words[word + 1], I64), ir.Constant(I64, 32))
    return b.or_(high, b.zext(words[word], I64))


def _uniform(ctx: EmitContext, op: Op, index: int, idx: Index) -> ir.Value:
    dtype: DType = op.attrs["dtype"]
    bits = UNIFORM_BITS[dtype]
    b = ctx.b
    top = b.lshr(philox_block(ctx, op, idx)[op.attrs["word"]], _i32(32 - bits))
    value = b.fmul(b.uitofp(top, F32), ir.Constant(F32, 2.0 ** -bits))  # exact: top < 2^24
    assert compute_type(dtype) == F32
    return round_to(b, value, dtype)  # exact too (d bits fit the dtype); kept for the compute convention


#: Random op -> lowering (the ACCESS table's signature: the value of the result at an index).
RANDOM: dict[str, Callable[[EmitContext, Op, int, Index], ir.Value]] = {
    "philox_bits": _bits,
    "philox_uniform": _uniform,
}
