"""Fake (traced) convolutions on the ``neuron`` device laid out as CPU's: what ``torch.compile`` traces.

PyTorch's fake-tensor rule for ``convolution`` and its backward picks the result's memory format from the
convolution backend ATen would choose for the tensors' device; for a PrivateUse1 device that is the
"overrideable" backend, whose format is always contiguous. The device's eager convolutions return CPU's layout
(channels_last for channels_last operands: ``layouts.py``), so a graph TorchDynamo and AOTAutograd traced on
neuron tensors returned contiguous outputs where eager returns channels_last, and everything after the first
convolution was contiguous inside the graph. :func:`install` wraps the rule: a result on the neuron device
takes the strides of the same call on CPU fake tensors. Installed when the device registers (before any
trace: fake results are cached by the op's arguments).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

aten = torch.ops.aten

_OPS = (aten.convolution.default, aten.convolution_backward.default)


def install(device_type: str) -> None:
    """Wrap the fake-tensor rule of :data:`_OPS` (idempotent)."""
    from torch._subclasses import fake_impls

    for op in _OPS:
        rule = fake_impls.op_implementations_dict.get(op)
        if rule is None or getattr(rule, "_neuron_wrapped", False):
            continue
        fake_impls.op_implementations_dict[op] = _like_cpu(rule, device_type)


def _like_cpu(rule: Any, device_type: str) -> Any:
    def wrapped(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        result = rule(fake_mode, func, *args, **kwargs)
        flat, tree = tree_flatten(result)
        if not any(isinstance(t, torch.Tensor) and t.device.type == device_type for t in flat):
            return result
        with fake_mode:  # the same call on CPU fake tensors of the operands' layouts

            def on_cpu(value: Any) -> Any:
                if isinstance(value, torch.Tensor) and value.device.type == device_type:
                    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="cpu")
                return value

            cpu = tree_leaves(rule(fake_mode, func, *tree_map(on_cpu, args), **tree_map(on_cpu, kwargs)))
        if len(cpu) != len(flat):
            return result
        return tree.unflatten([_restrided(fake_mode, t, c) for t, c in zip(flat, cpu)])

    wrapped._neuron_wrapped = True  # type: ignore[attr-defined]
    return wrapped


def _restrided(fake_mode: Any, value: Any, cpu: Any) -> Any:
    """``value`` (a fake neuron tensor) with ``cpu``'s strides, when they differ."""
    if not isinstance(value, torch.Tensor) or not isinstance(cpu, torch.Tensor) or value.shape != cpu.shape or \
            value.stride() == cpu.stride():
        return value
    from torch._subclasses.fake_tensor import FakeTensor

    with torch._subclasses.fake_tensor.in_kernel_invocation_manager(fake_mode):
        meta = torch.empty_strided(value.shape, cpu.stride(), dtype=value.dtype, device="meta")
    return FakeTensor(fake_mode, meta, value.device)
