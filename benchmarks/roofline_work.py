"""The work each kernel row of ``roofline.py`` must do per element, whatever its implementation: the compute roof's
definition (session 30).

A row's compute roof is the time of its **necessary element work measured as one loop on this machine**: for each
phase of the row (a graph that must finish before the next starts: cross-entropy's forward and backward; every
other row is one phase) the operations any correct implementation does per element (each op of the row's
definition once; a reduction's accumulate as one op; a division by a row's value as a product by its reciprocal;
a row constant computed once per row is not counted), written as float32 arithmetic on one element and run by
``microkernels.element_module`` over L1-resident data, vectorized by O3 with the math loops' hints, the fastest
of several runs and of interleave counts 1, 2 and 4, in two forms, the faster counting: all of it in one loop
("fused"), or the loop without the polynomial functions plus each function at its own loop's rate ("split": the
functions in loops of their own, as row (a)'s gelu is; on Zen 3 (a)'s fused loop spills and runs 1.15x the split
form, softmax's fused 1.09x). Polynomial functions are neuroncc's own (``mathlib``; the fastest form it has for the argument:
``exp_nonpositive`` for exp(x - max)). bf16 rows add their conversions as integer operations on the float32 bits,
in the fewest instructions known per vector (:data:`CONVERSIONS`: widening an input 1, rounding a result that is
read again 5, rounding and packing an output 4 of its 4.5, the half instruction left out), so that they cost in the
loop what they cost beside the arithmetic, on the pipes they share. Where the CPU reads bf16 unary math from tables
(``CpuTarget.looks_up_bf16_unary_math``) each evaluation is a table read at ``microkernels.lookup_throughput``'s
rate, added to the loop's time (its rounding is in the table).

Why measured as one loop and not counted: before session 30 the roof added each polynomial function's measured
time to the other operations counted as flops at the FMA peak (2 FMAs of 2 flops per lane a cycle), i.e. a
``vsubps`` beside softmax's exponential at a quarter of a cycle per vector. On Zen 3 such an operation costs ~3x
that beside the exponential (session 29 xent29: one ``vsubps`` per 8 elements 12% of ``exp_nonpositive``'s time);
the loop measures what the operations cost together, on the pipes and the window they share, and counts nothing a
row's definition does not ask for (no row caches, no second reads of a row, no NaN-row redo, none of the bits'
extra operations neuroncc's kernels keep to give eager's bits: cross-entropy's ``0 - e*s`` and separate ``- lse``).

The loop's dataflow chains the operations through one value per element (the operands other than the element are
constants: a weight, a row's max) so that none is dead: the instructions and their counts are the row's, each
element's chain is independent of the others', and a reduction's accumulate costs its one instruction, not its
latency chain (an optimistic count: a roof).

Memory and compute combine per phase, max(memory, compute) (memory: the phase's bytes streamed, and streamed in
place too where the phase updates its inputs, ``Phase.in_place``), and phases add: a phase waits for the one before it
(cross-entropy's backward cannot start before the forward's loss is known, TorchDynamo's graph break between them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

import microkernels as mk
from kernel_cases import ADAMW_SHAPES, Case, _elements, bf16_softmax_exp
from neuroncc.codegen.llvm.elementwise import gelu_function
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.ir.dtypes import DType

F32 = ir.FloatType()
I32 = ir.IntType(32)

#: Integer vector instructions per vector of elements that bf16 conversions take at the fewest known, without bf16
#: conversion instructions (AVX2; see roofline.py's ``CONVERSION_INSTRUCTIONS`` for each sequence): widening an
#: input, rounding a result kept as float32 for the next op, rounding and packing an output.
CONVERSIONS = {"widened": 1, "rounded_kept": 5, "rounded": 4}
#: The same with AVX-512 BW (roofline.py's ``CONVERSION_INSTRUCTIONS_AVX512``: 1, 4, 2.5).
CONVERSIONS_AVX512 = {"widened": 1, "rounded_kept": 4, "rounded": 2}


@dataclass
class Phase:
    """One phase of a row: ``elements`` elements, each doing ``element``'s work; ``reads``/``writes`` the phase's
    unavoidable bytes (None: the row's ``Work``'s); ``lookups`` bf16 table reads per element (on CPUs that read
    bf16 unary math from tables; else ``lookup_math`` is evaluated in the loop)."""

    name: str
    elements: int
    ops: str  # the work per element, for the log and the docs
    element: Callable[["Ops"], ir.Value]
    inputs: tuple[float, float] = (-6.0, 6.0)
    reads: int | None = None
    writes: int | None = None
    lookups: int = 0
    #: the phase writes its outputs over its inputs (an optimizer step): its bytes may also stream in place
    in_place: bool = False


class Ops:
    """The element's operations on the builder ``b`` (``x``: the element, float32)."""

    def __init__(self, b: ir.IRBuilder, x: ir.Value, target, bf16: bool, looks_up: bool, functions: bool = True):
        """``bf16``: the row's conversions are part of the work; ``looks_up``: its bf16 unary math is read from
        tables (counted apart) instead of evaluated; ``functions`` False: the polynomial functions left out (each
        is then counted at its own loop's rate: the split form, see the module docstring). ``used``: the
        functions the element evaluates (or leaves out)."""
        self.b, self.x, self.target, self.looks_up, self.functions = b, x, target, looks_up, functions
        self.used: list[str] = []
        self.counts = (CONVERSIONS_AVX512 if target.has("avx512bw") else CONVERSIONS) if bf16 else None

    @staticmethod
    def c(value: float) -> ir.Constant:
        return ir.Constant(F32, value)

    def add(self, a, value):
        return self.b.fadd(a, self.c(value) if isinstance(value, float) else value)

    def sub(self, a, value):
        return self.b.fsub(a, self.c(value) if isinstance(value, float) else value)

    def mul(self, a, value):
        return self.b.fmul(a, self.c(value) if isinstance(value, float) else value)

    def max(self, a, value: float):  # one vmaxps (a row max's accumulate)
        return self.b.select(self.b.fcmp_ordered(">", a, self.c(value)), a, self.c(value))

    def fma(self, a, m, addend):  # a * m + addend, one vfmadd (a sum of squares' accumulate)
        addend = self.c(addend) if isinstance(addend, float) else addend
        return self.b.call(self._intrinsic("llvm.fma.f32", 3), [a, m, addend])

    def sqrt(self, a):
        return self.b.call(self._intrinsic("llvm.sqrt.f32", 1), [a])

    def div(self, a, d):
        return self.b.fdiv(a, d)

    def math(self, name: str, a):
        if name == "gelu":  # (the form the row's gelu op evaluates: ``elementwise.gelu_function``)
            name = gelu_function(self.target, "none", DType.f32 if self.counts is None else DType.bf16)
        self.used.append(name)
        return math_call(self.b, name, a, target=self.target) if self.functions else a

    def lookup_math(self, name: str, a):
        """bf16 unary math: a table read where the CPU looks it up (counted apart: :attr:`Phase.lookups`), else the
        polynomial and its result's rounding."""
        return a if self.looks_up else self.rounded_kept(self.math(name, a))

    def _intrinsic(self, name: str, arity: int) -> ir.Function:
        module = self.b.module
        fn = module.globals.get(name)
        return fn if fn is not None else ir.Function(module, ir.FunctionType(F32, [F32] * arity), name)

    def _integer(self, a, steps: list[tuple[str, int]]):
        bits = self.b.bitcast(a, I32)
        parity = None
        for op, constant in steps:
            k = ir.Constant(I32, constant)
            if op == "parity":  # (bits >> 16) & 1: two instructions
                parity = self.b.and_(self.b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
            elif op == "add_parity":
                bits = self.b.add(bits, parity)
            else:
                bits = getattr(self.b, op)(bits, k)
        return self.b.bitcast(bits, F32)

    def _conversion(self, a, kind: str):
        if self.counts is None:
            return a
        steps = {1: [("and_", -65536)], 2: [("add", 0x7FFF), ("and_", -65536)],
                 4: [("parity", 0), ("add", 0x7FFF), ("add_parity", 0)],
                 5: [("parity", 0), ("add", 0x7FFF), ("add_parity", 0), ("and_", -65536)]}[self.counts[kind]]
        return self._integer(a, steps)

    def widened(self, a):
        return self._conversion(a, "widened")

    def rounded_kept(self, a):
        return self._conversion(a, "rounded_kept")

    def rounded(self, a):
        return self._conversion(a, "rounded")


# ---- each row's element work ------------------------------------------------------------------------------------

def _gelu_sigmoid(o: Ops):
    x = o.widened(o.x)
    t = o.rounded_kept(o.add(o.rounded_kept(o.mul(x, 0.75)), 0.125))  # x*w, + b
    return o.rounded(o.mul(o.lookup_math("gelu", t), o.lookup_math("sigmoid", x)))


def _softmax(o: Ops, exp: str = "exp_nonpositive"):
    # max's accumulate; x - max; exp; the sum's accumulate; * 1/sum (the max keeps x - 7 <= 0 here)
    e = o.math(exp, o.sub(o.max(o.widened(o.x), -20.0), 7.0))
    return o.rounded(o.mul(o.add(e, 0.5), 0.25))


def _bf16_softmax(o: Ops):
    # (b)'s, its exponentials as the host's kernel evaluates them (on Zen 4 in degree 5: their results bf16 alone)
    return _softmax(o, bf16_softmax_exp())


def _layernorm(o: Ops):
    # the mean's accumulate; x - mean; the sum of squares' accumulate (an FMA); * rstd; * w; + b
    d = o.sub(o.add(o.widened(o.x), 0.5), 0.0625)
    return o.rounded(o.add(o.mul(o.mul(o.fma(d, d, 0.25), 0.375), 1.25), 0.125))


def _affine(o: Ops):
    return o.add(o.mul(o.x, 0.75), 0.125)


def _rmsnorm(o: Ops):
    # the sum of squares' accumulate (an FMA); * rstd; * w
    return o.mul(o.mul(o.fma(o.x, o.x, 0.25), 0.375), 1.25)


def _xent_forward(o: Ops):
    # the block max's accumulate; x - max; exp; the sum's accumulate (the log and the loss: once a row)
    return o.add(o.math("exp_nonpositive", o.sub(o.max(o.x, -20.0), 7.0)), 0.5)


def _xent_backward(o: Ops):
    # x - (max + log-sum-exp), a row constant; exp; * (loss tangent / rows) (the target's - 1: once a row)
    return o.mul(o.math("exp_nonpositive", o.sub(o.x, 7.0)), 0.001)


def _adamw(o: Ops):
    # foreach AdamW, per parameter (g the element; the state p, m, v stand in as the element and constants):
    # p (1 - lr wd); m + (1 - b1)(g - m) (a difference, an FMA); v b2 + (1 - b2) g g (two products, an FMA);
    # sqrt(v) / sqrt(bias2) + eps; m / that; p - step * that (an FMA) (the scalars: once a step)
    g = o.x
    p = o.mul(g, 0.99999)
    m = o.fma(o.sub(g, 0.01), o.c(0.1), 0.01)
    v = o.fma(o.mul(g, g), o.c(0.001), o.mul(g, 0.999))
    return o.fma(o.div(m, o.add(o.mul(o.sqrt(v), 1.5), 1e-8)), o.c(-1e-3), p)


def phases(key: str) -> list[Phase]:
    """The row ``key``'s phases (``kernel_cases.cases()``'s keys)."""
    n_a, n_c = 4096 * 1024, 8192 * 1024
    rows_ce, vocab = 512, 32000
    n_ce = rows_ce * vocab
    table = {
        "a": [Phase("", n_a, "x*w, +b, gelu, sigmoid(x), * (3 ops, 2 functions)", _gelu_sigmoid)],
        "b": [Phase("", n_a, "max, x - max, exp_nonpositive, sum, * 1/sum (4 ops, 1 function)", _softmax)],
        "c": [Phase("", n_c, "sum, x - mean, sum of squares (FMA), * rstd, * w, + b (6 ops)", _layernorm)],
        "c'": [Phase("", n_c, "x*w, + b (2 ops)", _affine)],
        "a16": [Phase("", n_a, "(a)'s, x widened, x*w and +b rounded, the output rounded; gelu and sigmoid "
                      "by table where looked up", _gelu_sigmoid, lookups=2)],
        "b16": [Phase("", n_a, "(b)'s, x widened, the output rounded", _bf16_softmax)],
        "c16": [Phase("", n_c, "(c)'s, x widened, the output rounded", _layernorm)],
        "rms": [Phase("", n_c, "sum of squares (FMA), * rstd, * w (3 ops)", _rmsnorm)],
        "ce": [Phase("forward", n_ce, "max, x - max, exp_nonpositive, sum (3 ops, 1 function)", _xent_forward,
                     reads=4 * n_ce + 8 * rows_ce, writes=0),
               Phase("backward", n_ce, "x - (max + lse), exp_nonpositive, * s (2 ops, 1 function)", _xent_backward,
                     reads=4 * n_ce, writes=4 * n_ce)],
        "adamw": [Phase("", _elements(*ADAMW_SHAPES), "p*(1-lr wd), g - m, FMA, g*g, v*b2, FMA, sqrt, * c, + eps, "
                        "/, FMA (11 ops: a sqrt and a division among them)", _adamw, inputs=(0.5, 2.0),
                        in_place=True)],
    }
    return table[key]


THREAD_CLOCK = {1: time.thread_time}  # 1 thread: CPU time of the calling thread; else wall clock


def clock_for(threads: int):
    return THREAD_CLOCK.get(threads, time.perf_counter)


class ElementRoof:
    """roofline.py's ``Machine``'s compute roof of a row (see the module docstring): its element loops, compiled for
    ``self.target``, their fastest measured rates, and each phase's time from them, ``self.math`` (each polynomial
    function's rate) and ``self.lookup`` (the bf16 table read's)."""

    #: (row key, phase, form, bf16 conversions) -> (compiled kernels at each interleave count, functions used)
    element_kernels: dict[tuple, tuple[list, list[str]]]
    #: the same key -> {threads: the fastest elements per second measured, over the interleave counts}
    element_rates: dict[tuple, dict[int, float]]

    #: the element loops' interleave counts measured (the fastest counts): the math loops' 4 spilled and ran
    #: slower than 2 for some rows' work on Zen 3 (session 30)
    ELEMENT_INTERLEAVES = (1, 2, 4)

    def _element_keys(self, case: Case) -> list[tuple]:
        bf16 = case.work.widened > 0
        return [(case.key, index, form, conversions) for index, _ in enumerate(phases(case.key))
                for form in ("fused", "rest") for conversions in ((False, True) if bf16 else (False,))]

    def measure_elements(self, case: Case, threads: int) -> None:
        """Measure (again) the element loops of ``case``'s phases at ``threads`` (``roofline_work``), keeping the
        fastest of this and every earlier measurement (see ``Machine.remeasure``)."""
        row = phases(case.key)
        clock = clock_for(threads)
        for key in self._element_keys(case):
            _, index, form, conversions = key
            phase = row[index]
            if key not in self.element_kernels:
                looks_up = phase.lookups > 0 and self.target.looks_up_bf16_unary_math
                kernels, used = [], []
                for interleave in self.ELEMENT_INTERLEAVES:
                    def element(b, x, used=used):
                        ops = Ops(b, x, self.target, conversions, looks_up, form == "fused")
                        value = phase.element(ops)
                        used[:] = ops.used
                        return value
                    kernels.append(mk.compile_kernel(mk.element_module(f"{case.key}_{index}_{form}", self.target,
                                                                       element, interleave), "math"))
                self.element_kernels[key] = (kernels, used)
            kernels, _ = self.element_kernels[key]
            rate = max(mk.module_throughput(kernel, threads, clock, phase.inputs) for kernel in kernels)
            rates = self.element_rates.setdefault(key, {})
            rates[threads] = max(rates.get(threads, 0.0), rate)

    def phase_compute(self, case: Case, index: int, threads: int, conversions: bool = True) -> tuple[float, str]:
        """(seconds, form) of phase ``index`` of ``case``'s necessary element work at ``threads``: the faster of its
        element loop with the functions in it ("fused") and the loop without them plus each function at its own
        loop's rate ("split"); bf16 table reads (where the CPU looks bf16 unary math up) added to both."""
        phase = phases(case.key)[index]
        bf16 = conversions and case.work.widened > 0
        fused_key, rest_key = (case.key, index, "fused", bf16), (case.key, index, "rest", bf16)
        used = self.element_kernels[fused_key][1]
        n = phase.elements
        looked_up = phase.lookups > 0 and self.target.looks_up_bf16_unary_math
        tables = phase.lookups * n / self.lookup[threads] if looked_up else 0.0
        fused = n / self.element_rates[fused_key][threads] + tables
        if not used:  # (no function to split off: one form, the faster reading of its two builds)
            return min(fused, n / self.element_rates[rest_key][threads] + tables), "fused"
        split = n / self.element_rates[rest_key][threads] + tables + \
            sum(n / self.math[name][threads] for name in used)
        return (fused, "fused") if fused <= split else (split, "split")

    def describe_work(self, case: Case, threads: int) -> str:
        """The row's phases' necessary work per element and its element loops' measured rates at ``threads``."""
        parts = []
        for index, phase in enumerate(phases(case.key)):
            rates = ", ".join(f"{form}{' bf16' if bf16 else ''} {self.element_rates[key][threads] / 1e9:.2f}"
                              for key in self._element_keys(case) if key[1] == index for form, bf16 in [key[2:]])
            seconds, form = self.phase_compute(case, index, threads)
            parts.append(f"{phase.name or 'work'}: {phase.ops}; element loops (Gelem/s): {rates}; "
                         f"{seconds * 1e3:.3f} ms ({form})")
        return "; ".join(parts)

