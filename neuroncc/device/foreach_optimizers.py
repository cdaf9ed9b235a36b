"""torch.optim's default Adam, AdamW and SGD steps on the device as one program per step, as ``fused=True``.

PyTorch picks ``foreach`` for the device (a PrivateUse1 backend; never ``fused`` by default), and its
``_multi_tensor_adam`` runs ~8 ``_foreach_*`` ops a step (lerp, mul, addcmul, sqrt, div, add, addcdiv, the
weight decay's mul): each is one device program over the whole list, but each reads and writes whole lists, ~20
passes over the parameters' memory where the step's element math needs 7 (read parameter, gradient and two
moments; write three), and ~8 calls' host work. :func:`install` wraps torch.optim's ``_multi_tensor_adam`` and
``_multi_tensor_sgd``: a call whose tensors are all dense float tensors of one dtype on one neuron device, with
float hyperparameters, not capturable and not differentiable (SGD: every momentum buffer made, i.e. from its
second step), runs as one compiled program that applies the same ops, in the same order and dtypes, element by
element (:func:`_adam`, :func:`_sgd`: the foreach function's ops, each tensor's results rounded as its op
rounds them). Every other call, and every call TorchDynamo traces, goes to PyTorch's function unchanged.

The step's state is PyTorch's own (the CPU ``step`` tensors, incremented as PyTorch increments them; the moments
and buffers): ``state_dict``, checkpoints and GradScaler see no difference. The host computes each tensor's
bias corrections and step size in double from its ``step`` exactly as the foreach function does, and passes them
as lifted floats (a new learning rate or step is an argument, not a new kernel). The program is compiled through
fused_optimizers.compile_step (one loop per tensor, donated in place, the compile cache); the foreach function's
results come out bitwise (tests/device/test_optimizers.py).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.autograd.graph import increment_version

from neuroncc.device.build_lock import building
from neuroncc.device.foreach_donated import spans_disjoint
from neuroncc.device.fused_optimizers import compile_step

_FLOATING = (torch.float32, torch.bfloat16, torch.float16)
#: tensor types the program reads and writes directly (a subclass, e.g. a DTensor, runs PyTorch's function)
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))
_shape_of, _dtype_of, _device_of = attrgetter("shape"), attrgetter("dtype"), attrgetter("device")
_is_cpu_of, _requires_grad_of = attrgetter("is_cpu"), attrgetter("requires_grad")
_is_contiguous, _numel, _item = torch.Tensor.is_contiguous, torch.Tensor.numel, torch.Tensor.item
#: (kind, variant, dtype, device index, input count, first list's shapes) -> [the compiled step (None: PyTorch's
#: function runs it), the addresses last found disjoint, the tensors' sizes in bytes]
_KERNELS: dict[tuple, list[Any]] = {}
_data_ptr = torch.Tensor.data_ptr
_installed = False


def install() -> None:
    """Route torch.optim's foreach Adam/AdamW and SGD through :func:`_routed_adam` / :func:`_routed_sgd` (once;
    with the device's foreach kernels, dispatch.py)."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch.optim.adam as adam_module
    import torch.optim.sgd as sgd_module

    adam_module._multi_tensor_adam = _routed(adam_module._multi_tensor_adam, _adam_step)
    sgd_module._multi_tensor_sgd = _routed(sgd_module._multi_tensor_sgd, _sgd_step)


def _routed(original: Any, step: Any) -> Any:
    def routed(*args: Any, **kwargs: Any) -> None:
        if torch.compiler.is_compiling() or not step(*args, **kwargs):
            original(*args, **kwargs)

    routed.__wrapped__ = original  # type: ignore[attr-defined]
    routed.__name__ = original.__name__
    routed.__doc__ = original.__doc__
    return routed


class Placement(NamedTuple):
    """Where a routed call's tensor lists live: their dtype, neuron device index, and the first list's shapes
    (every list holds the same shapes, position by position)."""

    dtype: torch.dtype
    index: int
    shapes: tuple[torch.Size, ...]


def dense(lists: list[list[Any]]) -> Placement | None:
    """The lists' :class:`Placement` when every list is as long as the first and holds, per position,
    contiguous plain tensors (no subclass) of one dtype and shape on one neuron device; else None.

    Each property is read for a whole list at once (``map`` over C-level getters: no Python frame per tensor;
    ~0.4 us a tensor, where tensor-by-tensor checks cost ~1). The device holds strided tensors only: a sparse
    tensor is on another device, and its list fails the device check before ``is_contiguous`` is asked."""
    first = lists[0]
    if not first or any(len(tensors) != len(first) for tensors in lists):
        return None
    dtype, device = first[0].dtype, first[0].device
    if dtype not in _FLOATING or device.type != "neuron":
        return None
    shapes = tuple(map(_shape_of, first))
    for tensors in lists:
        if not _PLAIN.issuperset(map(type, tensors)) or set(map(_dtype_of, tensors)) != {dtype} \
                or set(map(_device_of, tensors)) != {device} or not all(map(_is_contiguous, tensors)) \
                or (tensors is not first and tuple(map(_shape_of, tensors)) != shapes):
            return None
    return Placement(dtype, device.index or 0, shapes)


def run_step(kind: str, math_of: Any, inputs: list[torch.Tensor], numbers: list[float], n: int, variant: tuple,
             placed: Placement, written: list[torch.Tensor]) -> bool:
    """Run the step's program over ``inputs`` (compiled on first use of its signature); False when it cannot
    run here (the caller runs PyTorch's function). ``inputs``: the lists :func:`dense` placed, then tensors the
    kind fixes (a 0-d norm); ``written``: the tensors it writes, whose version counters go up as PyTorch's
    in-place ops make them (autograd's check of saved tensors sees the step)."""
    key = (kind, variant, placed.dtype, placed.index, len(inputs), placed.shapes)
    entry = _KERNELS.get(key)
    if entry is None:
        with building():  # one thread traces and compiles it (frontend/tracing.py)
            entry = _KERNELS.get(key)
            if entry is None:
                kernel = compile_step(kind, repr((n, variant)), lambda ts, fs: math_of(ts, fs, n, variant), inputs,
                                      len(numbers), placed.index)
                entry = _KERNELS[key] = [kernel, None]
    kernel, checked = entry[0], entry[1]
    if kernel is None:
        return False
    addresses = tuple(map(_data_ptr, inputs))
    if addresses != checked:  # the kernel writes each tensor in place: overlapping ones go to PyTorch's function
        if len(entry) == 2:
            entry.append(np.array([t.numel() * t.element_size() for t in inputs], dtype=np.uint64))
        if not spans_disjoint(list(addresses), entry[2]):
            return False
        entry[1] = addresses
    if not kernel.run_donated(addresses, numbers):
        kernel.call((), {}, inputs, numbers)
    increment_version(written)
    return True


# ---- Adam / AdamW: torch.optim.adam._multi_tensor_adam, capturable=False ----------------------------------------

def _host_counts(steps: list[Any]) -> bool:
    """Whether the ``step`` counts are one-element CPU tensors outside autograd (PyTorch's, capturable=False)."""
    return _PLAIN.issuperset(map(type, steps)) and all(map(_is_cpu_of, steps)) \
        and set(map(_numel, steps)) == {1} and not any(map(_requires_grad_of, steps))


def _adam_step(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
               grad_scale: Any, found_inf: Any, *, amsgrad: bool, has_complex: bool, beta1: Any, beta2: Any, lr: Any,
               weight_decay: float, eps: float, maximize: bool, capturable: bool, differentiable: bool,
               decoupled_weight_decay: bool = False) -> bool:
    """One foreach Adam/AdamW step as one program, or False (PyTorch's function runs it)."""
    if capturable or differentiable or has_complex or grad_scale is not None or found_inf is not None:
        return False
    if not all(type(x) in (float, int) for x in (beta1, beta2, lr, weight_decay, eps)):
        return False
    lists = [params, grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    placed = dense(lists)
    if placed is None or len(state_steps) != len(params) or not _host_counts(state_steps):
        return False
    inputs = [t for tensors in lists for t in tensors]
    n = len(params)
    # the foreach function's scalars, as it computes them (after its step += 1), once per distinct step
    torch._foreach_add_(state_steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
    decay_term = 1 - lr * weight_decay if decoupled_weight_decay else weight_decay
    numbers = [decay_term, 1 - beta1, beta2, 1 - beta2, eps]
    steps = list(map(_item, state_steps))  # as the foreach function reads them (step.item())
    uniform = steps.count(steps[0]) == n  # the usual case: one pair of scalars for every tensor
    scalars: dict[float, tuple[float, float]] = {}
    for step in steps[:1] if uniform else steps:
        pair = scalars.get(step)
        if pair is None:
            pair = scalars[step] = ((lr / (1 - beta1 ** step)) * -1, (1 - beta2 ** step) ** 0.5)
        numbers += pair
    variant = (decoupled_weight_decay, amsgrad, maximize, weight_decay != 0, uniform)
    written = inputs[:n] + inputs[2 * n:]  # all but the gradients
    if run_step("adam", _adam, inputs, numbers, n, variant, placed, written):
        return True
    torch._foreach_sub_(state_steps, 1.0)  # PyTorch's function counts the step itself
    return False


def _adam(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """``_multi_tensor_adam``'s ops (capturable=False) per tensor: ``tensors`` params, grads, exp_avgs,
    exp_avg_sqs[, max_exp_avg_sqs]; ``floats`` the decay term, 1 - beta1, beta2, 1 - beta2, eps, then per tensor
    (step size, sqrt of bias correction 2), or that pair once when every tensor's step is the same (``uniform``)."""
    decoupled, amsgrad, maximize, decay, uniform = variant
    params, grads, avgs, squares = (tensors[k * n:(k + 1) * n] for k in range(4))
    maxima = tensors[4 * n:5 * n] if amsgrad else []
    decay_term, lerp_weight, beta2, square_weight, eps = floats[:5]
    for i in range(n):
        p, g = params[i], grads[i]
        if maximize:
            g = torch.neg(g)
        if decay:
            if decoupled:
                p = torch.mul(p, decay_term)
            else:
                g = torch.add(g, p, alpha=decay_term)
        m = torch.lerp(avgs[i], g, lerp_weight)
        v = torch.addcmul(torch.mul(squares[i], beta2), g, g, value=square_weight)
        avgs[i].copy_(m)
        squares[i].copy_(v)
        if amsgrad:
            v = torch.maximum(maxima[i], v)
            maxima[i].copy_(v)
        step_size, correction = floats[5:7] if uniform else floats[5 + 2 * i:7 + 2 * i]
        denom = torch.add(torch.div(torch.sqrt(v), correction), eps)
        params[i].copy_(torch.addcdiv(p, m, denom, value=step_size))


# ---- SGD: torch.optim.sgd._multi_tensor_sgd ----------------------------------------------------------------------

def _sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffer_list: list[Any],
              grad_scale: Any, found_inf: Any, *, weight_decay: float, momentum: float, lr: Any, dampening: float,
              nesterov: bool, maximize: bool, has_sparse_grad: bool) -> bool:
    """One foreach SGD step as one program, or False (PyTorch's function runs it: its first step with momentum
    makes the buffers)."""
    if grad_scale is not None or found_inf is not None or has_sparse_grad:
        return False
    if not all(type(x) in (float, int) for x in (weight_decay, momentum, lr, dampening)):
        return False
    lists = [params, grads] + ([momentum_buffer_list] if momentum != 0 else [])
    if momentum != 0 and any(b is None for b in momentum_buffer_list):
        return False
    placed = dense(lists)
    if placed is None:
        return False
    # nesterov adds the buffers into the gradients in place when neither maximize nor a weight decay copied them
    writes_grads = momentum != 0 and nesterov and not maximize and weight_decay == 0
    variant = (maximize, weight_decay != 0, momentum != 0, nesterov, writes_grads)
    inputs = [t for tensors in lists for t in tensors]
    n = len(params)
    written = inputs[:n] + inputs[2 * n:] + (inputs[n:2 * n] if writes_grads else [])
    return run_step("sgd", _sgd, inputs, [weight_decay, momentum, 1 - dampening, -lr], n, variant, placed, written)


def _sgd(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """``_multi_tensor_sgd``'s ops per tensor: ``tensors`` params, grads[, momentum buffers]; ``floats`` weight
    decay, momentum, 1 - dampening, -lr."""
    maximize, decay, with_momentum, nesterov, writes_grads = variant
    params, grads = tensors[:n], tensors[n:2 * n]
    buffers = tensors[2 * n:3 * n] if with_momentum else []
    weight_decay, momentum, undamped, neg_lr = floats
    for i in range(n):
        g = grads[i]
        if maximize:
            g = torch.neg(g)
        if decay:
            g = torch.add(g, params[i], alpha=weight_decay)
        if with_momentum:
            b = torch.add(torch.mul(buffers[i], momentum), g, alpha=undamped)
            buffers[i].copy_(b)
            if nesterov:
                g = torch.add(g, b, alpha=momentum)
                if writes_grads:
                    grads[i].copy_(g)
            else:
                g = b
        params[i].copy_(torch.add(params[i], g, alpha=neg_lr))
