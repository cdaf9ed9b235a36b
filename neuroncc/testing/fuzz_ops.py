"""The fuzzer's op table: each entry picks well-typed operands and parameters and renders one statement.

An entry's ``choose(ctx)`` returns the statement's fields (operand names under the keys listed in
``operands``, everything else a parameter) or None when it does not apply; ``template`` renders them as
Python over torch. Operands come from earlier values or from fresh program inputs made to fit
(:meth:`Ctx.fresh`). The generator then checks the statement on meta tensors, so an entry only has to be
*usually* valid.

Numerical hygiene, so that a mismatch means a bug and not an ill-conditioned program: functions with poles
or overflow get guarded arguments (``log(|x| + 1)``, ``x / (|y| + 0.5)``, ``exp(clamp(x, max=10))``), and
discontinuous functions (floor, comparisons, casts to int, argmax) only read program inputs (``raw=True``),
whose values both sides see exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLOATS = ("float32", "bfloat16")
NUMERIC = ("float32", "bfloat16", "int64")


@dataclass(frozen=True, slots=True)
class Spec:
    """A tensor's shape and dtype (torch dtype name); ``high`` bounds int64 inputs to [0, high)."""

    shape: tuple[int, ...]
    dtype: str
    high: int | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


class Ctx:
    """What an op's ``choose`` sees: the values so far, a seeded RNG, and fresh inputs on demand."""

    def __init__(self, rng: random.Random, values: dict[str, Spec], raw: set[str], float_dtype: str,
                 max_numel: int):
        self.rng, self.values, self.raw = rng, values, raw
        self.float_dtype, self.max_numel = float_dtype, max_numel
        self.fresh_inputs: list[tuple[str, Spec]] = []
        self._next_input = sum(1 for name in values if name.startswith("x"))

    def pick(self, accept: Callable[[Spec], bool] = lambda s: True, *, raw: bool = False) -> str | None:
        """An existing value (recent ones likelier), or None."""
        names = [n for n, s in self.values.items() if accept(s) and (not raw or n in self.raw)]
        if not names:
            return None
        weights = [1.0 + i for i in range(len(names))]
        return self.rng.choices(names, weights)[0]

    def fresh(self, spec: Spec) -> str:
        name = f"x{self._next_input}"
        self._next_input += 1
        self.fresh_inputs.append((name, spec))
        self.values[name] = spec
        self.raw.add(name)
        return name

    def pick_or_fresh(self, spec: Spec, fresh_probability: float = 0.5, *, raw: bool = False) -> str:
        """A value with exactly ``spec``'s shape and dtype, else a fresh input."""
        if self.rng.random() >= fresh_probability:
            found = self.pick(lambda s: s.shape == spec.shape and s.dtype == spec.dtype, raw=raw)
            if found:
                return found
        return self.fresh(spec)

    def broadcast_partner(self, spec: Spec, dtypes: tuple[str, ...], *, raw: bool = False) -> str:
        """A value broadcastable against ``spec``: the same shape, some dims 1, or fewer leading dims."""
        dtype = spec.dtype if spec.dtype in dtypes else self.rng.choice(dtypes)
        if self.rng.random() < 0.15:  # mixed dtypes: type promotion
            dtype = self.rng.choice(dtypes)
        shape = list(spec.shape)
        roll = self.rng.random()
        if roll < 0.3 and shape:
            shape = shape[self.rng.randint(1, len(shape)):]
        elif roll < 0.6:
            shape = [1 if self.rng.random() < 0.4 else s for s in shape]
        high = 5 if dtype == "int64" else None
        return self.pick_or_fresh(Spec(tuple(shape), dtype, high), 0.6, raw=raw)

    def dim(self, spec: Spec) -> int:
        return self.rng.randrange(spec.rank) - (spec.rank if self.rng.random() < 0.3 else 0)

    def dims(self, spec: Spec) -> tuple[int, ...]:
        count = self.rng.randint(1, spec.rank)
        return tuple(sorted(self.rng.sample(range(spec.rank), count)))


@dataclass(frozen=True, slots=True)
class FuzzOp:
    name: str
    weight: float
    operands: tuple[str, ...]
    template: str
    choose: Callable[[Ctx], dict[str, Any] | None]
    code_params: tuple[str, ...] = ()  # parameters that are Python source already (an index expression)


def render(op: FuzzOp, fields: dict[str, Any], dtype_name: Callable[[str], str] = lambda d: d) -> str:
    """The statement's Python expression; ``dtype_name`` maps dtype parameters (for the float64 reference)."""
    spelled = {}
    for key, value in fields.items():
        if key in op.operands or key in op.code_params:
            spelled[key] = value
        elif key.startswith("dtype"):
            spelled[key] = f"torch.{dtype_name(value)}"
        else:
            spelled[key] = repr(value)
    return op.template.format(**spelled)


# ---- choosers ------------------------------------------------------------------------------------------


def _one(accept: Callable[[Spec], bool], *, raw: bool = False, **params: Callable[[Ctx, Spec], Any]):
    def choose(ctx: Ctx) -> dict[str, Any] | None:
        a = ctx.pick(accept, raw=raw)
        if a is None:
            return None
        fields: dict[str, Any] = {"a": a}
        for key, make in params.items():
            value = make(ctx, ctx.values[a])
            if value is None:
                return None
            fields[key] = value
        return fields
    return choose


def _is_float(s: Spec) -> bool:
    return s.is_float


def _is_numeric(s: Spec) -> bool:
    return s.dtype in NUMERIC


def _ranked(s: Spec) -> bool:
    return s.rank >= 1


def _float_ranked(s: Spec) -> bool:
    return s.is_float and s.rank >= 1


def _binary(dtypes: tuple[str, ...], *, raw: bool = False):
    def choose(ctx: Ctx) -> dict[str, Any] | None:
        a = ctx.pick(lambda s: s.dtype in dtypes, raw=raw)
        if a is None:
            return None
        b = ctx.broadcast_partner(ctx.values[a], dtypes, raw=raw)
        return {"a": a, "b": b} if ctx.rng.random() < 0.8 else {"a": b, "b": a}
    return choose


def _where(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(_is_numeric)
    if a is None:
        return None
    spec = ctx.values[a]
    cond = ctx.pick(lambda s: s.dtype == "bool" and len(s.shape) <= spec.rank
                    and all(c in (1, d) for c, d in zip(s.shape[::-1], spec.shape[::-1])))
    cond = cond or ctx.fresh(Spec(spec.shape, "bool"))
    return {"c": cond, "a": a, "b": ctx.broadcast_partner(spec, (spec.dtype,))}


def _reshape_target(ctx: Ctx, s: Spec) -> tuple[int, ...] | None:
    numel = math.prod(s.shape)
    factors = [f for f in range(2, numel + 1) if numel % f == 0]
    shape, rest = [], numel
    while rest > 1 and len(shape) < 3:
        choices = [f for f in factors if rest % f == 0 and f <= rest]
        f = ctx.rng.choice(choices)
        shape.append(f)
        rest //= f
    shape.append(rest) if rest > 1 or not shape else None
    ctx.rng.shuffle(shape)
    if ctx.rng.random() < 0.3:
        shape.insert(ctx.rng.randint(0, len(shape)), 1)
    if ctx.rng.random() < 0.3 and shape:
        shape[ctx.rng.randrange(len(shape))] = -1
    return tuple(shape)


def _slice(ctx: Ctx, s: Spec) -> str | None:
    dim = ctx.rng.randrange(s.rank)
    size = s.shape[dim]
    start = ctx.rng.randint(0, max(size - 1, 0))
    end = ctx.rng.randint(start + 1, size) if size > start else size
    step = ctx.rng.choice((1, 1, 2))
    pieces = [":"] * dim + [f"{start}:{end}" + (f":{step}" if step > 1 else "")]
    return ", ".join(pieces)


def _expand_target(ctx: Ctx, s: Spec) -> tuple[int, ...] | None:
    shape = [ctx.rng.choice((2, 3)) if d == 1 else d for d in s.shape]
    if ctx.rng.random() < 0.4 or not shape:
        shape.insert(0, ctx.rng.choice((2, 3)))
    return tuple(shape) if math.prod(shape) <= ctx.max_numel else None


def _cat(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(_ranked)
    if a is None:
        return None
    spec = ctx.values[a]
    dim = ctx.dim(spec)
    other = list(spec.shape)
    other[dim] = ctx.rng.randint(1, 4)
    b = ctx.pick_or_fresh(Spec(tuple(other), spec.dtype, spec.high), 0.7)
    return {"a": a, "b": b, "dim": dim}


def _stack(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick()
    if a is None:
        return None
    spec = ctx.values[a]
    return {"a": a, "b": ctx.pick_or_fresh(spec), "dim": ctx.rng.randint(-spec.rank - 1, spec.rank)}


def _matmul(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(lambda s: s.is_float and 1 <= s.rank <= 4)
    if a is None:
        return None
    spec = ctx.values[a]
    k = spec.shape[-1]
    n = ctx.rng.choice((1, 2, 3, 4, 8))
    if spec.rank == 1 or ctx.rng.random() < 0.5:
        shape: tuple[int, ...] = (k, n)
    else:
        shape = spec.shape[:-2][ctx.rng.randint(0, spec.rank - 2):] + (k, n)
    return {"a": a, "b": ctx.pick_or_fresh(Spec(shape, spec.dtype), 0.7)}


def _linear(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(_float_ranked)
    if a is None:
        return None
    spec = ctx.values[a]
    n = ctx.rng.choice((1, 3, 4, 8))
    return {"a": a, "w": ctx.fresh(Spec((n, spec.shape[-1]), spec.dtype)), "bias": ctx.fresh(Spec((n,), spec.dtype))}


def _normalizable(s: Spec) -> bool:
    # Normalizing 1 or 2 values is degenerate: the result is 0 or +-1 whatever the input, and the gradient is
    # pure rounding noise (scaled by 1/sqrt(var)) that differs between any two correct implementations.
    return s.is_float and s.rank >= 1 and s.shape[-1] >= 3


def _layer_norm(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(_normalizable)
    if a is None:
        return None
    d = ctx.values[a].shape[-1]
    dtype = ctx.values[a].dtype
    return {"a": a, "d": d, "w": ctx.fresh(Spec((d,), dtype)), "bias": ctx.fresh(Spec((d,), dtype))}


def _rms_norm(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(_normalizable)
    if a is None:
        return None
    spec = ctx.values[a]
    return {"a": a, "w": ctx.fresh(Spec(spec.shape[-1:], spec.dtype))}


def _attention(ctx: Ctx) -> dict[str, Any] | None:
    q = ctx.pick(lambda s: s.is_float and 2 <= s.rank <= 4)
    if q is None:
        return None
    spec = ctx.values[q]
    kv_shape = spec.shape[:-2] + (ctx.rng.randint(1, 5), spec.shape[-1])
    k = ctx.pick_or_fresh(Spec(kv_shape, spec.dtype), 0.7)
    v = ctx.pick_or_fresh(Spec(kv_shape, spec.dtype), 0.7)
    return {"q": q, "k": k, "v": v, "scale": round(1 / math.sqrt(spec.shape[-1]), 4)}


def _index_op(kind: str):
    def choose(ctx: Ctx) -> dict[str, Any] | None:
        a = ctx.pick(_float_ranked)
        if a is None:
            return None
        spec = ctx.values[a]
        dim = ctx.rng.randrange(spec.rank)
        count = ctx.rng.randint(1, 5)
        if kind == "gather":
            shape = tuple(ctx.rng.randint(1, s) if i != dim else count for i, s in enumerate(spec.shape))
            index = ctx.fresh(Spec(shape, "int64", spec.shape[dim]))
        else:
            index = ctx.fresh(Spec((count,), "int64", spec.shape[dim]))
        return {"a": a, "i": index, "dim": dim}
    return choose


def _embedding(ctx: Ctx) -> dict[str, Any] | None:
    rows = ctx.rng.randint(2, 10)
    shape = tuple(ctx.rng.randint(1, 4) for _ in range(ctx.rng.randint(1, 2)))
    index = ctx.pick(lambda s: s.dtype == "int64" and s.high is not None and s.high <= rows, raw=True)
    index = index or ctx.fresh(Spec(shape, "int64", rows))
    return {"i": index, "w": ctx.fresh(Spec((rows, ctx.rng.choice((2, 4, 8))), ctx.float_dtype))}


def _cross_entropy(ctx: Ctx) -> dict[str, Any] | None:
    a = ctx.pick(lambda s: s.is_float and s.rank == 2)
    if a is None:
        return None
    n, c = ctx.values[a].shape
    return {"a": a, "t": ctx.fresh(Spec((n,), "int64", c))}


def _cast(targets: tuple[str, ...], *, accept: Callable[[Spec], bool], raw: bool = False):
    def choose(ctx: Ctx) -> dict[str, Any] | None:
        a = ctx.pick(accept, raw=raw)
        if a is None:
            return None
        return {"a": a, "dtype": ctx.rng.choice([t for t in targets if t != ctx.values[a].dtype] or list(targets))}
    return choose


def _perm(ctx: Ctx, s: Spec) -> tuple[int, ...]:
    dims = list(range(s.rank))
    ctx.rng.shuffle(dims)
    return tuple(dims)


def _two_dims(ctx: Ctx, s: Spec) -> tuple[int, int]:
    return ctx.rng.randrange(s.rank), ctx.rng.randrange(s.rank) - s.rank


def _size1_dim(ctx: Ctx, s: Spec) -> int | None:
    ones = [i for i, d in enumerate(s.shape) if d == 1]
    return ctx.rng.choice(ones) if ones else None


def _keep(ctx: Ctx, s: Spec) -> bool:
    return ctx.rng.random() < 0.4


def _small_int(low: int, high: int):
    return lambda ctx, s: ctx.rng.randint(low, high)


def _pad(ctx: Ctx, s: Spec) -> tuple[int, ...]:
    return tuple(ctx.rng.randint(0, 2) for _ in range(2 * ctx.rng.randint(1, min(s.rank, 2))))


def _unary(name: str, template: str, weight: float = 1.0, accept: Callable[[Spec], bool] = _is_float,
           raw: bool = False) -> FuzzOp:
    return FuzzOp(name, weight, ("a",), template, _one(accept, raw=raw))


_any = lambda s: True  # noqa: E731
_dim = lambda ctx, s: ctx.dim(s)  # noqa: E731
_dims = lambda ctx, s: ctx.dims(s)  # noqa: E731

OPS: tuple[FuzzOp, ...] = (
    # unary elementwise (guarded where the function has a pole or overflows)
    _unary("neg", "-{a}", accept=_is_numeric),
    _unary("abs", "torch.abs({a})", accept=_is_numeric),
    _unary("relu", "torch.relu({a})"),
    _unary("sigmoid", "torch.sigmoid({a})"),
    _unary("tanh", "torch.tanh({a})"),
    _unary("exp", "torch.exp(torch.clamp({a}, max=10.0))"),
    _unary("log", "torch.log(torch.abs({a}) + 1)"),
    _unary("sqrt", "torch.sqrt(torch.abs({a}) + 0.5)"),
    _unary("rsqrt", "torch.rsqrt(torch.abs({a}) + 0.5)"),
    _unary("reciprocal", "1.0 / (torch.abs({a}) + 0.5)"),
    _unary("sin", "torch.sin({a})", 0.5),
    _unary("cos", "torch.cos({a})", 0.5),
    _unary("erf", "torch.erf({a})", 0.5),
    # gelu(+inf) is left out: eager itself gives inf for a 0-dim tensor and NaN in its vectorized kernel.
    _unary("gelu", "F.gelu(torch.clamp({a}, max=1e30))"),
    _unary("gelu_tanh", "F.gelu({a}, approximate='tanh')", 0.5),
    _unary("silu", "F.silu({a})"),
    _unary("softplus", "F.softplus({a})", 0.5),
    _unary("leaky_relu", "F.leaky_relu({a}, 0.1)", 0.5),
    _unary("square", "{a} * {a}"),
    _unary("pow", "torch.pow(torch.abs({a}) + 0.5, 1.5)", 0.5),
    _unary("affine", "{a} * 0.5 + 1.25", accept=_is_numeric),
    _unary("rsub_scalar", "2.0 - {a}"),
    _unary("clamp", "torch.clamp({a}, min=-0.5, max=0.75)"),
    _unary("hardtanh", "F.hardtanh({a})", 0.5),
    _unary("log1p", "torch.log1p(torch.abs({a}))", 0.5),
    _unary("atan", "torch.atan({a})", 0.3),
    # discontinuous: program inputs only
    _unary("floor", "torch.floor({a})", 0.3, raw=True),
    _unary("round", "torch.round({a})", 0.3, raw=True),
    _unary("sign", "torch.sign({a})", 0.3, raw=True),
    _unary("gt0", "{a} > 0", 0.5, accept=_is_numeric, raw=True),
    _unary("isnan", "torch.isnan({a})", 0.2, raw=True),
    FuzzOp("lt", 0.5, ("a", "b"), "{a} < {b}", _binary(NUMERIC, raw=True)),
    FuzzOp("eq", 0.3, ("a", "b"), "{a} == {b}", _binary(("int64", "bool"), raw=True)),
    _unary("logical_not", "torch.logical_not({a})", 0.3, accept=lambda s: s.dtype == "bool"),
    FuzzOp("logical_and", 0.3, ("a", "b"), "{a} & {b}", _binary(("bool",))),
    # binary arithmetic (broadcasting, mixed dtypes)
    FuzzOp("add", 3, ("a", "b"), "{a} + {b}", _binary(NUMERIC)),
    FuzzOp("sub", 2, ("a", "b"), "{a} - {b}", _binary(NUMERIC)),
    FuzzOp("mul", 3, ("a", "b"), "{a} * {b}", _binary(NUMERIC)),
    FuzzOp("div", 1, ("a", "b"), "{a} / (torch.abs({b}) + 0.5)", _binary(FLOATS)),
    FuzzOp("floordiv", 0.3, ("a", "b"), "torch.div({a}, torch.abs({b}) + 1, rounding_mode='floor')",
           _binary(("int64",))),
    FuzzOp("maximum", 1, ("a", "b"), "torch.maximum({a}, {b})", _binary(NUMERIC)),
    FuzzOp("minimum", 1, ("a", "b"), "torch.minimum({a}, {b})", _binary(NUMERIC)),
    FuzzOp("add_alpha", 0.5, ("a", "b"), "torch.add({a}, {b}, alpha=2)", _binary(FLOATS)),
    FuzzOp("where", 1, ("c", "a", "b"), "torch.where({c}, {a}, {b})", _where),
    # casts
    FuzzOp("to_float", 1, ("a",), "{a}.to({dtype})", _cast(FLOATS, accept=_any)),
    FuzzOp("to_int", 0.3, ("a",), "{a}.to({dtype})", _cast(("int64",), accept=_is_float, raw=True)),
    FuzzOp("to_bool", 0.2, ("a",), "{a}.to({dtype})", _cast(("bool",), accept=lambda s: s.dtype == "int64")),
    # reductions
    FuzzOp("sum", 2, ("a",), "torch.sum({a}, dim={dims}, keepdim={keep})",
           _one(lambda s: s.rank >= 1 and s.dtype in NUMERIC, dims=_dims, keep=_keep)),
    FuzzOp("sum_all", 0.5, ("a",), "{a}.sum()", _one(_is_numeric)),
    FuzzOp("mean", 1.5, ("a",), "torch.mean({a}, dim={dims}, keepdim={keep})", _one(_float_ranked, dims=_dims, keep=_keep)),
    FuzzOp("amax", 1, ("a",), "torch.amax({a}, dim={dims}, keepdim={keep})", _one(_ranked, dims=_dims, keep=_keep)),
    FuzzOp("amin", 0.5, ("a",), "torch.amin({a}, dim={dims}, keepdim={keep})", _one(_ranked, dims=_dims, keep=_keep)),
    FuzzOp("max_dim", 0.5, ("a",), "torch.max({a}, dim={dim}).values", _one(_float_ranked, dim=_dim)),
    FuzzOp("prod", 0.3, ("a",), "torch.prod({a}, dim={dim})", _one(_float_ranked, dim=_dim)),
    FuzzOp("var", 0.5, ("a",), "torch.var({a}, dim={dims}, correction=0)", _one(_float_ranked, dims=_dims)),
    FuzzOp("argmax", 0.3, ("a",), "torch.argmax({a}, dim={dim})", _one(_float_ranked, dim=_dim, raw=True)),
    FuzzOp("any", 0.2, ("a",), "torch.any({a}, dim={dim})", _one(lambda s: s.dtype == "bool" and s.rank >= 1, dim=_dim)),
    FuzzOp("softmax", 1.5, ("a",), "torch.softmax({a}, dim={dim})", _one(_float_ranked, dim=_dim)),
    FuzzOp("log_softmax", 1, ("a",), "torch.log_softmax({a}, dim={dim})", _one(_float_ranked, dim=_dim)),
    FuzzOp("logsumexp", 0.5, ("a",), "torch.logsumexp({a}, dim={dim})", _one(_float_ranked, dim=_dim)),
    FuzzOp("cumsum", 0.2, ("a",), "torch.cumsum({a}, dim={dim})", _one(_float_ranked, dim=_dim)),
    # views and data movement
    FuzzOp("permute", 1.5, ("a",), "{a}.permute({perm})", _one(_ranked, perm=_perm)),
    FuzzOp("transpose", 1.5, ("a",), "{a}.transpose(*{dims2})", _one(lambda s: s.rank >= 2, dims2=_two_dims)),
    FuzzOp("reshape", 1.5, ("a",), "{a}.reshape({shape})", _one(_any, shape=_reshape_target)),
    FuzzOp("view", 0.5, ("a",), "{a}.contiguous().view({shape})", _one(_any, shape=_reshape_target)),
    FuzzOp("unsqueeze", 1, ("a",), "{a}.unsqueeze({dim})", _one(_any, dim=lambda ctx, s: ctx.rng.randint(-s.rank - 1, s.rank))),
    FuzzOp("squeeze", 0.5, ("a",), "{a}.squeeze({dim})", _one(_ranked, dim=_size1_dim)),
    FuzzOp("flatten", 0.5, ("a",), "{a}.flatten({start})", _one(_ranked, start=lambda ctx, s: ctx.rng.randrange(s.rank))),
    FuzzOp("slice", 1.5, ("a",), "{a}[{index}]", _one(_ranked, index=_slice), code_params=("index",)),
    FuzzOp("select", 0.7, ("a",), "{a}.select({dim}, {index})",
           _one(_ranked, dim=lambda ctx, s: 0, index=lambda ctx, s: ctx.rng.randrange(s.shape[0]) if s.shape[0] else None)),
    FuzzOp("narrow", 0.5, ("a",), "torch.narrow({a}, -1, {start}, 1)",
           _one(_ranked, start=lambda ctx, s: ctx.rng.randrange(s.shape[-1]) if s.shape[-1] else None)),
    FuzzOp("expand", 1, ("a",), "{a}.expand({shape})", _one(_any, shape=_expand_target)),
    FuzzOp("flip", 0.3, ("a",), "torch.flip({a}, {dims})", _one(_ranked, dims=_dims)),
    FuzzOp("cat", 1, ("a", "b"), "torch.cat([{a}, {b}], dim={dim})", _cat),
    FuzzOp("stack", 0.5, ("a", "b"), "torch.stack([{a}, {b}], dim={dim})", _stack),
    FuzzOp("chunk", 0.5, ("a",), "torch.chunk({a}, 2, dim={dim})[{part}]",
           _one(_ranked, dim=_dim, part=lambda ctx, s: 0 if ctx.rng.random() < 0.5 else -1)),
    FuzzOp("repeat", 0.3, ("a",), "{a}.repeat({reps})",
           _one(_ranked, reps=lambda ctx, s: tuple(ctx.rng.randint(1, 2) for _ in s.shape))),
    FuzzOp("pad", 0.3, ("a",), "F.pad({a}, {pad})", _one(_float_ranked, pad=_pad)),
    FuzzOp("contiguous", 0.3, ("a",), "{a}.contiguous()", _one(_any)),
    FuzzOp("tril", 0.2, ("a",), "torch.tril({a})", _one(lambda s: s.rank == 2 and s.is_float)),
    # contractions and patterns
    FuzzOp("matmul", 2, ("a", "b"), "{a} @ {b}", _matmul),
    FuzzOp("linear", 1, ("a", "w", "bias"), "F.linear({a}, {w}, {bias})", _linear),
    FuzzOp("layer_norm", 0.7, ("a", "w", "bias"), "F.layer_norm({a}, ({d},), {w}, {bias})", _layer_norm),
    FuzzOp("rms_norm", 0.7, ("a", "w"), "{a} * torch.rsqrt(({a} * {a}).mean(-1, keepdim=True) + 1e-6) * {w}",
           _rms_norm),
    FuzzOp("manual_softmax", 0.7, ("a",),
           "torch.exp({a} - {a}.amax(-1, keepdim=True)) / torch.exp({a} - {a}.amax(-1, keepdim=True)).sum(-1, keepdim=True)",
           _one(_float_ranked)),
    FuzzOp("attention", 0.7, ("q", "k", "v"), "torch.softmax({q} @ {k}.transpose(-1, -2) * {scale}, dim=-1) @ {v}",
           _attention),
    FuzzOp("gather", 0.4, ("a", "i"), "torch.gather({a}, {dim}, {i})", _index_op("gather")),
    FuzzOp("index_select", 0.4, ("a", "i"), "torch.index_select({a}, {dim}, {i})", _index_op("index_select")),
    FuzzOp("embedding", 0.4, ("i", "w"), "F.embedding({i}, {w})", _embedding),
    FuzzOp("cross_entropy", 0.3, ("a", "t"), "F.cross_entropy({a}, {t})", _cross_entropy),
)

OPS_BY_NAME = {op.name: op for op in OPS}
