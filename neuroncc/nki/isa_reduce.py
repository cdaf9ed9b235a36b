"""VectorE instructions that reduce or scan along the free axis: tensor_scalar_reduce, tensor_tensor_scan,
bn_stats and bn_aggr. Each takes NKI 0.2+'s arguments (``dst`` first) and NKI 0.1's (keyword arguments, the
result returned, ``mask=``)."""

from __future__ import annotations

import numpy as np

from neuroncc.hardware.neuron import BN_STATS_FMAX
from neuroncc.nki import masking, ops, validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import dtype_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import compute_type, emit, new_result, operand, read, reduce_cmd, scalar_or_vector, write
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine

_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def tensor_scalar_reduce(dst: Tensor | None = None, data: Tensor | None = None, op0: object = None,
                         operand0: Tensor | float | None = None, reduce_op: object = None,
                         reduce_res: Tensor | None = None, reverse0: bool = False,
                         reduce_cmd: reduce_cmd = reduce_cmd.reset_reduce, reduce_init: Tensor | float | None = None,
                         reduce_res_negate: bool = False, name: str | None = None, dtype: object = None,
                         mask: object = None) -> Tensor:
    """``dst = data <op0> operand0`` and ``reduce_res = reduce_op`` of that over every free axis (VectorE).

    ``reduce_cmd=reduce`` folds into what ``reduce_res`` holds; ``load_reduce`` starts from ``reduce_init``.
    The simulator keeps no hidden accumulator registers: the running value lives in ``reduce_res``.
    """
    data = validate.tensor("tensor_scalar_reduce", "data", data)
    if dst is None:  # NKI 0.1: keyword arguments, the result returned
        dst = new_result(data.shape, dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:
        restricted = masking.restriction("tensor_scalar_reduce", mask, data.shape)
        if restricted is None or restricted.empty:
            return dst
        if restricted.keep is not None:
            raise NKISimulationError("tensor_scalar_reduce: the mask must select a rectangle of the input")
        res = reduce_res[restricted.box[0]] if isinstance(reduce_res, Tensor) else reduce_res
        tensor_scalar_reduce(restricted.trim(dst), restricted.trim(data), op0, restricted.trim(operand0), reduce_op,
                             res, reverse0, reduce_cmd, reduce_init, reduce_res_negate)
        return dst
    context = current()
    dst = validate.tensor("tensor_scalar_reduce", "dst", dst)
    first = ops.resolve_alu(op0, "tensor_scalar_reduce", "op0")
    folding = ops.resolve_alu(reduce_op, "tensor_scalar_reduce", "reduce_op")
    if first.kind != "arith":
        raise NKISimulationError(f"tensor_scalar_reduce op0 must be an arithmetic operator, got {first.name}")
    if folding.name not in _IDENTITY:
        raise NKISimulationError(
            f"tensor_scalar_reduce reduce_op must be add, multiply, max or min, got {folding.name}")
    for role, value in (("data", data), ("dst", dst)):
        validate.space("tensor_scalar_reduce", role, value, validate.ON_CHIP)
        validate.tile("tensor_scalar_reduce", role, value)
    validate.same_free_size("tensor_scalar_reduce", "dst", dst, data.shape, "data")
    partitions = data.shape[0]
    operands = [operand("data", data, "r")]
    if isinstance(operand0, Tensor):
        validate.vector_operand("tensor_scalar_reduce", "operand0", operand0, partitions)
        operands.append(operand("operand0", operand0, "r"))
    accumulates = reduce_cmd in (reduce_cmd.reduce,)
    if reduce_res is not None:
        reduce_res = validate.tensor("tensor_scalar_reduce", "reduce_res", reduce_res)
        validate.space("tensor_scalar_reduce", "reduce_res", reduce_res, validate.ON_CHIP)
        validate.vector_operand("tensor_scalar_reduce", "reduce_res", reduce_res, partitions)
        operands.append(operand("reduce_res", reduce_res, "rw" if accumulates else "w"))
    emit(context, "tensor_scalar_reduce", Engine.VECTOR, (*operands, operand("dst", dst, "w")),
         op0=first.name, reduce_op=folding.name, reduce=True)
    if context.numerics:
        as_type = compute_type(data, operand0)
        scalar = scalar_or_vector(operand0 if operand0 is not None else 0, partitions, as_type)
        if isinstance(operand0, Tensor):
            scalar = scalar.reshape((partitions,) + (1,) * (data.ndim - 1))
        x = read(data, as_type)
        with np.errstate(all="ignore"):
            result = first.apply(scalar, x) if reverse0 else first.apply(x, scalar)
            write(dst, result)
            if reduce_res is not None:
                folded = folding.reduce(np.asarray(result, np.float64).reshape(partitions, -1), axis=1, keepdims=True)
                if accumulates:
                    folded = folding.apply(read(reduce_res, np.dtype(np.float64)).reshape(partitions, 1), folded)
                elif reduce_cmd is reduce_cmd.load_reduce:
                    start = scalar_or_vector(reduce_init, partitions, np.dtype(np.float64)).reshape(-1, 1)
                    folded = folding.apply(start, folded)
                write(reduce_res, -folded if reduce_res_negate else folded)
    return dst


def tensor_tensor_scan(dst: Tensor | None = None, data0: Tensor | None = None, data1: Tensor | None = None,
                       initial: Tensor | float | None = None, op0: object = None, op1: object = None,
                       reverse0: bool = False, reverse1: bool = False, name: str | None = None, dtype: object = None,
                       mask: object = None) -> Tensor:
    """A scan along the free axis on VectorE: ``r[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0])`` and
    ``r[:, i] = op1(op0(data0[:, i], r[:, i - 1]), data1[:, i])`` (NKI 0.1: ``tensor_tensor_scan(data0, data1,
    initial, op0, op1)`` returns ``r``)."""
    if isinstance(dst, Tensor) and isinstance(data0, Tensor) and data1 is None:
        dst, data0, data1 = None, dst, data0  # NKI 0.1: tensor_tensor_scan(data0, data1, initial=..., op0=...)
    elif isinstance(dst, Tensor) and (initial is None or callable(initial)):
        # NKI 0.1 positional: (data0, data1, initial, op0, op1, ...) arrive one slot to the right (0.2+ always
        # passes `initial`, and never an operator in its place).
        shifted_op0, shifted_op1 = (initial, op0) if callable(initial) else (op0, op1)
        dst, data0, data1, initial, op0, op1 = None, dst, data0, data1, shifted_op0, shifted_op1
    data0 = validate.tensor("tensor_tensor_scan", "data0", data0)
    data1 = validate.tensor("tensor_tensor_scan", "data1", data1)
    if dst is None:
        dst = new_result(data0.shape, dtype_of(dtype) if dtype else data0.dtype)
    if mask is not None:
        raise NKISimulationError("tensor_tensor_scan: masks are not supported; slice the operands instead")
    context = current()
    dst = validate.tensor("tensor_tensor_scan", "dst", dst)
    first = ops.resolve_alu(op0, "tensor_tensor_scan", "op0")
    second = ops.resolve_alu(op1, "tensor_tensor_scan", "op1")
    for role, value in (("data0", data0), ("data1", data1), ("dst", dst)):
        validate.space("tensor_tensor_scan", role, value, validate.ON_CHIP)
        validate.tile("tensor_tensor_scan", role, value)
    validate.same_free_size("tensor_tensor_scan", "data1", data1, data0.shape, "data0")
    validate.same_free_size("tensor_tensor_scan", "dst", dst, data0.shape, "data0")
    if data0.buffer is Buffer.PSUM and data1.buffer is Buffer.PSUM:
        raise NKISimulationError("tensor_tensor_scan data0 and data1 cannot both be in PSUM")
    partitions = data0.shape[0]
    operands = [operand("data0", data0, "r"), operand("data1", data1, "r")]
    if isinstance(initial, Tensor):
        validate.vector_operand("tensor_tensor_scan", "initial", initial, partitions)
        operands.append(operand("initial", initial, "r"))
    psum_input = Buffer.PSUM in (data0.buffer, data1.buffer)
    emit(context, "tensor_tensor_scan", Engine.VECTOR, (*operands, operand("dst", dst, "w")),
         op0=first.name, op1=second.name, psum_input=psum_input)
    if context.numerics:
        f32 = np.dtype(np.float32)
        a = read(data0, f32).reshape(partitions, -1)
        b = read(data1, f32).reshape(partitions, -1)
        state = scalar_or_vector(initial if initial is not None else 0.0, partitions, f32).reshape(-1)
        state = np.broadcast_to(state, (partitions,)).astype(f32)
        out = np.empty_like(a)
        with np.errstate(all="ignore"):
            for i in range(a.shape[1]):
                partial = first.apply(state, a[:, i]) if reverse0 else first.apply(a[:, i], state)
                state = (second.apply(b[:, i], partial) if reverse1 else second.apply(partial, b[:, i])).astype(f32)
                out[:, i] = state
        write(dst, out.reshape(dst.shape))
    return dst


def _statistics_box(op: str, mask: object, data: Tensor) -> masking.Restriction | None:
    """The box of ``data`` a ``bn_stats`` / ``bn_aggr`` mask selects (None: nothing selected)."""
    restricted = masking.restriction(op, mask, data.shape)
    if restricted is None or restricted.empty:
        return None
    if restricted.keep is not None:
        raise NKISimulationError(f"{op}: the mask must select a rectangle of data (slice it instead)")
    return restricted


def bn_stats(dst: Tensor | None = None, data: Tensor | None = None, name: str | None = None, dtype: object = None,
             mask: object = None) -> Tensor:
    """Per-partition statistics of up to 512 elements for ``bn_aggr`` (VectorE): six values per partition,
    ``count, mean, variance * count`` of the even-indexed elements, then the same for the odd ones."""
    if data is None and isinstance(dst, Tensor):
        dst, data = None, dst
    data = validate.tensor("bn_stats", "data", data)
    if dst is None:
        dst = new_result((data.shape[0], 6), dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:  # the statistics of the selected box of data (the LayerNorm tutorial's last block)
        restricted = _statistics_box("bn_stats", mask, data)
        if restricted is not None:
            bn_stats(dst=dst[(restricted.box[0],) + (slice(None),) * (dst.ndim - 1)], data=restricted.trim(data))
        return dst
    context = current()
    for role, value in (("data", data), ("dst", dst)):
        validate.space("bn_stats", role, value, validate.ON_CHIP)
        validate.tile("bn_stats", role, value)
    if data.free_size > BN_STATS_FMAX:
        raise NKISimulationError(
            f"bn_stats data free size {data.free_size} exceeds maximum {BN_STATS_FMAX} (tile_size.bn_stats_fmax)")
    validate.same_free_size("bn_stats", "dst", dst, (data.shape[0], 6), "result")
    emit(context, "bn_stats", Engine.VECTOR, (operand("data", data, "r"), operand("dst", dst, "w")))
    if context.numerics:
        x = read(data, np.dtype(np.float64)).reshape(data.shape[0], -1)
        stats = []
        for half in (x[:, 0::2], x[:, 1::2]):
            count = half.shape[1]
            mean = half.mean(axis=1) if count else np.zeros(x.shape[0])
            var = half.var(axis=1) if count else np.zeros(x.shape[0])
            stats += [np.full(x.shape[0], float(count)), mean, var * count]
        write(dst, np.stack(stats, axis=1).reshape(dst.shape))
    return dst


def bn_aggr(dst: Tensor | None = None, data: Tensor | None = None, name: str | None = None, dtype: object = None,
            mask: object = None) -> Tensor:
    """Combine ``bn_stats`` outputs (``count, mean, variance * count`` triples per partition) into the mean
    and the (population) variance of all their elements: two values per partition (VectorE)."""
    if data is None and isinstance(dst, Tensor):
        dst, data = None, dst
    data = validate.tensor("bn_aggr", "data", data)
    if dst is None:
        dst = new_result((data.shape[0], 2), dtype_of(dtype) if dtype else data.dtype)
    if mask is not None:  # the statistics of the selected box of data (the LayerNorm tutorial's last block)
        restricted = _statistics_box("bn_aggr", mask, data)
        if restricted is not None:
            bn_aggr(dst=dst[(restricted.box[0],) + (slice(None),) * (dst.ndim - 1)], data=restricted.trim(data))
        return dst
    context = current()
    for role, value in (("data", data), ("dst", dst)):
        validate.space("bn_aggr", role, value, validate.ON_CHIP)
        validate.tile("bn_aggr", role, value)
    if data.free_size % 3:
        raise NKISimulationError(f"bn_aggr data holds (count, mean, variance*count) triples; got {data.free_size} "
                                 f"elements per partition")
    validate.same_free_size("bn_aggr", "dst", dst, (data.shape[0], 2), "result")
    emit(context, "bn_aggr", Engine.VECTOR, (operand("data", data, "r"), operand("dst", dst, "w")))
    if context.numerics:
        triples = read(data, np.dtype(np.float64)).reshape(data.shape[0], -1, 3)
        count, mean, scaled_var = triples[..., 0], triples[..., 1], triples[..., 2]
        total = count.sum(axis=1)
        with np.errstate(all="ignore"):
            grand = (count * mean).sum(axis=1) / total
            var = (scaled_var + count * (mean - grand[:, None]) ** 2).sum(axis=1) / total
        write(dst, np.stack([grand, var], axis=1).reshape(dst.shape))
    return dst
