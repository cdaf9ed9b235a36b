"""``neuroncc.evaluate(model, inputs)``: the evaluation recipe, run end to end (see :mod:`neuroncc.evaluation.report`).

Three copies of the model run on the same inputs: neuroncc (``torch.compile(backend="neuron", dynamic=False)``
with ``fallback="cpu"``, so an op neuroncc cannot compile is reported instead of failing the evaluation),
eager float32 and eager float64. With ``train=True`` each runs a training step: forward, backward of a
fixed random projection of every floating output (random cotangents: a plain ``sum`` has zero gradient through
a softmax), and one SGD step; gradients and updated parameters are compared too. The state a call updates in
place (a buffer such as a training-mode BatchNorm's ``running_mean``, a tensor input written with ``add_``) is
compared after the call, as outputs are: every buffer and tensor input that neuroncc's run or eager float32's left
different from its value before the call.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ContextManager

import torch
import torch.utils._pytree as pytree

from neuroncc.codegen.llvm import native_library
from neuroncc.errors import InputError
from neuroncc.evaluation.fallbacks import FallbackSnapshot
from neuroncc.evaluation.report import (
    DEFAULT_ATOL, DEFAULT_RTOL, CompileTime, Difference, EvaluationReport, KernelTime, ShapeRun, Timing,
)
from neuroncc.executors.tracing import TimelineRecorder, installed
from neuroncc.frontend import stats
from neuroncc.frontend.compiled_graph_record import CompiledGraphRecord

SGD_LR = 1e-2


def evaluate(model: torch.nn.Module | Callable[..., Any], inputs: Any, *, train: bool = False, target: str = "cpu",
             shapes: Sequence[Sequence[Sequence[int]]] = (), repeat: int = 20, rtol: float = DEFAULT_RTOL,
             atol: float = DEFAULT_ATOL, options: dict[str, Any] | None = None,
             name: str | None = None, input_names: Sequence[str] | None = None,
             progress: Callable[[str], ContextManager[Any]] | None = None) -> EvaluationReport:
    """Evaluate ``model`` on ``inputs`` (a tensor or a tuple of positional arguments) under neuroncc.

    ``shapes``: extra input shapes to try (one shape per tensor input, or for the first input only), each
    reported as reusing a compiled graph or compiling new ones, with the reason. ``repeat``: calls sampled
    for the steady-state times. ``options``: the backend's options (``fallback`` defaults to ``"cpu"``).
    ``input_names``: the inputs' names in the report when a call updates them in place (default ``arg 0``, ...).
    ``progress(title)`` (a context manager, e.g. the CLI's ``Progress.step``) is entered around each stage.
    Returns an :class:`~neuroncc.evaluation.report.EvaluationReport`; ``report.passed`` is the verdict.
    """
    stage = progress or (lambda title: contextlib.nullcontext())
    if repeat < 1:
        raise InputError(f"evaluate: repeat must be at least 1, got {repeat}")
    if not (rtol >= 0 and atol >= 0):
        raise InputError(f"evaluate: tolerances must be non-negative, got rtol={rtol}, atol={atol}")
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not any(isinstance(a, torch.Tensor) for a in args):
        raise InputError("evaluate: inputs must hold at least one tensor")
    if train and not isinstance(model, torch.nn.Module):
        raise InputError("evaluate(train=True) needs a torch.nn.Module (its parameters are trained)")
    report = EvaluationReport(name or type(model).__name__, target, train, rtol, atol)
    before = _state_after(model, args)  # buffers and inputs before any call: what a call updated differs
    ours, eager32, eager64 = _copies(model)
    compiled = torch.compile(ours, backend="neuron", dynamic=False,
                             options={"fallback": "cpu", **(options or {}), "target": target})
    cotangents: list[torch.Tensor] | None = None
    fallbacks = FallbackSnapshot.take()
    records_before = len(stats.compile_records())

    with stage("compile and run with neuroncc"):
        start = time.perf_counter()
        ours_out = _step(compiled, ours, _fresh(args), train, lambda outs: cotangents)
        first_call = time.perf_counter() - start
        if train:  # the first step compiled the forward graph; cotangents are drawn from its outputs' shapes
            cotangents = _cotangents(ours_out.outputs)
            _reset(ours, model)
            start = time.perf_counter()
            ours_out = _step(compiled, ours, _fresh(args), train, lambda outs: cotangents)
            first_call += time.perf_counter() - start  # the backward graph compiles in this step
    with stage("run eager PyTorch in float32 and float64"):
        eager_out = _step(eager32, eager32, _fresh(args), train, lambda outs: cotangents)
        exact_out = _step(eager64, eager64, _to_float64(_fresh(args)), train,
                          lambda outs: [c.double() for c in cotangents] if cotangents else None)
    report.differences = _differences(ours_out, eager_out, exact_out, rtol, atol)
    names = [*(input_names or ())][:len(args)]
    names += [f"arg {position}" for position in range(len(names), len(args))]
    updated = _updated_state(ours_out, eager_out, exact_out, before, names, rtol, atol)
    report.differences[len(ours_out.outputs):len(ours_out.outputs)] = updated  # after the outputs, as run --check
    with stage(f"time {repeat} calls of each, interleaved"):
        report.kernels = _kernel_timeline(compiled, ours, args, train, cotangents)
        ours_samples, eager_samples = _steady_state(compiled, ours, eager32, args, train, cotangents, repeat)
    report.steady_state = [Timing("neuroncc", tuple(ours_samples)), Timing("eager", tuple(eager_samples))]
    report.compile = _compile_time(first_call, stats.compile_records()[records_before:], min(ours_samples))
    for shape in shapes:
        with stage(f"try input shapes {[list(s) for s in shape]}"):
            report.shapes.append(_try_shape(compiled, ours, args, shape, train))
    report.fallbacks = fallbacks.since()
    report.notices = [f"shared-library kernels given up in this process ({reason}): kernels load through MCJIT"
                      for reason in native_library.given_up()]
    return report


# ---- running ------------------------------------------------------------------------------------------------

class StepResult:
    """Outputs (flattened), gradients and parameters after one SGD step, by name; ``buffers`` (by name) and
    ``inputs`` (by position, ``None`` for a non-tensor) as the call left them."""

    def __init__(self, outputs: list[torch.Tensor], gradients: dict[str, torch.Tensor],
                 parameters: dict[str, torch.Tensor], state: StepResult | None = None):
        self.outputs, self.gradients, self.parameters = outputs, gradients, parameters
        self.buffers: dict[str, torch.Tensor] = state.buffers if state else {}
        self.inputs: list[torch.Tensor | None] = state.inputs if state else []


def _state_after(module: Any, args: tuple[Any, ...]) -> StepResult:
    """Copies of ``module``'s buffers and of the tensor inputs (a step result holding only them)."""
    state = StepResult([], {}, {})
    if isinstance(module, torch.nn.Module):
        state.buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    state.inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]
    return state


def _copies(model: Any) -> tuple[Any, Any, Any]:
    if not isinstance(model, torch.nn.Module):
        return model, model, model  # a function: nothing to copy (its float64 run gets float64 inputs)
    return copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model).double()


def _reset(copy_: Any, original: Any) -> None:
    """Put the original's parameters and buffers back into ``copy_`` (after a step trained it)."""
    if isinstance(copy_, torch.nn.Module):
        copy_.load_state_dict(original.state_dict())
        copy_.zero_grad(set_to_none=True)


def _floating(outputs: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def _cotangents(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(o.shape, generator=generator).to(o.dtype) if o.dtype.is_floating_point else torch.zeros(0)
            for o in outputs]


def _step(fn: Any, module: Any, args: tuple[Any, ...], train: bool,
          cotangents: Callable[[list[torch.Tensor]], list[torch.Tensor] | None]) -> StepResult:
    if not train:
        with torch.no_grad():
            outputs = [o.detach() for o in _floating(fn(*args))]
        return StepResult(outputs, {}, {}, _state_after(module, args))
    module.zero_grad(set_to_none=True)
    outputs = _floating(fn(*args))
    chosen = cotangents(outputs)
    if chosen is not None:
        terms = [(o * c).sum() for o, c in zip(outputs, chosen) if c.numel() and o.requires_grad]
        if terms:
            torch.stack([t.double() for t in terms]).sum().backward()
    named = dict(module.named_parameters())
    gradients = {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None}
    if chosen is not None:
        with torch.no_grad():
            for p in named.values():
                if p.grad is not None:
                    p.sub_(SGD_LR * p.grad)
    parameters = {n: p.detach().clone() for n, p in named.items()}
    return StepResult([o.detach() for o in outputs], gradients, parameters, _state_after(module, args))


def _fresh(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Copies of the tensor inputs: each compared run starts from the same values, also when the model updates
    its inputs in place (an exported program's ``x.add_(1)``: the runs after the first saw updated inputs)."""
    return tuple(a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                 for a in args)


def _to_float64(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a for a in args)


# ---- numerics -----------------------------------------------------------------------------------------------

def _errors(ours: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    if ours.shape != reference.shape or ours.numel() == 0:
        return (0.0, 0.0) if ours.shape == reference.shape else (float("inf"), float("inf"))
    a, b = ours.double(), reference.double()
    if torch.equal(a, b):
        return 0.0, 0.0
    diff = (a - b).abs()
    diff = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    return float(diff.max()), float((diff / b.abs().clamp_min(1e-12)).max())


def _tolerance_used(ours: torch.Tensor, reference: torch.Tensor, rtol: float, atol: float) -> float:
    """max |ours - reference| / (atol + rtol * |reference|) (equal values and NaN in both count 0): <= 1 passes."""
    if ours.shape != reference.shape:
        return float("inf")
    if ours.numel() == 0:
        return 0.0
    if not ours.dtype.is_floating_point:
        return 0.0 if torch.equal(ours, reference.to(ours.dtype)) else float("inf")
    a, b = ours.double(), reference.double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    allowed = atol + rtol * b.abs()
    used = torch.where(same, torch.zeros_like(a), (a - b).abs() / allowed)
    return float(torch.nan_to_num(used, nan=float("inf")).max())


def _difference(name: str, kind: str, ours: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor | None,
                rtol: float, atol: float) -> Difference:
    abs32, rel32 = _errors(ours, eager)
    abs64 = rel64 = eager_abs64 = eager_rel64 = None
    if exact is not None and exact.dtype == torch.float64:
        abs64, rel64 = _errors(ours, exact)
        eager_abs64, eager_rel64 = _errors(eager, exact)
    used = _tolerance_used(ours, eager, rtol, atol)
    return Difference(name, kind, tuple(ours.shape), abs32, rel32, abs64, rel64, eager_abs64, eager_rel64, used,
                      used <= 1.0)


def _differences(ours: StepResult, eager: StepResult, exact: StepResult, rtol: float, atol: float) -> list[Difference]:
    found = []
    for index, (mine, theirs) in enumerate(zip(ours.outputs, eager.outputs)):
        reference = exact.outputs[index] if index < len(exact.outputs) else None
        found.append(_difference(f"output {index}", "output", mine, theirs, reference, rtol, atol))
    for kind, mine_map, theirs_map, exact_map in (("gradient", ours.gradients, eager.gradients, exact.gradients),
                                                  ("parameter", ours.parameters, eager.parameters, exact.parameters)):
        for pname, mine in mine_map.items():
            if pname in theirs_map:
                found.append(_difference(pname, kind, mine, theirs_map[pname], exact_map.get(pname), rtol, atol))
    return found


def _updated_state(ours: StepResult, eager: StepResult, exact: StepResult, before: StepResult,
                   input_names: list[str], rtol: float, atol: float) -> list[Difference]:
    """The buffers and tensor inputs the call updated in place (neuroncc's run or eager float32's left them
    different from before the call), each compared as an output is."""
    found = []
    for bname, old in before.buffers.items():
        mine, theirs = ours.buffers.get(bname), eager.buffers.get(bname)
        if mine is not None and theirs is not None and not (_unchanged(mine, old) and _unchanged(theirs, old)):
            found.append(_difference(bname, "buffer", mine, theirs, exact.buffers.get(bname), rtol, atol))
    for position, old in enumerate(before.inputs):
        if old is None or position >= min(len(ours.inputs), len(eager.inputs)):
            continue
        mine, theirs = ours.inputs[position], eager.inputs[position]
        if not (_unchanged(mine, old) and _unchanged(theirs, old)):
            reference = exact.inputs[position] if position < len(exact.inputs) else None
            found.append(_difference(input_names[position], "input", mine, theirs, reference, rtol, atol))
    return found


def _unchanged(after: torch.Tensor, before: torch.Tensor) -> bool:
    """The same dtype, shape and values (NaN where NaN was)."""
    if after.dtype != before.dtype or after.shape != before.shape:
        return False
    return bool(((after == before) | (torch.isnan(after) & torch.isnan(before))).all()) \
        if after.dtype.is_floating_point or after.dtype.is_complex else torch.equal(after, before)


# ---- time ---------------------------------------------------------------------------------------------------

def _timed_step(fn: Any, module: Any, args: tuple[Any, ...], train: bool,
                cotangents: list[torch.Tensor] | None) -> float:
    start = time.perf_counter()
    if train:
        module.zero_grad(set_to_none=True)
        outputs = _floating(fn(*args))
        terms = [(o * c).sum() for o, c in zip(outputs, cotangents or ()) if c.numel() and o.requires_grad]
        if terms:
            sum(terms).backward()
    else:
        with torch.no_grad():
            fn(*args)
    return time.perf_counter() - start


def _steady_state(compiled: Any, ours: Any, eager: Any, args: tuple[Any, ...], train: bool,
                  cotangents: list[torch.Tensor] | None, repeat: int) -> tuple[list[float], list[float]]:
    """``repeat`` calls of each, interleaved (so load on the machine hits both alike), after 3 warm-up calls."""
    for _ in range(3):
        _timed_step(compiled, ours, args, train, cotangents)
        _timed_step(eager, eager, args, train, cotangents)
    mine, theirs = [], []
    for _ in range(repeat):
        mine.append(_timed_step(compiled, ours, args, train, cotangents))
        theirs.append(_timed_step(eager, eager, args, train, cotangents))
    return mine, theirs


def _kernel_timeline(compiled: Any, ours: Any, args: tuple[Any, ...], train: bool,
                     cotangents: list[torch.Tensor] | None) -> list[KernelTime]:
    """Every neuroncc step of one call (forward and, in training, backward), measured."""
    recorder = TimelineRecorder()
    with installed(recorder):
        _timed_step(compiled, ours, args, train, cotangents)
    origin = min((s.start_us for s in recorder.steps), default=0.0)
    return [KernelTime(s.info.graph, s.info.name, s.info.kind, s.start_us - origin, s.duration_us)
            for s in sorted(recorder.steps, key=lambda s: s.start_us)]


def _compile_time(first_call: float, records: list[CompiledGraphRecord], run_seconds: float) -> CompileTime:
    passes = sum(r.record.passes_total for r in records)
    codegen = sum(r.record.codegen_seconds for r in records)
    cache = sum(r.record.cache_seconds for r in records)
    importing = sum(r.import_seconds for r in records)
    tracing = max(first_call - run_seconds - passes - codegen - cache, importing)
    return CompileTime(first_call, tracing, importing, passes, codegen, cache, tuple(r.record for r in records))


# ---- other shapes -------------------------------------------------------------------------------------------

def _inputs_of_shape(args: tuple[Any, ...], shape: Sequence[Sequence[int]]) -> tuple[Any, ...]:
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    shapes = [tuple(int(n) for n in s) for s in shape]
    if len(shapes) > len(tensors):
        raise InputError(f"evaluate: {len(shapes)} shapes given for {len(tensors)} tensor inputs")
    generator = torch.Generator().manual_seed(1)
    new = list(args)
    for position, wanted in zip(tensors, shapes):
        old = args[position]
        if old.dtype.is_floating_point:
            new[position] = torch.randn(wanted, generator=generator).to(old.dtype)
        else:
            high = int(old.max()) + 1 if old.numel() else 1
            new[position] = torch.randint(0, max(high, 1), wanted, generator=generator).to(old.dtype)
    return tuple(new)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "changed since the last specialization:" in message:
            self.lines.append(message.split("changed since the last specialization: ", 1)[1].split("; TorchDynamo")[0])


def _try_shape(compiled: Any, ours: Any, args: tuple[Any, ...], shape: Sequence[Sequence[int]],
               train: bool) -> ShapeRun:
    new_args = _inputs_of_shape(args, shape)
    described = tuple(tuple(a.shape) for a in new_args if isinstance(a, torch.Tensor))
    logger = logging.getLogger("neuroncc.frontend")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    before = stats.stats()["graphs_compiled"]
    start = time.perf_counter()
    try:
        _timed_step(compiled, ours, new_args, train, None)
        error = None
    except Exception as exc:  # a shape the model itself refuses: reported, the evaluation goes on
        error = _shape_refusal(ours, new_args, exc)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    seconds = time.perf_counter() - start
    return ShapeRun(described, stats.stats()["graphs_compiled"] - before, seconds, tuple(handler.lines), error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _shape_refusal(module: Any, args: tuple[Any, ...], error: BaseException) -> str:
    """Why a shape failed: eager PyTorch's own refusal when it refuses it too (a program exported with static
    shapes does), else neuroncc's error."""
    try:
        with torch.no_grad():
            copy.deepcopy(module)(*args) if isinstance(module, torch.nn.Module) else module(*args)
    except Exception as eager_error:  # the model's own refusal, whatever its type
        return f"eager PyTorch refuses these shapes too ({_first_line(eager_error)})"
    return f"neuroncc failed: {_first_line(error)}"
