"""torch <-> numpy at the executable boundary, with as few copies as the dtypes allow.

Inputs: a CPU tensor is handed over as ``tensor.numpy()``, a view of the same memory with the same strides
(no copy). bfloat16 has no numpy dtype and crosses as float32 holding bf16 values (the IR's convention);
float64 crosses as float32 (neuroncc computes it in float32), complex128 as complex64. Outputs: ``torch.from_numpy`` wraps the
executable's fresh array (no copy), then the tensor is given the dtype and strides eager PyTorch would give.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch

from neuroncc.errors import InputError

#: dtypes that cross as another (a copy, unavoidable: numpy has no bfloat16, f64 computes as f32 and complex128
#: as complex64).
_CROSSING = {torch.bfloat16: torch.float32, torch.float64: torch.float32, torch.complex128: torch.complex64}
_VIA_FLOAT32 = tuple(_CROSSING)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """The shape, strides and dtype eager PyTorch gives a tensor (read from ``node.meta["val"]``)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(tensor: torch.Tensor) -> TensorSpec:
        return TensorSpec(tuple(int(s) for s in tensor.shape), tuple(int(s) for s in tensor.stride()), tensor.dtype)


def to_numpy(tensor: torch.Tensor, bf16_bits: bool = False) -> np.ndarray:
    """A numpy view of a CPU tensor (a float32 copy for bf16 and f64, a complex64 copy for complex128; with
    ``bf16_bits``, a bf16 tensor's bits as an int16 view, no copy: see :func:`neuroncc.frontend.importer.
    import_graph`)."""
    try:
        if bf16_bits and tensor.dtype is torch.bfloat16:
            return tensor.detach().view(torch.int16).numpy()
        if tensor.dtype not in _VIA_FLOAT32:
            try:
                return tensor.detach().numpy()  # the common case, in one call
            except RuntimeError:  # a conjugate or negative bit to resolve first
                pass
        tensor = tensor.detach()
        if tensor.dtype in _CROSSING:
            return tensor.to(_CROSSING[tensor.dtype]).resolve_conj().resolve_neg().numpy()
        return tensor.resolve_conj().resolve_neg().numpy()
    except TypeError as exc:  # numpy's "can't convert meta device type tensor": a tensor without host memory
        if tensor.device.type == "cpu":
            raise
        raise InputError(f"a {tensor.device.type} tensor {str(tensor.dtype).removeprefix('torch.')}"
                         f"{list(tensor.shape)} was passed to a compiled graph: neuroncc runs on tensors in host "
                         "memory (CPU or neuron); a meta tensor has no values to compute on") from exc


class ParameterViews:
    """numpy views of the parameters a compiled graph takes, kept between calls.

    ``tensor.detach().numpy()`` costs 2-3 us for a tensor that requires grad, and a training step hands the same
    parameter tensors to its graphs on every call. A kept view is reused while the argument at that position is
    the same tensor object (held weakly) with the same data pointer, shape and strides; in-place updates (the
    optimizer's) show through the view. Only leaf tensors that require grad are kept (parameters live for the
    whole run anyway; keeping activations would hold them past their last use), and only real views (not the
    float32 copies of bf16/f64 tensors)."""

    def __init__(self, count: int, bf16_bits: bool = False):
        self._kept: list[tuple[weakref.ref, int, tuple[int, ...], tuple[int, ...], np.ndarray] | None] = [None] * count
        self._bf16_bits = bf16_bits

    def arrays(self, args: list[torch.Tensor], positions: list[int]) -> list[np.ndarray]:
        kept, arrays = self._kept, []
        for slot, position in enumerate(positions):
            tensor = args[position]
            entry = kept[slot]
            if entry is not None and entry[0]() is tensor and tensor.data_ptr() == entry[1] and \
                    tensor.shape == entry[2] and tensor.stride() == entry[3]:
                arrays.append(entry[4])
                continue
            array = to_numpy(tensor, self._bf16_bits)
            viewed = tensor.dtype not in _VIA_FLOAT32 or (self._bf16_bits and tensor.dtype is torch.bfloat16)
            if tensor.requires_grad and tensor.is_leaf and viewed and not tensor.is_conj() and not tensor.is_neg():
                kept[slot] = (weakref.ref(tensor), tensor.data_ptr(), tensor.shape, tensor.stride(), array)
            else:
                kept[slot] = None
            arrays.append(array)
        return arrays


def numpy_layout(spec: TensorSpec) -> tuple[np.dtype, tuple[int, ...]] | None:
    """The numpy dtype and byte strides an executable's result needs for ``torch.from_numpy`` alone to give
    ``spec`` (see :func:`wrap_result`), or None when the dtype has no numpy equivalent."""
    dtype = _NUMPY_DTYPES.get(spec.dtype)  # a table: this runs at compile time, under a fake tensor mode
    if dtype is None:
        return None
    return dtype, tuple(s * dtype.itemsize for s in spec.stride)


_NUMPY_DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                 torch.int64: np.dtype(np.int64), torch.int32: np.dtype(np.int32), torch.int16: np.dtype(np.int16),
                 torch.int8: np.dtype(np.int8), torch.uint8: np.dtype(np.uint8), torch.bool: np.dtype(np.bool_),
                 torch.complex64: np.dtype(np.complex64)}


def wrap_result(array: np.ndarray, spec: TensorSpec, layout: tuple[np.dtype, tuple[int, ...]] | None) -> torch.Tensor:
    """:func:`to_torch`, without its conversions when the result already has ``layout`` (from
    :func:`numpy_layout`): the usual case, one ``torch.from_numpy``."""
    if layout is not None and type(array) is np.ndarray and array.dtype == layout[0] and \
            array.strides == layout[1] and array.shape == spec.shape and array.flags.writeable:
        return torch.from_numpy(array)
    return to_torch(array, spec)


def to_torch(array: np.ndarray, spec: TensorSpec) -> torch.Tensor:
    """Wrap an executable's result as a tensor with ``spec``'s dtype and eager's strides."""
    array = np.asarray(array)
    if not array.flags.writeable:  # torch.from_numpy needs writable memory; executables may return views
        array = array.copy()
    tensor = torch.from_numpy(array)
    if spec.dtype is torch.bfloat16 and tensor.dtype is torch.int16:
        tensor = tensor.view(torch.bfloat16)  # a bf16 result's bits (see to_numpy)
    elif tensor.dtype != spec.dtype:
        tensor = tensor.to(spec.dtype)
    if tuple(tensor.shape) != spec.shape:
        raise ValueError(f"executable returned shape {list(tensor.shape)}, the graph says {list(spec.shape)}")
    return with_strides(tensor, spec.stride)


def with_strides(tensor: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``tensor``'s values laid out with ``stride`` (eager's layout), copying only if the layout differs."""
    if tensor.numel() <= 1 or _same_layout(tensor.shape, tensor.stride(), stride):
        return tensor
    broadcast = [d for d, (size, st) in enumerate(zip(tensor.shape, stride)) if st == 0 and size > 1]
    if broadcast:
        # An expanded (stride-0) output: lay out one slice and expand it again, as eager's expand did.
        compact = tensor
        for d in broadcast:
            compact = compact.narrow(d, 0, 1)
        compact_stride = tuple(1 if d in broadcast else st for d, st in enumerate(stride))
        return with_strides(compact.contiguous(), compact_stride).expand(tensor.shape)
    try:
        return torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype).copy_(tensor)
    except RuntimeError:
        # Self-overlapping strides (from as_strided) cannot be written; keep the values in a dense layout.
        return tensor


def _same_layout(shape: torch.Size, have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Strides agree on every dim where they matter (a dim of size 1 may have any stride)."""
    return all(size == 1 or a == b for size, a, b in zip(shape, have, want))
