"""Local rewriting: rule tables, one driver that applies them to a fixed point, DCE and CSE.

A :class:`Rule` matches ops by name (``"*"`` matches any op) and returns a replacement value (or values) for
the op's results, or None. Tables are tuples of rules, one per line with one comment each; they compose with
``+``. :func:`rewrite_to_fixed_point` sweeps the function in order, applies the first matching rule to each
op, then removes dead ops and merges duplicates, until nothing changes.

Every replacement must have exactly the type (shape and element type) of the result it replaces; the driver
checks this, so a rule that, say, returns a broadcast operand is a bug that fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroncc.ir import REGISTRY, Builder, Category, Function, Op, Value, print_function

Replacement = Value | tuple[Value, ...] | None


def named(op: Op | None, name: str) -> Op | None:
    """``op`` when it is an op ``name``, else None: how a rewrite matches the specific op of its pattern (the
    permute a matmul's transpose flag absorbs). A property shared by ops (a view, pointwise, a matrix product)
    is asked of the op as a trait instead (``op.has(Trait.VIEW)``)."""
    return op if op is not None and op.name == name else None


@dataclass(frozen=True)
class Rule:
    """One local rewrite: ``rewrite(site)`` for ops named ``op`` (``"*"``: any op)."""

    op: str
    rewrite: Callable[[Site], Replacement]


class Site:
    """The op being rewritten, with what a rule needs to look around it and to build replacement ops."""

    def __init__(self, op: Op, producers: Mapping[Value, Op], config: Any = None):
        self.op = op
        self.producers = producers
        self.config = config  # the pass's options, for rules that depend on them
        self._builder: Builder | None = None

    @property
    def builder(self) -> Builder:
        """Where a rule emits new ops; they are committed only if the rule returns a replacement. Made on first
        use: a site is made for every (op, rule) pair and most rules emit nothing."""
        if self._builder is None:
            self._builder = Builder()
        return self._builder

    @property
    def new_ops(self) -> list[Op]:
        """The ops the rule emitted, in order."""
        return self._builder.ops if self._builder is not None else []

    @property
    def operands(self) -> tuple[Value, ...]:
        return self.op.operands

    @property
    def attrs(self):
        return self.op.attrs

    @property
    def result(self) -> Value:
        return self.op.result

    def producer(self, value: Value) -> Op | None:
        """The op defining ``value`` (None for parameters)."""
        return self.producers.get(value)

    def producer_named(self, value: Value, name: str) -> Op | None:
        """The op defining ``value`` when it is an op ``name`` (see :func:`named`)."""
        return named(self.producers.get(value), name)

    def splat(self, value: Value) -> Any:
        """The scalar every element of ``value`` equals, when ``value`` is a constant; otherwise None."""
        return splat_value(self.producers.get(value))

    def is_splat(self, value: Value, scalar: float) -> bool:
        found = self.splat(value)
        return found is not None and not isinstance(found, bool) and found == scalar and \
            (scalar != 0 or _sign_bit(found) == _sign_bit(scalar))

    def exact(self, value: Value | None) -> Value | None:
        """``value`` if it has exactly the op result's shape and element type (so it can replace it)."""
        if value is None:
            return None
        want = self.result.type
        return value if value.type.shape == want.shape and value.type.dtype == want.dtype else None

    def emit(self, name: str, *operands: Value, **attrs: Any) -> Value:
        """Build a new op (its type inferred) to be placed before the op being rewritten."""
        return self.builder.op(name, *operands, hint=self.op.results[0].hint if self.op.results else None, **attrs)

    def full(self, value: Any) -> Value:
        """A ``full`` op with the result's shape and element type holding ``value``."""
        t = self.result.type
        return self.emit("full", shape=t.shape, dtype=t.dtype, value=scalar_attr(value, t.dtype))


def _sign_bit(x: float) -> bool:
    return bool(np.signbit(x))


def splat_value(op: Op | None) -> Any:
    """The single value every element of ``op``'s result holds, when its op and attributes say so (``full``, a
    ``constant`` whose elements are all equal, a one-element ``iota``); None for other ops and parameters."""
    return op.opdef.splat_value(op.attrs) if op is not None else None


def scalar_attr(value: Any, dtype) -> int | float:
    """A Python number for a ``full`` op's ``value`` attribute of element type ``dtype``."""
    if dtype.is_float:
        return float(value)
    return int(value)


# ---- the driver ------------------------------------------------------------------------------------------


def rewrite_to_fixed_point(fn: Function, rules: Sequence[Rule], *, config: Any = None,
                           max_sweeps: int = 64) -> Function:
    """Apply ``rules`` to ``fn`` (top level only), with DCE and CSE, until the function stops changing."""
    by_op: dict[str, list[Rule]] = {}
    for rule in rules:
        by_op.setdefault(rule.op, []).append(rule)
    region_texts = RegionTexts()  # the sweeps keep most regions as they are: each is printed once
    fn = cse(dce(fn), region_texts)
    for _ in range(max_sweeps):
        rewritten, changed = _sweep(fn, by_op, config)
        if not changed:
            return fn
        fn = cse(dce(rewritten), region_texts)
    return fn


def _sweep(fn: Function, by_op: Mapping[str, list[Rule]], config: Any) -> tuple[Function, bool]:
    mapping: dict[Value, Value] = {}
    producers: dict[Value, Op] = {}
    ops: list[Op] = []
    changed = False

    def resolve(v: Value) -> Value:
        return mapping.get(v, v)

    for op in fn.ops:
        operands = tuple(resolve(v) for v in op.operands)
        if any(a is not b for a, b in zip(operands, op.operands)):
            op = Op(op.name, operands, op.results, op.attrs, op.regions)
        for rule in by_op.get(op.name, []) + by_op.get("*", []):
            site = Site(op, producers, config)
            replacement = rule.rewrite(site)
            if replacement is None:
                continue
            values = replacement if isinstance(replacement, tuple) else (replacement,)
            _check_replacement(rule, op, values)
            for new_op in site.new_ops:
                ops.append(new_op)
                producers.update((r, new_op) for r in new_op.results)
            mapping.update(zip(op.results, values))
            changed = True
            break
        else:
            ops.append(op)
            producers.update((r, op) for r in op.results)
    return Function(fn.name, fn.params, tuple(ops), tuple(resolve(v) for v in fn.outputs), fn.metadata), changed


def _check_replacement(rule: Rule, op: Op, values: tuple[Value, ...]) -> None:
    if len(values) != len(op.results):
        raise AssertionError(f"rewrite rule {rule.rewrite.__name__} replaced {len(op.results)} results of "
                             f"'{op.name}' with {len(values)} values")
    for old, new in zip(op.results, values):
        if old.type.shape != new.type.shape or old.type.dtype != new.type.dtype:
            raise AssertionError(f"rewrite rule {rule.rewrite.__name__} replaced a {old.type} result of "
                                 f"'{op.name}' with a {new.type} value")


def dce(fn: Function) -> Function:
    """Drop ops none of whose results are used (every IR op is free of side effects)."""
    live = set(fn.outputs)
    kept: list[Op] = []
    for op in reversed(fn.ops):
        if any(r in live for r in op.results):
            kept.append(op)
            live.update(op.operands)
    if len(kept) == len(fn.ops):
        return fn
    return fn.with_ops(reversed(kept))


class RegionTexts:
    """The canonical text of each region seen, printed once: IR is immutable, so a region object prints the
    same every time (each is kept here, so its ``id`` is not reused meanwhile). CSE compares regions by this
    text, and a fixed-point rewrite runs CSE after every sweep over mostly unchanged kernels."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Function, str]] = {}

    def __call__(self, region: Function) -> str:
        known = self._texts.get(id(region))
        if known is None:
            known = self._texts[id(region)] = (region, print_function(region, canonical=True))
        return known[1]


def cse(fn: Function, region_texts: RegionTexts | None = None) -> Function:
    """Merge ops that compute the same thing (same op, operands, attributes and regions); ``region_texts``
    remembers the regions' texts across calls."""
    text_of = region_texts if region_texts is not None else RegionTexts()
    seen: dict[tuple, Op] = {}
    mapping: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in fn.ops:
        operands = tuple(mapping.get(v, v) for v in op.operands)
        if any(a is not b for a, b in zip(operands, op.operands)):
            op = Op(op.name, operands, op.results, op.attrs, op.regions)
        key = (op.name, tuple(id(v) for v in operands), tuple((k, exact_key(v)) for k, v in op.attrs.items()),
               tuple(text_of(r) for r in op.regions))
        if key in seen:
            mapping.update(zip(op.results, seen[key].results))
            continue
        seen[key] = op
        ops.append(op)
    if not mapping:
        return fn
    return Function(fn.name, fn.params, tuple(ops), tuple(mapping.get(v, v) for v in fn.outputs), fn.metadata)


def exact_key(value: Any) -> Any:
    """An attribute value as a dict key that tells apart what ``==`` does not: -0.0 from 0.0, 1.0 from 1 and
    True, NaN from itself (full(-0.0) and full(0.0) are different constants)."""
    if isinstance(value, float):
        return (float, value.hex())
    if isinstance(value, tuple):
        return tuple(exact_key(v) for v in value)
    return (type(value), value)


def map_regions(fn: Function, transform: Callable[[Function], Function]) -> Function:
    """``fn`` with ``transform`` applied to the region of every op that owns one (top level only)."""
    if not any(op.regions for op in fn.ops):
        return fn
    ops = [
        Op(op.name, op.operands, op.results, op.attrs, tuple(transform(r) for r in op.regions)) if op.regions else op
        for op in fn.ops
    ]
    return fn.with_ops(ops)


def is_constant(op: Op | None) -> bool:
    return op is not None and REGISTRY.get(op.name).category is Category.CONSTANT
