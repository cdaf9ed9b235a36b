"""``lower-complex``: complex (c64) arithmetic as float32 arithmetic on real and imaginary parts.

Code generators compute on real numbers only. This pass gives every complex value of the function a pair of
f32 values of its shape, its *parts*, and rewrites each complex op on the parts:

    mul a, b   ->  (ar br - ai bi, ar bi + ai br)        add/sub/neg/conj: part by part
    div a, b   ->  Smith's algorithm (as c10::complex divides, without overflow in |b|^2)
    abs a      ->  hypot(ar, ai) without overflow         eq/ne: both parts; where: part by part
    cast       ->  real -> (x, 0); complex -> real keeps the real part
    sum/mean, full, movement and indexing ops            ->  the same op on each part

c64 values stay only where the storage itself is meant: function parameters and outputs, the operands and
results of library ops (the FFTs, ``fft=library``), and ``view_as_real``/``view_as_complex``, which reinterpret
a c64 buffer as f32 pairs (interleaved storage) and back without copying. A c64 parameter's parts are
``select(view_as_real(p), -1, 0 | 1)``; a c64 value a library op or an output needs is
``view_as_complex(cat(unsqueeze(re, -1), unsqueeze(im, -1)))``, computed in one fused kernel.

``fft=dft`` (the NKI pipeline) also rewrites ``fft_r2c``/``fft_c2r``/``fft_c2c`` into matrix products with
constant cosine and sine tables, one real transform per dimension (:mod:`neuroncc.passes.dft`), so they run
on the tensor engine instead of as host steps. The result computes what the input did (the interpreter agrees
with itself before and after, to float32 rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from dataclasses import dataclass
from typing import Any, ClassVar

from neuroncc.errors import PassError
from neuroncc.ir import REGISTRY, Builder, Category, DType, Function, Op, Trait, Value
from neuroncc.passes.dft import DFT_LOWERINGS
from neuroncc.passes.manager import Pass, PassContext

F32 = DType.f32
FFT_MODES = ("library", "dft")


@dataclass(frozen=True)
class LowerComplex(Pass):
    """Rewrite complex arithmetic into float32 arithmetic on real and imaginary parts (see the module doc).

    ``fft=library`` keeps the FFT ops (the cpu target calls ATen); ``fft=dft`` lowers them to DFT matmuls.
    """

    name: ClassVar[str] = "lower-complex"
    fft: str = "library"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        if self.fft not in FFT_MODES:
            raise PassError(f"lower-complex: fft must be one of {', '.join(FFT_MODES)}, got {self.fft!r}")
        if not any(_is_complex(v) for op in fn.walk() for v in op.operands + op.results) \
                and not any(_is_complex(p) for p in fn.params):
            return fn
        return _Lowering(fn, self.fft).run()


def _is_complex(value: Value) -> bool:
    return value.type.dtype.is_complex


class Parts:
    """Emits float32 ops on a builder; the helpers every lowering rule uses."""

    def __init__(self, builder: Builder):
        self.b = builder

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value:
        return self.b.op(name, *operands, **attrs)

    def zeros_like(self, x: Value) -> Value:
        return self.op("full", shape=x.type.shape, dtype=F32, value=0.0)

    def scalar(self, value: float) -> Value:
        return self.op("full", shape=(), dtype=F32, value=value)

    def hypot(self, a: Value, b: Value) -> Value:
        """sqrt(a^2 + b^2) without overflow or underflow in the squares; inf if either is infinite."""
        x, y = self.op("abs", a), self.op("abs", b)
        big, small = self.op("maximum", x, y), self.op("minimum", x, y)
        ratio = self.op("div", small, big)
        scaled = self.op("mul", big, self.op("sqrt", self.op("add", self.scalar(1.0), self.op("mul", ratio, ratio))))
        zero = self.op("eq", big, self.scalar(0.0))
        infinite = self.op("logical_or", self.op("isinf", x), self.op("isinf", y))
        return self.op("where", infinite, self.scalar(float("inf")), self.op("where", zero, self.scalar(0.0), scaled))


#: A rule: (parts helper, the op, its operands' parts or new values, its attrs) -> the results' parts or values.
Rule = Callable[["_Lowering", Op], Any]


class _Lowering:
    def __init__(self, fn: Function, fft: str):
        self.fn, self.fft = fn, fft
        self.b = Builder(fn.name, fn.metadata)
        self.p = Parts(self.b)
        self.values: dict[Value, Value] = {}  # old value -> new value (real values, and c64 values kept whole)
        self.parts: dict[Value, tuple[Value, Value]] = {}  # old c64 value -> (re, im) in the new function
        self.pairs: dict[Value, Value] = {}  # old c64 value -> its f32[..., 2] (re, im) pairs in the new function

    # ---- the two representations of a complex value ----------------------------------------------------

    def whole(self, value: Value) -> Value:
        """``value`` in the new function: a c64 value is rebuilt from its pairs if it has no storage yet."""
        if value not in self.values:
            self.values[value] = self.p.op("view_as_complex", self.interleaved(value))
        return self.values[value]

    def interleaved(self, value: Value) -> Value:
        """The f32[..., 2] (real, imaginary) pairs of a c64 value: its storage reinterpreted if it has one,
        else its parts interleaved."""
        if value not in self.pairs:
            if value in self.values:
                self.pairs[value] = self.p.op("view_as_real", self.values[value])
            else:
                re, im = self.parts[value]
                rank = value.type.rank
                self.pairs[value] = self.p.op("cat", self.p.op("unsqueeze", re, dim=rank),
                                              self.p.op("unsqueeze", im, dim=rank), dim=rank)
        return self.pairs[value]

    def split(self, value: Value) -> tuple[Value, Value]:
        """The (re, im) parts of a c64 value (of a stored one: selects on its pairs)."""
        if value not in self.parts:
            pairs = self.interleaved(value)
            rank = value.type.rank
            self.parts[value] = (self.p.op("select", pairs, dim=rank, index=0),
                                 self.p.op("select", pairs, dim=rank, index=1))
        return self.parts[value]

    # ---- driving -------------------------------------------------------------------------------------------

    def run(self) -> Function:
        for param in self.fn.params:
            self.values[param] = self.b.param(param.type, param.hint)
        for op in self.fn.ops:
            if any(_is_complex(v) for region in op.regions for inner in region.walk()
                   for v in inner.operands + inner.results):
                raise PassError(f"lower-complex: op '{op.name}' holds complex values in its region "
                                "(run lower-complex before fuse)")
            if not any(_is_complex(v) for v in op.operands + op.results):
                self._copy(op)
            else:
                self._lower(op)
        return self.b.build([self.whole(v) for v in self.fn.outputs])

    def _copy(self, op: Op) -> None:
        operands = [self.values[v] for v in op.operands]
        new = self.b.emit(op.name, operands, op.attrs, regions=op.regions,
                          result_types=tuple(r.type for r in op.results) if op.regions else None)
        self.values.update(zip(op.results, new.results))

    def _lower(self, op: Op) -> None:
        category = REGISTRY.get(op.name).category
        if op.has(Trait.REINTERPRET):
            self._reinterpret(op)
        elif op.name in ELEMENTWISE_RULES:
            results = ELEMENTWISE_RULES[op.name](self, op)
            self._define(op, results)
        elif category is Category.EXTERN and op.name in DFT_LOWERINGS and self.fft == "dft":
            operand = op.operands[0]
            x = self.split(operand) if _is_complex(operand) else self.values[operand]
            self._define(op, [DFT_LOWERINGS[op.name](self.p, x, op)])
        elif category is Category.EXTERN:
            operands = [self.whole(v) if _is_complex(v) else self.values[v] for v in op.operands]
            new = self.b.emit(op.name, operands, op.attrs)
            self.values.update(zip(op.results, new.results))
        elif category in (Category.MOVEMENT, Category.INDEX, Category.REDUCTION, Category.CONSTANT):
            self._part_by_part(op)
        else:
            raise PassError(f"lower-complex: op '{op.name}' on complex operands has no real lowering")

    def _define(self, op: Op, results: list[Any]) -> None:
        for old, new in zip(op.results, results):
            if _is_complex(old):
                self.parts[old] = new
            else:
                self.values[old] = new

    def _reinterpret(self, op: Op) -> None:
        (operand,), (result,) = op.operands, op.results
        if not _is_complex(result):  # view_as_real: the storage reinterpreted, or the parts interleaved
            self.values[result] = self.interleaved(operand)
        else:  # view_as_complex: the pairs are the operand (the c64 view is made only if something needs it)
            self.pairs[result] = self.values[operand]

    def _part_by_part(self, op: Op) -> None:
        """The op applied to the real parts and to the imaginary parts (real operands, e.g. indices, shared)."""
        if op.opdef.category is Category.CONSTANT:  # full (the one complex creation op): a real value
            value = op.opdef.splat_value(op.attrs)
            re = self.p.op("full", shape=op.attrs["shape"], dtype=F32, value=float(value))
            self.parts[op.result] = (re, self.p.zeros_like(re))
            return
        halves = []
        for half in (0, 1):
            operands = [self.split(v)[half] if _is_complex(v) else self.values[v] for v in op.operands]
            halves.append(self.b.emit(op.name, operands, op.attrs).results)
        for result, re, im in zip(op.results, *halves):
            if _is_complex(result):
                self.parts[result] = (re, im)
            else:
                raise PassError(f"lower-complex: op '{op.name}' turns complex operands into a real result")


# ---- elementwise rules ---------------------------------------------------------------------------------


def _binary_parts(low: _Lowering, op: Op) -> tuple[tuple[Value, Value], tuple[Value, Value]]:
    a, b = op.operands
    return low.split(a), low.split(b)


def _add_sub(low: _Lowering, op: Op) -> list[Any]:
    (ar, ai), (br, bi) = _binary_parts(low, op)
    return [(low.p.op(op.name, ar, br), low.p.op(op.name, ai, bi))]


def _mul(low: _Lowering, op: Op) -> list[Any]:
    p = low.p
    (ar, ai), (br, bi) = _binary_parts(low, op)
    return [(p.op("sub", p.op("mul", ar, br), p.op("mul", ai, bi)),
             p.op("add", p.op("mul", ar, bi), p.op("mul", ai, br)))]


def _div(low: _Lowering, op: Op) -> list[Any]:
    """Smith's algorithm, c10::complex's division: scale by the larger part of the divisor."""
    p = low.p
    (ar, ai), (br, bi) = _binary_parts(low, op)
    real_larger = p.op("ge", p.op("abs", br), p.op("abs", bi))
    # |br| >= |bi|: r = bi/br, d = br + bi r: ((ar + ai r)/d, (ai - ar r)/d)
    r1 = p.op("div", bi, br)
    d1 = p.op("add", br, p.op("mul", bi, r1))
    re1 = p.op("div", p.op("add", ar, p.op("mul", ai, r1)), d1)
    im1 = p.op("div", p.op("sub", ai, p.op("mul", ar, r1)), d1)
    # |br| < |bi|: r = br/bi, d = bi + br r: ((ar r + ai)/d, (ai r - ar)/d)
    r2 = p.op("div", br, bi)
    d2 = p.op("add", bi, p.op("mul", br, r2))
    re2 = p.op("div", p.op("add", p.op("mul", ar, r2), ai), d2)
    im2 = p.op("div", p.op("sub", p.op("mul", ai, r2), ar), d2)
    # 0 / 0 (both parts of the divisor zero): each part divided by zero, as c10::complex does
    zero = p.op("logical_and", p.op("eq", br, p.scalar(0.0)), p.op("eq", bi, p.scalar(0.0)))
    re = p.op("where", zero, p.op("div", ar, p.op("abs", br)), p.op("where", real_larger, re1, re2))
    im = p.op("where", zero, p.op("div", ai, p.op("abs", bi)), p.op("where", real_larger, im1, im2))
    return [(re, im)]


def _neg(low: _Lowering, op: Op) -> list[Any]:
    re, im = low.split(op.operands[0])
    return [(low.p.op("neg", re), low.p.op("neg", im))]


def _conj(low: _Lowering, op: Op) -> list[Any]:
    re, im = low.split(op.operands[0])
    return [(re, low.p.op("neg", im))]


def _abs(low: _Lowering, op: Op) -> list[Any]:
    return [low.p.hypot(*low.split(op.operands[0]))]


def _compare(low: _Lowering, op: Op, both: str) -> list[Any]:
    """eq / ne: the comparison of the real parts and of the imaginary parts, joined by ``both``."""
    (ar, ai), (br, bi) = _binary_parts(low, op)
    return [low.p.op(both, low.p.op(op.name, ar, br), low.p.op(op.name, ai, bi))]


def _where(low: _Lowering, op: Op) -> list[Any]:
    cond, a, b = op.operands
    cond, (ar, ai), (br, bi) = low.values[cond], low.split(a), low.split(b)
    return [(low.p.op("where", cond, ar, br), low.p.op("where", cond, ai, bi))]


def _cast(low: _Lowering, op: Op) -> list[Any]:
    (x,), target = op.operands, op.attrs["dtype"]
    if _is_complex(x) and target.is_complex:
        return [low.split(x)]
    if _is_complex(x):  # complex -> real: the real part (PyTorch warns that the imaginary part is discarded)
        re = low.split(x)[0]
        return [re if target is F32 else low.p.op("cast", re, dtype=target)]
    real = low.values[x]
    re = real if real.type.dtype is F32 else low.p.op("cast", real, dtype=F32)
    return [(re, low.p.zeros_like(re))]


ELEMENTWISE_RULES: dict[str, Rule] = {
    "add": _add_sub,  # (ar + br, ai + bi)
    "sub": _add_sub,  # (ar - br, ai - bi)
    "mul": _mul,  # (ar br - ai bi, ar bi + ai br)
    "div": _div,  # Smith's algorithm
    "neg": _neg,  # (-ar, -ai)
    "conj": _conj,  # (ar, -ai)
    "abs": _abs,  # hypot(ar, ai), an f32 result
    "eq": partial(_compare, both="logical_and"),  # ar == br and ai == bi
    "ne": partial(_compare, both="logical_or"),  # ar != br or ai != bi
    "where": _where,  # part by part
    "cast": _cast,  # real <-> complex
}
