"""In-place foreach ops of a training step computed in their tensors' own memory: GradScaler's unscale
(``_amp_foreach_non_finite_check_and_unscale_``) and ``clip_grad_norm_``'s scaling (``_foreach_mul_`` by a 0-d
tensor; ``_foreach_div_`` too).

The device's generic entry for an in-place op (kernels.CompiledKernel) writes every result into fresh memory and
then swaps that memory into its argument: for a foreach op over a model's gradients, one allocation, one release
and one swap per tensor a call (Python work per tensor: 2.3-4.8x CPU's kernel over 120 small gradients, session
31). :class:`DonatedForeach` compiles the same op (its own decomposition, traced as fused_optimizers.compile_step
traces a step) as a program that computes each written tensor in its own memory, and passes it the tensors'
addresses: one native call, no memory made. The values are the generic entry's, bit for bit (the same
per-element ops; tests/device/test_training_step.py).

It takes a signature whose tensors are all contiguous and whose call has no Python floats (:meth:`takes`, asked
by entries.make_entry: any other signature keeps the generic entry), and a call whose tensors do not overlap
one another (checked per new set of addresses: a gradient made by backward is new memory every step); a call
whose tensors overlap runs CPU's kernel on the device's memory (fallback.run_on_host: PyTorch's in-order
semantics).

GradScaler's unscale runs in one pass over the gradients when its ``inv_scale`` is finite and at most 1 in
magnitude (a scale of at least 1: every step but after long runs of backoffs): then a gradient holds an inf or a
NaN exactly when its unscaled value does (a finite value times such a factor rounds to a finite value no larger;
inf or NaN times any factor is inf or NaN), so :func:`_unscale_in_one_pass` checks the values it writes, each
gradient's rows as the kernel computes them (the check reads the row it just wrote, not the gradient again:
``refine.cache_written_rows``, ``in_place.writes_in_place``). Any other ``inv_scale`` takes the two programs.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
import torch

from neuroncc.codegen.llvm.refine import ROW_CACHE_MAX
from neuroncc.device.build_lock import building
from neuroncc.device.counters import COUNTS
from neuroncc.device.fallback import HostFallback, run_on_host
from neuroncc.device.fused_optimizers import compile_traced
from neuroncc.device.op_forms import OpForm
from neuroncc.device.programs import CannotCompile
from neuroncc.device.signature import rebuild

aten = torch.ops.aten
_FLOATING = (torch.float32, torch.bfloat16, torch.float16)


def spans_disjoint(starts: list[int], sizes: np.ndarray) -> bool:
    """Whether no two of the byte spans ``[starts[i], starts[i] + sizes[i])`` share a byte (numpy: a model's
    few hundred gradients in ~20 us, where sorting tuples in Python took ~0.5 ms)."""
    if len(starts) < 2:
        return True
    begin = np.fromiter(starts, dtype=np.uint64, count=len(starts))
    order = np.argsort(begin, kind="stable")
    begin, end = begin[order], begin[order] + sizes[order]
    return bool((end[:-1] <= begin[1:]).all())


class DonatedForeach:
    """The device entry of one signature of an in-place foreach op (see the module docstring)."""

    holds_kernel = True

    def __init__(self, form: OpForm, index: int, state: Any):
        self.form, self.index, self.state = form, index, state
        self.tick = 0
        self.kernels: list[Any] | None = None
        self.sizes: np.ndarray | None = None
        self.checked: tuple[int, ...] | None = None  # the addresses last found disjoint
        self.one_pass: Any = None  # the unscale's one-pass kernel (False: none; see the module docstring)

    @staticmethod
    def takes(tensors: list[torch.Tensor], floats: list[float]) -> bool:
        """Whether this entry computes a signature (else the generic entry does): no floats to lift, every
        tensor a contiguous plain floating tensor (the 0-d scale may be any float dtype)."""
        return not floats and bool(tensors) and all(
            type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_contiguous() and t.dtype in _FLOATING
            for t in tensors)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        if self.sizes is None:
            self.sizes = np.array([t.numel() * t.element_size() for t in tensors], dtype=np.uint64)
        addresses = tuple(map(torch.Tensor.data_ptr, tensors))
        if addresses != self.checked:  # the program writes each tensor in place: overlapping ones go to CPU's kernel
            if not spans_disjoint(list(addresses), self.sizes):
                self.state.device_calls += 1
                return run_on_host(self.form, args, kwargs, self.index)
            self.checked = addresses
        if self.form.op in _SPLIT and _scales_down(tensors[-1]):
            kernel = self.one_pass
            if kernel is None:
                with building():
                    kernel = self.one_pass
                    if kernel is None:
                        kernel = self.one_pass = self._compile_one_pass(args, kwargs, tensors)
            if kernel is not False:
                return kernel.call(args, kwargs, tensors, floats)
        kernels = self.kernels
        if kernels is None:
            with building():  # one thread traces and compiles them (frontend/tracing.py)
                kernels = self.kernels
                if kernels is None:
                    kernels = self.kernels = self._compile(args, kwargs, tensors)
        result = None
        for kernel in kernels:
            result = kernel.call(args, kwargs, tensors, floats)
        self.state.device_calls -= len(kernels) - 1  # one call of the op
        return result

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor]) -> list[Any]:
        """The op's programs, in the order they run: one, or for the unscale two (:data:`_SPLIT`)."""
        n = len(args[0])
        if self.form.op in _SPLIT:  # the check (found_inf), then the scaling (the gradients)
            parts = [set(range(n)), set(range(n, len(tensors)))]
        else:
            parts = [set()]
        try:
            return [self._program(args, kwargs, tensors, discarded, f"part {k} of {len(parts)}")
                    for k, discarded in enumerate(parts)]
        except CannotCompile as error:
            COUNTS["eager_fallback_signatures"] += 1
            return [HostFallback(self.form, error.reason, self.index, self.state)]

    def _compile_one_pass(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor]) -> Any:
        """The unscale as one program over each gradient's rows (:func:`_as_rows`; the kernel is called with the
        gradients themselves: it takes addresses), or False when a gradient has no such rows or the program does not
        write every gradient where it is."""
        n = len(args[0])
        rows = [_as_rows(grad) for grad in tensors[:n]]
        if any(grad is None for grad in rows):
            return False
        inputs = [*rows, *tensors[n:]]
        try:
            kernel = compile_traced(self.form, str(self.form.op), "one pass", _unscale_in_one_pass, inputs, 0,
                                    self.index, self.state)
        except CannotCompile:
            return False
        in_place = getattr(kernel.executable, "in_place", None) or {}
        return kernel if all(k in in_place for k in range(n)) else False

    def _program(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 discarded: set[int], part: str) -> Any:
        """The op's own decomposition over the call's tensors, the writes into those at ``discarded`` dropped (the
        op writes copies of them: dead code); ``part`` names it among the op's programs (the signature index)."""
        op = self.form.op

        def run(inputs: list[torch.Tensor], _floats: list[float]) -> None:
            new_args, new_kwargs = rebuild(args, kwargs,
                                           lambda i, _t: inputs[i].clone() if i in discarded else inputs[i], [])
            op(*new_args, **new_kwargs)

        return compile_traced(self.form, str(op), part, run, tensors, 0, self.index, self.state)


def _scales_down(inv_scale: torch.Tensor) -> bool:
    """Whether GradScaler's ``inv_scale`` (a float32 one-element tensor, read where it is: device memory is host
    memory) is finite and at most 1 in magnitude: the one pass's check is then exact (module docstring)."""
    if inv_scale.dtype is not torch.float32 or inv_scale.numel() != 1:
        return False
    value = ctypes.c_float.from_address(inv_scale.data_ptr()).value
    return math.isfinite(value) and abs(value) <= 1.0


#: The shortest rows a gradient's rows longer than a kept row are split into; a gradient with no such split (a
#: prime length above ``ROW_CACHE_MAX``: rows of one element, a row loop's overhead per element) takes the two programs
MIN_SPLIT_COLUMNS = 256


def _as_rows(grad: torch.Tensor) -> torch.Tensor | None:
    """A contiguous gradient as a 2-d view of rows the kernel checks as it writes them: its last dim's rows, or
    one row, split where longer than a row the kernel keeps (``ROW_CACHE_MAX``) into the longest rows that fit and
    divide it, of at least ``MIN_SPLIT_COLUMNS`` (None when none does)."""
    columns = grad.shape[-1] if grad.dim() >= 2 and grad.numel() > ROW_CACHE_MAX else grad.numel()
    if columns > ROW_CACHE_MAX:
        columns = next((c for c in range(ROW_CACHE_MAX, MIN_SPLIT_COLUMNS - 1, -1) if grad.numel() % c == 0), None)
        if columns is None:
            return None
    return grad.view(-1, columns) if columns else grad.view(1, 0)


def _finite(values: torch.Tensor) -> torch.Tensor:
    """``torch.isfinite(values)``; for bfloat16, from the bits the program writes (the device's programs hold
    bf16 tensors as their bits: a check of the bf16 values would read the gradient again, not the written row):
    a bf16 value is finite unless its 8 exponent bits are all ones."""
    if values.dtype is torch.bfloat16:
        return (values.view(torch.int16) & 0x7F80) != 0x7F80
    return torch.isfinite(values)


def _unscale_in_one_pass(inputs: list[torch.Tensor], _floats: list[float]) -> None:
    """``_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`` for an ``inv_scale`` that
    :func:`_scales_down`, over 2-d gradients: each gradient unscaled as the op's decomposition does
    (frontend/lowering/amp.py), and checked on its unscaled rows."""
    grads, found_inf, inv_scale = inputs[:-2], inputs[-2], inputs[-1]
    found = found_inf
    for grad in grads:
        unscaled = (grad * inv_scale).to(grad.dtype)
        grad.copy_(unscaled)
        rows = _finite(unscaled).all(dim=-1)
        finite = rows.reshape(()) if rows.numel() == 1 else rows.all()
        found = torch.where(finite, found, torch.ones_like(found))
    found_inf.copy_(found)


#: Ops computed as two programs where the one pass is not exact (module docstring):
#: ``_amp_foreach_non_finite_check_and_unscale_``'s check reads every gradient (a reduction) and its scaling
#: writes them; in one program no gradient could be written in place (a kernel writes a parameter's memory only
#: when no other stage reads it: codegen/llvm/in_place.py). The check runs first, then the scaling, each the
#: op's own ops.
_SPLIT = frozenset({aten._amp_foreach_non_finite_check_and_unscale_.default})


#: op -> its entry (entries.CUSTOM_ENTRIES)
ENTRIES = {op: DonatedForeach for op in (aten._amp_foreach_non_finite_check_and_unscale_.default,
                                          aten._foreach_mul_.Tensor, aten._foreach_div_.Tensor)}
