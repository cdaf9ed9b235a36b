"""bf16 matrix products on the neuron device: ATen's own bf16 kernel, writing into device memory.

Where the host multiplies bf16 natively (AVX512-BF16 or AMX: ``extern.aten_multiplies_bf16_natively``),
ATen's bf16 product (oneDNN's bf16 GEMM) is what CPU eager runs, in 0.36-0.42x the time of the float32
product of the same values. A compiled program of one product would widen its operands' bits into float32
buffers, narrow them again for that call (the same decision, made for compiled graphs in ``extern.run_extern``)
and convert the product back twice: 1.4-2.0x the time of ATen's call alone ([128, 512] x [512, 2048]: 1.34 ms
against CPU eager's 0.67, session 46, AMD Zen 4); ``fallback.run_on_host`` (host
views, the result copied into device memory) adds a copy of the result and its walk over the arguments. This
entry runs the ``out=`` form of the op on host views of the operands into a new device tensor: CPU eager's
bits (the functional and ``out=`` forms run the same ATen code), 70-170 us above CPU eager's call where
run_on_host was 120-960 us ([32, 512] x [512, 512] to [4096, 256] x [256, 1024], 2 threads, AMD Zen 4,
session 46). Other overloads of the products (``out=``, in place) take ``AtenOnDeviceMemory``
(``layouts.aten_on_device_memory``), calls with operands ATen would refuse take run_on_host, which raises
eager's error.

The same entry runs ``addmm`` (and ``addmm_``, ``addmm.out``) of any dtype whose ``beta``/``alpha`` are Python
floats (:func:`scaled`): a compiled program builds them into its BLAS call (``executors/cpu/blas.py``), one
kernel per value (~3 ms each, an entry in the bounded cache); ATen's call is CPU eager's bits for every value,
as that program's were (session 47).
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.device import memory
from neuroncc.device.fallback import run_on_host
from neuroncc.device.op_forms import OpForm
from neuroncc.executors.tracing import StepInfo, active_tracer

aten = torch.ops.aten


def _mm_shape(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    a, b = args[0], args[1]
    return (a.shape[0], b.shape[1]) if a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] else None


def _addmm_shape(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    return _mm_shape(args[1:3])


def _bmm_shape(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    a, b = args[0], args[1]
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return None
    return (a.shape[0], a.shape[1], b.shape[2])


def _baddbmm_shape(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    return _bmm_shape(args[1:3])


#: functional product -> (its out= overload, the result's shape from the positional tensor arguments, or None
#: where ATen would refuse them)
PRODUCTS = {
    aten.mm.default: (aten.mm.out, _mm_shape, 2),
    aten.addmm.default: (aten.addmm.out, _addmm_shape, 3),
    aten.bmm.default: (aten.bmm.out, _bmm_shape, 2),
    aten.baddbmm.default: (aten.baddbmm.out, _baddbmm_shape, 3),
}


#: every overload of the products (``out=`` and in-place forms too) that runs ATen's bf16 kernel on the device's
#: memory (``layouts.aten_on_device_memory``); the functional ones take :class:`AtenBf16Product`
PRODUCT_PACKETS = frozenset({op.overloadpacket for op in PRODUCTS} | {aten.addmm_, aten.baddbmm_})


#: products whose Python floats (``beta``, ``alpha``) send every call of the signature to ATen (:func:`scaled`)
SCALED_PACKETS = frozenset({aten.addmm, aten.addmm_})


def scaled(form: OpForm, floats: list[float]) -> bool:
    """Whether the call is an ``addmm`` whose ``beta`` or ``alpha`` is a Python float (ATen runs it)."""
    return bool(floats) and getattr(form.op, "overloadpacket", None) in SCALED_PACKETS


class AtenBf16Product:
    """The entry of a functional bf16 product (:data:`PRODUCTS`), or of a :func:`scaled` ``addmm`` of any dtype:
    a device op, not a fallback."""

    holds_kernel = False

    def __init__(self, form: OpForm, index: int, state: Any):
        self.form, self.index, self.state = form, index, state
        self.out_op, self.shape_of, self.tensor_count = PRODUCTS[form.op]
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        count = self.tensor_count
        shape = self.shape_of(args) if len(args) >= count else None
        if shape is None or any(not isinstance(t, torch.Tensor) or t.device.type != "neuron" or
                                t.dtype is not args[0].dtype for t in args[:count]):
            # a keyword tensor, shapes or dtypes ATen refuses or a CPU tensor: its own call (and eager's error)
            return run_on_host(self.form, args, kwargs, self.index)
        self.state.device_calls += 1
        out = memory.empty(shape, args[0].dtype, self.index)
        views = [memory.host_view(t) for t in args[:count]]
        tracer = active_tracer()  # torch.profiler sees it as the extern step its program would run
        if tracer is None:
            self.out_op(*views, *args[count:], **kwargs, out=memory.host_view(out))
        else:
            with tracer.step(StepInfo(self.form.name, "extern", "neuron device")):
                self.out_op(*views, *args[count:], **kwargs, out=memory.host_view(out))
        return out


def entry(form: OpForm, tensors: list[torch.Tensor], index: int, state: Any) -> AtenBf16Product | None:
    """The entry of a functional product that ATen runs (a bf16 call ``layouts.aten_on_device_memory`` sends to
    ATen, or a :func:`scaled` one), else None (its other overloads: ``entries.AtenOnDeviceMemory``)."""
    if form.op not in PRODUCTS:
        return None
    return AtenBf16Product(form, index, state)
