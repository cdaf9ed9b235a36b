"""What is known about the sign of a function's values: :func:`at_most_zero`, :func:`at_least_zero` and
:func:`bounds_above`, read from the function's ops and from facts about its parameters.

The math library has cheaper code for some functions on half their domain (``exp_nonpositive``: e**x for
x <= 0); the cpu code generator asks :func:`at_most_zero` whether an exp's argument is always there. The answers
err on the side of no, and every one allows NaN (a NaN anywhere stays NaN through these ops, and the cheaper
functions carry it).

Facts about parameters are function metadata, by parameter position, so they print and reach the cache key:

    nonnegative  = (p, ...)       parameter p's elements are all >= 0 (or NaN)
    upper_bounds = ((m, x), ...)  each element of parameter x is <= the element of parameter m it broadcasts
                                  against (m is amax(x) over some dims, keepdim, computed elsewhere)

A backward graph gets them from the front end (``frontend/saved_facts.py``: what the forward graph's own ops
say about the activations it saves, such as log-softmax's max and log-sum), and the fusion pass hands each
kernel region the facts of the parameters it reads (:func:`facts_for`). Why that is needed: cross-entropy's
backward computes exp(x - amax - log) from the forward's saved amax and log; only the forward's ops show that
the argument is <= 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.graph import Function, Op, Value

NONNEGATIVE = "nonnegative"
UPPER_BOUNDS = "upper_bounds"

#: How many sign questions deep one answer may look before it says no.
MAX_DEPTH = 64


def at_most_zero(fn: Function, value: Value) -> bool:
    """Whether every element of ``value`` is <= 0 or NaN: ``x - m`` where m bounds x from above (x - amax(x),
    x - logsumexp(x) in its plain form and as torch decomposes it, x - a saved max), or ``a - b`` with a <= 0
    and b >= 0 (log-softmax from a saved max and log-sum: x - amax - log). Float subtraction is monotone, so the
    rounded differences keep these signs."""
    return Signs(fn).at_most_zero(value)


def at_least_zero(fn: Function, value: Value) -> bool:
    """Whether every element of ``value`` is >= 0 or NaN (exp, sums of such, the log of a sum of exponentials
    that includes exp(0) = 1, such as log-softmax's log-sum; parameters the metadata says are)."""
    return Signs(fn).at_least_zero(value)


def bounds_above(fn: Function, bound: Value, value: Value) -> bool:
    """Whether each element of ``value`` is <= the element of ``bound`` it broadcasts against (or either is NaN)."""
    return Signs(fn).bounds_above(bound, value)


def facts_for(source: Function, params: Sequence[Value]) -> Attrs:
    """The facts of ``source``'s parameters that carry over to a function whose parameters are ``params`` (each a
    value of ``source``: its own parameters, or others, which carry none), as that function's metadata."""
    position = {p: i for i, p in enumerate(source.params)}
    new = {p: i for i, p in enumerate(params)}
    by_source = {position[p]: i for p, i in new.items() if p in position}
    nonnegative = tuple(sorted(by_source[p] for p in source.metadata.get(NONNEGATIVE, ()) if p in by_source))
    upper_bounds = tuple(sorted((by_source[m], by_source[x]) for m, x in source.metadata.get(UPPER_BOUNDS, ())
                                if m in by_source and x in by_source))
    facts = {NONNEGATIVE: nonnegative, UPPER_BOUNDS: upper_bounds}
    return Attrs({key: value for key, value in facts.items() if value})


def with_facts(metadata: Attrs, facts: Attrs) -> Attrs:
    """``metadata`` with its parameter facts replaced by ``facts``."""
    kept = {k: v for k, v in metadata.items() if k not in (NONNEGATIVE, UPPER_BOUNDS)}
    return Attrs({**kept, **dict(facts)})


def fact_errors(fn: Function) -> list[str]:
    """What is wrong with ``fn``'s parameter facts (the verifier reports it): positions out of range, facts
    about non-float parameters, an upper bound that does not broadcast against its value as a keepdim max."""
    errors = []
    params = fn.params

    def float_param(p: object) -> bool:
        return type(p) is int and 0 <= p < len(params) and params[p].type.dtype.is_float

    for p in fn.metadata.get(NONNEGATIVE, ()):
        if not float_param(p):
            errors.append(f"nonnegative names {p}, not a float parameter")
    for pair in fn.metadata.get(UPPER_BOUNDS, ()):
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(float_param(p) for p in pair)):
            errors.append(f"upper_bounds pair {pair} is not (float parameter, float parameter)")
            continue
        bound, value = (params[p].type.shape for p in pair)
        if len(bound) != len(value) or any(b not in (1, v) for b, v in zip(bound, value)):
            errors.append(f"upper_bounds pair {pair}: a {list(bound)} bound cannot be a keepdim max of {list(value)}")
    return errors


class Signs:
    """The rules of :func:`at_most_zero`, :func:`at_least_zero` and :func:`bounds_above` over one function, for
    callers that ask about many of its values."""

    def __init__(self, fn: Function):
        self.producers = fn.producers()
        self.nonnegative = {fn.params[p] for p in fn.metadata.get(NONNEGATIVE, ())}
        self.upper_bounds = {(fn.params[m], fn.params[x]) for m, x in fn.metadata.get(UPPER_BOUNDS, ())}
        self.nonpositive_known: dict[Value, bool] = {}
        self.nonnegative_known: dict[Value, bool] = {}
        self.depth = 0

    def op(self, value: Value, name: str) -> Op | None:
        op = self.producers.get(value)
        return op if op is not None and op.name == name else None

    def at_most_zero(self, value: Value) -> bool:
        return self._memoized(self.nonpositive_known, self._at_most_zero, value)

    def at_least_zero(self, value: Value) -> bool:
        return self._memoized(self.nonnegative_known, self._at_least_zero, value)

    def _memoized(self, known: dict[Value, bool], rule, value: Value) -> bool:
        """``rule(value)``, remembered (a graph's values share operands), and no for chains deeper than
        ``MAX_DEPTH`` (a residual stream of many layers, which no rule here needs to walk)."""
        if value not in known:
            if self.depth >= MAX_DEPTH:
                return False
            self.depth += 1
            try:
                known[value] = rule(value)
            finally:
                self.depth -= 1
        return known[value]

    def _at_most_zero(self, value: Value) -> bool:
        if not value.type.dtype.is_float:
            return False
        if (difference := self.op(value, "sub")) is not None:
            a, b = difference.operands
            return self.bounds_above(b, a) or (self.at_most_zero(a) and self.at_least_zero(b))
        negated = self.op(value, "neg")
        return negated is not None and self.at_least_zero(negated.operands[0])

    def _at_least_zero(self, value: Value) -> bool:
        if not value.type.dtype.is_float:
            return False
        if value in self.nonnegative or self.op(value, "exp") is not None:
            return True
        if (total := self.op(value, "sum")) is not None or (total := self.op(value, "add")) is not None:
            return all(self.at_least_zero(v) for v in total.operands)
        if (logarithm := self.op(value, "log")) is not None:
            return self._sum_of_exps_from_its_max(logarithm.operands[0])
        return False

    def bounds_above(self, bound: Value, value: Value) -> bool:
        if (bound, value) in self.upper_bounds:
            return True
        if (maximum := self.op(bound, "amax")) is not None:
            # keepdim: each element meets the max of its own slice when broadcast (an unsqueezed max is left out)
            return maximum.operands[0] is value and bool(maximum.attrs["keepdim"])
        if (total := self.op(bound, "add")) is not None:  # m + c >= m when c >= 0 (logsumexp = log-sum + max)
            a, b = total.operands
            return (self.bounds_above(a, value) and self.at_least_zero(b)) or \
                (self.bounds_above(b, value) and self.at_least_zero(a)) or \
                self._guarded_log_sum_exp(a, b, value) or self._guarded_log_sum_exp(b, a, value)
        return False

    def _guarded_log_sum_exp(self, log_sum: Value, shift: Value, value: Value) -> bool:
        """``log_sum + shift`` is torch's logsumexp of ``value``: log(sum(exp(value - w))) + w with
        w = where(abs(m) == inf, 0, m), m = amax(value) over the sum's dims, keepdim. It bounds ``value``: where m
        is finite, w = m and the log-sum is >= 0; where m = +inf, the total is inf (value - it: -inf or NaN);
        where m = -inf (all -inf), the sum is 0 and the total -inf (value - it: NaN); a NaN makes all NaN."""
        maximum = self._guarded_max(shift)
        logarithm = self.op(log_sum, "log")
        total = self.op(logarithm.operands[0], "sum") if logarithm is not None else None
        exponential = self.op(total.operands[0], "exp") if total is not None else None
        difference = self.op(exponential.operands[0], "sub") if exponential is not None else None
        return maximum is not None and difference is not None and difference.operands == (value, shift) \
            and maximum.operands[0] is value and maximum.attrs["dims"] == total.attrs["dims"]

    def _guarded_max(self, shift: Value) -> Op | None:
        """The keepdim amax m when ``shift`` is where(abs(m) == inf, 0, m) (torch's logsumexp decomposition)."""
        select = self.op(shift, "where")
        if select is None:
            return None
        condition, zero, m = select.operands
        maximum, equal = self.op(m, "amax"), self.op(condition, "eq")
        if maximum is None or not maximum.attrs["keepdim"] or equal is None or self._scalar(zero) != 0:
            return None
        magnitude, infinity = equal.operands
        absolute = self.op(magnitude, "abs")
        return maximum if absolute is not None and absolute.operands[0] is m and self._scalar(infinity) == math.inf \
            else None

    def _scalar(self, value: Value) -> object:
        """The value of a ``full`` op (None for anything else)."""
        full = self.op(value, "full")
        return full.attrs["value"] if full is not None else None

    def _sum_of_exps_from_its_max(self, value: Value) -> bool:
        """``value`` >= 1: a sum over dims D of exp(x - m), m = amax(x) over the same D, keepdim: each slice holds
        its max, whose term is exp(+0) = 1 exactly, and adding terms >= 0 to it never rounds below 1. (The log
        of it is then >= 0; were it an ulp below, the exp of x - amax - log would be an ulp above 0, which the
        non-positive exp still computes exactly: it is exp's bits up to x = 71.)"""
        total = self.op(value, "sum")
        exponential = self.op(total.operands[0], "exp") if total is not None else None
        difference = self.op(exponential.operands[0], "sub") if exponential is not None else None
        maximum = self.op(difference.operands[1], "amax") if difference is not None else None
        return maximum is not None and maximum.operands[0] is difference.operands[0] \
            and bool(maximum.attrs["keepdim"]) and maximum.attrs["dims"] == total.attrs["dims"]
