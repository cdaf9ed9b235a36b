"""Float32 true division (``div`` with ``rounding_mode="none"``) in LLVM IR, with eager's CPU kernels' bits.

Eager's ``div_true_kernel`` (torch 2.13, BinaryOpsKernel.cpp) divides: every float32 quotient is IEEE's correctly
rounded ``x / c``, whether the divisor is a tensor of the same shape, a broadcast row or column, a 0-d tensor or a
Python number (a bf16/f16 result: the float32 quotient, with the number unrounded, then rounded once; measured on
torch 2.13, session 45). Only kernels that reduce the divisor themselves multiply by its reciprocal: softmax's
``tmp_sum = 1 / tmp_sum`` then ``x * tmp_sum`` (SoftMaxKernel.cpp).

The one rule (:func:`multiplies_by_the_reciprocal`): a divisor that the kernel reduced itself (a reduction op of the
same region, seen through movement ops: softmax's exp / sum) keeps ``arcp``, and LLVM hoists the exact
reciprocal 1/sum out of the row's loop and multiplies by it, eager's softmax formula; every other divisor (a
program input, a constant, a value computed elementwise) takes a plain ``fdiv``: ``vdivps``, IEEE's quotient and
IEEE's special cases (x/0, x/inf, inf/c, NaN, overflow, denormals). Before session 45 every division carried
``arcp``, and LLVM divided by a loop-invariant divisor (a number, a 0-d tensor, a column ``[..., 1]``) as
x * RN(1/c): within 1.5 ulp, and a third of ``x / 3.0``'s quotients one ulp from eager's (54% for 7.0).

``arcp`` alone never brings in the reciprocal estimate (``entries.RECIPROCAL_ESTIMATES``): LLVM's x86 backend takes
it for an fdiv flagged ``ninf`` as well (the math library's ``RECIP`` flags), so a per-element divisor was and is
divided by ``vdivps``.

May import: the code generator's modules below ``emit``.
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.scalars import F32, call
from neuroncc.ir.graph import Op
from neuroncc.ir.opdef import Category
from neuroncc.ir.ops import REGISTRY


def multiplies_by_the_reciprocal(region: Any, op: Op) -> bool:
    """Whether ``op`` (a float true division in ``region``) divides by a value the kernel reduced itself, through
    movement ops only (softmax's exp(x - max) / sum): eager's kernels multiply by such a value's reciprocal
    (softmax's 1 / sum per row), and the sum's bits are the kernel's own anyway (its order is the vectorizer's)."""
    producers = region.producers()
    divisor = op.operands[1]
    while (producer := producers.get(divisor)) is not None:
        category = REGISTRY.get(producer.name).category
        if category is Category.REDUCTION:
            return True
        if category is not Category.MOVEMENT or not producer.operands:
            return False
        divisor = producer.operands[0]
    return False


def true_division(ctx: Any, op: Op, a: ir.Value, c: ir.Value) -> ir.Value:
    """``a / c`` in float32 with eager's bits (see the module's docstring for the rule)."""
    b = ctx.b
    if not multiplies_by_the_reciprocal(ctx.plan.region, op):
        return b.fdiv(a, c)
    # x * (1/y) where LLVM hoists 1/y (softmax's per-row sum). A zero or infinite divisor takes x * (1/y) with the
    # exact reciprocal, +-inf or +-0: IEEE's quotient, NaN cases included (kept from when the reciprocal could be
    # the estimate, whose Newton step gives NaN there; the code and bits of softmax are unchanged).
    zero_c = ir.Constant(F32, 0.0)
    quotient = b.fdiv(a, c, flags=("arcp",))
    magnitude = call(b, "llvm.fabs.f32", [c])
    zero = b.fcmp_ordered("==", magnitude, zero_c)
    special = b.or_(zero, b.fcmp_ordered("==", magnitude, ir.Constant(F32, math.inf)))
    exact_reciprocal = call(b, "llvm.copysign.f32", [b.select(zero, ir.Constant(F32, math.inf), zero_c), c])
    return b.select(special, b.fmul(a, exact_reciprocal), quotient)
