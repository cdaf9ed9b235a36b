"""Values whose NaNs are already what rounding float32 to bf16 makes of a NaN: quiet, their low 16 bits zero.

``scalars.round_to`` rounds to nearest even by adding 0x7FFF and the parity bit to the float32 bits, which is
right for every number. A NaN takes its own bits instead, quieted, low half cleared: the sum's carry could run
through an all-ones payload into the exponent and the sign (0xFFFFFFFF rounds to +0), and a signalling NaN would
stay signalling. That case is a compare, an or and a blend per vector, 3 of a rounding's 8 vector instructions on
AVX2 and 6 of the 26 per 16 elements of bf16 LayerNorm's write loop (Zen 3). A NaN that is quiet with a zero low
half needs none of it: the sum leaves its high half as it is, so its rounding is the same bits without the case.

x86 arithmetic (add, sub, mul, div, sqrt, FMA, and the reciprocal estimates an ``arcp`` division uses: checked on
Zen 3) returns the quiet form of a NaN operand, payload kept, or the default NaN 0xFFC00000; so does a float sum
(float64 partials: the conversions keep the payload's high bits). A value such arithmetic computes from operands
whose NaNs have zero low halves (bf16 values: a tensor's bits or a rounded result; their widening to float32; other
such results) is, when a NaN, quiet with a zero low half. :meth:`NanPayloads.needs_nan_case` is the decision (for
a ``cast`` to bf16), ``round_to(..., nan_case=False)`` the code (``elementwise._cast``).

The math library's ``exp`` (both forms, ``mathlib._exp`` and ``_exp_nonpositive``) counts as such arithmetic: a NaN
operand flows through its clamps as the operand (``_raised_keeping_nan``: x86's maxps returns it), through
adds, multiplies and FMAs whose other operands are constants or computed from the same NaN, and through the scale
(``vscalefps``, or products with powers of two built from integer bits, never NaN), so it comes out quieted with
its payload; a NaN made of numbers (inf * 0) is the default NaN. ``tests/codegen/test_pairs.py`` holds that on
AVX-512 and AVX2 code. So do ``sigmoid`` (0 - x, the clamps, exp, 1 + e and a true division) and the erf form of
``gelu`` (x * sqrt(1/2), erf's rational function behind clamps that keep a NaN, a division by the reciprocal
estimate, 1 + erf, a select that keeps it, two products of the same NaN). bf16 softmax's output rounding (a cast
of exp(x - max) / sum) needs no NaN case with exp: 4 of the 19 vector instructions per 32 elements of its write
loop (Zen 4). A float ``amax``/``amin`` result is an
element of its operand or the default NaN (``reductions._extreme_collapse``), so it has zero low halves when its
operand has (it is not quiet: an operand of arithmetic, not a rounded value itself).

Ops with bf16 results (eager's bf16 ops round after each op) drop the case the same way where the target says so
(``CpuTarget.rounds_bf16_op_results_without_nan_case``, AVX-512 and AVX2): bf16 gelu(x*w+b)*sigmoid(x) rounds five
times per element, each case a compare, an or and a blend per vector.

What does not count: the math library's other functions (their NaNs are not promised), max/min/where and the like
as rounded values (they pass an operand through, a signalling NaN as it is), float32 tensors (any payload), and
constants LLVM could fold an op away with (x * 1, x / 1, x + 0, x - 0, x * -1 -> -x: a signalling x would pass
unquieted), so constants count only as a ``full`` of another value, and a sum only over at least two elements (one
is passed through).
"""

from __future__ import annotations

import math

from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Function, Op, Value

#: Ops lowered to IEEE arithmetic on their float operands (``div`` only as true division), and the math library's
#: exp, which returns a NaN operand as they do (see the module docstring).
ARITHMETIC = frozenset({"add", "sub", "mul", "div", "sqrt", "rsqrt", "reciprocal", "exp", "sigmoid"})
#: Ops in :data:`ARITHMETIC` with one of these attributes: gelu's erf form (its tanh form is not checked).
ARITHMETIC_FORMS = {"gelu": ("approximate", "none")}
#: Float reductions whose result is one of their operand's elements or the default NaN.
EXTREMES = frozenset({"amax", "amin"})
#: Float reductions computed by adds (over at least two elements).
SUMS = frozenset({"sum", "mean", "var"})
#: Constants with which LLVM may fold an arithmetic op to its other operand (or its negation).
_IDENTITIES = (0.0, 1.0, -1.0)


class NanPayloads:
    """The decision for one region (its values' facts memoized: a region is a DAG)."""

    def __init__(self, region: Function, op_results: bool = False):
        self._op_results = op_results  # (``CpuTarget.rounds_bf16_op_results_without_nan_case``)
        self._producers = region.producers()
        self._plain: dict[Value, bool] = {}
        self._reads_data: dict[Value, bool] = {}

    def needs_nan_case(self, op: Op) -> bool:
        """Whether rounding ``op``'s float32 value to bf16 needs the NaN case: for a ``cast`` to bf16 (the one
        rounding of a float32 computation: LayerNorm's), unless its operand is computed by arithmetic whose NaNs
        are quiet with zero low halves. An op with a bf16 result (eager's bf16 ops round after each op) keeps it
        unless ``op_results`` and the op itself is such arithmetic: without it, row (a) (bf16
        gelu(x*w+b)*sigmoid(x), ``benchmarks``) ran 12-13% faster on Zen 4 and 16-17% on Zen 3 (session 24; sessions
        11 and 13 had measured the arithmetic ops' alone 5% slower there, on code since changed)."""
        if op.name != "cast":
            return not (self._op_results and op.results[0].type.dtype is DType.bf16 and self._quiet_arithmetic(op))
        source = self._producers.get(op.operands[0])
        return source is None or not self._quiet_arithmetic(source)

    def _quiet_arithmetic(self, op: Op) -> bool:
        """Whether ``op`` is arithmetic (a real x86 operation) on operands whose NaNs have zero low halves."""
        if op.name == "div" and op.attrs.get("rounding_mode") != "none":
            return False
        if op.name in SUMS:
            (operand,) = op.operands
            if math.prod(operand.type.shape[d] for d in op.attrs["dims"]) < 2:
                return False
        elif op.name in ARITHMETIC_FORMS:
            attribute, form = ARITHMETIC_FORMS[op.name]
            if op.attrs.get(attribute) != form:
                return False
        elif op.name not in ARITHMETIC:
            return False
        return all(self._plain_operand(operand) for operand in op.operands)

    def _plain_operand(self, value: Value) -> bool:
        """Whether ``value``'s NaNs have zero low halves, and it is no constant an op could be folded away with."""
        if value not in self._plain:
            self._plain[value] = self._plain_now(value)
        return self._plain[value]

    def _plain_now(self, value: Value) -> bool:
        op = self._producers.get(value)
        if op is not None and op.name == "full":
            number = float(op.attrs["value"])
            return not math.isnan(number) and number not in _IDENTITIES
        if not self._data(value):
            return False  # another constant (LLVM sees its value): not worth telling apart
        if value.type.dtype is DType.bf16:
            return True  # a tensor's bits, or a rounded value
        if op is None:
            return False  # a float32 tensor
        if op.name == "cast":  # a widened bf16 value
            return op.operands[0].type.dtype is DType.bf16 and self._plain_operand(op.operands[0])
        if op.name in EXTREMES:
            return value.type.dtype is DType.f32 and self._plain_operand(op.operands[0])
        return value.type.dtype is DType.f32 and self._quiet_arithmetic(op)

    def _data(self, value: Value) -> bool:
        """Whether ``value`` depends on a parameter of the region (is not a constant)."""
        if value not in self._reads_data:
            op = self._producers.get(value)
            self._reads_data[value] = op is None or any(self._data(operand) for operand in op.operands)
        return self._reads_data[value]
