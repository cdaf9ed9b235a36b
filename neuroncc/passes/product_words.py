"""``bf16-product-words``: bf16 matrix products and convolutions read and write bf16 words.

On the cpu target a bf16 value lives in a float32 buffer (its bits in the high half, ir/dtypes.py), while ATen's
bf16 products and convolutions (oneDNN's bf16 kernels on hosts with AVX512-BF16 or AMX: executors/cpu/extern.py)
take bfloat16 tensors. Without this pass every such call narrows each operand (a pass over it and a fresh tensor
per call) and widens its results into float32 buffers, and a bf16 graph input, which crosses the boundary as its
words (an i16 parameter), is first widened by a kernel of its own only to be narrowed again (an autocast training
step's backward: three such kernels, five narrowings and three widenings per step of an MLP).

So each bf16 op that declares ``words`` (``mm``, ``bmm``, ``addmm``, ``convolution``, ``convolution_backward``:
ir/ops/linalg.py) works on i16 words (``words = true``), each of its results a bitcast of the words it gives:

    mm(bitcast(p, bf16), permute(y))  ->  bitcast(mm(p, permute(bitcast(y, i16)), words = true), bf16)
    convolution_backward(g, x, w)     ->  a bitcast of each result of convolution_backward(g', x', w', words = true)

(g', x', w' the operands' words.) A word operand that is a ``bitcast`` of words is those words; a ``permute`` is
taken through, so the layout pass still folds it into the product's transpose flags; any other operand gets a
``bitcast`` to i16, which fusion puts in the kernel that computes the value (it writes the value's words beside
it, 2 bytes an element). A result's bitcast joins the kernels that read it, and a bitcast back to words (a graph
output, a saved activation) cancels it. Exact: a bitcast to the words and back is the identity on bf16 values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuroncc.ir import DType, Function, Value
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


def on_words(site: Site) -> Replacement:
    op = site.op
    if "words" not in op.opdef.attrs or op.attrs["words"] or not op.results \
            or any(r.type.dtype is not DType.bf16 for r in op.results):
        return None
    operands = [_words(site, v) for v in op.operands]
    computed = site.emit(op.name, *operands, **dict(op.attrs, words=True))  # a tuple for several results
    results = tuple(site.builder.op("bitcast", words, dtype=DType.bf16, hint=result.hint)
                    for words, result in zip(computed if isinstance(computed, tuple) else (computed,), op.results))
    return results if len(results) > 1 else results[0]


RULES: tuple[Rule, ...] = (
    Rule("*", on_words),  # a bf16 product or convolution (its backward) -> bitcasts of its results on words
    Rule("bitcast", involution),  # bitcast(bitcast(x)) -> x: a result's words given as a graph output's
)


@dataclass(frozen=True)
class Bf16ProductWords(Pass):
    """Make each bf16 matrix product and convolution read and write bf16 words (see the module docstring)."""

    name: ClassVar[str] = "bf16-product-words"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        fn = map_regions(fn, lambda region: self.apply(region, ctx))
        return rewrite_to_fixed_point(fn, RULES)
