"""Integer shifts with PyTorch's CPU semantics for every amount (the ``bitwise_*_shift`` ops' LLVM lowering).

LLVM's ``shl``/``ashr``/``lshr`` are poison for an amount >= the bit width, and the amount is read unsigned, so a
negative one is such an amount too. PyTorch defines them (torch 2.13 CPU, every integer type): a left shift or
an unsigned right shift by them gives 0, a signed right shift fills with the sign bit. So the amount is clamped
to width - 1 by a select before the shift (no poison is ever computed) and a second select zeroes the results of
the out-of-range amounts where the clamped shift does not already give them (a signed right shift by width - 1
is the sign fill). Both are selects on vectors: the loop vectorizes without branches (AVX-512's variable shifts
``vpsllv``/``vpsrav``/``vpsrlv`` on 16-, 32- and 64-bit lanes; 8-bit lanes widen).
"""

from __future__ import annotations

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.scalars import is_unsigned
from neuroncc.ir.graph import Op


def _clamped(b: ir.IRBuilder, amount: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(the amount clamped to width - 1, whether it was out of range: >= the width read unsigned)."""
    width = amount.type.width
    out_of_range = b.icmp_unsigned(">=", amount, ir.Constant(amount.type, width))
    return b.select(out_of_range, ir.Constant(amount.type, width - 1), amount), out_of_range


def shift_left(ctx: EmitContext, op: Op, args: list[ir.Value]) -> ir.Value:
    """``a << amount`` wrapping in a's width; 0 for an amount < 0 or >= the width."""
    b, (a, amount) = ctx.b, args
    clamped, out_of_range = _clamped(b, amount)
    return b.select(out_of_range, ir.Constant(a.type, 0), b.shl(a, clamped))


def shift_right(ctx: EmitContext, op: Op, args: list[ir.Value]) -> ir.Value:
    """``a >> amount``, arithmetic for signed types (an amount < 0 or >= the width fills with the sign), logical
    for u8 (0 for those amounts)."""
    b, (a, amount) = ctx.b, args
    clamped, out_of_range = _clamped(b, amount)
    if not is_unsigned(op.operands[0].type.dtype):
        return b.ashr(a, clamped)
    return b.select(out_of_range, ir.Constant(a.type, 0), b.lshr(a, clamped))
