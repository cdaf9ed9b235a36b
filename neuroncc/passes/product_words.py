"""``bf16-product-words``: bf16 matrix products read and write bf16 words.

On the cpu target a bf16 value lives in a float32 buffer (its bits in the high half, ir/dtypes.py), while ATen's
bf16 products (oneDNN's bf16 GEMM on hosts with AVX512-BF16 or AMX: executors/cpu/extern.py) take bfloat16
tensors. Without this pass every such product narrows each operand (a pass over it and a fresh tensor per call)
and widens its result into a float32 buffer, and a bf16 graph input, which crosses the boundary as its words
(an i16 parameter), is first widened by a kernel of its own only to be narrowed again (an autocast training
step's backward: three such kernels, five narrowings and three widenings per step).

So each bf16 ``mm``, ``bmm`` and ``addmm`` works on i16 words (``words = true``, ir/ops/linalg.py), its result a
bitcast of the words it gives:

    mm(bitcast(p, bf16), permute(y))  ->  bitcast(mm(p, permute(bitcast(y, i16)), words = true), bf16)

A word operand that is a ``bitcast`` of words is those words; a ``permute`` is taken through, so the layout pass
still folds it into the product's transpose flags; any other operand gets a ``bitcast`` to i16, which fusion
puts in the kernel that computes the value (it writes the value's words beside it, 2 bytes an element). The
result's bitcast joins the kernels that read it, and a bitcast back to words (a graph output) cancels it.
Exact: a bitcast to the words and back is the identity on bf16 values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuroncc.ir import DType, Function, Trait, Value
from neuroncc.passes.canonicalize_rules import involution
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import Replacement, Rule, Site, map_regions, rewrite_to_fixed_point


def _words(site: Site, value: Value) -> Value:
    """The i16 words of bf16 ``value``, built without widening or narrowing anything already in words."""
    bitcast = site.producer_named(value, "bitcast")
    if bitcast is not None and bitcast.operands[0].type.dtype is DType.i16:
        return bitcast.operands[0]
    permute = site.producer_named(value, "permute")
    if permute is not None:
        return site.emit("permute", _words(site, permute.operands[0]), dims=permute.attrs["dims"])
    return site.emit("bitcast", value, dtype=DType.i16)


def product_of_words(site: Site) -> Replacement:
    op = site.op
    if not op.has(Trait.MATRIX_PRODUCT) or op.attrs["words"] or op.result.type.dtype is not DType.bf16:
        return None
    operands = [_words(site, v) for v in op.operands]
    return site.emit("bitcast", site.emit(op.name, *operands, **dict(op.attrs, words=True)), dtype=DType.bf16)


RULES: tuple[Rule, ...] = (
    Rule("*", product_of_words),  # a bf16 mm/bmm/addmm -> bitcast(the same product on words, bf16)
    Rule("bitcast", involution),  # bitcast(bitcast(x)) -> x: a result's words given as a graph output's
)


@dataclass(frozen=True)
class Bf16ProductWords(Pass):
    """Make each bf16 matrix product read and write bf16 words (see the module docstring)."""

    name: ClassVar[str] = "bf16-product-words"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        fn = map_regions(fn, lambda region: self.apply(region, ctx))
        return rewrite_to_fixed_point(fn, RULES)
