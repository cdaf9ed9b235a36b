"""Making ``neuron`` a PyTorch device: :func:`register`.

    PrivateUse1 renamed "neuron" -> torch.neuron (device module), hooks, device guard
      -> structural ops (factories, copies, views, resize, set_, item) for the PrivateUse1 key
      -> one boxed fallback for every other op: the eager compiler (dispatch.py), which on first use of an op
         registers a direct kernel for it so later calls skip the fallback
      -> AutocastPrivateUse1: a fallthrough, and casting kernels for CPU autocast's ops (autocast.py)
      -> torch.accelerator routing, tensor printing through a CPU copy, neuron UntypedStorages from the
         device's allocator, CPU tensors' ``pin_memory()`` (pinned.py)

Cheap: the eager dispatcher behind the fallback (dispatch.py and what it imports) is imported on the first op
that reaches the fallback, the compiler on the first op it compiles. Called by the ``torch.backends`` entry
point (autoload.py) when torch is imported, by ``import neuroncc.device``, and safe to call again.
"""

from __future__ import annotations

import importlib
import itertools
import threading
from typing import Any

import torch

from neuroncc.device import (autocast, autograd_decomposed, config, fake_convolution, pinned, streams, structural,
                             torch_module)
from neuroncc.device.accelerator import route_accelerator
from neuroncc.device.backward_devices import route_backward
from neuroncc.device.generators import route_torch_generator
from neuroncc.device.printing import print_through_cpu
from neuroncc.device.untraced import untraced
from neuroncc.codegen.llvm.fork_safety import renew_in_child

DEVICE_NAME = "neuron"

_lock = renew_in_child(threading.Lock())
_libraries: list[torch.library.Library] = []  # kept alive: dropping a Library unregisters its kernels


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    #: The device type, which PyTorch's C++ asks through pybind11 for every device guard and every autograd node
    #: on the device (2 a view under autograd, ~37 a Linear + LayerNorm block's backward): a C-level callable
    #: returning the constant, so that an ask runs no Python frame (the backward ~2% faster).
    type_ = staticmethod(itertools.repeat(torch._C._autograd.DeviceType.PrivateUse1).__next__)


def is_registered() -> bool:
    return bool(_libraries)


def register() -> None:
    """Register the ``neuron`` device with PyTorch (idempotent)."""
    with _lock:
        if _libraries:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", DEVICE_NAME):
            raise RuntimeError(f"cannot register the neuron device: PyTorch's PrivateUse1 backend is already "
                               f"'{current}' (one process can host one PrivateUse1 device)")
        config.load_from_environment()
        if current == "privateuseone":
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=torch_module, hook=_Hooks(),
                                                    device_guard=_Guard())
        kernels = torch.library.Library("aten", "IMPL")
        for name in REGISTERED_AT_ONCE:
            kernels.impl(name, untraced(_through_fallback(getattr(torch.ops.aten, name).default)), "PrivateUse1",
                         with_keyset=True)
        structural.register(kernels)
        pinned.register(kernels)
        streams.register(kernels)
        route_torch_generator()
        route_backward()
        autograd_decomposed.register(kernels)
        kernels.impl("_thnn_fused_lstm_cell", untraced(_lstm_cell_with_biases), "PrivateUse1", with_keyset=True)
        # sparse neuron tensors (nn.Embedding(sparse=True)'s gradient) are refused by name, not by PyTorch's
        # "Could not run ... with arguments from the 'Sparseneuron' backend"
        kernels.impl("_sparse_coo_tensor_with_dims_and_tensors", untraced(_sparse_refused), "SparsePrivateUse1")
        fallback = torch.library.Library("_", "IMPL")
        fallback.fallback(untraced(_device_fallback), "PrivateUse1", with_keyset=True)
        autocast.register(kernels, fallback, DEVICE_NAME)
        _libraries.extend((kernels, fallback))
        structural.install_storage_constructor()
        fake_convolution.install(DEVICE_NAME)  # traced convolutions laid out as eager's (CPU's)
        route_accelerator()
        print_through_cpu()


#: Ops that would never reach the fallback, given a kernel here, at registration, that goes where the fallback
#: goes:
#: * ``convolution_overrideable`` and its backward: PyTorch fills their PrivateUse1 entry with a kernel that only
#:   raises; ATen calls them for convolutions on a backend it does not know (a process whose first device op
#:   was a convolution reached that kernel when they were registered only once the dispatcher was imported).
#: * ``native_layer_norm``, ``native_group_norm``: their CompositeExplicitAutograd kernels (``math_native_layer_norm``
#:   ...) would run for the device: a batch norm, then ``out * weight + bias``, which promotes a bfloat16 input
#:   with float32 weights (autocast's usual case) to a float32 result where CPU's kernel and the op's meta
#:   give bfloat16. The device compiles them whole, from the front end's decomposition (one program, not three).
#: * ``addr``: its CompositeExplicitAutograd kernel (``beta * self + alpha * outer``, three device ops) rounds a
#:   bf16/f16 result where CPU's kernel does not (frontend/lowering/low_precision.py has CPU's).
#: * ``cummax``, ``cummin``, ``logcumsumexp``, ``cholesky_solve``: their CompositeExplicitAutograd kernels call
#:   ``_cummax_helper``, ``_cummin_helper``, ``_logcumsumexp`` and ``_cholesky_solve_helper``, which have no meta
#:   kernel, so every call fell back to CPU; the front end lowers the ops themselves. (bool ``cummax``/``cummin``
#:   still run on CPU: the IR's scans take no bool.)
REGISTERED_AT_ONCE = ("convolution_overrideable", "convolution_backward_overrideable", "native_layer_norm",
                      "native_group_norm", "addr", "cummax", "cummin", "logcumsumexp", "cholesky_solve")

#: Ops whose PrivateUse1 kernel here adjusts a call before the fallback takes it (dispatch.py makes their handlers
#: without registering them again).
ADJUSTED_AT_ONCE = ("_thnn_fused_lstm_cell",)

_fallback: list[Any] = []  # dispatch.device_fallback, once imported


def _through_fallback(op: Any) -> Any:
    """``op``'s kernel: the fallback's first call (which imports the eager dispatcher), then ``op``'s own device
    kernel straight (three Python frames fewer a call: ``native_layer_norm`` is one of every model's commonest)."""
    direct: list[Any] = []

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if direct:
            return direct[0](*args, **kwargs)
        result = _device_fallback(keyset, op, *args, **kwargs)
        if not direct:
            direct.append(importlib.import_module("neuroncc.device.dispatch").handler_for(op).run)
        return result

    return kernel


def _lstm_cell_with_biases(keyset: Any, input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
                           input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> Any:
    """``_thnn_fused_lstm_cell`` of an ``nn.LSTM(bias=False)`` (no biases) with zero biases: PyTorch's meta kernel
    of the op, which the device checks each new call with, reads the device of the absent biases and raises
    (torch 2.13). Adding zeros changes no value but a zero's sign; autograd, above this kernel, saw no biases."""
    if input_bias is None and hidden_bias is None:
        input_bias = hidden_bias = torch.zeros(input_gates.shape[1], dtype=input_gates.dtype,
                                               device=input_gates.device)
    return _device_fallback(keyset, torch.ops.aten._thnn_fused_lstm_cell.default, input_gates, hidden_gates, cx,
                            input_bias, hidden_bias)


def _sparse_refused(*args: Any, **kwargs: Any) -> Any:
    from neuroncc.device.fallback import sparse_result_error

    raise sparse_result_error("aten._sparse_coo_tensor_with_dims_and_tensors")


def _device_fallback(keyset: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """The boxed fallback as registered: the eager dispatcher's, imported by the first op that reaches it (it
    registers direct kernels for the ops it sees, so most later calls do not come through here)."""
    if not _fallback:
        with _lock:
            if not _fallback:
                dispatch = importlib.import_module("neuroncc.device.dispatch")
                dispatch.set_library(_libraries[0])
                _fallback.append(dispatch.device_fallback)
    return _fallback[0](keyset, op, *args, **kwargs)
