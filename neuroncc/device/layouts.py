"""The strides eager PyTorch gives an op's new results on CPU: the device gives its results the same, so memory
formats propagate as they do on CPU (a channels_last input's convolution, batch norm, pooling, activations and
sums are channels_last; ``is_contiguous(memory_format=...)`` answers as on CPU).

    the op's meta kernel's strides            every op but those below (PyTorch's meta kernels follow CPU's)
    CPU_FAKE ops: CPU fake tensors' strides   the meta kernel picks by the tensors' device, which meta tensors
                                              lack (a channels_last convolution is contiguous on meta)
    SELF_FORMAT ops: ``self``'s format        CPU's kernel allocates in its input's suggested memory format,
                                              the meta kernel contiguously (reflection/replication pads, ...)
    CONTIGUOUS ops: contiguous                CPU's kernel allocates contiguously, the meta kernel in the
                                              input's format (``mse_loss_backward``)

A program's last node (a decomposition's) can have other strides than the op's meta kernel; the program's new
results get these instead (kernels.Binding writes them so, through a temporary when the kernel's own output
layout differs). ``tests/device/test_memory_format.py`` compares them with CPU.

The second half decides how a call is computed in its tensors' memory order (``memory_order_shapes``: pointwise
ops over flat or permuted buffers, batch norm over ``[elements / C, C]`` rows; ``aten_on_device_memory``:
convolutions by ATen on the device's memory), so channels_last tensors are not transposed per op
(``tests/device/test_memory_format_order.py``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

from neuroncc.device import memory
from neuroncc.device.autocast import ALL_AUTOCAST_KEYS
from neuroncc.device.bf16_products import PRODUCT_PACKETS
from neuroncc.device.op_forms import OpForm, argument
from neuroncc.executors.cpu.extern import aten_multiplies_bf16_natively
from neuroncc.frontend.convert import TensorSpec
from neuroncc.frontend.importer import ComputedOutput, GraphOutput
from neuroncc.ir.types import contiguous_strides

aten = torch.ops.aten

#: ops whose layout comes from a run on CPU fake tensors (PyTorch's own choice of convolution backend and format)
CPU_FAKE = frozenset({aten.convolution.default, aten.convolution_backward.default,
                      aten.pixel_shuffle.default, aten.pixel_unshuffle.default})
#: ops whose results CPU allocates in ``self``'s suggested memory format (their meta kernels: contiguous)
SELF_FORMAT = frozenset({
    aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
    aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default,
    aten.reflection_pad1d_backward.default, aten.reflection_pad2d_backward.default,
    aten.reflection_pad3d_backward.default, aten.replication_pad1d_backward.default,
    aten.replication_pad2d_backward.default, aten.replication_pad3d_backward.default,
    aten.channel_shuffle.default, aten.native_channel_shuffle.default,
    aten.max_unpool2d.default, aten.max_unpool3d.default,
})
#: ops whose results CPU allocates contiguously (their meta kernels: in the input's format)
CONTIGUOUS = frozenset({aten.mse_loss_backward.default})


def eager_result(op: Any, args: list[Any], kwargs: dict[str, Any], concrete: Any, result: Any) -> Any:
    """``result`` (the op's meta result for meta ``args``; ``concrete(value)`` makes an argument runnable)
    restrided as CPU's kernel lays it out."""
    if op in CPU_FAKE:
        return _restrided(result, _cpu_fake_run(op, args, kwargs, concrete))
    if op in SELF_FORMAT:
        self = argument(op, "self", args, kwargs)
        fmt = torch._prims_common.suggest_memory_format(self)
        return tree_map(lambda m: _in_format(m, fmt), result)
    if op in CONTIGUOUS:
        return tree_map(lambda m: _in_format(m, torch.contiguous_format), result)
    return result


def _in_format(value: Any, fmt: torch.memory_format) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty(value.shape, dtype=value.dtype, device="meta", memory_format=fmt)


def _cpu_fake_run(op: Any, args: list[Any], kwargs: dict[str, Any], concrete: Any) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fake(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype)
        return value

    args, kwargs = concrete(args), {name: concrete(value) for name, value in kwargs.items()}
    # autocast off: the call has its dtypes already (the device's kernels run inside the user's autocast region)
    with torch._C._ExcludeDispatchKeyGuard(ALL_AUTOCAST_KEYS), FakeTensorMode():
        return op(*tree_map(fake, args), **tree_map(fake, kwargs))


def _restrided(result: Any, on_cpu: Any) -> Any:
    flat, tree = tree_flatten(result)
    flat_cpu = tree_leaves(on_cpu)
    if len(flat_cpu) != len(flat):
        return result
    return tree.unflatten([torch.empty_strided(m.shape, c.stride(), dtype=m.dtype, device="meta")
                           if isinstance(m, torch.Tensor) and isinstance(c, torch.Tensor) and m.shape == c.shape
                           else m for m, c in zip(flat, flat_cpu)])


def new_result_strides(form: OpForm, result: Any) -> list[tuple[int, ...] | None]:
    """Eager's strides of each new result (``eager_result``'s), in a program's output order; None where the
    result is not a dense tensor."""
    return [None if layout is None else layout[1] for layout in new_result_layouts(form, result)]


def new_result_layouts(form: OpForm, result: Any) -> list[tuple[tuple[int, ...], tuple[int, ...]] | None]:
    """Shape and eager strides of each new result, in a program's output order; None where the result is not a
    dense tensor."""
    leaves = tree_leaves(result)
    if form.writes:
        leaves = [leaf for leaf, name in zip(leaves, form.returns) if name is None]
    return [(tuple(leaf.shape), tuple(leaf.stride())) if isinstance(leaf, torch.Tensor) and
            memory.dense_strides(leaf.shape, leaf.stride()) else None for leaf in leaves]


def laid_out(outputs: tuple[GraphOutput, ...], strides: list[tuple[int, ...] | None]) -> tuple[GraphOutput, ...]:
    """A program's ``outputs`` with each computed one given eager's ``strides`` (when its outputs are the op's
    new results one for one)."""
    if len(outputs) != len(strides):
        return outputs
    laid = []
    for output, wanted in zip(outputs, strides):
        if isinstance(output, ComputedOutput) and wanted is not None and wanted != output.spec.stride \
                and len(wanted) == len(output.spec.shape):
            output = ComputedOutput(output.index, TensorSpec(output.spec.shape, wanted, output.spec.dtype))
        laid.append(output)
    return tuple(laid)


# --- computing in memory order ------------------------------------------------------------------------------
#: ops that normalize each channel (dim 1) over every other dim: on a tensor whose channels are innermost in
#: memory (channels_last, channels_last_3d) they are the same op on its bytes seen as ``[elements / C, C]``
#: rows (BatchNorm1d's form). Per op: the arguments of the input's shape.
PER_CHANNEL = {
    aten.native_batch_norm.default: ("input",),
    aten._native_batch_norm_legit.default: ("input",),
    aten._native_batch_norm_legit.no_stats: ("input",),
    aten._native_batch_norm_legit_no_training.default: ("input",),
    aten.native_batch_norm_backward.default: ("grad_out", "input"),
}


#: how a call's tensor is presented to a program built in memory order: (shape, strides), None strides for a
#: contiguous tensor of that shape over the tensor's bytes
Presented = tuple[tuple[int, ...], tuple[int, ...] | None]


def memory_order_shapes(form: OpForm, args: list[Any], kwargs: dict[str, Any], tensors: list[Any],
                        strides: list[tuple[int, ...] | None]) -> list[Presented] | None:
    """How the program of a call is built over its tensors' bytes in memory order: per tensor, the shape (and
    strides, where it is not contiguous in that shape) it is read as; each new result is written as a
    contiguous tensor of its memory-order shape. None: build it over the tensors as they are (contiguous
    operands, mixed layouts, other ops).

    A dense tensor in any memory order is a flat buffer: a pointwise op (``torch.Tag.pointwise``) whose tensors
    are all of one shape and one dense non-contiguous layout (besides 0-d ones), and whose new results are
    laid out so too, is the same op over flat ``[numel]`` buffers (a channels_last ReLU, its backward, a residual
    add). With operands that broadcast (a per-channel scale ``[1, C, 1, 1]``, an expanded gradient), the op is
    built over every tensor permuted into the full-shape tensors' memory order (``[N, H, W, C]``; the
    broadcast ones keep their strides, permuted): a pointwise op commutes with a permutation of all its
    operands. A PER_CHANNEL op whose input's channels are innermost is the same op over ``[numel / C, C]`` rows.
    Without this the kernels compute in the logical (NCHW) order, reading such tensors with a stride and
    writing each result through a transposing copy (``kernels.Binding``'s temporary).

    ``tensors`` are the call's tensors (anything with shape and stride), ``strides`` the new results' eager
    strides (:func:`new_result_strides`); written tensors are among ``tensors``."""
    sized = [t for t in tensors if len(t.shape) > 0]
    if not sized:
        return None
    if form.foreach:
        return _foreach_memory_order(form, args, tensors, strides)
    if _pointwise(form.op) or form.functional is not None and _pointwise(form.functional):
        return _pointwise_memory_order(form, args, kwargs, tensors, strides)
    names = PER_CHANNEL.get(form.op)
    if names is None:
        return None
    full = [argument(form.op, name, args, kwargs) for name in names]
    shape, layout = tuple(full[0].shape), tuple(full[0].stride())
    if len(shape) < 3 or shape[1] < 2 or layout[1] != 1 or not _permuted_dense(shape, layout) or \
            any(tuple(t.shape) != shape or not _same_strides(shape, t.stride(), layout) for t in full) or \
            any(s is not None and len(s) == len(shape) and not _same_strides(shape, s, layout) for s in strides):
        return None
    rows = (math.prod(shape) // shape[1], shape[1])
    ids = {id(t) for t in full}
    return [(rows, None) if id(t) in ids else _as_is(t) for t in tensors]


def _as_is(tensor: Any) -> Presented:
    return tuple(tensor.shape), tuple(tensor.stride())


def _pointwise_memory_order(form: OpForm, args: list[Any], kwargs: dict[str, Any], tensors: list[Any],
                            strides: list[tuple[int, ...] | None]) -> list[Presented] | None:
    full = max((tuple(t.shape) for t in tensors), key=len)
    rank = len(full)
    sized = [t for t in tensors if len(t.shape) > 0]
    written = [argument(form.op, name, args, kwargs) for name in form.written]
    if rank < 2 or any(_broadcast(tuple(t.shape), full) is None for t in sized) or \
            any(not isinstance(t, torch.Tensor) or tuple(t.shape) != full for t in written):
        return None
    # the layout of the results (new ones, or the written tensors)
    layout = strides[0] if strides else tuple(written[0].stride()) if written else None
    if layout is None or not _permuted_dense(full, layout) or \
            any(s is None or not _same_strides(full, s, layout) for s in strides) or \
            any(not _same_strides(full, t.stride(), layout) for t in written):
        return None
    whole = {id(t) for t in sized if tuple(t.shape) == full and _same_strides(full, t.stride(), layout)}
    if len(whole) == len({id(t) for t in sized}):
        flat = (math.prod(full),)
        return [(flat, None) if len(t.shape) > 0 else ((), None) for t in tensors]
    order = sorted(range(rank), key=lambda d: (-layout[d] if full[d] != 1 else 0, d))
    if tuple(full[d] for d in order) == full:
        # [8, 8, 8, 8]: the results' memory-order shape is their own, and kernels.Binding could not tell their
        # bytes from a logical layout (it knows a memory-order output by its other shape)
        return None
    presented: list[Presented] = []
    for t in tensors:
        if len(t.shape) == 0:
            presented.append(((), None))
        elif id(t) in whole:
            presented.append((tuple(full[d] for d in order), None))
        else:  # broadcast or in another layout: aligned to the full rank, its strides kept (permuted with its dims)
            shape = (1,) * (rank - t.dim()) + tuple(t.shape)
            step = (0,) * (rank - t.dim()) + tuple(t.stride())
            presented.append((tuple(shape[d] for d in order), tuple(step[d] for d in order)))
    return presented


def _broadcast(shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...] | None:
    """``shape`` aligned to ``full``'s rank when it broadcasts to ``full``, else None."""
    if len(shape) > len(full):
        return None
    aligned = (1,) * (len(full) - len(shape)) + shape
    return aligned if all(a in (1, f) for a, f in zip(aligned, full)) else None


def _foreach_memory_order(form: OpForm, args: list[Any], tensors: list[Any],
                            strides: list[tuple[int, ...] | None]) -> list[Presented] | None:
    """memory_order_shapes of a pointwise ``_foreach_`` op (an optimizer's step over channels_last convolution
    weights): each list position whose tensors share one dense non-contiguous layout (and its new result, if
    any) is built over flat buffers, the other positions as they are."""
    element = getattr(aten, form.op._schema.name.split("::")[1].removeprefix("_foreach_").removesuffix("_"), None)
    if element is None or not any(_pointwise(getattr(element, name)) for name in element.overloads()):
        return None
    arguments = form.op._schema.arguments
    lists = [value for a, value in zip(arguments, args) if isinstance(a.type, torch._C.ListType)
             and isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value)]
    if not lists or len({len(value) for value in lists}) != 1:
        return None
    flat: dict[int, bool] = {}  # id(tensor) -> built over its flat buffer
    for position in range(len(lists[0])):
        group = [value[position] for value in lists if isinstance(value[position], torch.Tensor)]
        shape, layout = tuple(group[0].shape), tuple(group[0].stride())
        result = strides[position] if len(strides) == len(lists[0]) else None
        fits = len(shape) >= 2 and _permuted_dense(shape, layout) and \
            all(tuple(t.shape) == shape and _same_strides(shape, t.stride(), layout) for t in group) and \
            (not strides or result is not None and _same_strides(shape, result, layout))
        for t in group:
            if flat.setdefault(id(t), fits) != fits:
                return None  # one tensor at two positions, built two ways
    if not any(flat.values()):
        return None
    return [((math.prod(t.shape),), None) if flat.get(id(t)) else _as_is(t) for t in tensors]


#: ops that set every element alike (not tagged pointwise): flat buffers too
_FILLS = frozenset({aten.zero_.default, aten.zero.default, aten.fill_.Scalar, aten.fill.Scalar})


def _pointwise(op: Any) -> bool:
    return torch.Tag.pointwise in op.tags or op in _FILLS


def _permuted_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Dense, not contiguous, and holding elements (a layout worth building in memory order)."""
    return math.prod(shape) > 1 and memory.dense_strides(shape, strides) and \
        not _same_strides(shape, strides, contiguous_strides(shape))


def _same_strides(shape: tuple[int, ...], a: Any, b: Any) -> bool:
    """The same strides in every dim of size above 1 (the same element order in memory)."""
    return len(a) == len(b) == len(shape) and all(n == 1 or x == y for n, x, y in zip(shape, a, b))



def in_memory_order(outputs: tuple[GraphOutput, ...], results: list[tuple[tuple[int, ...], tuple[int, ...]] | None],
                    shapes: dict[tuple[int, ...], tuple[int, ...]]) -> tuple[GraphOutput, ...] | None:
    """The outputs of a program built in memory order (:func:`memory_order_shapes`) as the op's new results:
    each computed one of the memory-order shape of its result's shape (``shapes``: logical -> memory-order
    shape) is that result, in eager's layout (``results``: shape and strides per new result).
    ``kernels.Binding`` writes such an output in place: its contiguous bytes are the result's in memory order.
    None when the outputs are not the new results one for one."""
    if len(outputs) != len(results):
        return None
    laid = []
    for output, result in zip(outputs, results):
        if isinstance(output, ComputedOutput) and result is not None and result[0] in shapes and \
                shapes[result[0]] == output.spec.shape:
            output = ComputedOutput(output.index, TensorSpec(result[0], result[1], output.spec.dtype))
        laid.append(output)
    return tuple(laid)


#: ops whose device program is one ATen call (an extern step: executors/cpu/extern.py), which writes its result
#: into the program's contiguous output: for operands in another memory format the result is transposed there
#: and back into eager's layout by ``kernels.Binding``
ATEN_EXTERNS = frozenset({aten.convolution.default, aten.convolution_backward.default})
#: ops (every overload: ``out=`` forms too) whose CPU kernels compute channels_last (and channels_last_3d) tensors
#: in their memory order, vectorized over the channels, while the device's programs compute in the logical
#: order (reading with a stride, writing through a transposing temporary): pools, their backwards, the 2-d
#: reflection pad (not replication_pad2d: its CPU kernel called alone lays its result out contiguously, where
#: eager's ``F.pad`` gives channels_last)
CHANNELS_LAST_KERNELS = frozenset({
    aten.max_pool2d_with_indices, aten.max_pool2d_with_indices_backward, aten.avg_pool2d, aten.avg_pool2d_backward,
    aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward, aten.adaptive_max_pool2d,
    aten.adaptive_max_pool2d_backward, aten.max_pool3d_with_indices, aten.max_pool3d_with_indices_backward,
    aten.avg_pool3d, aten.avg_pool3d_backward, aten._adaptive_avg_pool3d, aten._adaptive_avg_pool3d_backward,
    aten.reflection_pad2d, aten.reflection_pad2d_backward,
})


#: matrix products (every overload, in-place forms too) that run ATen's own bf16 kernel on the device's memory
#: when their tensors are bf16 and the host multiplies bf16 natively (see bf16_products.py)
BF16_PRODUCTS = PRODUCT_PACKETS


def aten_on_device_memory(form: OpForm, tensors: list[torch.Tensor]) -> bool:
    """Whether the call runs ATen's own kernel on the device's memory (``fallback.run_on_host``: host views of
    the operands, the results copied into device memory in ATen's layout) instead of its program: a
    BF16_PRODUCTS or ATEN_EXTERNS op on bf16 tensors where the host multiplies bf16 natively (CPU eager's bits and
    speed: a bf16 convolution's program took 2.1-2.4x CPU eager's time, session 46), or an ATEN_EXTERNS or
    CHANNELS_LAST_KERNELS op whose floating-point tensors are float32 and some of whose tensors
    are dense in another memory format than contiguous (channels_last), where ATen's result is laid out so too
    (computed in memory order, CPU eager's values)."""
    packet = getattr(form.op, "overloadpacket", None)
    if packet in BF16_PRODUCTS or form.op in ATEN_EXTERNS:
        floats = [t for t in tensors if t.is_floating_point()]
        if floats and all(t.dtype is torch.bfloat16 for t in floats) and aten_multiplies_bf16_natively():
            return True
        if packet in BF16_PRODUCTS:
            return False
    if form.op not in ATEN_EXTERNS and packet not in CHANNELS_LAST_KERNELS:
        return False
    return all(t.dtype is torch.float32 for t in tensors if t.is_floating_point()) and \
        any(t.dim() >= 3 and _permuted_dense(tuple(t.shape), tuple(t.stride())) for t in tensors)
