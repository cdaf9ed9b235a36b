"""Printing ``neuron`` tensors: their values are formatted from a CPU copy.

PyTorch formats a tensor by running a dozen ops on it (abs, max, masked_select, isfinite, ...). On the device
each would be compiled on first use, so the first ``print`` would cost seconds and fill the executed-op
counters with printing's ops. PyTorch copies xla/lazy/ipu/mtia tensors to CPU before formatting for the same
reason; this does that for neuron: the values come from one copy, the suffixes (``device='neuron:0'``,
``grad_fn=``, dtype) from the tensor itself.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._tensor_str as tensor_str


def print_through_cpu() -> None:
    """Wrap ``torch._tensor_str._str`` once so neuron tensors' contents are formatted from a CPU copy."""
    original = tensor_str._str
    if getattr(original, "__neuroncc_routed__", False):
        return

    def _str(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
        if tensor_contents is None and _formats_from_cpu(self):
            with torch.no_grad():
                values = self.detach().to("cpu")
            prefix = "nested_tensor(" if self.is_nested else "tensor("
            if values.numel() > 0 or values.dim() == 1:
                tensor_contents = tensor_str._tensor_str(values, len(prefix))
        return original(self, tensor_contents=tensor_contents)

    _str.__neuroncc_routed__ = True
    _str.__wrapped__ = original
    tensor_str._str = _str


def _formats_from_cpu(tensor: Any) -> bool:
    return (type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.layout == torch.strided
            and tensor.device.type == torch._C._get_privateuse1_backend_name())
