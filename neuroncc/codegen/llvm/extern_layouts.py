"""What the launch plan must know of the extern kernels the cpu executor calls: which results come back as
ATen's fresh tensors, and in which layout.

The executor (:mod:`neuroncc.executors.cpu.adopt`) adopts such a tensor as the result's buffer instead of
copying it, which only works if the plan laid the result out the way ATen returns it. These predictions are
made here, at plan time, from the op, its attributes and its operands' static layouts; a wrong one costs a
copy, never a wrong result. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from neuroncc.hardware.host import target_cpu
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import contiguous_strides


def onednn_shapes_eligible(name: str, attrs: Mapping[str, Any], shapes: Sequence[Sequence[int]]) -> bool:
    """The part of the oneDNN choice that the op, its attributes, its operands' logical shapes (after
    transpose_a/_b) and the host (:meth:`CpuTarget.onednn_takes`) decide, known when the launch is planned
    (float32 operands assumed; see :func:`_onednn_eligible` for the rest)."""
    if not REGISTRY.get(name).has(Trait.MATRIX_PRODUCT) or attrs.get("transpose_a"):
        return False
    first = len(shapes) - 2  # the factors are the last two operands
    a, b = shapes[first], shapes[first + 1]
    if len(a) != 2 or len(b) != 2 or not target_cpu().onednn_takes(a[0], a[1], b[1]):  # mm, addmm: no batch dims
        return False
    if first == 1:  # addmm: its first operand is the bias
        bias = shapes[0]
        if attrs["alpha"] != 1 or attrs["beta"] != 1 or math.prod(bias) != b[1]:
            return False
        if len(bias) == 2 and bias[0] != 1 or len(bias) > 2:
            return False
    return True


def _storage_order(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense tensor of ``shape`` whose dims are stored outermost first in ``order``."""
    strides, step = [0] * len(shape), 1
    for dim in reversed(order):
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


def _dense_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The storage order of a dense (no gaps, no overlap) layout, or None."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    return tuple(order) if _storage_order(shape, order) == tuple(strides) else None


def _like(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """``empty_like``'s layout for an operand of ``shape`` and ``strides``: kept when dense, else contiguous."""
    return tuple(strides) if _dense_order(shape, strides) is not None else None


#: op -> ((shape, strides) of each operand, shape of each result) -> the element strides ATen returns each
#: result with (None: contiguous). Ops not listed return contiguous results. This is a prediction the launch
#: plan lays those results out by, so that the launcher can adopt ATen's tensors (executors/cpu/adopt.py); a wrong
#: one costs a copy, not a wrong result. Attention: the output is ``empty_like(query)``, the logsumexp is
#: stored [B, L, H], the backward's gradients [B, L, H, E] (ATen's CPU flash kernels).
RESULT_STRIDES: dict[str, Callable[[Sequence[tuple[Sequence[int], Sequence[int]]], Sequence[Sequence[int]]],
                                   tuple[tuple[int, ...] | None, ...]]] = {
    "flash_attention": lambda operands, shapes: (_like(*operands[0]), _storage_order(shapes[1], (0, 2, 1))),
    "flash_attention_backward": lambda operands, shapes: tuple(_storage_order(s, (0, 2, 1, 3)) for s in shapes),
}


#: dtypes whose ATen results differ from their stored form (bf16 is rounded into float32, f16 computed in float32)
_CONVERTED = (DType.bf16, DType.f16)


def supplied_strides(op: Any, operands: Sequence[Any]) -> tuple[tuple[int, ...] | None, ...]:
    """For each result of top-level extern ``op`` (operand layouts ``operands``: ValueSpecs), the element
    strides in which its step will supply the result's buffer (ATen's fresh tensor's layout), or None where
    the step writes into a buffer of the plan's."""
    results = op.results
    none = (None,) * len(results)
    if any(r.type.dtype in _CONVERTED for r in results):
        return none
    if REGISTRY.get(op.name).category is Category.EXTERN:  # a library op: one ATen call
        predict = RESULT_STRIDES.get(op.name)
        predicted = none if predict is None else predict([(s.shape, s.strides) for s in operands],
                                                         [r.type.shape for r in results])
        return tuple(contiguous_strides(r.type.shape) if p is None else tuple(p) for p, r in zip(predicted, results))
    if op.attrs.get("words") and not op.has(Trait.MATRIX_PRODUCT):  # a convolution on bf16 words: ATen's fresh
        return tuple(contiguous_strides(r.type.shape) for r in results)  # tensors, contiguous (extern._dense)
    if not op.has(Trait.MATRIX_PRODUCT) or results[0].type.rank != 2 or any(s.dtype != "f32" for s in operands) \
            or results[0].type.dtype != DType.f32:  # mm, addmm of float32
        return none
    first = len(op.operands) - 2  # the factors are the last two operands
    shapes = [tuple(s.shape) for s in operands]
    for flag, position in (("transpose_a", first), ("transpose_b", first + 1)):
        if op.attrs.get(flag):
            shapes[position] = shapes[position][::-1]
    if not onednn_shapes_eligible(op.name, op.attrs, shapes):
        return none
    return (contiguous_strides(results[0].type.shape),)


def same_layout(shape: Sequence[int], strides: Sequence[int], other: Sequence[int]) -> bool:
    """Whether two element strides of ``shape`` address the same elements (a size-1 dim's stride is moot)."""
    return all(n == 1 or a == b for n, a, b in zip(shape, strides, other))
