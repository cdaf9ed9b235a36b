"""What DistributedDataParallel needs to run on the neuron device: its bf16 gradient-compression hooks.

DDP refuses ``bf16_compress_hook`` and ``bf16_compress_wrapper(...)``'s hooks unless CUDA with NCCL 2.10+ or
XPU with XCCL is present (``DistributedDataParallel._check_comm_hook`` knows them by name); the ``neuron``
group all-reduces bf16 tensors (gloo sums them, as it does float16 for ``fp16_compress_hook``), so a DDP over a
neuron group takes them. :func:`install` (called when a neuron process group is made) lets those hooks through
for such a DDP and leaves every other check, and every other DDP, to PyTorch's own code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch.nn.parallel import DistributedDataParallel

#: The hooks DDP refuses off CUDA/NCCL and XPU/XCCL, by name (as DDP knows them).
BF16_HOOK_NAMES = frozenset({"bf16_compress_hook", "bf16_compress_wrapper_hook"})

_installed = False


def install(neuron_group: type) -> None:
    """Let a DDP of neuron parameters over a group of class ``neuron_group`` take the bf16 compression hooks
    (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    original = DistributedDataParallel._check_comm_hook

    def check_comm_hook(self: DistributedDataParallel, hook: Callable[..., Any]) -> None:
        if (getattr(hook, "__name__", None) in BF16_HOOK_NAMES and self.device_type == "neuron"
                and isinstance(self.process_group, neuron_group)):
            hook = _renamed(hook)  # the same hook to DDP's other checks (callable, its annotations)
        original(self, hook)

    check_comm_hook.__doc__ = original.__doc__
    DistributedDataParallel._check_comm_hook = check_comm_hook


def _renamed(hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def same_hook(*args: Any, **kwargs: Any) -> Any:
        return hook(*args, **kwargs)

    same_hook.__name__ = f"neuron_{hook.__name__}"
    return same_hook
