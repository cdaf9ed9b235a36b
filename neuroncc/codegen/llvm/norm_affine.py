"""LayerNorm's affine step, ``((x - mean(x)) * rstd) * w + b``, with its weight and bias in one fused multiply-add
where its float32 sum is only rounded to bf16 (``CpuTarget.fuses_bf16_layer_norm_weight_and_bias``): one rounding
fewer than the graph's (its product is not rounded before the bias is added), one vector operation fewer per 16
elements in the write loop. The pattern is matched on the region's ops; elsewhere an add stays an add.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.scalars import call
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op


def fused_weight_and_bias(ctx: EmitContext, add: Op, args: list[ir.Value]) -> ir.Value | None:
    """``add`` (args: its operands' values) as ``fma(n, w, b)`` where it is LayerNorm's ``+ b`` of its ``n * w``
    (:func:`layer_norm_affine`) and the target fuses it, else None. The product's own ``fmul`` is left unused."""
    if not ctx.target.fuses_bf16_layer_norm_weight_and_bias:
        return None
    for product, addend, operand in ((args[0], args[1], add.operands[0]), (args[1], args[0], add.operands[1])):
        if isinstance(product, ir.Instruction) and product.opname == "fmul" and \
                layer_norm_affine(ctx.plan.region, add, operand):
            return call(ctx.b, "llvm.fma.f32", [*product.operands, addend])
    return None


def layer_norm_affine(region: Any, add: Op, product: Any) -> bool:
    """Whether ``add`` is LayerNorm's ``+ b`` of ``product``, its ``* w``: product = mul((x - mean(x)) * r, w), r
    one value per row, read by ``add`` alone, whose sum is read only by a cast to bf16 (no region output keeps
    either)."""
    producers, users = region.producers(), region.users()
    scale, total = producers.get(product), add.results[0]
    if scale is None or scale.name != "mul" or users.get(product) != [(add, add.operands.index(product))] or \
            product in region.outputs or total in region.outputs:
        return False
    readers = users.get(total, [])
    if len(readers) != 1 or readers[0][0].name != "cast" or readers[0][0].attrs.get("dtype") is not DType.bf16:
        return False
    for normalized in scale.operands:
        norm = producers.get(normalized)
        if norm is None or norm.name != "mul" or len(users.get(normalized, ())) != 1:
            continue
        for deviation, rstd in ((norm.operands[0], norm.operands[1]), (norm.operands[1], norm.operands[0])):
            centre = producers.get(deviation)
            if centre is not None and centre.name == "sub" and _one_per_row(norm, rstd) and \
                    getattr(producers.get(centre.operands[1]), "name", None) == "mean":
                return True
    return False


def _one_per_row(op: Op, operand: Any) -> bool:
    """Whether ``operand`` broadcasts along the last dimension of ``op``'s result (one value per row)."""
    shape, result = operand.type.shape, op.results[0].type.shape
    return len(result) > 0 and result[-1] > 1 and (len(shape) == 0 or shape[-1] == 1)
