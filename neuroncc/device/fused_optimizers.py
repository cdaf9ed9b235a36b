"""PyTorch's fused optimizer ops on the device: ``_fused_adam_``, ``_fused_adamw_`` and ``_fused_sgd_`` (and
their ``tensor_lr`` overloads), each call one compiled program over the whole parameter list.

``torch.optim.Adam/AdamW/SGD(..., fused=True)`` (Hugging Face's ``adamw_torch_fused``) call these ops once per
step and parameter group. PyTorch's CPU kernel computes each tensor's scalars (bias corrections, step size) in
double from the tensor's ``step`` and the hyperparameters, rounds them to float32 and runs float32 math per
element (bf16/fp16 tensors widened to float32, rounded on store). The device does the same split:

* the host reads the ``step`` tensors (and a tensor ``lr``, ``found_inf``) -- device memory is host memory,
  so that is a load, not a copy -- computes the same double scalars, and passes them to the kernel as lifted
  float arguments (per tensor where they depend on its ``step``);
* the kernel is one program per signature (list length, shapes, dtype, flags), traced from :func:`_adam` or
  :func:`_sgd` below with the floats as sentinels (programs.traced_program) and compiled through the compile
  cache like every other device op: a new learning rate or step count is a new argument, never a new kernel.
  It computes every parameter, moment and (unscaled) gradient in the tensor's own memory (donated, as
  torch.compile's optimizer graphs do): one read and one write per element, no fresh memory per step. Tensors
  that overlap one another go to CPU's kernel instead.

``found_inf`` set (GradScaler saw an inf) skips the update, as CPU's kernel does; ``grad_scale`` divides the
gradients (written back, unscaled) before the update. The per-element order is the CPU kernel's (its vector
loop's lerp is one fused multiply-add where ours rounds twice: results agree to float32 rounding, bitwise in
most elements; tests/device/test_optimizers.py).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import torch

from neuroncc.device import signature_index
from neuroncc.device.counters import COUNTS, op_state
from neuroncc.device.build_lock import building
from neuroncc.device.fallback import HostFallback, run_on_host
from neuroncc.device.kernel_compile import COMPILE_OPTIONS, compile_kernel
from neuroncc.device.kernels import CompiledKernel
from neuroncc.device.op_forms import OpForm, form_of
from neuroncc.device.programs import CannotCompile, traced_program
from neuroncc.passes.pipeline import default_pipeline

aten = torch.ops.aten
_FLOATING = (torch.float32, torch.bfloat16, torch.float16)

#: A step's program is compiled with one loop per tensor (``fuse{horizontal=false}``), as CPU's kernel runs:
#: merged, same-shape tensors' loops stream 4-5 arrays each at once (28 streams for four [768, 256] weights),
#: which ran the large AdamW row's step 1.01-1.05x slower (docs/performance-history.md, session 30).
STEP_OPTIONS = {**COMPILE_OPTIONS, "pipeline": default_pipeline("cpu").replace(",fuse,", ",fuse{horizontal=false},")}
assert "horizontal=false" in STEP_OPTIONS["pipeline"]


def _value(tensor: torch.Tensor) -> float:
    """A one-element tensor's value, read where it is (device memory is host memory)."""
    if tensor.dtype is torch.float32 and tensor.numel() == 1:
        return ctypes.c_float.from_address(tensor.data_ptr()).value
    return float(tensor.reshape(()).cpu().item() if tensor.device.type != "cpu" else tensor.item())


def disjoint(tensors: list[torch.Tensor]) -> bool:
    """Whether no two of the (dense) tensors share a byte."""
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    return all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def _f32(value: float) -> float:
    return ctypes.c_float(value).value


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype is torch.float32 else t.float()


def _gradient(grad: torch.Tensor, scale: torch.Tensor | None, maximize: bool) -> torch.Tensor:
    """A parameter's gradient as the step uses it: unscaled by GradScaler's ``grad_scale`` (and written back so,
    as CPU's fused kernels do), negated to maximize."""
    g = _wide(grad)
    if scale is not None:
        g = g / scale
        grad.copy_(g)
    return -g if maximize else g


def _adam(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """One Adam/AdamW step over ``n`` tensors, CPU's fused kernel's element math (see the module docstring).

    ``tensors``: params, grads, exp_avgs, exp_avg_sqs[, max_exp_avg_sqs (amsgrad)][, grad_scale];
    ``floats``: weight decay term, lerp coefficient, beta2, 1 - beta2, eps, then per tensor (-step size,
    sqrt of bias correction 2)."""
    adamw, amsgrad, maximize, decay, small_lerp, scaled = variant
    params, grads, avgs, squares = (tensors[k * n:(k + 1) * n] for k in range(4))
    maxima = tensors[4 * n:5 * n] if amsgrad else []
    scale = tensors[-1] if scaled else None
    decay_term, lerp, beta2, square_weight, eps = floats[:5]
    for i in range(n):
        p, m, v = _wide(params[i]), _wide(avgs[i]), _wide(squares[i])
        g = _gradient(grads[i], scale, maximize)
        if decay:
            if adamw:
                p = p * decay_term
            else:
                g = g + p * decay_term
        # exp_avg.lerp_(grad, 1 - beta1), CPU's two forms by the weight's size
        m = m + lerp * (g - m) if small_lerp else g - (g - m) * lerp
        v = v * beta2 + square_weight * g * g
        avgs[i].copy_(m)
        squares[i].copy_(v)
        neg_step, correction = floats[5 + 2 * i], floats[6 + 2 * i]
        if amsgrad:
            v = torch.maximum(_wide(maxima[i]), v)
            maxima[i].copy_(v)
        denom = v.sqrt() / correction + eps
        params[i].copy_(p + neg_step * m / denom)


def _sgd(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """One SGD step over ``n`` tensors (CPU's fused kernel's element math).

    ``tensors``: params, grads[, momentum buffers][, grad_scale]; ``floats``: weight decay, momentum,
    1 - dampening, -lr."""
    maximize, decay, with_momentum, nesterov, first, scaled = variant
    params, grads = tensors[:n], tensors[n:2 * n]
    buffers = tensors[2 * n:3 * n] if with_momentum else []
    scale = tensors[-1] if scaled else None
    weight_decay, momentum, undamped, neg_lr = floats
    for i in range(n):
        p = _wide(params[i])
        g = _gradient(grads[i], scale, maximize)
        if decay:
            g = p * weight_decay + g
        if with_momentum:
            b = g if first else _wide(buffers[i]) * momentum + undamped * g
            buffers[i].copy_(b)
            g = b * momentum + g if nesterov else b
        params[i].copy_(p + g * neg_lr)


class FusedStep:
    """The device entry of one signature of a fused optimizer op (see the module docstring). It holds a
    compiled kernel per variant: the flags of the call that the signature's key does not fix (a weight decay
    of zero or not, which of the lerp's two forms, SGD's first step)."""

    holds_kernel = True

    def __init__(self, form: OpForm, index: int, state: Any):
        self.form, self.index, self.state = form, index, state
        self.tick = 0
        name = form.op._schema.name
        self.adam = "adam" in name
        self.adamw = "adamw" in name
        self.kernels: dict[tuple, Any] = {}
        self.plain: bool | None = None
        self.checked: tuple[int, ...] | None = None  # the tensors' addresses last found disjoint
        #: argument name -> (position, default): reading ``op._schema`` per call cost more than the rest of the call
        self.positions = {a.name: (k, a.default_value) for k, a in enumerate(form.op._schema.arguments)}

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        positions = self.positions

        def get(name: str) -> Any:  # op_forms.argument, with the schema's positions read once
            if name in kwargs:
                return kwargs[name]
            position, default = positions[name]
            return args[position] if position < len(args) else default

        found_inf = get("found_inf")
        if found_inf is not None and _value(found_inf) == 1.0:  # CPU's kernel: no update at all
            self.state.device_calls += 1
            return None
        lr = get("lr")
        lr = _value(lr) if isinstance(lr, torch.Tensor) else float(lr)
        params = list(get("self"))
        if not params:
            return None
        if self.plain is None:  # the signature (dtypes, shapes, strides, list lengths) decides it: once
            self.plain = self._plain(params, get)
        if not self.plain:
            return run_on_host(self.form, args, kwargs, self.index)
        scale = get("grad_scale")
        if self.adam:
            inputs, numbers, variant = self._adam_call(params, get, lr, scale is not None)
        else:
            inputs, numbers, variant = self._sgd_call(params, get, lr, scale is not None)
        addresses = tuple(t.data_ptr() for t in inputs)
        if addresses != self.checked:  # the kernel writes each tensor in place: overlapping ones go to CPU's kernel
            if not disjoint(inputs):
                return run_on_host(self.form, args, kwargs, self.index)
            self.checked = addresses
        if scale is not None:
            inputs.append(scale)
        kernel = self.kernels.get(variant)
        if kernel is None:
            with building():  # one thread compiles it (frontend/tracing.py)
                kernel = self.kernels.get(variant)
                if kernel is None:
                    kernel = self.kernels[variant] = self._compile(inputs, len(numbers), len(params), variant)
        if isinstance(kernel, HostFallback):
            return kernel.call(args, kwargs, tensors, floats)
        return kernel.call(args, kwargs, inputs, numbers)

    def _plain(self, params: list[torch.Tensor], get: Any) -> bool:
        """Whether the call is one the kernel computes: every list as long as the parameters', each position
        one dtype and shape, dense tensors (anything else goes to CPU's kernel, which raises its own errors)."""
        lists = [params, get("grads")]
        lists += [get("exp_avgs"), get("exp_avg_sqs")] if self.adam else []
        if self.adam and get("amsgrad"):
            lists.append(get("max_exp_avg_sqs"))
        if not self.adam and get("momentum") != 0.0:
            lists.append(get("momentum_buffer_list"))
        dtype = params[0].dtype
        if dtype not in _FLOATING:
            return False
        for tensors in lists:
            if len(tensors) != len(params):
                return False
            for t, p in zip(tensors, params):
                if t.dtype is not dtype or t.shape != p.shape or not t.is_contiguous() or t.device != p.device:
                    return False
        scale = get("grad_scale")
        return scale is None or (scale.numel() == 1 and scale.dtype is torch.float32 and scale.dim() == 0
                                 and scale.device == params[0].device)

    def _adam_call(self, params: list[torch.Tensor], get: Any, lr: float,
                   scaled: bool) -> tuple[list[torch.Tensor], list[float], tuple]:
        beta1, beta2, weight_decay, eps = (float(get(name)) for name in ("beta1", "beta2", "weight_decay", "eps"))
        amsgrad, maximize = bool(get("amsgrad")), bool(get("maximize"))
        lerp = _f32(1 - beta1)
        small_lerp = abs(lerp) < 0.5
        # CPU's scalars, in double (the decay factor, AdamW: 1 - lr * wd), but the large lerp's 1 - weight in
        # float32 as its kernel computes it
        numbers = [1 - lr * weight_decay if self.adamw else weight_decay, lerp if small_lerp else _f32(1 - lerp),
                   beta2, 1 - beta2, eps]
        for step in get("state_steps"):
            step = _value(step)
            numbers.append(-(lr / (1 - beta1 ** step)))
            numbers.append(math.sqrt(1 - beta2 ** step))
        inputs = [*params, *get("grads"), *get("exp_avgs"), *get("exp_avg_sqs")]
        if amsgrad:
            inputs += get("max_exp_avg_sqs")
        return inputs, numbers, (self.adamw, amsgrad, maximize, weight_decay != 0.0, small_lerp, scaled)

    def _sgd_call(self, params: list[torch.Tensor], get: Any, lr: float,
                  scaled: bool) -> tuple[list[torch.Tensor], list[float], tuple]:
        weight_decay, momentum, dampening = (float(get(name)) for name in ("weight_decay", "momentum", "dampening"))
        numbers = [weight_decay, momentum, 1 - dampening, -lr]
        inputs = [*params, *get("grads")]
        if momentum != 0.0:
            inputs += get("momentum_buffer_list")
        variant = (bool(get("maximize")), weight_decay != 0.0, momentum != 0.0, bool(get("nesterov")),
                   bool(get("is_first_step")), scaled)
        return inputs, numbers, variant

    def _compile(self, inputs: list[torch.Tensor], count: int, n: int, variant: tuple) -> Any:
        math_of = _adam if self.adam else _sgd
        try:
            return compile_traced(self.form, str(self.form.op), repr((n, variant)),
                                  lambda ts, fs: math_of(ts, fs, n, variant), inputs, count, self.index, self.state)
        except CannotCompile as error:
            COUNTS["eager_fallback_signatures"] += 1
            return HostFallback(self.form, error.reason, self.index, self.state)


def compile_traced(form: OpForm, kind: str, describes: str, run: Any, inputs: list[torch.Tensor], count: int,
                   index: int, state: Any) -> CompiledKernel:
    """The kernel of ``run(tensors, floats)``'s program (programs.traced_program: written in place, ``count``
    lifted floats) compiled as a step (:data:`STEP_OPTIONS`), or, when the signature index knows it
    (``kind``, ``describes``: what else the program depends on, and the tensors), loaded straight from the
    compile cache: a warm process traces none of its steps. Raises CannotCompile."""
    try:
        slot = signature_index.Slot.named(signature_index.program_name(kind, describes, inputs, count), kind)
    except signature_index.Unindexable:
        slot = None
    hit = slot.lookup(inputs) if slot is not None else None
    if hit is not None:
        COUNTS["eager_kernels_loaded"] += 1
        return CompiledKernel(form, hit.program, hit.executable, index, inputs, state)
    program = traced_program(run, inputs, count)
    return compile_kernel(form, program, index, inputs, state, slot=slot, options=STEP_OPTIONS)


def compile_step(kind: str, describes: str, run: Any, inputs: list[torch.Tensor], count: int, index: int) -> Any:
    """The compiled program of a multi-tensor step that is no aten op (foreach_optimizers.py's routed foreach
    steps and clip_grad_norm_'s parts): ``run(tensors, floats)`` writes ``inputs`` in place from them and
    ``count`` lifted floats; ``describes`` what else it depends on (its variant). Its calls count as
    ``torch.optim._multi_tensor_<kind>`` in ``neuroncc.get_executed_ops()`` (``kind`` "adam" or "sgd"), else as
    ``kind`` itself. None when it cannot be compiled (the caller runs PyTorch's function)."""
    form = form_of(aten._fused_sgd_.default if kind == "sgd" else aten._fused_adam_.default)  # its binding: in place
    name = f"torch.optim._multi_tensor_{kind}" if kind in ("adam", "sgd") else kind
    try:
        return compile_traced(form, name, describes, run, inputs, count, index, op_state(name))
    except CannotCompile:
        COUNTS["eager_fallback_signatures"] += 1
        return None


#: op -> its entry (entries.CUSTOM_ENTRIES)
ENTRIES = {getattr(getattr(aten, name), overload): FusedStep
           for name in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_") for overload in ("default", "tensor_lr")}
