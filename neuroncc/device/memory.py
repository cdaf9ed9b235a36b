"""``neuron`` tensors over the allocator's blocks, and CPU tensors over the same memory.

A neuron tensor is an ordinary strided TensorImpl with the PrivateUse1 dispatch key whose storage is a
non-owning view of a :class:`~neuroncc.device.allocator.Block` (``storage._owner = block`` keeps the block
alive exactly as long as the storage: see allocator.py). It is made the cheapest way found from Python
(~4 us): a bare PrivateUse1 tensor, then CPU's ``set_`` kernel (redispatched past our own key) points it at
the storage with the wanted sizes and strides. CPU's view kernels work on these tensors the same way and keep
the neuron key, which is how views are implemented (structural.py).

The device's memory is host memory, so a CPU tensor over the same bytes (:func:`host_view`) lets CPU kernels
read and write a neuron tensor in place: copies across devices, the CPU fallback and ``.item()`` use it.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable

import torch

from neuroncc.device.allocator import ALLOCATOR, Block

CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
# The boxed redispatch entry point without OpOverload.redispatch's Python frame (~1.5 us of ~5 per tensor).
_redispatch_set = getattr(getattr(_SET_STORAGE, "_handle", None), "redispatch_boxed", None) or _SET_STORAGE.redispatch
_storage_at = torch._C._construct_storage_from_data_pointer
_bare_tensor = torch._C._acc.create_empty_tensor
_CPU = torch.device("cpu")
_EMPTY_SHAPE = (0,)

_devices: list[torch.device] = []
_DEVICE_0 = torch.device("privateuseone", 0)  # the same device whatever PrivateUse1 is named


def device(index: int) -> torch.device:
    """``torch.device("neuron", index)``, made once."""
    while len(_devices) <= index:
        _devices.append(torch.device(torch._C._get_privateuse1_backend_name(), len(_devices)))
    return _devices[index]


def extent_bytes(shape: tuple[int, ...] | torch.Size, stride: tuple[int, ...], itemsize: int,
                 offset: int = 0) -> int:
    """Bytes a strided tensor spans from its storage's start (0 when it has no elements)."""
    if any(size == 0 for size in shape):
        return 0
    return (offset + 1 + sum((size - 1) * step for size, step in zip(shape, stride))) * itemsize


def storage_for(block: Block, index: int, nbytes: int) -> torch.UntypedStorage:
    """A neuron storage of ``nbytes`` over ``block`` that keeps the block alive."""
    storage = _storage_at(block.address, device(index), nbytes)
    storage._owner = block
    return storage


def on_storage(storage: torch.UntypedStorage, dtype: torch.dtype, shape: tuple[int, ...] | list[int],
               stride: tuple[int, ...] | list[int], offset: int = 0) -> torch.Tensor:
    """A new neuron tensor viewing ``storage``."""
    index = storage.device.index
    tensor = _bare_tensor(_EMPTY_SHAPE, dtype) if not index else _bare_on(index, dtype)
    _redispatch_set(CPU_KEYS, tensor, storage, offset, shape, stride)
    return tensor


_VIEW_DTYPE = torch.ops.aten.view.dtype
_redispatch_view_dtype = getattr(getattr(_VIEW_DTYPE, "_handle", None), "redispatch_boxed", None) or _VIEW_DTYPE.redispatch
_templates: dict[int, torch.Tensor] = {}


def _bare_on(index: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor on ``neuron:index`` (index > 0) to point at a storage of that device.

    ``create_empty_tensor`` only makes ``neuron:0`` tensors and CPU's ``set_`` refuses to move a tensor to a
    storage of another device, so each device gets one empty template tensor (made through DLPack, whose
    "ext_dev" device type PyTorch maps to PrivateUse1) and new tensors are views of it (a fresh TensorImpl
    each)."""
    template = _templates.get(index)
    if template is None:
        template = _templates[index] = dlpack_template(index)
    return _redispatch_view_dtype(CPU_KEYS, template, dtype)


def empty_strided(shape: tuple[int, ...] | list[int], stride: tuple[int, ...] | list[int], dtype: torch.dtype,
                  index: int) -> torch.Tensor:
    """A new neuron tensor on device ``index`` with fresh memory from the allocator (a factory's, ``empty_like``'s:
    contiguous strides take :func:`new_tensor`'s cheaper way)."""
    stride = tuple(stride)
    return new_tensor(extent_bytes(shape, stride, dtype.itemsize), shape, stride, dtype, index,
                      stride == bare_strides(shape))


def new_tensor(nbytes: int, shape: tuple[int, ...] | list[int], stride: tuple[int, ...] | list[int],
               dtype: torch.dtype, index: int, contiguous: bool = False) -> torch.Tensor:
    """:func:`empty_strided` with its byte extent already known (the eager path's hot call: one block, one
    storage, one tensor). ``contiguous``: the strides are the shape's contiguous ones."""
    block = ALLOCATOR.allocate(nbytes, index)
    if contiguous and index == 0:
        # The cheapest way (~2x faster than set_): a bare tensor of the right shape, whose empty storage
        # takes our block's data pointer and size (the swapped-out storage is empty and dies at once).
        tensor = _bare_tensor(shape, dtype)
        storage = tensor.untyped_storage()
        storage._swap_data_ptr_(_storage_at(block.address, _DEVICE_0, nbytes))
        storage._owner = block
        return tensor
    storage = _storage_at(block.address, _devices[index] if index < len(_devices) else device(index), nbytes)
    storage._owner = block
    tensor = _bare_tensor(_EMPTY_SHAPE, dtype) if index == 0 else _bare_on(index, dtype)
    _redispatch_set(CPU_KEYS, tensor, storage, 0, shape, stride)
    return tensor


def tensor_maker(nbytes: int, shape: tuple[int, ...] | list[int], stride: tuple[int, ...] | list[int],
                 dtype: torch.dtype, index: int, contiguous: bool = False) -> Callable[[], torch.Tensor]:
    """``make()`` -> a new tensor as :func:`new_tensor` makes it, for a caller that makes tensors of one layout
    over and over (a compiled op's result): the pool and the branches are settled once, here."""
    if not (contiguous and index == 0):
        return functools.partial(new_tensor, nbytes, shape, stride, dtype, index, contiguous)
    allocate = ALLOCATOR.pool(0).allocate

    def make() -> torch.Tensor:
        block = allocate(nbytes)
        tensor = _bare_tensor(shape, dtype)
        storage = tensor.untyped_storage()
        storage._swap_data_ptr_(_storage_at(block.address, _DEVICE_0, nbytes))
        storage._owner = block
        return tensor

    return make


def empty(shape: tuple[int, ...] | list[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """A new contiguous neuron tensor."""
    return empty_strided(shape, contiguous_strides(shape), dtype, index)


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def bare_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The strides ``create_empty_tensor`` gives a shape (contiguous, a zero-size dim zeroing those before it)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= int(size)
    return tuple(reversed(strides))


def host_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``tensor``'s memory (same sizes, strides and offset); CPU tensors are returned as they
    are. Writing through it writes the neuron tensor; it keeps the memory alive as long as it lives."""
    if tensor.device.type == "cpu":
        return tensor
    storage = tensor.untyped_storage()
    host = getattr(storage, "_host", None)
    if host is None:
        # One CPU storage per neuron storage, owning the same block (not the neuron storage: no cycle).
        host = _storage_at(storage.data_ptr(), _CPU, storage.nbytes())
        host._owner = getattr(storage, "_owner", storage)
        storage._host = host
    view = torch.empty(0, dtype=tensor.dtype)
    view.set_(host, tensor.storage_offset(), tensor.size(), tensor.stride())
    if tensor.is_conj():  # lazily conjugated / negated (complex) views keep their bit
        view = view.conj()
    if tensor.is_neg():
        view = view._neg_view()
    return view


def to_device(cpu: torch.Tensor, index: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A neuron copy of a CPU tensor (same strides when they are dense, else contiguous), in ``dtype``."""
    dtype = dtype or cpu.dtype
    if is_dense(cpu):
        result = empty_strided(tuple(cpu.shape), cpu.stride(), dtype, index)
    else:
        result = empty(tuple(cpu.shape), dtype, index)
    host_view(result).copy_(cpu)
    return result


def commit(target: torch.Tensor, source: torch.Tensor, nbytes: int) -> None:
    """Make ``target`` hold ``source``'s values (same shape, strides and dtype; both dense; ``nbytes`` their
    extent). When ``target`` is the whole of a storage of ours, the two storages exchange their memory: O(1),
    and every tensor viewing ``target``'s storage sees the new values (its data pointer changes, as after a
    storage swap on any device). Otherwise the bytes are copied."""
    storage = target.untyped_storage()
    if target.storage_offset() == 0 and storage.nbytes() == nbytes and getattr(storage, "_owner", None) is not None:
        other = source.untyped_storage()
        storage._swap_data_ptr_(other)
        storage._owner, other._owner = other._owner, storage._owner
        storage.__dict__.pop("_host", None)  # a CPU view of the old memory
        other.__dict__.pop("_host", None)
    else:
        ctypes.memmove(target.data_ptr(), source.data_ptr(), nbytes)


def dense_strides(shape: tuple[int, ...] | list[int], strides: tuple[int, ...] | list[int]) -> bool:
    """Elements cover a contiguous range exactly once in some dim order (a permuted contiguous layout)."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(shape, strides) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def is_dense(tensor: torch.Tensor) -> bool:
    """:func:`dense_strides` of a tensor."""
    return dense_strides(tensor.shape, tensor.stride())


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DL_DELETER)]


_DL_EXT_DEV, _DL_FLOAT = 12, 2
_keep_alive: list[object] = []  # the templates live as long as the process: their DLPack structs too


def dlpack_template(index: int) -> torch.Tensor:
    """An empty float32 ``neuron:index`` tensor, made through DLPack (no storage of ours behind it)."""
    shape, strides = (ctypes.c_int64 * 1)(0), (ctypes.c_int64 * 1)(1)
    memory = (ctypes.c_char * 64)()
    deleter = _DL_DELETER(lambda _: None)
    managed = _DLManagedTensor(_DLTensor(ctypes.addressof(memory), _DLDevice(_DL_EXT_DEV, index), 1,
                                         _DLDataType(_DL_FLOAT, 32, 1), shape, strides, 0), None, deleter)
    _keep_alive.extend((shape, strides, memory, deleter, managed))
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return torch.from_dlpack(new_capsule(ctypes.addressof(managed), b"dltensor", None))
