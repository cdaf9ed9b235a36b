"""The verifier: the IR's validity rules, checked between passes.

Rules: every operand is defined before its use (regions see only their own parameters and values); no value
is defined twice; every op is registered, its operand count and attributes fit its definition, and its
declared result types match what its type rule infers (strides may differ: layout is an annotation);
a ``kernel`` region's parameters match the op's operands; facts about parameters (``ir/signs.py``) name float
parameters of fitting shapes. Errors name the op and the value as printed.
"""

from __future__ import annotations

from collections.abc import Callable

from neuroncc.errors import TypeInferenceError, VerifyError
from neuroncc.ir.graph import Function, Op, Value, value_names
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.signs import fact_errors


class OpVerifyError(VerifyError):
    """A :class:`VerifyError` that knows which op broke the rule (the parser uses it for locations)."""

    def __init__(self, message: str, op: Op | None = None):
        super().__init__(message)
        self.op = op


def verify(fn: Function) -> None:
    """Raise :class:`VerifyError` if ``fn`` breaks an IR rule; return None otherwise."""
    _verify(fn, _Names(fn), defined=set(), where=lambda: f"func @{fn.name}", everywhere=set())
    _verify_donated(fn)
    for scope in [fn, *(region for op in fn.walk() for region in op.regions)]:
        for error in fact_errors(scope):
            raise VerifyError(f"func @{fn.name}{'' if scope is fn else f' region {scope.name}'}: {error}")


def _verify_donated(fn: Function) -> None:
    """``donated = ((output, param), ...)``: each output and each parameter at most once, of one shape and
    dtype (the output is stored into the parameter's tensor; see :class:`Function`)."""
    pairs = fn.metadata.get("donated", ())
    if not isinstance(pairs, tuple):
        raise VerifyError(f"func @{fn.name}: donated must be a list of (output, parameter) pairs")
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2 or not all(type(i) is int for i in pair):
            raise VerifyError(f"func @{fn.name}: donated pair {pair} is not (output, parameter)")
    outputs, params = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    for pair in pairs:
        output, param = pair
        if not (0 <= output < len(fn.outputs) and 0 <= param < len(fn.params)):
            raise VerifyError(f"func @{fn.name}: donated pair {pair} names no output or no parameter")
        have, want = fn.outputs[output].type, fn.params[param].type
        if (have.shape, have.dtype) != (want.shape, want.dtype):
            raise VerifyError(f"func @{fn.name}: output #{output} ({have}) cannot be donated parameter #{param}'s "
                              f"buffer ({want})")
        if outputs.count(output) > 1 or params.count(param) > 1:
            raise VerifyError(f"func @{fn.name}: donated pair {pair}: an output or a parameter appears twice")


class _Names:
    """``names(value)``: the value's name as ``fn`` prints, found on first use (only error messages need
    names, and finding them costs as much as printing the function)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.names: dict[Value, str] | None = None

    def __call__(self, value: Value) -> str:
        if self.names is None:
            self.names = value_names(self.fn)
        return self.names.get(value, f"<value of type {value.type}>")


def _verify(fn: Function, names: _Names, defined: set[Value], where: Callable[[], str],
            everywhere: set[Value]) -> None:
    """``defined``: the values visible in this scope; ``everywhere``: every value defined so far, regions included
    (a value is defined exactly once in the whole function, or printing gives two definitions one name);
    ``where()``: the scope as error messages name it (built only for a message)."""
    def define(value: Value, op: Op | None) -> None:
        if value in everywhere:
            raise OpVerifyError(f"{where()}: value {names(value)} is defined twice", op)
        defined.add(value)
        everywhere.add(value)

    def label_of(op: Op) -> str:
        label = f"{where()}: op '{op.name}'"
        return label + f" defining {', '.join(names(r) for r in op.results)}" if op.results else label

    for param in fn.params:
        define(param, None)
    for op in fn.ops:
        for index, operand in enumerate(op.operands):
            if operand not in defined:
                raise OpVerifyError(
                    f"{label_of(op)}: operand #{index} {names(operand)} is not defined before its use", op
                )
        if op.name not in REGISTRY:
            raise OpVerifyError(f"{where()}: unknown op '{op.name}'", op)
        opdef = REGISTRY.get(op.name)
        for region in op.regions:
            _verify(region, names, defined=set(), where=lambda op=op: f"{label_of(op)} region", everywhere=everywhere)
        try:
            attrs = opdef.normalize_attrs(op.attrs)
            if attrs != op.attrs:
                missing = sorted(set(attrs) - set(op.attrs))
                raise TypeInferenceError(f"attributes are not normalized (missing {missing})")
            inferred = opdef.infer_types(tuple(v.type for v in op.operands), attrs, op.regions)
        except TypeInferenceError as exc:
            raise OpVerifyError(f"{label_of(op)}: {exc}", op) from None
        if len(inferred) != len(op.results):
            raise OpVerifyError(f"{label_of(op)}: has {len(op.results)} results but the op produces {len(inferred)}",
                                op)
        for result, want in zip(op.results, inferred):
            have = result.type
            if have.shape != want.shape or have.dtype != want.dtype:
                raise OpVerifyError(
                    f"{label_of(op)}: result {names(result)} is declared {have} but the op produces {want}", op
                )
        for result in op.results:
            define(result, op)
    for index, output in enumerate(fn.outputs):
        if output not in defined:
            raise OpVerifyError(f"{where()}: returned value #{index} {names(output)} is not defined", None)
