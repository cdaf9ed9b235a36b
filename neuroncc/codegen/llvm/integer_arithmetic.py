"""Integer division, remainder and power in LLVM IR, as ATen's CPU kernels compute them.

A zero divisor never traps: it sets the kernel's error flag (``FailedCheck.ZERO_DIVISOR``; the launcher raises
eager's ZeroDivisionError as ``KernelZeroDivisionError``) and the lane gives 0; ``INT_MIN / -1`` wraps, as x86's
``idiv`` would trap on it.
"""

from __future__ import annotations

from llvmlite import ir

from neuroncc.codegen.llvm.launch_plan import FailedCheck
from neuroncc.codegen.llvm.scalars import I1


def _zero(v: ir.Value) -> ir.Constant:
    return ir.Constant(v.type, 0)


def zero_divisor(ctx, c: ir.Value) -> ir.Value:
    """Whether ``c`` is zero, flagged as the kernel's error (the result's lanes then hold 0, never trap)."""
    zero = ctx.b.icmp_unsigned("==", c, _zero(c))
    ctx.fail_if(zero, FailedCheck.ZERO_DIVISOR)
    return zero


def _safe_divisor(ctx, a: ir.Value, c: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Integer division guard: x/0 sets the error flag (and gives 0) and INT_MIN/-1 must not trap."""
    b = ctx.b
    zero = zero_divisor(ctx, c)
    minus_one = b.icmp_signed("==", c, ir.Constant(c.type, -1))
    divisor = b.select(b.or_(zero, minus_one), ir.Constant(c.type, 1), c)
    return zero, divisor


def int_div(ctx, a: ir.Value, c: ir.Value, mode: str, *, unsigned: bool) -> ir.Value:
    """``a / c`` of integers rounded as ``mode`` says (floor, else toward zero), as ATen's kernels: a zero divisor
    flags the kernel's error and gives 0, INT_MIN / -1 wraps."""
    b = ctx.b
    if unsigned:
        zero = zero_divisor(ctx, c)
        return b.select(zero, _zero(c), b.udiv(a, b.select(zero, ir.Constant(c.type, 1), c)))
    zero, divisor = _safe_divisor(ctx, a, c)
    minus_one = b.icmp_signed("==", c, ir.Constant(c.type, -1))
    quotient = b.sdiv(a, divisor)
    if mode == "floor":
        remainder = b.srem(a, divisor)
        adjust = b.and_(b.icmp_signed("!=", remainder, _zero(c)),
                        b.icmp_signed("!=", b.icmp_signed("<", remainder, _zero(c)), b.icmp_signed("<", c, _zero(c))))
        quotient = b.sub(quotient, b.zext(adjust, c.type))
    quotient = b.select(minus_one, b.neg(a), quotient)
    return b.select(zero, _zero(c), quotient)


def int_rem(ctx, a: ir.Value, c: ir.Value, *, python_sign: bool, unsigned: bool) -> ir.Value:
    """The remainder of integers, with the divisor's sign (``python_sign``: ``remainder``) or the dividend's
    (``fmod``); a zero divisor flags the kernel's error and gives 0."""
    b = ctx.b
    if unsigned:
        zero = zero_divisor(ctx, c)
        return b.select(zero, _zero(c), b.urem(a, b.select(zero, ir.Constant(c.type, 1), c)))
    zero, divisor = _safe_divisor(ctx, a, c)
    remainder = b.srem(a, divisor)
    if python_sign:  # remainder takes the divisor's sign
        fix = b.and_(b.icmp_signed("!=", remainder, _zero(c)),
                     b.icmp_signed("!=", b.icmp_signed("<", remainder, _zero(c)), b.icmp_signed("<", c, _zero(c))))
        remainder = b.select(fix, b.add(remainder, c), remainder)
    return b.select(zero, _zero(c), remainder)


def int_pow(ctx, base: ir.Value, exponent: ir.Value) -> ir.Value:
    """Exponentiation by squaring (wrapping, as numpy); negative exponents give 0 except for base +-1."""
    b = ctx.b
    t = base.type
    entry = b.block
    head = b.append_basic_block("pow.head")
    body = b.append_basic_block("pow.body")
    done = b.append_basic_block("pow.done")
    b.branch(head)
    b.position_at_end(head)
    result = b.phi(t)
    square = b.phi(t)
    remaining = b.phi(t)
    result.add_incoming(ir.Constant(t, 1), entry)
    square.add_incoming(base, entry)
    remaining.add_incoming(exponent, entry)
    b.cbranch(b.icmp_signed(">", remaining, ir.Constant(t, 0)), body, done)
    b.position_at_end(body)
    odd = b.trunc(remaining, I1)
    result.add_incoming(b.select(odd, b.mul(result, square), result), body)
    square.add_incoming(b.mul(square, square), body)
    remaining.add_incoming(b.lshr(remaining, ir.Constant(t, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    negative = b.icmp_signed("<", exponent, ir.Constant(t, 0))
    is_one = b.icmp_signed("==", base, ir.Constant(t, 1))
    is_minus_one = b.icmp_signed("==", base, ir.Constant(t, -1))
    odd_exponent = b.trunc(exponent, I1)
    inverse = b.select(is_one, ir.Constant(t, 1),
                       b.select(is_minus_one, b.select(odd_exponent, ir.Constant(t, -1), ir.Constant(t, 1)),
                                ir.Constant(t, 0)))
    return b.select(negative, inverse, result)
