"""Every non-structural op on ``neuron`` tensors: compiled per call signature on first use, or run on CPU.

    device_fallback(keyset, op, ...)     the boxed PrivateUse1 fallback: the first call of each op lands here
      -> handler_for(op): a DeviceOp, registered as the op's own PrivateUse1 kernel (and for the in-place,
         out= and functional overloads of its family that have no real PrivateUse1 kernel), so that later
         calls skip the fallback's boxing
      -> DeviceOp.run(*args) (registered without the keyset; ``DeviceOp(keyset, *args)`` from the fallback):
         signature.describe -> the entry for that signature, made on first use:
           CompiledKernel   programs.build_program -> driver.compile.compile_graph (memory + disk cache)
           ByFloatValue     the same, keyed by the float values too (the kernel depends on them)
           HostFallback     the op cannot be compiled: CPU kernels on the device's memory, warned once
           HostRandom       random ops: CPU kernels, the device's generator
           ResizeOuts       out= tensors of the wrong shape: resized (as eager does), then called again
         each entry's ``call(args, kwargs, tensors, floats)`` runs the op and returns its result

Entries are kept per op; all of them together are bounded (``CONFIG.kernel_capacity``): past it, the least
recently used half are dropped (a dropped kernel comes back from the disk cache without compiling).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from neuroncc.device import build_lock, diagnostics, memory
from neuroncc.device.build_lock import LOCK as _lock
from neuroncc.device.config import CONFIG
from neuroncc.device.counters import COUNTS, op_state
from neuroncc.device.op_forms import OpForm, form_of
from neuroncc.device.registration import ADJUSTED_AT_ONCE, REGISTERED_AT_ONCE
from neuroncc.device.signature import describe
from neuroncc.device.untraced import untraced

_library: torch.library.Library | None = None
_handlers: dict[Any, DeviceOp] = {}
_ticks = itertools.count(1)


def set_library(library: torch.library.Library) -> None:
    """The ``aten`` IMPL library direct kernels are registered on (kept alive by registration.py)."""
    global _library
    _library = library
    for name in (*REGISTERED_AT_ONCE, *ADJUSTED_AT_ONCE):  # their kernels are registration.py's: handlers only
        op = getattr(torch.ops.aten, name).default
        _handlers.setdefault(op, DeviceOp(op))
    from neuroncc.frontend.lowering.rnn_cells import missing_meta_kernels  # with the first op, not at autoload

    for name, kernel in missing_meta_kernels().items():  # every new call is checked on meta tensors first
        library.impl(name, kernel, "Meta")


def device_fallback(keyset: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    """The boxed fallback for every PrivateUse1 op without a kernel of its own."""
    return handler_for(op)(keyset, *args, **kwargs)


def handlers() -> list[DeviceOp]:
    return list(_handlers.values())


def handler_for(op: Any) -> DeviceOp:
    handler = _handlers.get(op)
    if handler is None:
        with _lock:
            handler = _handlers.get(op)
            if handler is None:
                if not _first_op_done:
                    _register_at_first_op()
                handler = _handlers.get(op)
                if handler is None:  # (not one the first op registered: registered now, with its family)
                    handler = _handlers[op] = DeviceOp(op)
                    _register(op)
                for member in _family(op)[1:]:
                    if member not in _handlers:  # (a kernel registered twice makes PyTorch warn of an override)
                        _handlers[member] = DeviceOp(member)
                        _register(member)
    return handler


_first_op_done = False


def _register_at_first_op() -> None:
    """Give the ops whose generic kernels would reach the device through another op a device kernel of their own
    (once, with the first op the device sees; none of them is compiled until called).

    * Every ``_foreach_*`` op. PyTorch's generic foreach kernels (CompositeExplicitAutograd, used for backends
      without their own) loop over the lists calling the per-tensor op, so an optimizer step would be one kernel
      call per parameter and op. The device's own foreach kernel compiles the whole list into one program
      instead; torch.optim's foreach Adam/AdamW/SGD steps become one program each (foreach_optimizers.py),
      clip_grad_norm_ two (clip_grad.py).
    * The families :func:`handler_for` registers when one of their ``out=`` overloads first reaches the fallback
      (:func:`_structured_families`). A structured op's functional and in-place overloads (``clamp``, ``mm``,
      ``add.Tensor``) have a generic kernel (CompositeExplicitAutogradNonFunctional) that allocates the result
      and calls the ``out=`` overload: left to it, each op's first call reached the device as ``out=``, and
      its second call, now taking the functional's own kernel, built its program again (13 of a
      TransformerEncoderLayer training step's 59 kernels' programs were built twice, the second time in the
      second step: 70-100 ms of it where the step takes 8-15 ms; session 48). Only the process's first op
      still comes as ``out=``.
    """
    global _first_op_done
    _first_op_done = True
    from neuroncc.device import clip_grad, foreach_optimizers  # the compiler: imported on the first op

    foreach_optimizers.install()
    clip_grad.install()
    names = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")]
    for name in [name for name in names if name.startswith("aten::_foreach_")] + _structured_families(names):
        packet, _, overload = name.removeprefix("aten::").partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
        if op is None or op in _handlers:
            continue
        _handlers[op] = DeviceOp(op)
        _register(op)


def _structured_families(names: list[str]) -> list[str]:
    """The overloads :func:`_family` gives for an op of a family with a generic functional-via-``out=`` kernel
    (CompositeExplicitAutogradNonFunctional) and an overload that reaches the fallback (its ``out=``, which has
    no generic kernel): the ops that would take a device kernel at that ``out=`` overload's first call. A
    family whose generic kernels decompose into other ops (``select_backward``: its ``out=`` is
    CompositeExplicitAutograd) is not one: its ops keep running through the ops they decompose into."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(name.removeprefix("aten::").partition(".")[0].removesuffix("_"), []).append(name)
    chosen = []
    for members in families.values():
        try:
            if not any(has(name, "CompositeExplicitAutogradNonFunctional") for name in members):
                continue
            reaches_fallback = [not (has(name, "PrivateUse1") or has(name, "CompositeExplicitAutogradNonFunctional")
                                     or has(name, "CompositeImplicitAutograd")
                                     or has(name, "CompositeExplicitAutograd")) for name in members]
        except RuntimeError:  # a TorchScript-only overload (aten::add.t): not a dispatcher op
            continue
        if any(reaches_fallback):
            # (a real PrivateUse1 kernel stays: structural.py's as_strided_, which PyTorch's generic one has too)
            chosen += [name for name in members if not has(name, "PrivateUse1") and _takes_device_kernel(name)]
    return chosen


def _register(op: Any) -> None:
    if _library is None:
        return
    try:
        name = op._schema.name.split("::")[1] + (f".{op._overloadname}" if op._overloadname != "default" else "")
        # registered without the keyset (no kernel here reads it): the dispatcher boxes one argument fewer a call
        _library.impl(name, untraced(_handlers[op].run), "PrivateUse1")
    except RuntimeError:  # already has a kernel for this key (registered elsewhere): keep using the fallback
        pass


def _family(op: Any) -> list[Any]:
    """``op`` and the overloads of its functional, in-place and out= relatives that would otherwise reach the
    device through a generic kernel (CompositeExplicitAutogradNonFunctional's functional-via-out, or our
    fallback), never one with a decomposition of its own (CompositeImplicitAutograd / CompositeExplicitAutograd)."""
    name = op._schema.name.split("::")[1]
    base = name.removesuffix("_")
    members = [op]
    for packet_name in {base, base + "_"}:
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            member = getattr(packet, overload)
            qualified = member._schema.name + (f".{overload}" if overload != "default" else "")
            if member is op or member in members:
                continue
            if _takes_device_kernel(qualified):
                members.append(member)
    return members


def _takes_device_kernel(qualified: str) -> bool:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        if has(qualified, "CompositeImplicitAutograd") or has(qualified, "CompositeExplicitAutograd"):
            return False
        # a real PrivateUse1 kernel (structural.py's, or another library's) stays
        return not has(qualified, "PrivateUse1") or has(qualified, "CompositeExplicitAutogradNonFunctional")
    except RuntimeError:  # a TorchScript-only overload (aten::add.t): not a dispatcher op
        return False


class DeviceOp:
    """The PrivateUse1 kernel of one aten overload; see the module docstring."""

    def __init__(self, op: Any):
        self.op = op
        self.entries: dict[tuple[Any, ...], Any] = {}
        self.state = op_state(op)
        self.__name__ = f"neuron_{op}"

    @property
    def form(self) -> OpForm:
        """What the op does to its arguments (read from its schema on first use)."""
        return form_of(self.op)

    def __call__(self, keyset: Any, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """The op's call (the kernel registered for it, and what ``__call__`` runs)."""
        key, tensors, floats = describe(args, kwargs)
        entry = self.entries.get(key)
        if entry is None:
            entry = self._prepare(key, args, kwargs, tensors, floats)
        entry.tick = next(_ticks)
        return entry.call(args, kwargs, tensors, floats)

    def _prepare(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                 tensors: list[torch.Tensor], floats: list[float]) -> Any:
        # without TorchDynamo's compile lock while it is not imported: a cached kernel needs none of it
        return build_lock.built(lambda: self._make_entry(key, args, kwargs, tensors, floats))

    def _make_entry(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                    tensors: list[torch.Tensor], floats: list[float]) -> Any:
        from neuroncc.device import entries  # the compiler: imported on the first op (keeps registration cheap)

        entry = self.entries.get(key)
        if entry is not None:  # another thread made it meanwhile
            return entry
        index = check_devices(self.form, tensors)
        if index > 0 and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            diagnostics.autograd_off_device_zero(index)
        entry = entries.make_entry(self, args, kwargs, tensors, floats, index, handler_for)
        # a call whose meta kernel refused its floats' values (arange's step of the wrong sign) raises eager's
        # error on CPU: its entry is not kept, or the signature's other values, which the meta kernel may accept,
        # would go to CPU too
        if not (floats and getattr(entry, "refused", False)):
            self.entries[key] = entry
        if entry.holds_kernel:
            _evict_if_full()
        return entry


#: Ops that take index tensors on CPU with their input on the device, as CUDA's do; and the foreach ops whose
#: ``scalars`` are a 1-d CPU tensor (CUDA's too: torch.optim's Adam passes its step sizes so while any thread
#: of the process compiles, ``torch.compiler.is_compiling()`` being process-wide).
CPU_INDICES = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
                         "aten::_unsafe_index", "aten::_unsafe_index_put", "aten::_foreach_addcdiv",
                         "aten::_foreach_addcdiv_", "aten::_foreach_addcmul", "aten::_foreach_addcmul_"})


def check_devices(form: OpForm, tensors: list[torch.Tensor]) -> int:
    """The device index of the call's neuron tensors; CPU tensors may only be 0-d (CUDA's rule and error),
    or indices of an indexing op (the kernel reads them in host memory where they are)."""
    index, first = -1, None
    cpu_indices = form.op._schema.name in CPU_INDICES
    for tensor in tensors:
        device = tensor.get_device()
        if device < 0:
            if tensor.dim() == 0 or cpu_indices:
                continue
            device_name = "cpu"
        elif index < 0:
            index, first = device, tensor
            continue
        elif device == index:
            continue
        else:
            device_name = str(tensor.device)
        here = str(first.device) if first is not None else str(memory.device(0))
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{here} and {device_name}!")
    if index < 0:  # only CPU scalars (an out= tensor decides): the op's written argument
        index = 0
    return index


def _evict_if_full() -> None:
    compiled = [(entry.tick, handler, key) for handler in _handlers.values() for key, entry in handler.entries.items()
                if entry.holds_kernel]
    if len(compiled) <= CONFIG.kernel_capacity:
        return
    compiled.sort(key=lambda item: item[0])
    for _, handler, key in compiled[: len(compiled) // 2]:
        del handler.entries[key]
        COUNTS["eager_kernels_evicted"] += 1
