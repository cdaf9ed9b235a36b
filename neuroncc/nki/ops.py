"""Math operators the ISA instructions take as ``op`` arguments: ALU ops and activation functions.

Real NKI passes ``nl`` functions as operators (``nisa.tensor_tensor(..., op=nl.add)``,
``nisa.activation(op=nl.exp, ...)``). Each ``nl`` function that can serve as one carries its operator
name in a ``__nki_op__`` attribute; numpy ufuncs (``np.add``) are accepted too, as AWS's simulator does.
The two tables below are the whole semantics: one row per operator, computed in float32 (or int64 when
every operand is integral), the way the engines compute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from neuroncc.nki.errors import NKISimulationError


@dataclass(frozen=True, slots=True)
class AluOp:
    """A binary ALU operator of VectorE / GpSimdE (and ScalarE's tensor_scalar)."""

    name: str
    apply: Callable[[np.ndarray, np.ndarray], np.ndarray]
    reduce: Callable[..., np.ndarray] | None  # for tensor_reduce; None if the op cannot reduce
    kind: str  # "arith" | "compare" | "bitvec"


@dataclass(frozen=True, slots=True)
class ActivationFn:
    """A ScalarE activation function, applied elementwise after ``data * scale + bias``."""

    name: str
    apply: Callable[[np.ndarray], np.ndarray]


ALU_OPS: dict[str, AluOp] = {op.name: op for op in (
    AluOp("add", np.add, np.add.reduce, "arith"),                  # x + y
    AluOp("subtract", np.subtract, None, "arith"),                 # x - y
    AluOp("multiply", np.multiply, np.multiply.reduce, "arith"),   # x * y
    AluOp("divide", np.true_divide, None, "arith"),                # x / y (true division, also for ints)
    AluOp("maximum", np.maximum, np.maximum.reduce, "arith"),      # max(x, y)
    AluOp("minimum", np.minimum, np.minimum.reduce, "arith"),      # min(x, y)
    AluOp("power", np.power, None, "arith"),                       # x ** y
    AluOp("equal", np.equal, None, "compare"),                     # x == y  (1 or 0)
    AluOp("not_equal", np.not_equal, None, "compare"),             # x != y
    AluOp("greater", np.greater, None, "compare"),                 # x > y
    AluOp("greater_equal", np.greater_equal, None, "compare"),     # x >= y
    AluOp("less", np.less, None, "compare"),                       # x < y
    AluOp("less_equal", np.less_equal, None, "compare"),           # x <= y
    AluOp("bitwise_and", np.bitwise_and, np.bitwise_and.reduce, "bitvec"),  # x & y (integers only)
    AluOp("bitwise_or", np.bitwise_or, np.bitwise_or.reduce, "bitvec"),     # x | y
    AluOp("bitwise_xor", np.bitwise_xor, np.bitwise_xor.reduce, "bitvec"),  # x ^ y
    AluOp("left_shift", np.left_shift, None, "bitvec"),            # x << y (integers only)
    AluOp("right_shift", np.right_shift, None, "bitvec"),          # x >> y (arithmetic: sign-filling)
)}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf; Abramowitz & Stegun 7.1.26 in float64 (|error| < 1.5e-7) is below float32 noise.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (np.sign(x) * (1.0 - poly * np.exp(-z * z))).astype(x.dtype)


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))).astype(x.dtype)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))).astype(x.dtype)


ACTIVATIONS: dict[str, ActivationFn] = {fn.name: fn for fn in (
    ActivationFn("copy", lambda x: x),                               # identity (nl.copy)
    ActivationFn("exp", np.exp),                                     # e^x
    ActivationFn("log", np.log),                                     # ln x
    ActivationFn("sqrt", np.sqrt),                                   # sqrt x
    ActivationFn("rsqrt", lambda x: 1.0 / np.sqrt(x)),               # 1 / sqrt x
    ActivationFn("tanh", np.tanh),                                   # tanh x
    ActivationFn("sigmoid", _sigmoid),                               # 1 / (1 + e^-x)
    ActivationFn("relu", lambda x: np.maximum(x, 0).astype(x.dtype)),  # max(x, 0)
    ActivationFn("gelu", _gelu),                                     # x * Phi(x), erf form
    ActivationFn("gelu_apprx_tanh", _gelu_tanh),                     # tanh approximation of gelu
    ActivationFn("silu", lambda x: x * _sigmoid(x)),                 # x * sigmoid(x)
    ActivationFn("square", np.square),                               # x^2
    ActivationFn("reciprocal", lambda x: 1.0 / x),                   # 1 / x
    ActivationFn("negative", np.negative),                           # -x
    ActivationFn("abs", np.abs),                                     # |x|
    ActivationFn("sin", np.sin),                                     # sin x
    ActivationFn("cos", np.cos),                                     # cos x
)}

# numpy ufuncs a kernel may pass instead of nl functions, by ufunc name.
_NUMPY_ALIASES = {"true_divide": "divide", "absolute": "abs", "power": "power"}


def _op_name(op: object) -> str | None:
    name = getattr(op, "__nki_op__", None)
    if name is not None:
        return str(name)
    if isinstance(op, np.ufunc):
        return _NUMPY_ALIASES.get(op.__name__, op.__name__)
    if isinstance(op, (AluOp, ActivationFn)):
        return op.name
    return None


def resolve_alu(op: object, instruction: str, role: str = "op") -> AluOp:
    """The ALU operator ``op`` names (an nl function, numpy ufunc or AluOp), or a typed error."""
    name = _op_name(op)
    if name is None or name not in ALU_OPS:
        raise NKISimulationError(f"{instruction} {role} {_describe(op)} is not a supported ALU operator; "
                                 f"expected one of {', '.join(ALU_OPS)}")
    return ALU_OPS[name]


def resolve_activation(op: object, instruction: str = "activation") -> ActivationFn:
    """The activation function ``op`` names, or a typed error."""
    name = _op_name(op)
    if name is None or name not in ACTIVATIONS:
        raise NKISimulationError(f"{instruction} op {_describe(op)} is not a supported activation function; "
                                 f"expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _describe(op: object) -> str:
    name = _op_name(op) or getattr(op, "__name__", None)
    return repr(name) if name else repr(op)
