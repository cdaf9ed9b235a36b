"""``nki.language`` math: elementwise ops, reductions, matmul, transpose and broadcast_to.

Each function allocates its result (SBUF unless ``buffer=`` says otherwise; matmul and transpose return
PSUM tiles, as in NKI) and lowers to the ISA instruction NKI's compiler would pick:

- binary ops: tensor_tensor for two same-shaped tiles, tensor_scalar when one side is a number or a
  per-partition ``(P, 1)`` column, a broadcast copy first for other broadcasts;
- unary ops: activation on ScalarE;
- sum / max / min: tensor_reduce; mean adds a tensor_scalar to divide;
- matmul: nc_matmul (plus nc_transpose and a copy when ``transpose_x`` is False).

Every function that may serve as an ISA ``op`` argument carries its operator name in ``__nki_op__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from neuroncc.nki import isa_compute, isa_movement, isa_tensor_engine, ops, validate
from neuroncc.nki.allocate import allocate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import DType, bool_, dtype_of, float32, promote
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import emit, operand, write
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine

F = TypeVar("F", bound=Callable[..., object])
TileOrNumber = Tensor | float | int


def nki_op(name: str) -> Callable[[F], F]:
    """Mark an nl function as usable as the ISA operator ``name`` (``nisa.tensor_tensor(op=nl.add)``)."""
    def mark(fn: F) -> F:
        fn.__nki_op__ = name  # type: ignore[attr-defined]
        return fn
    return mark


def _new_tile(shape: tuple[int, ...], dtype: DType, buffer: object) -> Tensor:
    return allocate("ndarray", shape, dtype, buffer, transient=True)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def _is_column(value: Tensor, partitions: int) -> bool:
    return value.shape[0] == partitions and value.free_size == 1


# --------------------------------------------------------------------------------- binary
def _binary(name: str, x: TileOrNumber, y: TileOrNumber, dtype: object, buffer: object,
            mask: object = None) -> Tensor | float:
    alu = ops.ALU_OPS[name]
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        return float(alu.apply(np.float32(x), np.float32(y)))
    tiles = [v for v in (x, y) if isinstance(v, Tensor)]
    for role, value in zip(("x", "y"), (x, y)):
        if not isinstance(value, Tensor) and not _is_number(value):
            raise NKISimulationError(f"{name} {role} must be a tile or a number, got {type(value).__name__}")
    natural = tiles[0].dtype if len(tiles) == 1 else promote(tiles[0].dtype, tiles[1].dtype)
    float_number = any(isinstance(v, (float, np.floating)) for v in (x, y))
    if alu.kind == "compare":
        natural = bool_
    elif not natural.is_float and (name == "divide" or float_number):
        natural = float32  # an integer tile divided, or combined with a float, gives floats (as numpy)
    result_dtype = natural if dtype is None else dtype_of(dtype)
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        if x.shape == y.shape:
            return isa_compute.tensor_tensor(_new_tile(x.shape, result_dtype, buffer), x, y, op=alu, mask=mask)
        if x.ndim == y.ndim and _is_column(y, x.shape[0]):
            return isa_compute.tensor_scalar(_new_tile(x.shape, result_dtype, buffer), x, alu, y, mask=mask)
        if x.ndim == y.ndim and _is_column(x, y.shape[0]):
            return isa_compute.tensor_scalar(_new_tile(y.shape, result_dtype, buffer), y, alu, x, reverse0=True,
                                             mask=mask)
        if x.shape[0] == y.shape[0] and x.free_size == 1 and y.ndim != x.ndim:
            return isa_compute.tensor_scalar(_new_tile(y.shape, result_dtype, buffer), y, alu, x, reverse0=True,
                                             mask=mask)
        if x.shape[0] == y.shape[0] and y.free_size == 1 and y.ndim != x.ndim:
            return isa_compute.tensor_scalar(_new_tile(x.shape, result_dtype, buffer), x, alu, y, mask=mask)
        shape = _broadcast_shape(name, x.shape, y.shape)
        x = x if x.shape == shape else broadcast_to(x, shape)
        y = y if y.shape == shape else broadcast_to(y, shape)
        return isa_compute.tensor_tensor(_new_tile(shape, result_dtype, buffer), x, y, op=alu, mask=mask)
    if isinstance(x, Tensor):
        return isa_compute.tensor_scalar(_new_tile(x.shape, result_dtype, buffer), x, alu, y, mask=mask)
    assert isinstance(y, Tensor)
    return isa_compute.tensor_scalar(_new_tile(y.shape, result_dtype, buffer), y, alu, x, reverse0=True, mask=mask)


def _broadcast_shape(name: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise NKISimulationError(f"{name} operands of shapes {a} and {b} do not broadcast") from None


@nki_op("add")
def add(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x + y`` elementwise."""
    return _binary("add", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("subtract")
def subtract(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x - y`` elementwise."""
    return _binary("subtract", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("multiply")
def multiply(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x * y`` elementwise."""
    return _binary("multiply", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("divide")
def divide(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x / y`` elementwise."""
    return _binary("divide", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("maximum")
def maximum(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``max(x, y)`` elementwise."""
    return _binary("maximum", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("minimum")
def minimum(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``min(x, y)`` elementwise."""
    return _binary("minimum", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("power")
def power(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x ** y`` elementwise."""
    return _binary("power", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("equal")
def equal(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x == y`` elementwise (bool_ tile unless ``dtype`` is given)."""
    return _binary("equal", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("not_equal")
def not_equal(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x != y`` elementwise."""
    return _binary("not_equal", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("greater")
def greater(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x > y`` elementwise."""
    return _binary("greater", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("greater_equal")
def greater_equal(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x >= y`` elementwise."""
    return _binary("greater_equal", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("less")
def less(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x < y`` elementwise."""
    return _binary("less", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("less_equal")
def less_equal(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x <= y`` elementwise."""
    return _binary("less_equal", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("bitwise_and")
def bitwise_and(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x & y`` elementwise on integer tiles."""
    return _binary("bitwise_and", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("bitwise_or")
def bitwise_or(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x | y`` elementwise on integer tiles."""
    return _binary("bitwise_or", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("bitwise_xor")
def bitwise_xor(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None, mask: object = None,
        **_hints: object) -> Tensor:
    """``x ^ y`` elementwise on integer tiles."""
    return _binary("bitwise_xor", x, y, dtype, buffer, mask)  # type: ignore[return-value]


@nki_op("left_shift")
def left_shift(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None) -> Tensor:
    """``x << y`` elementwise on integer tiles."""
    return _binary("left_shift", x, y, dtype, buffer)  # type: ignore[return-value]


@nki_op("right_shift")
def right_shift(x: TileOrNumber, y: TileOrNumber, dtype: object = None, buffer: object = None) -> Tensor:
    """``x >> y`` elementwise on integer tiles (arithmetic: a negative value stays negative)."""
    return _binary("right_shift", x, y, dtype, buffer)  # type: ignore[return-value]


# --------------------------------------------------------------------------------- unary (ScalarE)
def _unary(name: str, x: Tensor, dtype: object, buffer: object, mask: object = None) -> Tensor:
    x = validate.tensor(name, "x", x)
    result = _new_tile(x.shape, x.dtype if dtype is None else dtype_of(dtype), buffer)
    return isa_compute.activation(result, ops.ACTIVATIONS[name], x, mask=mask)


def _make_unary(name: str, doc: str) -> Callable[..., Tensor]:
    def unary(x: Tensor, dtype: object = None, buffer: object = None, mask: object = None,
              **_hints: object) -> Tensor:
        return _unary(name, x, dtype, buffer, mask)
    unary.__name__ = unary.__qualname__ = name
    unary.__doc__ = f"{doc} elementwise (an activation instruction on ScalarE)."
    return nki_op(name)(unary)


exp = _make_unary("exp", "e^x")
log = _make_unary("log", "Natural log")
sqrt = _make_unary("sqrt", "Square root")
rsqrt = _make_unary("rsqrt", "1 / sqrt(x)")
tanh = _make_unary("tanh", "tanh")
sigmoid = _make_unary("sigmoid", "1 / (1 + e^-x)")
relu = _make_unary("relu", "max(x, 0)")
gelu = _make_unary("gelu", "GELU (erf form)")
gelu_apprx_tanh = _make_unary("gelu_apprx_tanh", "GELU (tanh approximation)")
silu = _make_unary("silu", "x * sigmoid(x)")
square = _make_unary("square", "x^2")
reciprocal = _make_unary("reciprocal", "1 / x")
negative = _make_unary("negative", "-x")
abs = _make_unary("abs", "|x|")  # noqa: A001 - NKI's name
sin = _make_unary("sin", "sin")
cos = _make_unary("cos", "cos")


# --------------------------------------------------------------------------------- reductions
def _reduce(name: str, op_name: str, x: Tensor, axis: int | Sequence[int], dtype: object, keepdims: bool,
            buffer: object, mask: object = None) -> Tensor:
    """One tensor_reduce. Reduced axes that are not the trailing ones (``nl.max(t, axis=[2, 4])``) are moved
    last by a permuted view of ``x`` (no copy), since the instruction reduces trailing free axes only."""
    x = validate.tensor(name, "x", x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted(int(a) + x.ndim if int(a) < 0 else int(a) for a in axes))
    kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    if not keepdims:
        dropped = tuple(n for i, n in enumerate(x.shape) if i not in axes)
        kept = dropped if len(dropped) >= 2 else kept  # an on-chip tile keeps a free dim
    result = _new_tile(kept, x.dtype if dtype is None else dtype_of(dtype), buffer)
    trailing = tuple(range(x.ndim - len(axes), x.ndim))
    if axes != trailing and 0 not in axes and mask is None:
        order = [i for i in range(x.ndim) if i not in axes] + list(axes)
        x = Tensor(x.storage, x.layout, x.offset, tuple(x.axes[i] for i in order))
        axes = trailing
    return isa_compute.tensor_reduce(result, ops.ALU_OPS[op_name], x, axis=axes, keepdims=keepdims, mask=mask)


@nki_op("add")
def sum(x: Tensor, axis: int | Sequence[int], dtype: object = None, keepdims: bool = False,  # noqa: A001
        buffer: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Sum along free ``axis`` (tensor_reduce). A 2-D tile reduced to one column stays ``(P, 1)``."""
    return _reduce("sum", "add", x, axis, dtype, keepdims, buffer, mask)


@nki_op("maximum")
def max(x: Tensor, axis: int | Sequence[int], dtype: object = None, keepdims: bool = False,  # noqa: A001
        buffer: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Maximum along free ``axis`` (tensor_reduce)."""
    return _reduce("max", "maximum", x, axis, dtype, keepdims, buffer, mask)


@nki_op("minimum")
def min(x: Tensor, axis: int | Sequence[int], dtype: object = None, keepdims: bool = False,  # noqa: A001
        buffer: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Minimum along free ``axis`` (tensor_reduce)."""
    return _reduce("min", "minimum", x, axis, dtype, keepdims, buffer, mask)


def mean(x: Tensor, axis: int | Sequence[int], dtype: object = None, keepdims: bool = False,
         buffer: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Mean along free ``axis``: a tensor_reduce sum, then a tensor_scalar multiply by 1/n."""
    x = validate.tensor("mean", "x", x)
    result_dtype = (x.dtype if x.dtype.is_float else float32) if dtype is None else dtype_of(dtype)
    total = _reduce("mean", "add", x, axis, float32, keepdims, buffer, mask)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    count = 1
    for a in axes:
        count *= x.shape[int(a)]
    return isa_compute.tensor_scalar(_new_tile(total.shape, result_dtype, buffer), total, ops.ALU_OPS["multiply"],
                                     1.0 / count)


# --------------------------------------------------------------------------------- matmul, layout
def matmul(x: Tensor, y: Tensor, transpose_x: bool = False, mask: object = None, **_hints: object) -> Tensor:
    """``x @ y`` (``x.T @ y`` with ``transpose_x=True``) into a new float32 PSUM tile.

    TensorE contracts over partitions and reads SBUF only, so this high-level call arranges its operands
    the way NKI's compiler does: without ``transpose_x`` it first transposes ``x`` (nc_transpose to PSUM,
    tensor_copy back to SBUF), and an operand still in PSUM (say, the result of ``nl.transpose``) is copied
    to SBUF first. Pass ``x`` pre-transposed in SBUF with ``transpose_x=True`` to skip all of that.
    """
    x = validate.tensor("matmul", "x", x)
    y = validate.tensor("matmul", "y", y)
    # TensorE does not mix a 4-byte operand with a narrower one; the high-level call converts to the wider.
    common = float32 if 4 in (x.dtype.itemsize, y.dtype.itemsize) else None
    stationary = x
    if not transpose_x:
        flipped = transpose(_in_sbuf(x) if x.buffer is Buffer.PSUM else x)
        stationary = isa_movement.tensor_copy(_new_tile((x.free_size, x.shape[0]), common or x.dtype, Buffer.SBUF),
                                              flipped)
    stationary = _in_sbuf(stationary, common)
    moving = _in_sbuf(y, common)
    result = _new_tile((stationary.shape[-1], moving.shape[-1]), float32, Buffer.PSUM)
    return isa_tensor_engine.nc_matmul(result, stationary, moving, mask=mask)


def _in_sbuf(x: Tensor, dtype: DType | None = None) -> Tensor:
    """``x`` itself in SBUF (as ``dtype``), else a copy of it there (the copy NKI's compiler adds for a PSUM
    operand, or a conversion)."""
    if x.buffer is Buffer.SBUF and (dtype is None or x.dtype == dtype):
        return x
    return isa_movement.tensor_copy(_new_tile(x.shape, dtype or x.dtype, Buffer.SBUF), x)


def transpose(x: Tensor, dtype: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Swap partition and free axes of a 2-D tile: TensorE into PSUM for an SBUF tile (up to 128 x 128),
    VectorE into SBUF for a PSUM tile of at most 32 x 32."""
    x = validate.tensor("transpose", "x", x)
    on_tensor_engine = x.buffer is Buffer.SBUF
    result = _new_tile((x.free_size, x.shape[0]), x.dtype if dtype is None else dtype_of(dtype),
                       Buffer.PSUM if on_tensor_engine else Buffer.SBUF)
    return isa_tensor_engine.nc_transpose(result, x, mask=mask)


def broadcast_to(x: Tensor, shape: tuple[int, ...] | list[int], dtype: object = None, buffer: object = None,
                 **_hints: object) -> Tensor:
    """Copy ``x`` into a new tile of ``shape``, repeating its size-1 dimensions (numpy broadcasting).

    Costed as one tensor_copy of the result. Broadcasting across partitions (a ``(1, F)`` row to
    ``(P, F)``) is a copy on real hardware too; free-dim broadcasts may be free there.
    """
    context = current()
    x = validate.tensor("broadcast_to", "x", x)
    target = tuple(int(n) for n in shape)
    if _broadcast_shape("broadcast_to", x.shape, target) != target:
        raise NKISimulationError(f"broadcast_to cannot broadcast shape {x.shape} to {target}")
    validate.space("broadcast_to", "x", x, validate.ON_CHIP)
    validate.tile("broadcast_to", "x", x)
    result = _new_tile(target, x.dtype if dtype is None else dtype_of(dtype), buffer)
    validate.tile("broadcast_to", "dst", result)
    emit(context, "tensor_copy", Engine.VECTOR, (operand("src", x, "r"), operand("dst", result, "w")),
         broadcast=True)
    if context.numerics:
        write(result, np.broadcast_to(x.array(), target))
    return result



def where(condition: Tensor, x: TileOrNumber, y: TileOrNumber, dtype: object = None, mask: object = None,
          **_hints: object) -> Tensor:
    """``x`` where ``condition`` is non-zero, else ``y`` (tiles or numbers): ``y`` is copied into the result,
    then ``tensor_copy_predicated`` copies ``x`` over it where the condition holds."""
    condition = validate.tensor("where", "condition", condition)
    tiles = [v for v in (x, y) if isinstance(v, Tensor)]
    natural = tiles[0].dtype if tiles else float32
    kind = natural if dtype is None else dtype_of(dtype)
    result = _new_tile(condition.shape, kind, None)
    if isinstance(y, Tensor):
        isa_movement.tensor_copy(result, y if y.shape == condition.shape else broadcast_to(y, condition.shape),
                                 mask=mask)
    else:
        isa_movement.memset(result, y, mask=mask)
    source: TileOrNumber = x
    if isinstance(x, Tensor) and (x.dtype != kind or x.shape != condition.shape):
        source = isa_movement.tensor_copy(_new_tile(condition.shape, kind, None),
                                          x if x.shape == condition.shape else broadcast_to(x, condition.shape))
    predicate = condition
    if condition.dtype.kind not in ("uint", "bool"):
        predicate = isa_movement.tensor_copy(_new_tile(condition.shape, bool_, None), condition)
    return isa_movement.tensor_copy_predicated(result, source, predicate, mask=mask)
