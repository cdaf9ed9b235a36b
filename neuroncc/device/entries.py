"""Making the entry for a new call signature: compile it, or decide how else it runs (see dispatch.py).

This module holds the compiler's imports (the torch front end, the compile driver): dispatch.py imports it on
the first op that needs an entry, so registering the device stays cheap.
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any

import torch

from neuroncc.device import (bf16_products, foreach_donated, fused_optimizers, generators, memory, signature_index,
                             tracking)
from neuroncc.device.kernel_compile import compile_kernel
from neuroncc.device.counters import COUNTS
from neuroncc.device.build_lock import built
from neuroncc.device.fallback import HostFallback, HostRandom, run_on_host
from neuroncc.device.kernels import CompiledKernel
from neuroncc.device import layouts
from neuroncc.device.layouts import SELF_FORMAT
from neuroncc.device.op_forms import OpForm, argument
from neuroncc.device.programs import CannotCompile, build_program, out_layouts
from neuroncc.device.signature import describe
from neuroncc.device.stand_ins import evaluate
from neuroncc.executors.tracing import StepInfo, active_tracer
from neuroncc.frontend import profiling

aten = torch.ops.aten


def make_entry(handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
               floats: list[float], index: int, lookup: Any) -> Any:
    """The entry for a new signature of ``handler``'s op; ``lookup(op)`` is the device kernel of another op."""
    tracking.report_to_stats()  # cheap and idempotent; before any op of this process runs on the device
    profiling.ensure_installed()  # torch.profiler sees the device's kernels and CPU fallbacks (idempotent)
    form: OpForm = handler.form
    state = handler.state
    if _numbers_for_tensors(form, args, kwargs):
        return WrapNumbers(handler)
    redirect = REDIRECTS.get(form.op)
    if redirect is not None:
        return Redirect(lookup(redirect[0]), redirect[1])
    custom = CUSTOM_ENTRIES.get(form.op)
    if custom is not None and (not hasattr(custom, "takes") or custom.takes(tensors, floats)):
        return custom(form, index, state)
    if form.random:
        return HostRandom(form, index, state)
    if layouts.aten_on_device_memory(form, tensors):
        return bf16_products.entry(form, tensors, index, state) or AtenOnDeviceMemory(form, index, state)
    entry = _kernel_entry(handler, form, args, kwargs, tensors, floats, index, state)
    if bf16_products.scaled(form, floats):
        aten_entry = bf16_products.entry(form, tensors, index, state) or AtenOnDeviceMemory(form, index, state)
        return FirstValues(entry, floats, aten_entry)
    if floats and entry.holds_kernel and tensors[0].is_floating_point() and \
            (form.op in CHECKED_SCALARS or form.op in FLOAT32_SCALARS or form.op in REFUSED_VALUES):
        dtype = torch.float32 if form.op in FLOAT32_SCALARS else tensors[0].dtype
        return CheckedScalars(entry, form, index, dtype, REFUSED_VALUES.get(form.op))
    return entry


def _kernel_entry(handler: Any, form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any],
                  tensors: list[torch.Tensor], floats: list[float], index: int, state: Any) -> Any:
    """make_entry's entry for a call that runs a kernel of its own: loaded through the index, or built."""
    # a signature an earlier process compiled: its kernel straight from the compile cache, no program built (and
    # no meta run sizing out= tensors: a signature indexed was one whose outs needed no resize)
    signature = describe(args, kwargs)[0]
    slot = signature_index.Slot.of(form.op, signature)
    hit = slot.lookup(tensors) if slot is not None else None
    if hit is not None:
        COUNTS["eager_kernels_loaded"] += 1
        return _deriving(CompiledKernel(form, hit.program, hit.executable, index, tensors, state), index)
    valued = signature_index.Slot.of_values(form.op, signature, floats) if floats else None
    hit = valued.lookup(tensors) if valued is not None else None
    if hit is not None:
        COUNTS["eager_kernels_loaded"] += 1
        return ByFloatValue(form, CompiledKernel(form, hit.program, hit.executable, index, tensors, state), floats,
                            index, state)
    if form.out_arguments and _out_resizes(form, args, kwargs, tensors, floats):
        return ResizeOuts(handler, index)
    try:
        program = build_program(form, args, kwargs, tensors, floats)
        # indexed by the signature when the kernel serves every value of the call's floats (as this entry
        # does), else by the values too; a guarded kernel serves the values its guards admit: not indexed
        value_free = program.lifted or not floats
        kernel = compile_kernel(form, program, index, tensors, state,
                                None if program.guards else slot if value_free else valued)
    except CannotCompile as error:
        COUNTS["eager_fallback_signatures"] += 1
        return HostFallback(form, error.reason, index, state, refused=error.refused)
    kernel = _deriving(kernel, index)
    if value_free and program.guards:
        return Guarded(form, kernel, program.guards, index, state)
    if value_free:
        return kernel
    return ByFloatValue(form, kernel, floats, index, state)


def _deriving(kernel: CompiledKernel, index: int) -> Any:
    """``kernel``, or its :class:`DerivedFloats` when its program takes floats derived from the call's."""
    return DerivedFloats(kernel, index) if kernel.program.derived else kernel


class DerivedFloats:
    """A lifted kernel whose program also takes floats derived from the call's (``Program.derived``: a constant
    its decomposition computed from them, ``0.5 * beta``): each call computes them, in Python's double precision
    as the decomposition did, and passes them after the call's own. A call whose floats cannot derive them
    (``1 / 0.0`` raises in Python) runs on CPU: eager's result or error."""

    holds_kernel = True

    def __init__(self, kernel: CompiledKernel, index: int):
        self.kernel, self.index = kernel, index
        self.form, self.program = kernel.form, kernel.program
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        try:
            derived = [evaluate(expression, floats) for expression in self.program.derived]
        except (ArithmeticError, ValueError):
            return run_on_host(self.form, args, kwargs, self.index)
        return self.kernel.call(args, kwargs, tensors, [*floats, *derived])


class KernelFreeEntry:
    """An entry that holds no compiled kernel of its own (never evicted with the kernels): its op's form, the
    device index and the op's counters."""

    holds_kernel = False

    def __init__(self, form: OpForm, index: int, state: Any):
        self.form, self.index, self.state = form, index, state
        self.tick = 0


class AtenOnDeviceMemory(KernelFreeEntry):
    """A call whose program would be one ATen call writing through a transposing copy (a channels_last
    convolution, layouts.aten_on_device_memory): ATen's kernel runs on the device's memory instead, its result
    copied into device memory as laid out (one copy, no transposes). A device op, not a fallback."""

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        self.state.device_calls += 1
        tracer = active_tracer()  # torch.profiler sees it as the extern step its program would run
        if tracer is None:
            return run_on_host(self.form, args, kwargs, self.index)
        with tracer.step(StepInfo(self.form.name, "extern", "neuron device")):
            return run_on_host(self.form, args, kwargs, self.index)


def _values(floats: list[float]) -> bytes:
    """The key of a call's float values: their bits (0.0 and -0.0 are equal floats but fill other bits; a NaN is
    unequal to itself, which would build its kernel again at every call)."""
    return struct.pack(f"{len(floats)}d", *floats)


#: Ops whose Python floats eager converts to the tensor's dtype with an overflow check (``c10::checked_convert``:
#: ``torch.full((2,), 70000.0, dtype=torch.float16)``, ``x16.masked_fill(m, 1e5)`` and ``x16.clamp(max=1e5)``
#: raise). Their kernels take the floats as arguments (lifted, ``programs._lift``) or built with them as
#: constants, neither of which checks, so a call with a finite float beyond the dtype's range runs on CPU, which
#: raises eager's error (:class:`CheckedScalars`).
CHECKED_SCALARS = frozenset({
    aten.fill_.Scalar, aten.fill.Scalar, aten.masked_fill.Scalar, aten.masked_fill_.Scalar,
    aten.index_fill.int_Scalar, aten.index_fill_.int_Scalar,
    aten.clamp.default, aten.clamp_.default, aten.clamp.out, aten.clamp_min.default, aten.clamp_min_.default,
    aten.clamp_min.out, aten.clamp_max.default, aten.clamp_max_.default, aten.clamp_max.out,
    aten.hardtanh.default, aten.hardtanh_.default, aten.hardtanh.out,
    aten.logit.default, aten.logit_.default, aten.logit.out, aten.logit_backward.default,
    aten.logit_backward.grad_input,
})
#: Ops whose floats eager converts to float32 with that check whatever the tensor's dtype (``elu``'s
#: ``alpha.to<float>()``, also in its bfloat16/float16 kernels; ``celu`` reaches the device as ``elu`` with
#: ``input_scale = 1 / alpha``: ``celu(x, 1e-40)`` raises)
FLOAT32_SCALARS = frozenset({aten.elu.default, aten.elu_.default, aten.elu.out, aten.elu_backward.default,
                             aten.elu_backward.grad_input})


def _negative_beta(floats: list[float]) -> bool:
    return not floats[0] >= 0  # (NaN too)


#: Ops eager refuses some values of their floats for where the device's decomposition computes a result: the
#: check eager makes, on the call's floats (such calls run on CPU, which raises eager's error)
REFUSED_VALUES = {
    # "smooth_l1_loss does not support negative values for beta." (ATen's composite checks before any kernel)
    aten.smooth_l1_loss.default: _negative_beta, aten.smooth_l1_loss.out: _negative_beta,
}


class CheckedScalars:
    """The entry of a :data:`CHECKED_SCALARS` (or :data:`FLOAT32_SCALARS`, :data:`REFUSED_VALUES`) op on a
    floating-point tensor: calls whose floats are all within ``dtype``'s range (or infinite, or NaN) and not
    refused take the kernel entry, the others run on CPU."""

    def __init__(self, entry: Any, form: OpForm, index: int, dtype: torch.dtype, refuses: Any = None):
        self.entry, self.form, self.index = entry, form, index
        self.holds_kernel = entry.holds_kernel
        self.largest = torch.finfo(dtype).max
        self.refuses = refuses
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        largest = self.largest
        if any(abs(value) > largest and not math.isinf(value) for value in floats) or \
                (self.refuses is not None and self.refuses(floats)):  # (a NaN compares False)
            return run_on_host(self.form, args, kwargs, self.index)
        return self.entry.call(args, kwargs, tensors, floats)


class ByFloatValue:
    """Kernels of a signature whose program depends on its floats' values: one per distinct tuple of floats."""

    holds_kernel = True
    guarded = False  # (a Guarded's kernels for other values are not indexed: its lifted kernel is not either)

    def __init__(self, form: OpForm, first: CompiledKernel, floats: list[float], index: int, state: Any):
        self.form, self.index, self.state = form, index, state
        self.kernels = {_values(floats): first}
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        kernel = self.kernels.get(_values(floats))
        if kernel is None:
            try:
                kernel = built(lambda: self._kernel_for(args, kwargs, tensors, floats))
            except CannotCompile:  # these values' own build failed: their meta kernel refused them (huber_loss's
                # delta <= 0 after a lifted kernel's guard ``delta > 0``), or the IR a constant: CPU, as eager
                return run_on_host(self.form, args, kwargs, self.index)
        return kernel.call(args, kwargs, tensors, floats)

    def _kernel_for(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                    floats: list[float]) -> CompiledKernel:
        """The kernel of these floats' values: made by another thread meanwhile, loaded through the index, or
        built and compiled (and indexed)."""
        kernel = self.kernels.get(_values(floats))
        if kernel is not None:
            return kernel
        valued = signature_index.Slot.of_values(self.form.op, describe(args, kwargs)[0], floats)
        hit = valued.lookup(tensors) if valued is not None else None
        if hit is not None:
            COUNTS["eager_kernels_loaded"] += 1
            kernel = CompiledKernel(self.form, hit.program, hit.executable, self.index, tensors, self.state)
        else:
            program = build_program(self.form, args, kwargs, tensors, floats, lift=False)
            kernel = compile_kernel(self.form, program, self.index, tensors, self.state,
                                    None if self.guarded else valued)
        self.kernels[_values(floats)] = kernel
        return kernel


class FirstValues:
    """A signature whose kernel depends on its floats' values (a :func:`bf16_products.scaled` ``addmm``: ``beta``
    and ``alpha`` are built into its BLAS call) where ATen computes the same bits without a kernel: the kernel of
    the first call's values serves those (a model's constant ``beta``: ~20 us a call, ATen's ~35 us,
    [8, 32] x [32, 16]), every other value goes to ATen (no compile per value: ~3 ms and a cache entry each)."""

    holds_kernel = True

    def __init__(self, first: Any, floats: list[float], others: Any):
        self.first, self.values, self.others = first, _values(floats), others
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        if _values(floats) == self.values:
            return self.first.call(args, kwargs, tensors, floats)
        return self.others.call(args, kwargs, tensors, floats)


class Guarded(ByFloatValue):
    """A lifted kernel whose build branched on its floats (programs.Program.guards): it serves the values its
    guards admit; each other tuple of floats gets its own kernel, built with them (``beta=0.0`` after
    ``beta=0.5``)."""

    def __init__(self, form: OpForm, lifted: CompiledKernel, guards: Any, index: int, state: Any):
        super().__init__(form, lifted, [], index, state)
        self.guarded = True
        self.kernels.clear()
        self.lifted, self.guards = lifted, guards

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        if self.guards.holds(floats):
            return self.lifted.call(args, kwargs, tensors, floats)
        return super().call(args, kwargs, tensors, floats)


class ResizeOuts:
    """``out=`` tensors of another shape than the result's: resized first (as eager resizes them), then the
    call goes through the op's kernel again under its new signature. The shapes are worked out per call:
    they can depend on the floats (``arange``), which are not in the signature."""

    holds_kernel = False

    def __init__(self, handler: Any, index: int):
        self.handler, self.index = handler, index
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        resizes = _out_resizes(self.handler.form, args, kwargs, tensors, floats)
        if not resizes:  # the same signature again would come back here: its meta kernel refused these floats
            # (CPU raises eager's error: arange's step of the wrong sign), or its outs fit them (CPU computes it)
            return run_on_host(self.handler.form, args, kwargs, self.index)
        for name, shape, strides in resizes:
            out = argument(self.handler.op, name, args, kwargs).resize_(shape)
            if out.stride() != strides and memory.dense_strides(shape, strides):  # eager's layout (out_layouts)
                out.as_strided_(shape, strides)
        return self.handler(None, *args, **kwargs)


def _out_resizes(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> list[tuple[str, torch.Size, tuple[int, ...]]]:
    try:
        layouts = out_layouts(form, args, kwargs, tensors, floats)
    except CannotCompile:
        return []
    resizes = []
    restrides = form.functional in SELF_FORMAT  # CPU's kernel lays its out= tensor out in its input's format
    for name, layout in zip(form.out_arguments, layouts):
        out = argument(form.op, name, args, kwargs)
        if isinstance(out, torch.Tensor) and layout is not None and \
                (out.shape != layout[0] or restrides and out.stride() != layout[1]):
            resizes.append((name, *layout))
    return resizes


class NativeDropout(KernelFreeEntry):
    """``aten.native_dropout``: the mask drawn from the device's generator, the scaling compiled."""

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        self.state.device_calls += 1
        input, p = args[0], float(args[1]) if len(args) > 1 else float(kwargs["p"])
        train = args[2] if len(args) > 2 else kwargs.get("train")
        if train is False or p == 0.0:
            return input.clone(), torch.ones_like(input, dtype=torch.bool)
        mask = torch.empty(input.shape, dtype=torch.bool, device=input.device)
        memory.host_view(mask).bernoulli_(1.0 - p, generator=generators.generator(self.index))
        if p >= 1.0:
            return input * mask, mask
        return input * mask * (1.0 / (1.0 - p)), mask


class Equal(KernelFreeEntry):
    """``aten.equal`` (``torch.equal``): a Python bool, so its value is needed at once: the same sizes, then a
    compiled ``eq`` and ``all`` on the device, read back. Tensors CPU's kernel refuses go to it for its error."""

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        a, b = argument(self.form.op, "self", args, kwargs), argument(self.form.op, "other", args, kwargs)
        if a.dtype != b.dtype or a.device != b.device:
            return run_on_host(self.form, args, kwargs, self.index)
        self.state.device_calls += 1
        if a.shape != b.shape:
            return False
        if a.numel() == 0:
            return True
        return bool(torch.eq(a, b).all().item())


def _tensor_parameters(op: Any) -> list[tuple[int, str]]:
    return [(position, a.name) for position, a in enumerate(op._schema.arguments)
            if isinstance(a.type, torch._C.TensorType) or
            (isinstance(a.type, torch._C.OptionalType) and isinstance(a.type.getElementType(), torch._C.TensorType))]


def _numbers_for_tensors(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call passes a Python number for a Tensor parameter (the dispatcher boxes a wrapped-number
    0-d tensor, ``remainder(int_tensor, 12)``'s 12, as a Python number; no kernel can be called so)."""
    for position, name in _tensor_parameters(form.op):
        value = args[position] if position < len(args) else kwargs.get(name)
        if isinstance(value, int | float | bool):
            return True
    return False


class WrapNumbers:
    """A call with Python numbers in Tensor parameters: each becomes the 0-d CPU tensor it stood for (as
    eager's wrapped numbers are), and the call goes through the op's kernel again under that signature.

    The places and kinds of the numbers are part of this entry's signature, so they are found on the first
    call. The 0-d tensors are shared by value (:func:`wrapped_number`): making one costs as much as the rest
    of a small op (``x * 0.5``). After the first call, when that signature's kernel is the one-result or in-place kind
    and the numbers are positional, later calls go to it straight with each number in a buffer of the
    0-d tensor's bytes (:meth:`CompiledKernel.fed_by_numbers`): no tensor, no second signature."""

    holds_kernel = False  # until it holds the other signature's kernel (then evicted with the kernels)

    def __init__(self, handler: Any):
        self.handler = handler
        self.parameters = _tensor_parameters(handler.op)
        self.tick = 0
        self.places: tuple[list[int], list[str]] | None = None
        self.direct: Any = None
        self.eager_dtype: torch.dtype | None = None  # the result's dtype where the wrapped call's differs

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        direct = self.direct
        if direct is not None:
            return direct(args, kwargs, tensors, floats)
        places = self.places
        if places is None:
            positions = [p for p, _ in self.parameters if p < len(args) and isinstance(args[p], int | float | bool)]
            names = [n for p, n in self.parameters if p >= len(args) and isinstance(kwargs.get(n), int | float | bool)]
            places = self.places = (positions, names)
            self.eager_dtype = _eager_dtype(self.handler.op, args, kwargs)
        positions, names = places
        new_args = list(args)
        for position in positions:
            new_args[position] = wrapped_number(new_args[position])
        if names:
            kwargs = dict(kwargs)
            for name in names:
                kwargs[name] = wrapped_number(kwargs[name])
        if names:
            return self.handler(None, *new_args, **kwargs)
        key, wrapped_tensors, wrapped_floats = describe(new_args, kwargs)
        result = self.handler(None, *new_args, **kwargs)
        if self.eager_dtype is not None and isinstance(result, torch.Tensor) and result.dtype != self.eager_dtype:
            return result.to(self.eager_dtype)  # one rounding of the float32 result, as CPU's opmath kernels
        kernel = self.handler.entries.get(key)
        if isinstance(kernel, CompiledKernel) and not wrapped_floats:
            feed = self._feed(new_args, positions, wrapped_tensors)
            kernel.rebound.append(lambda: self._go_direct(kernel, feed))  # the optimized code, once swapped in
            self._go_direct(kernel, feed)
        return result

    def _go_direct(self, kernel: CompiledKernel, feed: list[Any]) -> None:
        self.direct = kernel.fed_by_numbers(feed)
        if self.direct is not None:
            self.holds_kernel = True
            self.call = self.direct  # type: ignore[method-assign]  # the dispatcher calls it straight

    @staticmethod
    def _feed(new_args: list[Any], positions: list[int], wrapped_tensors: list[torch.Tensor]) -> list[Any]:
        """Where each tensor of the wrapped call comes from (see CompiledKernel.fed_by_numbers): the numbers'
        0-d tensors by their argument positions, the others in order from the original call's tensors."""
        feed, original = [], 0
        for tensor in wrapped_tensors:
            position = next((p for p in positions if new_args[p] is tensor), None)
            if position is None:
                feed.append((original, -1, None))
                original += 1
            else:
                feed.append((-1, position, _NUMBER_BUFFERS[tensor.dtype]))
        return feed


def _eager_dtype(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    """The dtype eager gives the call with its Python numbers, where the wrapped call's may differ: eager's
    wrapped numbers never win type promotion, the 0-d float32 tensors :func:`wrapped_number` makes do against
    0-d float16/bfloat16 tensors (``loss_bf16 * 0.5`` was float32). None when no tensor argument is such."""
    if not any(isinstance(a, torch.Tensor) and a.dim() == 0 and a.dtype in (torch.float16, torch.bfloat16)
               for a in (*args, *kwargs.values())):
        return None
    def meta(value: Any) -> Any:
        return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value
    try:
        result = op(*(meta(a) for a in args), **{k: meta(v) for k, v in kwargs.items()})
    except Exception:  # the call itself raises it, as eager words it
        return None
    return result.dtype if isinstance(result, torch.Tensor) else None


#: the ctypes type holding a wrapped number's 0-d tensor's bytes, by its dtype (wrapped_number's three)
_NUMBER_BUFFERS = {torch.float32: ctypes.c_float, torch.int64: ctypes.c_int64, torch.bool: ctypes.c_bool}


#: (type, value) -> (the 0-d CPU tensor holding it, its version when made); bounded
_WRAPPED: dict[tuple[type, Any], tuple[torch.Tensor, int]] = {}
_WRAPPED_CAPACITY = 256


def wrapped_number(value: Any) -> torch.Tensor:
    """``torch.tensor(value)``, shared between calls passing the same number. Keys hold the type (``True == 1``)
    and a zero's sign (``-0.0 == 0.0``); a NaN is never found again (``nan != nan``), so each makes a tensor. A tensor some
    kernel wrote into (its version moved) is not handed out again."""
    kind = type(value)
    # a zero carries its sign (0.0 == -0.0 as keys); a NaN never finds itself and makes a fresh tensor
    key = (kind, value) if value else (kind, value, math.copysign(1.0, value))
    cached = _WRAPPED.get(key)
    if cached is not None and cached[0]._version == cached[1]:
        return cached[0]
    # floats become float32 whatever the default dtype: under torch.set_default_dtype(torch.float64) a float64
    # scalar gives the call a signature the device runs as float32, i.e. this very entry again (RecursionError)
    tensor = torch.tensor(value, dtype=torch.float32) if kind is float else torch.tensor(value)
    if len(_WRAPPED) >= _WRAPPED_CAPACITY:
        _WRAPPED.clear()
    _WRAPPED[key] = (tensor, tensor._version)
    return tensor


class Redirect:
    """An op the device computes as another op, its arguments adapted (``convolution_overrideable``, which
    ATen calls for convolutions on a backend it does not know, is ``convolution``)."""

    holds_kernel = False

    def __init__(self, target: Any, adapt: Any):
        self.target, self.adapt = target, adapt
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        new_args, new_kwargs = self.adapt(args, kwargs)
        return self.target(None, *new_args, **new_kwargs)


def _same_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def _with_bias_sizes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """convolution_backward_overrideable's arguments -> convolution_backward's (which takes the bias size)."""
    grad_output, input, weight, *rest = args
    transposed, groups = rest[3], rest[5]
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return (grad_output, input, weight, [channels], *rest), kwargs


def _native_batch_norm_backward(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """batch_norm_backward(..., update, eps, output_mask, reserve) -> native_batch_norm_backward(..., train=update,
    eps, output_mask): CPU's kernel for it is the same computation (the reserve buffer is cuDNN's)."""
    named = ("grad_out", "input", "weight", "running_mean", "running_var", "save_mean", "save_var", "update", "eps",
             "output_mask", "reserve")
    values = {**dict(zip(named, args)), **kwargs}
    return tuple(values[name] for name in named[:10]), {}


def _without_unsafe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """_index_put_impl_(self, indices, values, accumulate, unsafe) -> index_put_(self, indices, values, accumulate)."""
    return args[:4], {k: v for k, v in kwargs.items() if k != "unsafe"}


#: op -> (the op computing it, argument adapter)
REDIRECTS = {
    aten._index_put_impl_.default: (aten.index_put_.default, _without_unsafe),
    aten.batch_norm_backward.default: (aten.native_batch_norm_backward.default, _native_batch_norm_backward),
    # autograd's zero gradients (sgn, ...): memory-less on CPU, plain zeros on the device
    aten._efficientzerotensor.default: (aten.zeros.default, _same_arguments),
    aten.convolution_overrideable.default: (aten.convolution.default, _same_arguments),
    aten.convolution_backward_overrideable.default: (aten.convolution_backward.default, _with_bias_sizes),
}
#: Ops with an entry of their own (the fused optimizer steps: fused_optimizers.py; in-place foreach ops computed in
#: place: foreach_donated.py, for the signatures its ``takes`` accepts).
CUSTOM_ENTRIES = {aten.native_dropout.default: NativeDropout, aten.equal.default: Equal, **fused_optimizers.ENTRIES,
                  **foreach_donated.ENTRIES}
