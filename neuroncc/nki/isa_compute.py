"""Elementwise and reduction instructions of VectorE, ScalarE and GpSimdE.

tensor_tensor, tensor_scalar, scalar_tensor_tensor, tensor_reduce, activation (+ activation_reduce) and
reciprocal. ``op`` arguments take nl functions (``nl.add``, ``nl.exp``), numpy ufuncs or the op objects of
``neuroncc.nki.ops``.

Each takes NKI 0.2+'s arguments (``dst`` first) and NKI 0.1's (no ``dst``: the call returns a fresh result
tile, ``dtype=`` picks its type, ``mask=`` restricts it; see ``masking``). A 0.1 call is recognised by its
arguments - an operator or a missing ``dst`` where 0.2+ has a tile - and normalised before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neuroncc.nki import instructions, masking, ops, validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import dtype_of, promote
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import (
    compute_type, emit, engine, new_result, operand, pick_engine, read, reduce_cmd, scalar_or_vector, write,
)
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine

_GPSIMD_NO_PSUM = "GpSimd engine cannot access PSUM"


def _spaces_for(unit: Engine) -> tuple[tuple[Buffer, ...], str]:
    if unit is Engine.GPSIMD:
        return validate.SBUF, _GPSIMD_NO_PSUM
    return validate.ON_CHIP, ""


def _check_scalar_operand(op: str, role: str, value: object, partitions: int, allowed: tuple[Buffer, ...]) -> None:
    if isinstance(value, Tensor):
        validate.space(op, role, value, allowed)
        validate.tile(op, role, value)
        validate.vector_operand(op, role, value, partitions)
    elif not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
        raise NKISimulationError(f"{op} {role} must be a number or a tile of shape ({partitions}, 1), got {value!r}")


def _check_bitvec(op: str, alu: ops.AluOp, *values: object) -> None:
    """Bitwise operators treat elements as bit patterns: integer tiles (and integer numbers) only."""
    if alu.kind != "bitvec":
        return
    for value in values:
        if (isinstance(value, Tensor) and value.dtype.is_float) or isinstance(value, (float, np.floating)):
            raise NKISimulationError(f"{op} op '{alu.name}' needs integer operands, got {value!r}")


def _scalar_param(value: object) -> object:
    return "tile" if isinstance(value, Tensor) else value


def tensor_tensor(dst: Tensor | None = None, data1: Tensor | None = None, data2: Tensor | None = None,
                  op: object = None, engine: engine = engine.unknown, name: str | None = None,
                  dtype: object = None, mask: object = None) -> Tensor:
    """``dst = data1 <op> data2`` elementwise on VectorE (or GpSimdE); operands have the same shape."""
    if op is None and callable(data2):  # NKI 0.1: tensor_tensor(data1, data2, op, dtype=None)
        dst, data1, data2, op = None, dst, data1, data2
    elif data2 is None and isinstance(dst, Tensor) and isinstance(data1, Tensor) and op is not None:
        dst, data1, data2 = None, dst, data1  # NKI 0.1: tensor_tensor(a, b, op=...)
    if dst is None and isinstance(data1, Tensor) and isinstance(data2, Tensor):
        dst = new_result(data1.shape, dtype_of(dtype) if dtype else promote(data1.dtype, data2.dtype))
    if mask is not None:
        return masking.run_masked("tensor_tensor", mask, dst.shape, tensor_tensor, dst, dst=dst, data1=data1,
                                  data2=data2, op=op, engine=engine)
    context = current()
    dst = validate.tensor("tensor_tensor", "dst", dst)
    data1 = validate.tensor("tensor_tensor", "data1", data1)
    data2 = validate.tensor("tensor_tensor", "data2", data2)
    alu = ops.resolve_alu(op, "tensor_tensor")
    _check_bitvec("tensor_tensor", alu, data1, data2)
    unit = pick_engine(engine, Engine.VECTOR, (Engine.VECTOR, Engine.GPSIMD), "tensor_tensor")
    allowed, why = _spaces_for(unit)
    for role, value in (("data1", data1), ("data2", data2), ("dst", dst)):
        validate.space("tensor_tensor", role, value, allowed, why)
        validate.tile("tensor_tensor", role, value)
    validate.same_free_size("tensor_tensor", "data2", data2, data1.shape, "data1")
    validate.same_free_size("tensor_tensor", "dst", dst, data1.shape, "data1")
    psum_input = data1.buffer is Buffer.PSUM or data2.buffer is Buffer.PSUM
    emit(context, "tensor_tensor", unit,
         (operand("data1", data1, "r"), operand("data2", data2, "r"), operand("dst", dst, "w")),
         op=alu.name, psum_input=psum_input)
    if context.numerics:
        as_type = compute_type(data1, data2)
        with np.errstate(all="ignore"):
            result = alu.apply(read(data1, as_type), read(data2, as_type).reshape(data1.shape))
        write(dst, result)
    return dst


def tensor_scalar(dst: Tensor | None = None, data: Tensor | None = None, op0: object = None,
                  operand0: Tensor | float | None = None, reverse0: bool = False, op1: object = None,
                  operand1: Tensor | float | None = None, reverse1: bool = False,
                  engine: engine = engine.unknown, name: str | None = None, dtype: object = None,
                  mask: object = None) -> Tensor:
    """``dst = (data <op0> operand0) <op1> operand1``; operands are numbers or per-partition ``(P, 1)`` tiles.

    ``reverse0`` computes ``operand0 <op0> data`` instead (likewise ``reverse1``). VectorE unless
    ``engine`` picks ScalarE or GpSimdE; one or two operators cost the same.
    """
    if callable(data) and not isinstance(data, Tensor):  # NKI 0.1: tensor_scalar(data, op0, operand0, ...)
        # Only the leading arguments can have arrived positionally; the rest are keywords already in place.
        shifted_reverse = operand0 if isinstance(operand0, bool) else reverse0
        dst, data, op0, operand0, reverse0 = None, dst, data, op0, shifted_reverse
    elif data is None and isinstance(dst, Tensor) and op0 is not None:  # NKI 0.1: tensor_scalar(x, op0=...)
        dst, data = None, dst
    if dst is None and isinstance(data, Tensor):
        dst = new_result(data.shape, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        return masking.run_masked("tensor_scalar", mask, dst.shape, tensor_scalar, dst, dst=dst, data=data, op0=op0,
                                  operand0=operand0, reverse0=reverse0, op1=op1, operand1=operand1,
                                  reverse1=reverse1, engine=engine)
    context = current()
    dst = validate.tensor("tensor_scalar", "dst", dst)
    data = validate.tensor("tensor_scalar", "data", data)
    unit = pick_engine(engine, Engine.VECTOR, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), "tensor_scalar")
    allowed, why = _spaces_for(unit)
    validate.space("tensor_scalar", "data", data, allowed, why)
    validate.space("tensor_scalar", "dst", dst, allowed, why)
    validate.tile("tensor_scalar", "data", data)
    validate.tile("tensor_scalar", "dst", dst)
    validate.same_free_size("tensor_scalar", "dst", dst, data.shape, "data")
    steps = [(ops.resolve_alu(op0, "tensor_scalar", "op0"), operand0, reverse0)]
    _check_bitvec("tensor_scalar", steps[0][0], data, operand0)
    _check_scalar_operand("tensor_scalar", "operand0", operand0, data.shape[0], allowed)
    if op1 is not None or operand1 is not None:
        steps.append((ops.resolve_alu(op1, "tensor_scalar", "op1"), operand1, reverse1))
        _check_bitvec("tensor_scalar", steps[1][0], data, operand1)
        _check_scalar_operand("tensor_scalar", "operand1", operand1, data.shape[0], allowed)
    operands = [operand("data", data, "r")]
    operands += [operand(f"operand{i}", value, "r") for i, (_, value, _) in enumerate(steps) if isinstance(value, Tensor)]
    emit(context, "tensor_scalar", unit, (*operands, operand("dst", dst, "w")),
         op0=steps[0][0].name, operand0=_scalar_param(operand0),
         **({"op1": steps[1][0].name, "operand1": _scalar_param(operand1)} if len(steps) > 1 else {}))
    if context.numerics:
        as_type = compute_type(data, operand0, operand1)
        result = read(data, as_type)
        with np.errstate(all="ignore"):
            for alu, value, reverse in steps:
                scalar = scalar_or_vector(value, data.shape[0], as_type).reshape(
                    (data.shape[0],) + (1,) * (data.ndim - 1) if isinstance(value, Tensor) else ())
                result = alu.apply(scalar, result) if reverse else alu.apply(result, scalar)
        write(dst, result)
    return dst


def scalar_tensor_tensor(dst: Tensor | None = None, data: Tensor | None = None, op0: object = None,
                         operand0: Tensor | float | None = None, op1: object = None, operand1: Tensor | None = None,
                         reverse0: bool = False, reverse1: bool = False, name: str | None = None,
                         dtype: object = None, mask: object = None) -> Tensor:
    """``dst = (data <op0> operand0) <op1> operand1`` on VectorE: operand0 a number or ``(P, 1)`` tile,
    operand1 a full tile shaped like ``data``. Costs about one tensor_tensor."""
    if dst is None and isinstance(data, Tensor):  # NKI 0.1: keyword arguments, returns the result
        dst = new_result(data.shape, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        return masking.run_masked("scalar_tensor_tensor", mask, dst.shape, scalar_tensor_tensor, dst, dst=dst,
                                  data=data, op0=op0, operand0=operand0, op1=op1, operand1=operand1,
                                  reverse0=reverse0, reverse1=reverse1)
    context = current()
    dst = validate.tensor("scalar_tensor_tensor", "dst", dst)
    data = validate.tensor("scalar_tensor_tensor", "data", data)
    operand1 = validate.tensor("scalar_tensor_tensor", "operand1", operand1)
    for role, value in (("data", data), ("operand1", operand1), ("dst", dst)):
        validate.space("scalar_tensor_tensor", role, value, validate.ON_CHIP)
        validate.tile("scalar_tensor_tensor", role, value)
    _check_scalar_operand("scalar_tensor_tensor", "operand0", operand0, data.shape[0], validate.ON_CHIP)
    validate.same_free_size("scalar_tensor_tensor", "operand1", operand1, data.shape, "data")
    validate.same_free_size("scalar_tensor_tensor", "dst", dst, data.shape, "data")
    first = ops.resolve_alu(op0, "scalar_tensor_tensor", "op0")
    second = ops.resolve_alu(op1, "scalar_tensor_tensor", "op1")
    operands = [operand("data", data, "r"), operand("operand1", operand1, "r")]
    if isinstance(operand0, Tensor):
        operands.append(operand("operand0", operand0, "r"))
    psum_input = data.buffer is Buffer.PSUM or operand1.buffer is Buffer.PSUM
    emit(context, "scalar_tensor_tensor", Engine.VECTOR, (*operands, operand("dst", dst, "w")),
         op0=first.name, op1=second.name, psum_input=psum_input)
    if context.numerics:
        as_type = compute_type(data, operand0, operand1)
        x = read(data, as_type)
        scalar = scalar_or_vector(operand0, data.shape[0], as_type)
        if isinstance(operand0, Tensor):
            scalar = scalar.reshape((data.shape[0],) + (1,) * (data.ndim - 1))
        other = read(operand1, as_type).reshape(data.shape)
        with np.errstate(all="ignore"):
            partial = first.apply(scalar, x) if reverse0 else first.apply(x, scalar)
            result = second.apply(other, partial) if reverse1 else second.apply(partial, other)
        write(dst, result)
    return dst


def _reduction_axes(op: str, axis: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted(int(a) + ndim if int(a) < 0 else int(a) for a in axes))
    if not axes:
        raise NKISimulationError(f"{op} needs at least one reduction axis")
    if 0 in axes:
        raise NKISimulationError(f"{op} cannot reduce along the partition axis 0; reduce free axes only")
    if any(a >= ndim for a in axes):
        raise NKISimulationError(f"{op} axis {axes} out of range for a {ndim}-D tile")
    if axes != tuple(range(ndim - len(axes), ndim)):
        # NKI's tensor_reduce docs: "the last contiguous free dimension(s) of the tile" (nl.sum & co. permute).
        raise NKISimulationError(f"{op} axis {axes} must be the trailing free axes of the {ndim}-D tile")
    return axes


def tensor_reduce(dst: Tensor | None = None, op: object = None, data: Tensor | None = None,
                  axis: int | Sequence[int] = 1, negate: bool = False, keepdims: bool = False,
                  name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """Reduce ``data`` along trailing free ``axis`` with ``op`` (add, maximum, minimum, ...) on VectorE."""
    if callable(dst) and not isinstance(dst, Tensor):
        # NKI 0.1: tensor_reduce(op, data, axis, ...) returns the result; positional arguments arrive
        # shifted one slot to the right.
        shifted_axis = data if data is not None else axis
        op, data, axis, dst = dst, op, shifted_axis, None
    if dst is None and isinstance(data, Tensor):  # NKI 0.1 (also its keyword form op=, data=, axis=)
        axes = _reduction_axes("tensor_reduce", axis, data.ndim)
        kept = tuple(n for i, n in enumerate(data.shape) if i not in axes)
        if keepdims or len(kept) < 2:  # an on-chip result keeps a free dimension
            kept = tuple(1 if i in axes else n for i, n in enumerate(data.shape))
        dst = new_result(kept, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        restricted = masking.restriction("tensor_reduce", mask, data.shape)
        if restricted is None or restricted.empty:
            return dst
        if restricted.keep is not None:
            raise NKISimulationError("tensor_reduce: the mask must select a rectangle of the input (slice it instead)")
        reduced = tuple(1 if i in _reduction_axes("tensor_reduce", axis, data.ndim) else n
                        for i, n in enumerate(data.shape))
        part = masking.Restriction(reduced, tuple(slice(0, 1) if n == 1 else s
                                                  for s, n in zip(restricted.box, reduced)), None)
        target = dst[(part.box[0],) + (slice(None),) * (dst.ndim - 1)] if dst.shape != reduced else dst[part.box]
        tensor_reduce(dst=target, op=op, data=restricted.trim(data), axis=axis, negate=negate, keepdims=keepdims)
        return dst
    context = current()
    dst = validate.tensor("tensor_reduce", "dst", dst)
    data = validate.tensor("tensor_reduce", "data", data)
    alu = ops.resolve_alu(op, "tensor_reduce")
    if alu.reduce is None:
        raise NKISimulationError(f"tensor_reduce op '{alu.name}' cannot reduce; use add, multiply, maximum or minimum")
    _check_bitvec("tensor_reduce", alu, data)
    validate.space("tensor_reduce", "data", data, validate.ON_CHIP)
    validate.space("tensor_reduce", "dst", dst, validate.ON_CHIP)
    validate.tile("tensor_reduce", "data", data)
    validate.tile("tensor_reduce", "dst", dst)
    axes = _reduction_axes("tensor_reduce", axis, data.ndim)
    reduced = tuple(1 if i in axes else n for i, n in enumerate(data.shape))
    validate.same_free_size("tensor_reduce", "dst", dst, reduced, "reduced")
    emit(context, "tensor_reduce", Engine.VECTOR, (operand("data", data, "r"), operand("dst", dst, "w")),
         op=alu.name)
    if context.numerics:
        with np.errstate(all="ignore"):
            result = alu.reduce(read(data, compute_type(data)), axis=axes, keepdims=True)
            write(dst, -result if negate else result)
    return dst


def activation(dst: Tensor | None = None, op: object = None, data: Tensor | None = None,
               bias: Tensor | float | None = None, scale: Tensor | float = 1.0, reduce_op: object = None,
               reduce_res: Tensor | None = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
               name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """``dst = op(data * scale + bias)`` on ScalarE; ``scale``/``bias`` are numbers or ``(P, 1)`` tiles.

    With ``reduce_res`` (a ``(P, 1)`` tile) the activated values are also summed along the free axes into
    it in the same instruction (``reduce_op`` must be add); ``reduce_cmd=reduce_cmd.reduce`` adds that sum to
    what ``reduce_res`` holds instead of overwriting it. The simulator keeps no hidden ScalarE registers.
    """
    if callable(dst) and not isinstance(dst, Tensor):
        # NKI 0.1: activation(op, data, bias=None, scale=1.0, dtype=None) returns the result; positional
        # arguments arrive shifted one slot to the right.
        shifted_bias = data if data is not None else bias
        shifted_scale = bias if (data is not None and bias is not None) else scale
        op, data, bias, scale, dst = dst, op, shifted_bias, shifted_scale, None
    if dst is None and isinstance(data, Tensor):  # NKI 0.1 (also its keyword form op=, data=)
        dst = new_result(data.shape, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        return masking.run_masked("activation", mask, dst.shape, activation, dst, dst=dst, op=op, data=data,
                                  bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                                  reduce_cmd=reduce_cmd)
    context = current()
    dst = validate.tensor("activation", "dst", dst)
    data = validate.tensor("activation", "data", data)
    function = ops.resolve_activation(op)
    for role, value in (("data", data), ("dst", dst)):
        validate.space("activation", role, value, validate.ON_CHIP)
        validate.tile("activation", role, value)
    validate.same_free_size("activation", "dst", dst, data.shape, "data")
    partitions = data.shape[0]
    if bias is not None:
        _check_scalar_operand("activation", "bias", bias, partitions, validate.ON_CHIP)
    _check_scalar_operand("activation", "scale", scale, partitions, validate.ON_CHIP)
    operands = [operand("data", data, "r")]
    operands += [operand(role, value, "r") for role, value in (("bias", bias), ("scale", scale))
                 if isinstance(value, Tensor)]
    if reduce_res is not None:
        reduce_res = validate.tensor("activation", "reduce_res", reduce_res)
        if reduce_op is not None and ops.resolve_alu(reduce_op, "activation", "reduce_op").name != "add":
            raise NKISimulationError("activation reduce_op must be add: ScalarE's reduction registers only sum")
        validate.space("activation", "reduce_res", reduce_res, validate.ON_CHIP)
        validate.tile("activation", "reduce_res", reduce_res)
        validate.vector_operand("activation", "reduce_res", reduce_res, partitions)
        operands.append(operand("reduce_res", reduce_res, "rw" if reduce_cmd is instructions.reduce_cmd.reduce else "w"))
    emit(context, "activation", Engine.SCALAR, (*operands, operand("dst", dst, "w")),
         op=function.name, reduce=reduce_res is not None)
    if context.numerics:
        f32 = np.dtype(np.float32)
        shape = (partitions,) + (1,) * (data.ndim - 1)
        with np.errstate(all="ignore"):
            x = read(data, f32) * scalar_or_vector(scale, partitions, f32).reshape(
                shape if isinstance(scale, Tensor) else ())
            if bias is not None:
                x = x + scalar_or_vector(bias, partitions, f32).reshape(shape if isinstance(bias, Tensor) else ())
            result = function.apply(x.astype(f32)).astype(f32)
            write(dst, result)
            if reduce_res is not None:
                total = result.reshape(partitions, -1).sum(axis=1, keepdims=True)
                if reduce_cmd is instructions.reduce_cmd.reduce:
                    total = total + read(reduce_res, f32).reshape(partitions, 1)
                write(reduce_res, total)
    return dst


def activation_reduce(dst: Tensor | None = None, op: object = None, data: Tensor | None = None,
                      reduce_op: object = None, reduce_res: Tensor | None = None,
                      bias: Tensor | float | None = None, scale: Tensor | float = 1.0,
                      name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """``activation`` that also sums the activated values into ``reduce_res``.

    NKI 0.1 calls it ``activation_reduce(op, data, reduce_op=, reduce_res=)`` and gets the result back.
    """
    if callable(dst) and not isinstance(dst, Tensor):
        op, data, dst = dst, op, None
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd=reduce_cmd.reset_reduce, dtype=dtype, mask=mask)


def reciprocal(dst: Tensor | None = None, data: Tensor | None = None, name: str | None = None,
               dtype: object = None, mask: object = None) -> Tensor:
    """``dst = 1 / data`` on VectorE (NKI 0.1: ``reciprocal(data)`` returns the result)."""
    if data is None and isinstance(dst, Tensor):
        dst, data = None, dst
    if dst is None and isinstance(data, Tensor):
        dst = new_result(data.shape, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        return masking.run_masked("reciprocal", mask, dst.shape, reciprocal, dst, dst=dst, data=data)
    context = current()
    dst = validate.tensor("reciprocal", "dst", dst)
    data = validate.tensor("reciprocal", "data", data)
    for role, value in (("data", data), ("dst", dst)):
        validate.space("reciprocal", role, value, validate.ON_CHIP)
        validate.tile("reciprocal", role, value)
    validate.same_free_size("reciprocal", "dst", dst, data.shape, "data")
    emit(context, "reciprocal", Engine.VECTOR, (operand("data", data, "r"), operand("dst", dst, "w")))
    if context.numerics:
        with np.errstate(all="ignore"):
            write(dst, 1.0 / read(data, np.dtype(np.float32)))
    return dst
