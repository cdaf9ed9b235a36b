"""Strides of view ops: which ops alias their operand's buffer, and the strides a reshape or a reinterpreting
view gives that buffer in place (PyTorch's computeStride).

Facts about the view ops, read by the passes, both code generators and the cpu launcher (which loads an artifact
without importing the passes), so they live with the IR. The windows a chain of strided views makes of its
source buffer (the fusion, layout and NKI passes' question) are :mod:`neuroncc.ir.view_windows`.
"""

from __future__ import annotations

import math

from neuroncc.ir.graph import Op
from neuroncc.ir.opdef import Trait
from neuroncc.ir.types import contiguous_strides


def aliases_operand(op: Op) -> bool:
    """Whether ``op`` stays at the top level as an alias of operand 0's buffer (no buffer of its own): a strided
    view (a window on the buffer) or a reinterpreting view (c64 <-> f32 pairs over the same storage; fusion
    keeps those out of kernels, whose code never sees c64, and the launcher reinterprets the buffer)."""
    return op.has(Trait.STRIDED_VIEW) or op.has(Trait.REINTERPRET)


def reinterpreted_strides(op: Op, strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of a reinterpreting view's result (``Trait.REINTERPRET``), in its own elements, from its
    operand's; None when the operand's layout cannot be reinterpreted in place (a complex view needs adjacent
    (re, im) pairs)."""
    if op.result.type.dtype.is_complex:  # view_as_complex: f32 pairs -> c64
        *outer, last = strides
        shape = op.operands[0].type.shape
        if (last != 1 and shape[-1] > 1) or any(s % 2 for s, n in zip(outer, shape) if n > 1):
            return None
        return tuple(s // 2 for s in outer)
    return tuple(2 * s for s in strides) + (1,)  # view_as_real: c64 -> f32 pairs


def reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                    new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that view ``shape``/``strides`` data as ``new_shape`` in place, or None (PyTorch's computeStride).

    With at most one element (or none) every layout addresses the same data, so the result is contiguous."""
    if math.prod(shape) <= 1 or math.prod(new_shape) == 0:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        chunk_ends = tensor_d == 0 or (shape[tensor_d - 1] != 1
                                       and strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None
