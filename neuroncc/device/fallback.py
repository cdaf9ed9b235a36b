"""Ops neuroncc cannot compile run on CPU, on the device's own memory.

The device's memory is host memory, so "copying the inputs out" costs nothing: each neuron tensor argument is
passed to the CPU kernel as a CPU tensor over the same bytes (memory.host_view). What the kernel writes into
its arguments (in-place and ``out=`` ops) lands in the neuron tensors directly; results that view an
argument's memory become neuron views of that argument's storage; fresh results are copied into new device
memory. The first fallback of each op warns once, naming the op, why, and the user's ``file:line``; with the
fallback mode ``error`` it raises :class:`neuroncc.errors.DeviceFallbackError` instead.

A result that is a nested or sparse tensor cannot live on the device (its memory is one strided buffer per
tensor): the op raises :class:`neuroncc.errors.UnsupportedOpError` naming it and the user's line
(``nn.TransformerEncoder``'s ``enable_nested_tensor`` path makes a nested one in eval mode from
``src_key_padding_mask``; ``nn.EmbeddingBag(sparse=True)``'s backward a sparse one. ``to_sparse()`` still
returns a CPU sparse tensor).

Random ops (a ``Generator`` argument) run the same way, drawing from the device's generator, and are device
ops, not fallbacks: the device's random numbers are made on the host.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from neuroncc.device import generators, memory
from neuroncc.device.config import CONFIG
from neuroncc.device.diagnostics import DeviceFallbackWarning, user_location
from neuroncc.device.op_forms import OpForm
from neuroncc.errors import (DeviceFallbackError, RuntimeCheckError, RuntimeIndexError, RuntimeZeroDivisionError,
                             UnsupportedOpError)
from neuroncc.executors.tracing import StepInfo, active_tracer
from neuroncc.frontend import run_errors


def check_error_on_host(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any], index: int,
                        kernel_error: RuntimeCheckError) -> Any:
    """After a device kernel's run-time check failed (``kernel_error``: an index out of range, an integer division
    by zero): the op's CPU kernel on the same memory, whose error is raised as the same kind
    (:class:`~neuroncc.errors.RuntimeIndexError`, :class:`~neuroncc.errors.RuntimeZeroDivisionError`) naming
    the op, the operand (the index, the divisor), the value and range (eager's words, or the kernel's where eager
    leaves the value out) and the user's ``file:line`` (the innermost caller outside torch and neuroncc), worded
    as the front end words a compiled graph's (``frontend/run_errors.py``); the CPU kernel's result if it does not
    raise."""
    try:
        return run_on_host(form, args, kwargs, index)
    except (IndexError, RuntimeError) as error:
        where = user_location()
        at = f" at {where}" if where else ""
        values = [args[p] if p < len(args) else kwargs.get(a.name) for p, a in enumerate(form.op._schema.arguments)]
        names = [a.name for a in form.op._schema.arguments]
        if isinstance(kernel_error, RuntimeZeroDivisionError):
            detail = run_errors.ZERO_DIVISION_DETAIL
            operand = run_errors.divisor_text(names[1], values[1]) if len(values) > 1 and values[1] is not None \
                else ""
            raise RuntimeZeroDivisionError(f"{form.name}{at}: {detail}{operand}", op=form.name, detail=detail,
                                           location=where) from error
        detail = run_errors.index_detail(error, kernel_error.detail)
        operand = run_errors.index_operands_text(
            (name, value if isinstance(value, list | tuple) else [value], None)
            for name, value in zip(names, values) if name not in form.out_arguments)
        raise RuntimeIndexError(f"{form.name}{at}: {detail}{operand}", op=form.name, detail=detail,
                                location=where) from error


def run_on_host(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any], index: int,
                generator: torch.Generator | None = None) -> Any:
    """Run ``form.op`` with CPU kernels over the neuron tensors' memory; results back as neuron tensors."""
    sources: dict[int, torch.Tensor] = {}  # storage address -> a neuron tensor over that storage

    def to_host(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            sources.setdefault(value.untyped_storage().data_ptr(), value)
            return memory.host_view(value)
        if isinstance(value, torch.device) and value.type != "cpu":  # a factory's device=: made on CPU, moved
            return _CPU
        return value

    host_args = [tree_map(to_host, value) if type(value) in _CONTAINERS else to_host(value) for value in args]
    host_kwargs = {name: tree_map(to_host, value) if type(value) in _CONTAINERS else to_host(value)
                   for name, value in kwargs.items()}
    # out= tensors: CPU kernels resize them as they need, which the device's memory (not resizable from CPU)
    # cannot follow; they get CPU tensors, copied into the neuron ones (resized as eager would) afterwards.
    outs = {name: host_kwargs[name] for name in form.out_arguments if isinstance(host_kwargs.get(name), torch.Tensor)}
    for name, view in outs.items():
        host_kwargs[name] = torch.empty(0, dtype=view.dtype)
    if generator is not None:
        _use_generator(form, host_args, host_kwargs, generator)
    result = form.op(*host_args, **host_kwargs)
    if result.is_nested if type(result) is torch.Tensor else \
            any(isinstance(leaf, torch.Tensor) and leaf.is_nested for leaf in tree_leaves(result)):
        raise nested_result_error(form.name)
    if form.name.endswith("_backward.default") and any(
            isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided for leaf in tree_leaves(result)):
        raise sparse_result_error(form.name)  # a sparse gradient, which autograd would reject as a CPU tensor
    for name in outs:
        target, computed = kwargs[name], host_kwargs[name]
        if target.shape != computed.shape:
            target.resize_(computed.shape)
        memory.host_view(target).copy_(computed)
    if form.writes:  # each return is a written argument (the neuron tensor itself) or a new result
        if not form.returns:
            return None
        results = result if isinstance(result, tuple) else (result,)
        returned = [_to_device(value, sources, index) if name is None else
                    args[i] if (i := _position(form, name)) < len(args) else kwargs[name]
                    for name, value in zip(form.returns, results)]
        return returned[0] if len(returned) == 1 else tuple(returned)
    if type(result) is torch.Tensor:
        return _to_device(result, sources, index)
    return tree_map(lambda value: _to_device(value, sources, index), result)


_CPU = torch.device("cpu")
#: argument types walked with pytree (an op's other arguments are leaves: mapped directly, without pytree's walk)
_CONTAINERS = (list, tuple, dict)


def nested_result_error(op_name: str) -> UnsupportedOpError:
    where = user_location()
    return UnsupportedOpError(
        f"neuroncc: {op_name}{f' at {where}' if where else ''} makes a nested tensor, which the neuron device "
        "cannot hold. nn.TransformerEncoder makes one in eval mode without gradients when given a "
        "src_key_padding_mask (its enable_nested_tensor fast path): construct it with enable_nested_tensor=False "
        "(the same outputs at the unpadded positions; the padded ones hold the layers' values instead of zeros), "
        "or keep the model on CPU")


def sparse_result_error(op_name: str) -> UnsupportedOpError:
    where = user_location()
    return UnsupportedOpError(
        f"neuroncc: {op_name}{f' at {where}' if where else ''} makes a sparse tensor, which the neuron device "
        "cannot hold (it stores strided tensors only). nn.Embedding(sparse=True) and nn.EmbeddingBag(sparse=True) "
        "make sparse gradients: construct them with sparse=False (dense gradients, the same values; "
        "torch.optim.SparseAdam then becomes Adam), or convert with .to_dense()")


def _to_device(value: Any, sources: dict[int, torch.Tensor], index: int) -> Any:
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
        return value
    if value._is_zerotensor():  # autograd's zero gradients have no memory: real zeros on the device
        value = torch.zeros(value.shape, dtype=value.dtype)
    if value.numel() and value.layout == torch.strided:
        source = sources.get(value.untyped_storage().data_ptr())
        if source is not None:  # a view of an argument's memory: the same view of the neuron storage
            return memory.on_storage(source.untyped_storage(), value.dtype, value.size(), value.stride(),
                                     value.storage_offset())
    if value.layout != torch.strided:
        return value
    dtype = torch.float32 if value.dtype is torch.float64 else value.dtype
    return memory.to_device(value, index, dtype)


def _position(form: OpForm, name: str) -> int:
    for position, argument in enumerate(form.op._schema.arguments):
        if argument.name == name:
            return position if not argument.kwarg_only else 1 << 30
    return 1 << 30


def _use_generator(form: OpForm, args: list[Any], kwargs: dict[str, Any], generator: torch.Generator) -> None:
    """Give a random op the device's generator where the caller passed none."""
    arguments = _GENERATOR_ARGUMENTS.get(form.op)
    if arguments is None:
        arguments = _GENERATOR_ARGUMENTS[form.op] = tuple(
            (position, argument) for position, argument in enumerate(form.op._schema.arguments)
            if "Generator" in str(argument.type))
    for position, argument in arguments:
        if argument.kwarg_only or position >= len(args):
            if kwargs.get(argument.name) is None:
                kwargs[argument.name] = generator
        elif args[position] is None:
            args[position] = generator


_GENERATOR_ARGUMENTS: dict[Any, tuple[tuple[int, Any], ...]] = {}  # op -> its Generator arguments


class HostFallback:
    """The entry of a call signature that runs on CPU (see the module docstring)."""

    holds_kernel = False

    def __init__(self, form: OpForm, reason: str, index: int, op_state: Any, refused: bool = False):
        self.form, self.reason, self.index, self.op_state = form, reason, index, op_state
        self.refused = refused  # the meta kernel raised: CPU's kernel raises the user's error as eager words it
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        state = self.op_state
        error_mode = CONFIG.fallback == "error"
        if error_mode and not self.refused:
            raise self._error()
        tracer = active_tracer()  # torch.profiler (or a timeline recorder) sees the op as a fallback range
        if tracer is None:
            result = run_on_host(self.form, args, kwargs, self.index)  # raises eager's error for a user error
        else:
            with tracer.step(StepInfo(self.form.name, "fallback", "neuron device")):
                result = run_on_host(self.form, args, kwargs, self.index)
        if error_mode:
            raise self._error()
        state.fallback_calls += 1
        if not state.warned:
            state.warned = True
            where = user_location()
            warnings.warn(f"neuroncc: {self.form.name} runs on CPU{f' at {where}' if where else ''}: {self.reason} "
                          "(the result is copied back to the neuron device)", DeviceFallbackWarning, stacklevel=2)
        return result

    def _error(self) -> DeviceFallbackError:
        where = user_location()
        return DeviceFallbackError(
            f"neuroncc cannot run {self.form.name} on the neuron device ({self.reason})"
            f"{f' at {where}' if where else ''}, and CPU fallbacks are errors (fallback mode 'error')",
            self.form.name)


class HostRandom:
    """A random op's entry: CPU's kernel on the device's memory, drawing from the device's generator."""

    holds_kernel = False

    def __init__(self, form: OpForm, index: int, op_state: Any):
        self.form, self.index, self.op_state = form, index, op_state
        self.tick = 0

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        self.op_state.device_calls += 1
        return run_on_host(self.form, args, kwargs, self.index, generators.generator(self.index))
