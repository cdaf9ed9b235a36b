"""The canonicalizer's rule tables: algebraic identities, view simplifications, reductions, constant folding.

Each rule keeps the replaced value's exact type (shape and element type): an identity such as ``x + 0 -> x``
fires only when the constant does not broadcast ``x`` to a bigger shape (``Site.exact`` checks that), and the
driver re-checks every replacement. Floating-point rewrites are exact in IEEE arithmetic: ``x + (-0.0)`` is
``x`` but ``x + 0.0`` is not when ``x`` is ``-0.0``, so ``x + 0.0 -> x`` fires only with
``canonicalize{signed_zeros=false}``.
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir import REGISTRY, Category, DenseAttr, DType, Function, Op, TensorType, Value
from neuroncc.ir.dtypes import to_storage
from neuroncc.ir.interpreter import InterpreterError, run_op
from neuroncc.ir.ops.creation import array_splat
from neuroncc.ir.signs import facts_for, with_facts
from neuroncc.passes.rewrite import Replacement, Rule, Site, is_constant, scalar_attr, splat_value

# ---- arithmetic ------------------------------------------------------------------------------------------


def _is_additive_zero(site: Site, value: Value) -> bool:
    """``value`` is a splat zero that leaves every addend unchanged (only -0.0 does, for IEEE floats)."""
    found = site.splat(value)
    if found is None or isinstance(found, bool) or found != 0:
        return False
    respect_sign = value.type.dtype.is_float and (site.config is None or site.config.signed_zeros)
    return not respect_sign or bool(np.signbit(found))


def add_zero(site: Site) -> Replacement:
    x, y = site.operands
    if _is_additive_zero(site, y):
        return site.exact(x)
    return site.exact(y) if _is_additive_zero(site, x) else None


def sub_zero(site: Site) -> Replacement:
    x, y = site.operands
    found = site.splat(y)
    if found is None or isinstance(found, bool) or found != 0:
        return None
    respect_sign = y.type.dtype.is_float and (site.config is None or site.config.signed_zeros)
    return site.exact(x) if not (respect_sign and np.signbit(found)) else None


def mul_one(site: Site) -> Replacement:
    x, y = site.operands
    if site.is_splat(y, 1):
        return site.exact(x)
    return site.exact(y) if site.is_splat(x, 1) else None


def mul_int_zero(site: Site) -> Replacement:
    x, y = site.operands
    if not site.result.type.dtype.is_int:
        return None
    return site.full(0) if site.is_splat(x, 0) or site.is_splat(y, 0) else None


def div_one(site: Site) -> Replacement:
    x, y = site.operands
    rounds = site.attrs["rounding_mode"] != "none" and x.type.dtype.is_float  # floor(x/1) is not x
    return site.exact(x) if site.is_splat(y, 1) and not rounds else None


def pow_one(site: Site) -> Replacement:
    x, y = site.operands
    return site.exact(x) if site.is_splat(y, 1) else None


def pow_two(site: Site) -> Replacement:
    x, y = site.operands
    if not site.is_splat(y, 2) or site.exact(x) is None:
        return None
    return site.emit("mul", x, x)  # exact: x*x is representable in the wider type the reference rounds from


def involution(site: Site) -> Replacement:
    (x,) = site.operands
    inner = site.producer_named(x, site.op.name)
    return site.exact(inner.operands[0]) if inner is not None else None


def idempotent(site: Site) -> Replacement:
    (x,) = site.operands
    return x if site.producer_named(x, site.op.name) is not None and site.exact(x) is not None else None


def where_same(site: Site) -> Replacement:
    cond, a, b = site.operands
    return site.exact(a) if a is b else None


def where_constant_condition(site: Site) -> Replacement:
    cond, a, b = site.operands
    found = site.splat(cond)
    if found is None:
        return None
    return site.exact(a if found else b)


def clamp_unbounded(site: Site) -> Replacement:
    if site.attrs["min"] is not None or site.attrs["max"] is not None or site.attrs["lifted"]:
        return None  # (a NaN bound makes the result NaN: it is a bound like any other here)
    return site.exact(site.operands[0])


def cast_same(site: Site) -> Replacement:
    (x,) = site.operands
    return site.exact(x)


#: (from, to) casts that keep every value exactly, so casting back returns the original.
_EXACT_CASTS = {
    (DType.bf16, DType.f32), (DType.f16, DType.f32),
    (DType.i8, DType.i16), (DType.i8, DType.i32), (DType.i8, DType.i64), (DType.i8, DType.f32),
    (DType.u8, DType.i16), (DType.u8, DType.i32), (DType.u8, DType.i64), (DType.u8, DType.f32),
    (DType.i16, DType.i32), (DType.i16, DType.i64), (DType.i16, DType.f32), (DType.i32, DType.i64),
}


def cast_round_trip(site: Site) -> Replacement:
    (x,) = site.operands
    inner = site.producer_named(x, "cast")
    if inner is None:
        return None
    original = inner.operands[0]
    exact_widening = (original.type.dtype, x.type.dtype) in _EXACT_CASTS
    return site.exact(original) if exact_widening and original.type.dtype == site.attrs["dtype"] else None


ARITHMETIC_RULES: tuple[Rule, ...] = (
    Rule("add", add_zero),  # x + 0 -> x, 0 + x -> x (0 must not broadcast x; -0.0 for IEEE floats)
    Rule("sub", sub_zero),  # x - 0 -> x
    Rule("mul", mul_one),  # x * 1 -> x, 1 * x -> x
    Rule("mul", mul_int_zero),  # x * 0 -> 0 for integers (floats: NaN * 0 is NaN)
    Rule("div", div_one),  # x / 1 -> x (not with floor/trunc rounding of floats)
    Rule("pow", pow_one),  # x ** 1 -> x
    Rule("pow", pow_two),  # x ** 2 -> x * x
    Rule("neg", involution),  # -(-x) -> x
    Rule("bitwise_not", involution),  # ~~x -> x
    Rule("logical_not", involution),  # not not x -> x (x bool: the type check refuses other x)
    Rule("bitcast", involution),  # bitcast(bitcast(x, t), type of x) -> x: the bits are kept both ways
    Rule("abs", idempotent),  # abs(abs(x)) -> abs(x)
    Rule("relu", idempotent),  # relu(relu(x)) -> relu(x)
    Rule("where", where_same),  # where(c, x, x) -> x
    Rule("where", where_constant_condition),  # where(true, a, b) -> a, where(false, a, b) -> b
    Rule("clamp", clamp_unbounded),  # clamp(x) without bounds -> x
    Rule("cast", cast_same),  # cast(x, type of x) -> x
    Rule("cast", cast_round_trip),  # cast(cast(x, wider), type of x) -> x when the widening is exact
)

# ---- views and data movement -----------------------------------------------------------------------------


def reshape_same_shape(site: Site) -> Replacement:
    return site.exact(site.operands[0])


def reshape_of_reshape(site: Site) -> Replacement:
    inner = site.producer_named(site.operands[0], "reshape")
    return site.emit("reshape", inner.operands[0], shape=site.attrs["shape"]) if inner is not None else None


def squeeze_is_reshape(site: Site) -> Replacement:
    return site.emit("reshape", site.operands[0], shape=site.result.type.shape)


def permute_identity(site: Site) -> Replacement:
    dims = site.attrs["dims"]
    return site.exact(site.operands[0]) if dims == tuple(range(len(dims))) else None


def permute_of_permute(site: Site) -> Replacement:
    inner = site.producer_named(site.operands[0], "permute")
    if inner is None:
        return None
    first, second = inner.attrs["dims"], site.attrs["dims"]
    return site.emit("permute", inner.operands[0], dims=tuple(first[d] for d in second))


def expand_same_shape(site: Site) -> Replacement:
    return site.exact(site.operands[0])


def expand_of_expand(site: Site) -> Replacement:
    inner = site.producer_named(site.operands[0], "expand")
    return site.emit("expand", inner.operands[0], shape=site.attrs["shape"]) if inner is not None else None


def slice_full_range(site: Site) -> Replacement:
    x = site.operands[0]
    a = site.attrs
    full = a["start"] == 0 and a["end"] == x.type.shape[a["dim"]] and a["step"] == 1
    return site.exact(x) if full else None


def slice_of_slice(site: Site) -> Replacement:
    inner = site.producer_named(site.operands[0], "slice")
    if inner is None or inner.attrs["dim"] != site.attrs["dim"]:
        return None
    outer, first = site.attrs, inner.attrs
    length = site.result.type.shape[outer["dim"]]
    start = first["start"] + outer["start"] * first["step"]
    step = first["step"] * outer["step"]
    if not length:  # an empty slice's start may lie past the inner one's end: empty at the inner end instead
        start = min(start, first["end"])
    end = start + (length - 1) * step + 1 if length else start
    return site.emit("slice", inner.operands[0], dim=outer["dim"], start=start, end=end, step=step)


def copy_is_value(site: Site) -> Replacement:
    return site.exact(site.operands[0])  # values are immutable: a copy is the same value


def cat_single(site: Site) -> Replacement:
    return site.exact(site.operands[0]) if len(site.operands) == 1 else None


def movement_of_splat(site: Site) -> Replacement:
    found = site.splat(site.operands[0])
    return site.full(found) if found is not None else None


VIEW_RULES: tuple[Rule, ...] = (
    Rule("reshape", reshape_same_shape),  # reshape(x, shape of x) -> x
    Rule("reshape", reshape_of_reshape),  # reshape(reshape(x)) -> reshape(x)
    Rule("squeeze", squeeze_is_reshape),  # squeeze(x) -> reshape(x): one spelling for reshapes
    Rule("unsqueeze", squeeze_is_reshape),  # unsqueeze(x) -> reshape(x)
    Rule("permute", permute_identity),  # permute(x, [0, 1, ...]) -> x
    Rule("permute", permute_of_permute),  # permute(permute(x, p), q) -> permute(x, p[q])
    Rule("expand", expand_same_shape),  # expand(x, shape of x) -> x
    Rule("expand", expand_of_expand),  # expand(expand(x)) -> expand(x)
    Rule("slice", slice_full_range),  # x[0:n:1] along a dim of size n -> x
    Rule("slice", slice_of_slice),  # slice(slice(x)) along one dim -> one slice
    Rule("copy", copy_is_value),  # copy(x) -> x
    Rule("cat", cat_single),  # cat([x]) -> x
) + tuple(
    Rule(name, movement_of_splat)  # a view or reordering of a splat constant -> a splat of the new shape
    for name in ("reshape", "permute", "expand", "slice", "select", "squeeze", "unsqueeze", "copy", "flip", "repeat")
)

# ---- reductions ------------------------------------------------------------------------------------------

_SINGLE_ELEMENT_IDENTITY = ("sum", "mean", "amax", "amin", "prod")


def reduce_nothing(site: Site) -> Replacement:
    x = site.operands[0]
    reduced = [x.type.shape[d] for d in site.attrs["dims"]]
    if any(size != 1 for size in reduced):
        return None
    if not site.attrs["dims"]:
        return site.exact(x)
    same = site.exact(x)
    if same is not None:
        return same
    return site.emit("reshape", x, shape=site.result.type.shape) if x.type.dtype == site.result.type.dtype else None


REDUCTION_RULES: tuple[Rule, ...] = tuple(
    Rule(name, reduce_nothing)  # a reduction over no dims or only size-1 dims -> x (reshaped)
    for name in _SINGLE_ELEMENT_IDENTITY
)

# ---- constants and folding -------------------------------------------------------------------------------


def constant_splat_is_full(site: Site) -> Replacement:
    array = site.attrs["value"].array
    found = array_splat(array)
    return site.full(found) if found is not None else None


def _constant_array(op: Op) -> np.ndarray:
    return run_op(op, [])[0]


def _evaluate_on_scalars(op: Op, scalars: list) -> object:
    """An elementwise op's value on splat operands, computed by the reference on 0-d arrays."""
    scalar_operands = tuple(Value(TensorType((), v.type.dtype)) for v in op.operands)
    scalar_results = tuple(Value(TensorType((), r.type.dtype)) for r in op.results)
    arrays = [to_storage(np.asarray(s), v.type.dtype) for s, v in zip(scalars, op.operands)]  # bf16 rounds
    (out,) = run_op(Op(op.name, scalar_operands, scalar_results, op.attrs), arrays)
    return out.item()


_RUN_TIME_ERRORS = (InterpreterError, ValueError, IndexError, ZeroDivisionError, OverflowError)


def fold_constants(site: Site) -> Replacement:
    op = site.op
    category = REGISTRY.get(op.name).category
    if category in (Category.CONSTANT, Category.KERNEL, Category.EXTERN) or op.regions or not op.results:
        return None
    if any(v.type.dtype.is_complex for v in op.operands + op.results):
        return None  # a complex result has no ``full`` form (its value attribute is real); lower-complex folds parts
    producers = [site.producer(v) for v in op.operands]
    if not all(is_constant(p) for p in producers):
        return None
    if category is Category.ELEMENTWISE:
        scalars = [splat_value(p) for p in producers]
        if all(s is not None for s in scalars):
            try:
                return site.full(_evaluate_on_scalars(op, scalars))
            except _RUN_TIME_ERRORS:
                return None
    limit = site.config.fold_limit if site.config is not None else 64
    if any(v.type.numel > limit for v in op.operands + op.results):
        return None
    try:
        arrays = run_op(op, [_constant_array(p) for p in producers])
    except _RUN_TIME_ERRORS:
        return None  # an error at run time (a bad index, say): leave it to run time
    values = []
    for result, array in zip(op.results, arrays):
        found = array_splat(array)
        if found is not None or array.size == 0:
            t = result.type
            values.append(site.emit("full", shape=t.shape, dtype=t.dtype,
                                    value=scalar_attr(found if found is not None else 0, t.dtype)))
        else:
            values.append(site.emit("constant", value=DenseAttr(array, result.type.dtype)))
    return tuple(values) if len(values) > 1 else values[0]


def kernel_unused_operands(site: Site) -> Replacement:
    """Drop kernel operands the region never reads and operands passed twice."""
    op = site.op
    (region,) = op.regions
    used = {v for inner in region.ops for v in inner.operands} | set(region.outputs)
    keep: dict[Value, int] = {}  # outer operand -> position among the kept params
    params, operands, alias = [], [], {}
    for outer, param in zip(op.operands, region.params):
        if param not in used:
            continue
        if outer in keep:
            alias[param] = params[keep[outer]]
            continue
        keep[outer] = len(params)
        params.append(param)
        operands.append(outer)
    if len(params) == len(region.params):
        return None
    metadata = with_facts(region.metadata, facts_for(region, params))  # (a dropped duplicate's facts: lost)
    body = Function(region.name, tuple(params), region.ops, region.outputs, metadata).replace_uses(alias)
    new = site.builder.emit("kernel", operands, op.attrs, regions=(body,),
                            result_types=tuple(r.type for r in op.results))
    for old, fresh in zip(op.results, new.results):
        fresh.hint = old.hint
    return new.results if len(new.results) != 1 else new.results[0]


FOLDING_RULES: tuple[Rule, ...] = (
    Rule("constant", constant_splat_is_full),  # a constant whose elements are all equal -> full
    Rule("*", fold_constants),  # an op on constants -> its value (splat elementwise ops at any size)
    Rule("kernel", kernel_unused_operands),  # kernel operands the region never reads -> dropped
)

CANONICALIZE_RULES: tuple[Rule, ...] = ARITHMETIC_RULES + VIEW_RULES + REDUCTION_RULES + FOLDING_RULES
