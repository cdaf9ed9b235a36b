"""Lifted floats' stand-ins that notice being looked at: the guards a lifted program holds for.

The device builds a call's program with stand-in values in the place of its Python floats (programs.py,
"Lifting") and serves every later value of them with that one kernel. Code that branches in Python on such a
float -- a decomposition's ``if beta == 0: return product`` (addmv, baddbmm, addbmm), a lowering's
``if exponent == 3`` (bf16 ``pow``) -- takes the stand-in's path, and the kernel was wrong for the values that
take the other one (``torch.baddbmm(torch.empty(...), q, k, beta=0.0)``: NaN where eager gives the product).

A :class:`StandIn` is the stand-in float itself; arithmetic on it gives stand-ins, and each comparison, ``bool``
or integer conversion of one is recorded with its outcome. Those outcomes are the lifted program's
:class:`Guards`: a call whose real floats decide every recorded question the same way traces the same program,
so the kernel serves it; any other call is built with its real floats (entries.py). The floats reach the
front end's lowerings as FX arguments (the stand-ins themselves) and its decompositions through the
dispatcher, which passes plain floats: :func:`watching_table` hands each decomposition the stand-in of an
argument equal to a sentinel. Not seen: branches in C++ kernels, and Python code that converts the float
first (``float(x)``, ``math.isnan``).

A stand-in also says how it is derived from the call's floats, as data (an :data:`Expression`): arithmetic on
stand-ins records what it computed (``0.5 * beta``, ``1 - eps``, ``alpha * scale``). A constant such a derivation
puts into the program is lifted too (programs.py): a kernel argument computed per call by :func:`evaluate`, in
double precision as the decomposition computed it, where it was a constant built into one kernel per value
(session 47: ``celu``, ``smooth_l1_loss``, ``huber_loss``, ``logit``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch._prims_common as _prims_common

Floats = Sequence[float]
#: how a value follows from a call's floats: ``("float", k)`` is float ``k``, ``("number", v)`` the constant ``v``,
#: ``(method, operand, ...)`` float's arithmetic ``method`` (one of :data:`_BINARY`/:data:`_UNARY` and their
#: reflected forms) applied to the operands' values; tuples in memory, lists once read from JSON
Expression = tuple


class StandIn(float):
    """A stand-in float whose value is ``compute(floats)`` for a call's real floats (``expression``, as data)."""

    __slots__ = ("compute", "expression")

    def __new__(cls, value: float, expression: Expression) -> StandIn:
        self = super().__new__(cls, value)
        self.expression = expression
        self.compute = functools.partial(evaluate, expression)
        return self

    __hash__ = float.__hash__


def evaluate(expression: Expression | list[Any], floats: Floats) -> Any:
    """The value of ``expression`` for a call's ``floats`` (Python's float arithmetic: the decomposition's own;
    raises ArithmeticError where that raised, ``1.0 / 0.0``)."""
    kind = expression[0]
    if kind == "float":
        return floats[expression[1]]
    if kind == "number":
        return expression[1]
    left, *rights = (evaluate(operand, floats) for operand in expression[1:])
    return ARITHMETIC[kind](float(left), *rights)


def well_formed(expression: Any) -> bool:
    """Whether ``expression`` (as read from a file) is an :data:`Expression` :func:`evaluate` takes."""
    if not isinstance(expression, list | tuple) or not expression:
        return False
    kind = expression[0]
    if kind == "float":
        return len(expression) == 2 and type(expression[1]) is int and expression[1] >= 0
    if kind == "number":
        return len(expression) == 2 and type(expression[1]) in (int, float, bool)
    return kind in ARITHMETIC and len(expression) >= 2 and all(well_formed(e) for e in expression[1:])


def _python_type_of_stand_ins(original: Callable[[type], type]) -> Callable[[type], type]:
    """PyTorch's ``_prims_common._maybe_get_pytype`` (the Python number type of an argument's type, asked by
    ``is_weakly_lesser_type`` and ``get_higher_type``) answering ``float`` for a stand-in's type too.

    PyTorch's references check a number argument's Python type against the tensor's (``leaky_relu``'s
    ``negative_slope``, ``elu``'s ``alpha``, ``softplus``'s ``beta``, ``addcmul``'s ``value``, ``lerp``'s type
    promotion): a stand-in, a float subclass, failed it ("Expected builtin numeric types"), the lifted build
    failed, and each of those ops compiled one kernel per value of its float (session 46). Every other type
    is answered as before."""
    if getattr(original, "sees_stand_ins", False):
        return original

    def python_type(typ: type) -> type:
        return float if typ is StandIn else original(typ)

    python_type.sees_stand_ins = True  # type: ignore[attr-defined]
    return python_type


_prims_common._maybe_get_pytype = _python_type_of_stand_ins(_prims_common._maybe_get_pytype)


def _compute(value: Any) -> Callable[[Floats], Any]:
    if isinstance(value, StandIn):
        return value.compute
    return lambda floats: value


def _expression(value: Any) -> Expression:
    if isinstance(value, StandIn):
        return value.expression
    return ("number", float(value) if isinstance(value, float) else value)  # (numpy's float64: a float)


def _arithmetic(name: str) -> Callable[..., Any]:
    method = ARITHMETIC[name]

    def apply(self: StandIn, *other: Any) -> Any:
        result = method(float(self), *[float(o) if isinstance(o, StandIn) else o for o in other])
        if not isinstance(result, float) or not _RECORDER.active or \
                not all(isinstance(o, int | float) for o in other):
            return result
        derived = StandIn(result, (name, self.expression, *[_expression(o) for o in other]))
        _RECORDER.derived.setdefault(result, []).append(derived)
        return derived

    return apply


def _question(method: Callable[..., Any]) -> Callable[..., Any]:
    def ask(self: StandIn, *other: Any) -> Any:
        result = method(float(self), *[float(o) if isinstance(o, StandIn) else o for o in other])
        if result is NotImplemented:
            return result
        left, rights = self.compute, [_compute(o) for o in other]
        _RECORDER.record(lambda floats: method(left(floats), *[r(floats) for r in rights]), result)
        return result

    return ask


#: float's number protocol by its methods' names: arithmetic (each with its reflected form) gives stand-ins,
#: questions (comparisons, conversions) are recorded with their answers
_BINARY = ("__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__pow__")
_UNARY = ("__neg__", "__pos__", "__abs__")
_QUESTIONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__int__", "__trunc__",
              "__floor__", "__ceil__", "__round__")
#: the arithmetic an :data:`Expression` may name, by name
ARITHMETIC: dict[str, Callable[..., Any]] = {
    name: getattr(float, name) for name in (*_BINARY, *("__r" + m[2:] for m in _BINARY), *_UNARY)}
for _name in ARITHMETIC:
    setattr(StandIn, _name, _arithmetic(_name))
for _method in _QUESTIONS:
    setattr(StandIn, _method, _question(getattr(float, _method)))


class Guards(tuple):
    """The recorded questions and their answers: ``holds(floats)`` says whether a call's floats answer them
    all the same way (and so trace the same program)."""

    def holds(self, floats: Floats) -> bool:
        try:
            return all(ask(floats) == answer for ask, answer in self)
        except (ArithmeticError, ValueError, OverflowError):
            return False


class _Recorder(threading.local):
    def __init__(self) -> None:
        self.active = False
        self.questions: list[tuple[Callable[[Floats], Any], Any]] = []
        self.by_value: dict[float, StandIn] = {}
        #: every stand-in arithmetic made, by its value (a build's derived constants: programs._lift)
        self.derived: dict[float, list[StandIn]] = {}

    def record(self, ask: Callable[[Floats], Any], answer: Any) -> None:
        if self.active:
            self.questions.append((ask, answer))


_RECORDER = _Recorder()


def stand_ins(values: Sequence[float]) -> list[StandIn]:
    """The stand-ins of a call's floats, ``values`` being the sentinel values (programs.sentinels)."""
    return [StandIn(value, ("float", index)) for index, value in enumerate(values)]


class watching:
    """Records the questions asked of ``values`` (stand-ins) while a program is built; ``guards`` after."""

    def __init__(self, values: Sequence[StandIn]):
        self.values = values
        self.guards = Guards()
        #: the stand-ins arithmetic on them made, by value (programs._lift lifts the constants holding them)
        self.derived: dict[float, list[StandIn]] = {}

    def __enter__(self) -> watching:
        if _RECORDER.active:
            raise RuntimeError("nested stand-in recording")
        self.derived = {}  # (filled as the build makes them)
        _RECORDER.active, _RECORDER.questions, _RECORDER.derived = True, [], self.derived
        _RECORDER.by_value = {float(v): v for v in self.values}
        return self

    def __exit__(self, *exc: Any) -> None:
        self.guards = Guards(_RECORDER.questions)
        _RECORDER.active, _RECORDER.questions, _RECORDER.by_value, _RECORDER.derived = False, [], {}, {}


def plain(value: Any) -> Any:
    """``value`` as a plain float if it is a stand-in (for lookups that must not count as questions)."""
    return float(value) if isinstance(value, StandIn) else value


def _with_stand_ins(value: Any) -> Any:
    if type(value) is float:
        return _RECORDER.by_value.get(value, value)
    if isinstance(value, list | tuple) and any(type(v) is float for v in value):
        return type(value)(_RECORDER.by_value.get(v, v) if type(v) is float else v for v in value)
    return value


def _watched(decomposition: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(decomposition)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not _RECORDER.active or not _RECORDER.by_value:
            return decomposition(*args, **kwargs)
        return decomposition(*[_with_stand_ins(a) for a in args],
                             **{k: _with_stand_ins(v) for k, v in kwargs.items()})

    return call


def watching_table(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``table`` whose decompositions see a lifted float's stand-in (the dispatcher hands them plain floats)."""
    return {op: _watched(fn) for op, fn in table.items()}
