"""LayerNorm's affine step, ``((x - mean(x)) * rstd) * w + b``, with its weight and bias in one fused multiply-add
where its float32 sum is only rounded to bf16 (``CpuTarget.fuses_bf16_layer_norm_weight_and_bias``): one rounding
fewer than the graph's (its product is not rounded before the bias is added), one vector operation fewer per 16
elements in the write loop.

Only where no operand is NaN or infinite: x86 returns the first NaN operand of an FMA in the order of its encoded
form, which the instruction selector picks, where the graph's product returns n's NaN before w's and its sum that
product's before b's (``nan_payloads.py``: NaN payloads are kept bit for bit), and an FMA does not round an
overflowing product to infinity before the bias meets it. So the write stage of a row loop holding the pattern runs
fused only on rows whose mean is finite and whose 1/std is finite and positive (then every n is finite), in a call
whose weight and bias are finite (checked once a call on their widened rows); other rows run the graph's ops (two
copies of the write loop, one branch a row). Elsewhere an add stays an add.

May import: the code generator's modules below ``emit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.kernel_plan import Computed, MapStage, RowLoop
from neuroncc.codegen.llvm.scalars import F32, I32, I64, call
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op, Value
from neuroncc.ir.opdef import Trait

_EXPONENT = 0x7F800000  # (a float32 whose exponent bits are all set is infinite or NaN)


@dataclass(frozen=True)
class Affine:
    """A matched ``((x - mean) * rstd) * w + b``: the values a row's guard and the call's check read."""

    mean: Value
    rstd: Value
    weight: Value
    bias: Value
    total: Value  # (the sum, ``+ b``'s result)


@dataclass(frozen=True)
class AffineRows:
    """The phase's matched step and its call's check: ``finite`` (an i1) holds where its weight and bias are."""

    affine: Affine
    finite: ir.Value


def fused_weight_and_bias(ctx: EmitContext, add: Op, args: list[ir.Value]) -> ir.Value | None:
    """``add`` (args: its operands' values) as ``fma(n, w, b)`` where the emitter fuses here (``ctx.fuses_affine``:
    a guarded row, :func:`emit_guarded`) and ``add`` is LayerNorm's ``+ b`` of its ``n * w``, else None. The
    product's own ``fmul`` is left unused."""
    if not ctx.fuses_affine:
        return None
    for product, addend, operand in ((args[0], args[1], add.operands[0]), (args[1], args[0], add.operands[1])):
        if isinstance(product, ir.Instruction) and product.opname == "fmul" and \
                layer_norm_affine(ctx.plan.region, add, operand) is not None:
            return call(ctx.b, "llvm.fma.f32", [*product.operands, addend])
    return None


def layer_norm_affine(region: Any, add: Op, product: Any) -> Affine | None:
    """``add`` as LayerNorm's ``+ b`` of ``product``, its ``* w``: product = mul((x - mean(x)) * r, w), r one value
    per row, read by ``add`` alone, whose sum is read only by a cast to bf16 (no region output keeps either); else
    None."""
    producers, users = region.producers(), region.users()
    scale, total = producers.get(product), add.results[0]
    if scale is None or scale.name != "mul" or users.get(product) != [(add, add.operands.index(product))] or \
            product in region.outputs or total in region.outputs:
        return None
    readers = users.get(total, [])
    if len(readers) != 1 or readers[0][0].name != "cast" or readers[0][0].attrs.get("dtype") is not DType.bf16:
        return None
    bias = add.operands[1 - add.operands.index(product)]
    for position, normalized in enumerate(scale.operands):
        norm = producers.get(normalized)
        if norm is None or norm.name != "mul" or len(users.get(normalized, ())) != 1:
            continue
        for deviation, rstd in ((norm.operands[0], norm.operands[1]), (norm.operands[1], norm.operands[0])):
            centre = producers.get(deviation)
            if centre is not None and centre.name == "sub" and _one_per_row(norm, rstd) and \
                    getattr(producers.get(centre.operands[1]), "name", None) == "mean":
                return Affine(centre.operands[1], rstd, scale.operands[1 - position], bias, total)
    return None


def affine_rows(em: Any, buffers: dict[Value, ir.Value]) -> AffineRows | None:
    """The phase's LayerNorm affine step where the target fuses it and its weight and bias are widened once a call
    into ``buffers`` (``row_buffers.emit_widened``), with the check of their values emitted here; else None."""
    if not em.target.fuses_bf16_layer_norm_weight_and_bias:
        return None
    region = em.plan.region
    for op in region.ops:
        if op.name != "add":
            continue
        for operand in op.operands:
            affine = layer_norm_affine(region, op, operand)
            if affine is not None and affine.weight in buffers and affine.bias in buffers:
                return AffineRows(affine, _finite(em, [buffers[affine.weight], buffers[affine.bias]]))
    return None


def _finite(em: Any, rows: list[ir.Value]) -> ir.Value:
    """Whether every float32 of ``rows`` (pointers to arrays) is finite: their exponent bits or'ed together."""
    b, seen = em.b, em.alloca(I32)
    b.store(ir.Constant(I32, 0), seen)
    for row in rows:
        def element(i: Any, row: ir.Value = row) -> None:
            bits = b.load(b.bitcast(b.gep(row, [ir.Constant(I64, 0), em.ir_index(i)], inbounds=True),
                                    ir.PointerType(I32)))
            exponent = b.and_(bits, ir.Constant(I32, _EXPONENT))
            b.store(b.or_(b.load(seen), b.zext(b.icmp_unsigned("==", exponent, ir.Constant(I32, _EXPONENT)), I32)),
                    seen)
        em.loop(0, row.type.pointee.count, element)
    return b.icmp_unsigned("==", b.load(seen), ir.Constant(I32, 0))


def emit_guarded(em: Any, rows: AffineRows | None, phase: RowLoop, number: int, outer: list[Any],
                 emit: Callable[[], None]) -> None:
    """Stage ``number`` of ``phase`` at row ``outer`` by ``emit``: a map stage of a phase with a fused affine step
    (``rows``) twice, fused on rows whose n are all finite in a call of finite weight and bias, else as the graph."""
    stage = phase.stages[number]
    if rows is None or not isinstance(stage, MapStage) or not _computes(em.plan, stage, rows.affine.total):
        emit()
        return
    b, at_row = em.b, list(outer[:len(phase.outer)])
    mean = em.value_at(rows.affine.mean, at_row + [0] * (len(rows.affine.mean.type.shape) - len(at_row)))
    rstd = em.value_at(rows.affine.rstd, at_row + [0] * (len(rows.affine.rstd.type.shape) - len(at_row)))
    infinity = ir.Constant(F32, math.inf)
    finite_mean = b.fcmp_ordered("<", call(b, "llvm.fabs.f32", [mean]), infinity)
    scale = b.and_(b.fcmp_ordered(">", rstd, ir.Constant(F32, 0.0)), b.fcmp_ordered("<", rstd, infinity))
    with b.if_else(b.and_(rows.finite, b.and_(finite_mean, scale)), likely=True) as (fused, graph):
        with fused, em.fresh_values():
            em.fuses_affine = True
            try:
                emit()
            finally:
                em.fuses_affine = False
        with graph, em.fresh_values():
            emit()


def _computes(plan: Any, stage: MapStage, value: Value) -> bool:
    """Whether ``stage`` computes ``value`` element by element on the way to what it writes (the stage reads every
    value the step's row guard reads: a stage before the row's mean, or without the step, is emitted as it is)."""
    pending, seen = [item for item, _ in stage.items], set()
    while pending:
        current = pending.pop()
        access = plan.access.get(current)
        if current in seen or not isinstance(access, Computed) or not access.op.has(Trait.POINTWISE):
            continue
        if current is value:
            return True
        seen.add(current)
        pending += access.op.operands
    return False


def _one_per_row(op: Op, operand: Any) -> bool:
    """Whether ``operand`` broadcasts along the last dimension of ``op``'s result (one value per row)."""
    shape, result = operand.type.shape, op.results[0].type.shape
    return len(result) > 0 and result[-1] > 1 and (len(shape) == 0 or shape[-1] == 1)
