"""``torch.autocast("neuron", dtype=torch.bfloat16 | torch.float16)``: the AutocastPrivateUse1 dispatch key.

    with torch.autocast("neuron"): y = linear(x, w, b)
      -> the dispatcher reaches AutocastPrivateUse1 first (PyTorch adds it to every neuron tensor's keys and
         excludes it while autocast is off for the device)
      -> an op of autocast_policy.AUTOCAST_POLICY: its AutocastKernel casts the floating-point neuron
         arguments (to the autocast dtype, to float32, or to the widest of them), then calls the op again
         with every autocast key excluded: autograd records the casts, so the backward runs in the dtypes
         the forward used
      -> any other op: a fallthrough (no Python, no cost): it runs in the dtypes it is given

This is what PyTorch's C++ ``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)`` wrappers do for CPU tensors
(``cached_cast``, ``CastPolicy``), with CPU's op lists; the dtype and its default (float16, PyTorch's for
PrivateUse1), enabling and nesting are PyTorch's own (``torch.get_autocast_dtype("neuron")``). A dtype other
than bfloat16 and float16 (``torch.neuron.get_amp_supported_dtype()``) makes ``torch.autocast`` warn and
disable itself, as CPU autocast does.

Differences from CPU's C++ wrappers: casts of float32 weights are not cached across the ops of one autocast
region (CPU casts a weight once per region however many ops use it; here each op using it casts it: the same
values, one cast kernel per use).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from neuroncc.device.autocast_policy import AUTOCAST_POLICY, CastPolicy
from neuroncc.device.untraced import untraced

AUTOCAST_KEY = "AutocastPrivateUse1"


def _all_autocast_keys() -> Any:
    """Every backend's autocast key: an autocast kernel runs its op with all of them excluded (as the C++
    wrappers exclude ``AutocastFunctionality``), so a nested CPU autocast does not cast again; the device
    traces its kernels with them excluded too (programs.py)."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    for name in dir(torch._C.DispatchKey):
        if name.startswith("Autocast"):
            keys = keys | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name))
    return keys


ALL_AUTOCAST_KEYS = _all_autocast_keys()


class AutocastKernel:
    """The AutocastPrivateUse1 kernel of one aten overload under one :class:`CastPolicy`."""

    def __init__(self, name: str, policy: CastPolicy, device_type: str):
        self.name, self.policy, self.device_type = name, policy, device_type
        self._op: Any = None  # the OpOverload, looked up on the first call (keeps registration cheap)
        self.__name__ = f"neuron_autocast_{name}"

    @property
    def op(self) -> Any:
        if self._op is None:
            packet_name, _, overload = self.name.partition(".")
            self._op = getattr(getattr(torch.ops.aten, packet_name), overload or "default")
        return self._op

    def __call__(self, keyset: Any, *args: Any, **kwargs: Any) -> Any:
        lower = torch.get_autocast_dtype(self.device_type)
        with torch._C._ExcludeDispatchKeyGuard(ALL_AUTOCAST_KEYS):
            target = self._target_dtype(lower, args, kwargs)
            args = tuple(self._cast(value, target) for value in args)
            kwargs = {name: self._cast(value, target) for name, value in kwargs.items()}
            return self.op(*args, **kwargs)

    def _target_dtype(self, lower: torch.dtype, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype:
        if self.policy is CastPolicy.LOWER_PRECISION:
            return lower
        if self.policy is CastPolicy.FLOAT32:
            return torch.float32
        return _widest(lower, (t for value in (*args, *kwargs.values()) for t in _tensors(value)
                               if self._eligible(t)))

    def _eligible(self, value: Any) -> bool:
        """A floating-point tensor on the device (float64 cannot be one: the device stores it as float32)."""
        return isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == self.device_type

    def _cast(self, value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self._cast(item, dtype) for item in value)
        if self._eligible(value) and value.dtype is not dtype:
            return value.to(dtype)
        return value


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _widest(lower: torch.dtype, tensors: Iterable[torch.Tensor]) -> torch.dtype:
    """The promote policy's dtype: float32 if any tensor is float32, else the autocast dtype; another
    floating dtype (float16 under bfloat16 autocast) is an error, as in PyTorch's ``prioritize``."""
    widest = lower
    for tensor in tensors:
        if tensor.dtype is torch.float32:
            widest = torch.float32
        elif tensor.dtype is not lower:
            raise RuntimeError(f"Unexpected floating ScalarType in at::autocast::prioritize: {tensor.dtype} "
                               f"under {lower} autocast on the {tensor.device.type} device")
    return widest


def register(kernels: torch.library.Library, fallback: torch.library.Library, device_type: str) -> None:
    """A fallthrough for every op on the AutocastPrivateUse1 key, and a casting kernel for each op of the
    policy (``kernels``: an ``aten`` IMPL library; ``fallback``: the ``_`` one): 3.5-5.7 ms of ``register()``."""
    fallback.fallback(torch.library.fallthrough_kernel, AUTOCAST_KEY)
    for name, policy in AUTOCAST_POLICY.items():
        # untraced: eager code inside a compiled function (FSDP2's hooks) must not trace the kernel as user code
        kernels.impl(name, untraced(AutocastKernel(name, policy, device_type)), AUTOCAST_KEY, with_keyset=True)
