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
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

from neuroncc.device import memory
from neuroncc.device.autocast import ALL_AUTOCAST_KEYS
from neuroncc.device.op_forms import OpForm, argument
from neuroncc.frontend.convert import TensorSpec
from neuroncc.frontend.importer import ComputedOutput, GraphOutput

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
    leaves = tree_leaves(result)
    if form.writes:
        leaves = [leaf for leaf, name in zip(leaves, form.returns) if name is None]
    return [tuple(leaf.stride()) if isinstance(leaf, torch.Tensor) and memory.dense_strides(leaf.shape, leaf.stride())
            else None for leaf in leaves]


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
