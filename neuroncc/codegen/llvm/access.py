"""Per-op lowering of movement, indexing and creation ops: the value of the result at an index.

Each entry takes the emission context, the op, the result number and the result index (a list of i64 values
or Python ints, which fold) and returns the compute-typed value, usually by asking the context for an
operand's value at a remapped index. Nothing is copied: ``permute`` of a computed value is the operand read
with permuted indices, ``cat`` reads every piece at a clamped index and selects (branch-free, so loops over
it still vectorize), ``gather``/``embedding`` load their index first and then the data.
Scatters (``SCATTERS``) write instead: :func:`emit_scatter` is their stage's serial loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext, Index
from neuroncc.codegen.llvm.kernel_plan import ScatterStage
from neuroncc.codegen.llvm.philox import RANDOM
from neuroncc.codegen.llvm.scalars import (
    F32, F32_EXACT_BITS, F64, I1, I32, I64, call, compute_type, constant, round_to, to_index,
)
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op
from neuroncc.ir.ops.indexing import index_result_shape
from neuroncc.ir.types import contiguous_strides

AccessLowering = Callable[[EmitContext, Op, int, Index], ir.Value]


def broadcast_index(ctx: EmitContext, idx: Index, result_shape: tuple[int, ...], shape: tuple[int, ...]) -> Index:
    """The index of an operand of ``shape`` broadcast to ``result_shape`` at the result's index ``idx``."""
    offset = len(result_shape) - len(shape)
    return [idx[d + offset] if shape[d] != 1 else 0 for d in range(len(shape))]


def _flat(ctx, idx: Index, shape: tuple[int, ...]) -> Any:
    flat: Any = 0
    for i, stride in zip(idx, contiguous_strides(shape)):
        flat = ctx.add(flat, ctx.mul(i, stride))
    return flat


def _unflat(ctx, flat: Any, shape: tuple[int, ...]) -> Index:
    """The index of flat position ``flat`` in ``shape`` (the outermost dim needs no remainder)."""
    out = []
    for d, (stride, size) in enumerate(zip(contiguous_strides(shape), shape)):
        if size == 1:
            out.append(0)
        elif d == next((k for k, n in enumerate(shape) if n != 1), 0):
            out.append(ctx.div(flat, stride))
        else:
            out.append(ctx.rem(ctx.div(flat, stride), size))
    return out


def reshape_groups(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pairs (source dims, target dims) of consecutive dims with equal element counts: a reshape only mixes
    indices within a group, so dims a reshape leaves alone (typically the last) keep a unit-stride index."""
    groups, i, j = [], 0, 0
    while i < len(source) or j < len(target):
        ga, gb, pa, pb = [], [], 1, 1
        if i < len(source):
            ga.append(i)
            pa, i = pa * source[i], i + 1
        if j < len(target):
            gb.append(j)
            pb, j = pb * target[j], j + 1
        while pa != pb:
            if pa < pb:
                ga.append(i)
                pa, i = pa * source[i], i + 1
            else:
                gb.append(j)
                pb, j = pb * target[j], j + 1
        groups.append((ga, gb))
    return groups


def _operand(ctx, op: Op, position: int, idx: Index) -> ir.Value:
    return ctx.value_at(op.operands[position], idx)


def _reshape(ctx, op, index, idx):
    source, target = op.operands[0].type.shape, op.result.type.shape
    if 0 in source:
        return _operand(ctx, op, 0, [0] * len(source))  # never evaluated: the loops run zero times
    out: Index = [0] * len(source)
    for ga, gb in reshape_groups(source, target):
        if len(ga) == 1 and len(gb) == 1:
            out[ga[0]] = idx[gb[0]]
            continue
        flat = _flat(ctx, [idx[d] for d in gb], tuple(target[d] for d in gb))
        for d, i in zip(ga, _unflat(ctx, flat, tuple(source[d] for d in ga))):
            out[d] = i
    return _operand(ctx, op, 0, out)


def _permute(ctx, op, index, idx):
    out = [0] * len(idx)
    for k, d in enumerate(op.attrs["dims"]):
        out[d] = idx[k]
    return _operand(ctx, op, 0, out)


def _expand(ctx, op, index, idx):
    return _operand(ctx, op, 0, broadcast_index(ctx, idx, op.result.type.shape, op.operands[0].type.shape))


def _slice(ctx, op, index, idx):
    dim = op.attrs["dim"] % len(idx)
    out = list(idx)
    out[dim] = ctx.add(ctx.mul(idx[dim], op.attrs["step"]), op.attrs["start"])
    return _operand(ctx, op, 0, out)


def _split(ctx, op, index, idx):
    dim = op.attrs["dim"] % len(idx)
    out = list(idx)
    out[dim] = ctx.add(idx[dim], sum(op.attrs["sizes"][:index]))  # result ``index`` starts after the earlier pieces
    return _operand(ctx, op, 0, out)


def _select(ctx, op, index, idx):
    dim = op.attrs["dim"] % (len(idx) + 1)
    return _operand(ctx, op, 0, list(idx[:dim]) + [op.attrs["index"]] + list(idx[dim:]))


def _squeeze(ctx, op, index, idx):
    rank = op.operands[0].type.rank
    dropped = {d % rank for d in op.attrs["dims"]} if rank else set()
    it = iter(idx)
    return _operand(ctx, op, 0, [0 if d in dropped else next(it) for d in range(rank)])


def _unsqueeze(ctx, op, index, idx):
    dim = op.attrs["dim"] % len(idx)
    return _operand(ctx, op, 0, list(idx[:dim]) + list(idx[dim + 1:]))


def _as_strided(ctx, op, index, idx):
    flat: Any = op.attrs["offset"]
    for i, stride in zip(idx, op.attrs["strides"]):
        flat = ctx.add(flat, ctx.mul(i, stride))
    return _operand(ctx, op, 0, _unflat(ctx, flat, op.operands[0].type.shape))


def _copy(ctx, op, index, idx):
    return _operand(ctx, op, 0, idx)


def _flip(ctx, op, index, idx):
    shape = op.result.type.shape
    flipped = {d % len(shape) for d in op.attrs["dims"]}
    return _operand(ctx, op, 0, [ctx.sub(shape[d] - 1, i) if d in flipped else i for d, i in enumerate(idx)])


def _repeat(ctx, op, index, idx):
    shape = op.operands[0].type.shape
    offset = len(idx) - len(shape)
    return _operand(ctx, op, 0, [ctx.rem(idx[d + offset], shape[d]) if shape[d] > 1 else 0 for d in range(len(shape))])


def _select_pieces(ctx, position: Any, starts: list[int], values: list[ir.Value]) -> ir.Value:
    """values[p] where starts[p] <= position < starts[p+1] (branch-free select chain)."""
    result = values[-1]
    for start, value in zip(reversed(starts[1:]), reversed(values[:-1])):
        result = ctx.b.select(ctx.lt(position, start), value, result)
    return result


def _cat(ctx, op, index, idx):
    dim = op.attrs["dim"] % len(idx)
    pieces = [(position, v.type.shape[dim]) for position, v in enumerate(op.operands) if v.type.shape[dim] > 0]
    starts, values, start = [], [], 0
    sizes = [v.type.shape[dim] for v in op.operands]
    for position, size in pieces:
        start = sum(sizes[:position])
        if isinstance(idx[dim], int) and not start <= idx[dim] < start + size:
            continue
        local = ctx.clamp(ctx.sub(idx[dim], start), 0, size - 1)
        starts.append(start)
        values.append(_operand(ctx, op, position, list(idx[:dim]) + [local] + list(idx[dim + 1:])))
    return _select_pieces(ctx, idx[dim], starts, values)


def _constant_pad(ctx, op, index, idx):
    shape = op.operands[0].type.shape
    pad = op.attrs["pad"]
    source, inside = list(idx), None
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        if pad[2 * i] == 0 and pad[2 * i + 1] <= 0:
            continue
        position = ctx.sub(idx[d], pad[2 * i])
        ok = ctx.b.and_(ctx.ge(position, 0), ctx.lt(position, shape[d])) if shape[d] else ir.Constant(I1, 0)
        inside = ok if inside is None else ctx.b.and_(inside, ok)
        source[d] = ctx.clamp(position, 0, max(shape[d] - 1, 0))
    fill = constant(op.result.type.dtype, op.attrs["value"])
    if any(s == 0 for s in shape):
        return fill
    value = _operand(ctx, op, 0, source)
    return value if inside is None else ctx.b.select(inside, value, fill)


def _slice_scatter(ctx, op, index, idx):
    attrs = op.attrs
    dim = attrs["dim"] % len(idx)
    length = op.operands[1].type.shape[dim]
    base = _operand(ctx, op, 0, idx)
    if length == 0:
        return base
    offset = ctx.sub(idx[dim], attrs["start"])
    inside = ctx.b.and_(ctx.ge(offset, 0), ctx.lt(offset, attrs["step"] * (length - 1) + 1))
    if attrs["step"] > 1:
        inside = ctx.b.and_(inside, ctx.eq(ctx.rem(ctx.clamp(offset, 0, None), attrs["step"]), 0))
    local = ctx.clamp(ctx.div(ctx.clamp(offset, 0, None), attrs["step"]), 0, length - 1)
    src = _operand(ctx, op, 1, list(idx[:dim]) + [local] + list(idx[dim + 1:]))
    return ctx.b.select(inside, src, base)


def _select_scatter(ctx, op, index, idx):
    dim = op.attrs["dim"] % len(idx)
    base = _operand(ctx, op, 0, idx)
    src = _operand(ctx, op, 1, list(idx[:dim]) + list(idx[dim + 1:]))
    return ctx.b.select(ctx.eq(idx[dim], op.attrs["index"]), src, base)


def _index_value(ctx, op: Op, position: int, idx: Index) -> ir.Value:
    return to_index(ctx.b, _operand(ctx, op, position, idx), op.operands[position].type.dtype)


def _gather(ctx, op, index, idx):
    x = op.operands[0].type
    if x.rank == 0:
        return _operand(ctx, op, 0, [])
    dim = op.attrs["dim"] % x.rank
    # checked as the reference checks (ir/ops/indexing.py): an index out of range wrapped modulo the size here,
    # a silently wrong value where eager and the interpreter raise
    position = ctx.checked_index(_index_value(ctx, op, 1, idx), x.shape[dim])
    return _operand(ctx, op, 0, list(idx[:dim]) + [position] + list(idx[dim + 1:]))


def _index_select(ctx, op, index, idx):
    x = op.operands[0].type
    if x.rank == 0:
        return _operand(ctx, op, 0, [])
    dim = op.attrs["dim"] % x.rank
    where = [idx[dim]] if op.operands[1].type.rank else []
    position = ctx.checked_index(_index_value(ctx, op, 1, where), x.shape[dim])
    return _operand(ctx, op, 0, list(idx[:dim]) + [position] + list(idx[dim + 1:]))


def _embedding(ctx, op, index, idx):
    weight = op.operands[0].type
    position = ctx.checked_index(_index_value(ctx, op, 1, list(idx[:-1])), weight.shape[0])
    return _operand(ctx, op, 0, [position, idx[-1]])


def advanced_positions(ctx, op: Op, idx: Index, first_index_operand: int) -> Index:
    """The operand-0 index addressed by result index ``idx`` of ``index``/``index_put`` (checked, wrapped)."""
    x = op.operands[0].type
    dims = op.attrs["dims"]
    indices = [v.type for v in op.operands[first_index_operand:]]
    shape = index_result_shape(op.name, x, dims, tuple(indices))
    broadcast_rank = len(shape) - (x.rank - len(dims))
    adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
    start = dims[0] if adjacent else 0
    b_idx = list(idx[start:start + broadcast_rank])
    rest = iter(list(idx[:start]) + list(idx[start + broadcast_rank:]))
    b_shape = tuple(shape[start:start + broadcast_rank])
    out: Index = []
    for d in range(x.rank):
        if d in dims:
            j = dims.index(d)
            t = indices[j]
            raw = _index_value(ctx, op, first_index_operand + j, broadcast_index(ctx, b_idx, b_shape, t.shape))
            out.append(ctx.checked_index(raw, x.shape[d]))
        else:
            out.append(next(rest))
    return out


def _index(ctx, op, index, idx):
    return _operand(ctx, op, 0, advanced_positions(ctx, op, idx, 1))


# ---- indexed writes: scatter, index_put ------------------------------------------------------------


@dataclass(frozen=True)
class ScatterLowering:
    """How an indexed write (``Trait.INDEXED_WRITE``) stores into its result, which already holds operand 0:
    one store per point of ``domain(op)``, at ``position(ctx, op, idx)`` (checked), of ``value(ctx, op,
    idx)``, added to what is there when ``accumulates(op)``."""

    domain: Callable[[Op], tuple[int, ...]]
    accumulates: Callable[[Op], bool]
    position: Callable[[EmitContext, Op, Index], Index]
    value: Callable[[EmitContext, Op, Index], ir.Value]


def _scatter_position(ctx, op: Op, idx: Index) -> Index:
    x = op.operands[0].type
    dim = op.attrs["dim"] % x.rank
    raw = to_index(ctx.b, ctx.value_at(op.operands[1], idx), op.operands[1].type.dtype)
    return list(idx[:dim]) + [ctx.checked_index(raw, x.shape[dim])] + list(idx[dim + 1:])


def _index_put_domain(op: Op) -> tuple[int, ...]:
    x, _, *indices = (v.type for v in op.operands)
    return index_result_shape("index_put", x, op.attrs["dims"], tuple(indices))


def _index_put_value(ctx, op: Op, idx: Index) -> ir.Value:
    values = op.operands[1]
    return ctx.value_at(values, broadcast_index(ctx, idx, _index_put_domain(op), values.type.shape))


#: Indexed write op -> how it stores (one entry per op).
SCATTERS: dict[str, ScatterLowering] = {
    # x with src[i] written at x[..., index[i], ...] along dim, over index's shape
    "scatter": ScatterLowering(lambda op: op.operands[1].type.shape, lambda op: op.attrs["reduce"] == "add",
                               _scatter_position, lambda ctx, op, idx: ctx.value_at(op.operands[2], idx)),
    # x with values (broadcast) written at the advanced indices, over the indexed shape
    "index_put": ScatterLowering(_index_put_domain, lambda op: op.attrs["accumulate"],
                                 lambda ctx, op, idx: advanced_positions(ctx, op, idx, 2), _index_put_value),
}


def _iota(ctx, op, index, idx):
    attrs = op.attrs
    dtype, start, step, length = attrs["dtype"], attrs["start"], attrs["step"], attrs["length"]
    if not dtype.is_float and _exact_in_i64(start, step, length):
        # torch.arange over integers (the one-hot of cross-entropy's backward compares against one): integer
        # arithmetic, equal to the float64 reference for every value below 2**53. The int64 <-> float64
        # conversions have no vector instruction without AVX-512, and kept the loops around it scalar.
        if _exact_in_f32(start, step, length):
            # computed in an i24 (every value and position is below 2**24) and zero-extended: the type says that
            # f32 holds the value exactly, so a compare against it runs on 8 float lanes (see
            # ``elementwise.narrow_equality``) where an i64 compare runs on 4 and is packed down again
            narrow = ir.IntType(F32_EXACT_BITS)
            position = ctx.b.trunc(ctx.ir_index(idx[0]), narrow)
            value = ctx.b.zext(ctx.b.add(ir.Constant(narrow, int(start)),
                                         ctx.b.mul(ir.Constant(narrow, int(step)), position)), I64)
        else:
            value = ctx.b.add(ir.Constant(I64, int(start)),
                              ctx.b.mul(ir.Constant(I64, int(step)), ctx.ir_index(idx[0])))
        if dtype.is_bool:
            return ctx.b.icmp_signed("!=", value, ir.Constant(I64, 0))
        target = compute_type(dtype)
        return value if target == I64 else ctx.b.trunc(value, target)
    i = ctx.ir_index(idx[0])
    # an int32 position converts with one vector instruction (vcvtdq2pd); an int64 one only with AVX-512
    i = ctx.b.sitofp(ctx.b.trunc(i, I32) if length <= 2**31 else i, F64)
    value = ctx.b.fadd(ir.Constant(F64, float(start)), ctx.b.fmul(ir.Constant(F64, float(step)), i))
    if dtype.is_float:
        return round_to(ctx.b, ctx.b.fptrunc(value, F32), dtype)
    if dtype.is_bool:
        return ctx.b.fcmp_unordered("!=", value, ir.Constant(F64, 0.0))
    return _f64_to_int(ctx, value, dtype)


def _exact_in_i64(start: float, step: float, length: int) -> bool:
    """Whether every element of an iota is an integer that float64 holds exactly (so integer arithmetic gives
    the reference's values)."""
    if not all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in (start, step)):
        return False
    last = int(start) + int(step) * max(length - 1, 0)
    return max(abs(int(start)), abs(last)) < 2**53


def _exact_in_f32(start: float, step: float, length: int) -> bool:
    """Whether every element of an integer iota, and every position, is a non-negative integer below 2**24."""
    last = int(start) + int(step) * max(length - 1, 0)
    bound = 1 << F32_EXACT_BITS
    return length <= bound and 0 <= min(int(start), last) and max(int(start), last) < bound


def _f64_to_int(ctx, value: ir.Value, dtype: DType) -> ir.Value:
    wide = call(ctx.b, "llvm.fptosi.sat.i64.f64", [value], I64)
    target = compute_type(dtype)
    return wide if target == I64 else ctx.b.trunc(wide, target)


def _full(ctx, op, index, idx):
    dtype, value = op.attrs["dtype"], op.attrs["value"]
    if dtype.is_int and isinstance(value, float):
        value = int(value) if math.isfinite(value) else 0
    return constant(dtype, value)


def _scalar_constant(ctx, op, index, idx):
    attr = op.attrs["value"]
    return constant(attr.dtype, attr.array.reshape(-1)[0].item())


#: Index lowerings that check their indices (``ctx.checked_index``: an out-of-range one sets the kernel's error
#: flag, and the launcher raises). gather wraps instead.
CHECKED_INDEX_OPS = frozenset({"gather", "index_select", "embedding", "index", "scatter", "index_put"})
#: Integer lowerings (elementwise.py) that check their divisor: a zero sets the kernel's error flag and the
#: launcher raises, as eager raises ZeroDivisionError (``checks_divisor``).
CHECKED_DIVISOR_OPS = frozenset({"div", "remainder", "fmod"})


def checks_divisor(op: Op, divisor_producer: Op | None = None) -> bool:
    """Whether ``op``'s lowering checks for a zero divisor (integer division and remainder): not when the divisor
    is made in the kernel by ``divisor_producer`` with one nonzero value everywhere (``x // 2``), whose check LLVM
    folds away, so the kernel's call need not read the error flag either."""
    if op.name not in CHECKED_DIVISOR_OPS or not op.operands[1].type.dtype.is_int:
        return False
    splat = divisor_producer.opdef.splat_value(divisor_producer.attrs) if divisor_producer is not None else None
    return splat is None or splat == 0


#: Index lowerings that need operand 0 to have a dimension to index (a 0-dim operand has no native lowering).
NEED_A_DIM = frozenset({"gather", "scatter", "index_put"})

#: Movement / index / creation op -> lowering (one entry per op).
ACCESS: dict[str, AccessLowering] = {
    "reshape": _reshape,
    "permute": _permute,
    "expand": _expand,
    "slice": _slice,
    "split": _split,
    "select": _select,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "as_strided": _as_strided,
    "copy": _copy,
    "flip": _flip,
    "repeat": _repeat,
    "cat": _cat,
    "constant_pad": _constant_pad,
    "slice_scatter": _slice_scatter,
    "select_scatter": _select_scatter,
    "gather": _gather,
    "index_select": _index_select,
    "embedding": _embedding,
    "index": _index,
    "iota": _iota,
    "full": _full,
    "constant": _scalar_constant,
    **RANDOM,  # philox_bits, philox_uniform (philox.py)
}


def emit_scatter(em: EmitContext, stage: ScatterStage) -> None:
    """Serial loop writing (or accumulating) data-dependent positions of the stage's buffer."""
    op, target = stage.op, stage.target
    scatter = SCATTERS[op.name]
    accumulate = scatter.accumulates(op)
    dtype = target.dtype

    def positions(idx: list[Any]) -> list[Any]:
        return scatter.position(em, op, idx)

    def write(idx: list[Any]) -> None:
        b = em.b
        where = positions(idx)
        value = scatter.value(em, op, idx)
        if accumulate:
            old = em.load(target, where)
            if dtype.is_float:  # bf16/f16: rounded after every add, in index order, as PyTorch's CPU kernels
                value = round_to(b, b.fadd(old, value), dtype)
            elif dtype.is_bool:
                value = b.or_(old, value)
            else:
                value = b.add(old, value)
        em.store(target, where, value)

    em.nest([(0, n) for n in stage.shape], write)
