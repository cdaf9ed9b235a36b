"""The OpInfo sweep on the ``neuron`` device: every sample run eagerly on neuron tensors and on CPU.

For one OpInfo and one mode (``fwd``: float32 forward; ``bwd``: float32 forward and gradients) every sample
runs twice with the same seed: on CPU tensors (the reference) and on copies of them on the neuron device
(same sizes, strides and offsets), where each aten op is compiled by neuroncc or falls back to CPU. Outputs,
gradients and the inputs after the call are compared with the same tolerances as the torch.compile sweep
(neuroncc.testing.opinfo); float64 results are compared in float32, the dtype the device stores them in.

Letters per sample: ``P`` ran on the device (every op a neuroncc kernel) and matches; ``F`` matches, with at
least one op run by the CPU fallback; ``M`` a different result (silent: the worst); ``C`` raised where CPU
did not; ``E`` CPU itself raises (not counted); ``-`` nothing to check (bwd without a differentiable output).
An OpInfo's status: ``device`` (all ``P``), ``fallback`` (matches, some ``F``), ``mismatch``, ``crash``.

With ``SweepConfig.dtype`` (``tools/opinfo_device_sweep.py --dtype bfloat16``, float16, int64, int32, bool,
uint8) the samples are the OpInfo's samples in that dtype and the comparison is torch's own for a device
against CPU (:func:`torch_tolerance`: ``torch.testing``'s default tolerance for each output's dtype, exact
for integers and bool, or the op's ``toleranceOverride`` for that test), with no float64 second opinion: a value outside
torch's tolerance is a mismatch (its note says whether the device's value is as close to the float64 answer
as CPU's).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

import neuroncc
from neuroncc.testing.opinfo import (
    CRASH,
    EAGER_FAILS,
    MISMATCH,
    NOT_APPLICABLE,
    PASS,
    ModeResult,
    SweepConfig,
    SampleTimeout,
    _call,
    _float64_run,
    _as_close_as_eager,
    _Run,
    compare_runs,
    describe,
    op_key,
    sample_callable,
    samples_for,
    time_limit,
)
from neuroncc.testing.opinfo_policy import Tolerance, metadata_only_reason

FALLBACK = "F"
LETTERS = {PASS: "ran on the device and matches CPU", FALLBACK: "matches CPU, with ops run by the CPU fallback",
           MISMATCH: "a different result than CPU", CRASH: "raised where CPU did not",
           EAGER_FAILS: "CPU itself raises (not counted)", NOT_APPLICABLE: "nothing to check"}
DEVICE_MODES = ("fwd", "bwd")
#: The dtypes ``--dtype`` sweeps (float32 is the default sweep, with its own table and rules).
SWEEP_DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "int16", "int8", "bool", "uint8")


def torch_tolerance(op: Any, dtype: torch.dtype) -> Tolerance:
    """The tolerance torch's OpInfo tests use to compare ``op`` on a device with CPU for samples in ``dtype``:
    the op's ``toleranceOverride``/``precisionOverride`` for TestCommon's CPU comparison, else None for
    both (``torch.testing.assert_close`` then takes each compared tensor's dtype's default: bf16 rtol 1.6e-2,
    float16 1e-3, float32 1.3e-6, atol 1e-5; integers and bool exact)."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    rtol = atol = None
    for info in getattr(op, "decorators", ()):
        if getattr(info, "cls_name", "") not in (None, "TestCommon") or \
                getattr(info, "test_name", "") not in (None, "test_compare_cpu") or \
                getattr(info, "device_type", None) not in (None, "cpu") or \
                (info.dtypes is not None and dtype not in info.dtypes):
            continue
        for decorator in info.decorators:
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                atol, rtol = decorator.d[dtype].atol, decorator.d[dtype].rtol
            elif isinstance(decorator, precisionOverride) and dtype in decorator.d:
                atol = decorator.d[dtype]
    if (rtol is None) != (atol is None):  # assert_close takes both or neither
        from torch.testing._comparison import default_tolerances

        default_rtol, default_atol = default_tolerances(dtype)
        rtol, atol = (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)
    return Tolerance(rtol=rtol, atol=atol)  # type: ignore[arg-type]


def device_status(letters: str) -> str:
    """An OpInfo's status on the device from its samples' letters (the worst outcome wins)."""
    counted = letters.replace(NOT_APPLICABLE, "").replace(EAGER_FAILS, "")
    if not counted:
        return "eager-fails" if EAGER_FAILS in letters else "n/a"
    for letter, status in ((MISMATCH, "mismatch"), (CRASH, "crash"), ("T", "crash"), (FALLBACK, "fallback")):
        if letter in counted:
            return status
    return "device"


def to_device(t: torch.Tensor) -> torch.Tensor:
    """A neuron copy of ``t`` with the same sizes, strides and storage offset (stride 0 included)."""
    base = t.detach()
    if base.layout != torch.strided:
        copy = base.to("neuron")
    else:
        storage = base.untyped_storage().to(device="neuron")
        copy = torch.empty(0, dtype=base.dtype, device="neuron").set_(storage, base.storage_offset(), base.size(),
                                                                      base.stride())
    return copy.requires_grad_(t.requires_grad)


def _to_cpu(tree: Any) -> Any:
    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            value = value.detach()
            return value.cpu() if value.device.type != "cpu" else value
        return value

    return tree_map(move, tree)


def _device_call(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], sample: Any, mode: str, seed: int) -> _Run:
    """One run of the sample on the device (inputs moved there), its results brought back to CPU."""
    return _call(fn, tensors, sample, mode, seed, place=to_device, collect=_to_cpu)


def _as_stored(reference: _Run, result: _Run) -> _Run:
    """The CPU reference with float64 tensors in float32 where the device's result is float32 (the device
    stores float64 as float32; results the op put on CPU keep their dtype)."""
    def narrow(expected: Any, actual: Any) -> Any:
        if isinstance(expected, torch.Tensor) and expected.dtype is torch.float64 and \
                isinstance(actual, torch.Tensor) and actual.dtype is torch.float32:
            return expected.float()
        return expected

    def tree(expected: Any, actual: Any) -> Any:
        expected_leaves, spec = tree_flatten(expected)
        actual_leaves = tree_leaves(actual)
        if len(actual_leaves) != len(expected_leaves):
            return expected
        return tree_unflatten([narrow(e, a) for e, a in zip(expected_leaves, actual_leaves)], spec)

    grads = reference.grads if reference.grads is None or result.grads is None else tree(reference.grads, result.grads)
    return _Run(tree(reference.outputs, result.outputs), grads, tree(reference.inputs_after, result.inputs_after))


def _fallback_calls() -> int:
    from neuroncc.device import dispatch

    return sum(handler.state.fallback_calls for handler in dispatch.handlers())


def run_device_sample(op: Any, sample: Any, mode: str, index: int, config: SweepConfig) -> tuple[str, str]:
    """(letter, note) for one sample."""
    key = op_key(op)
    fn, tensors = sample_callable(op, sample)
    seed = config.seed * 1_000_003 + index
    dtype = getattr(torch, config.dtype or "float32")
    try:
        with time_limit(config.sample_timeout_s):
            reference = _call(fn, tensors, sample, mode, seed)
    except (Exception, SampleTimeout) as exc:
        return EAGER_FAILS, f"CPU raises {describe(exc)}"
    if mode == "bwd" and reference.grads == []:
        return NOT_APPLICABLE, ""
    fallbacks = _fallback_calls()
    try:
        with time_limit(config.sample_timeout_s):
            result = _device_call(fn, tensors, sample, mode, seed)
    except SampleTimeout as exc:
        return "T", str(exc)
    except Exception as exc:
        return CRASH, describe(exc)
    if dtype is not torch.float32:
        tolerance = torch_tolerance(op, dtype)
        difference = compare_runs(result, _as_stored(reference, result), key, dtype, tolerance=tolerance)
        if difference:
            return MISMATCH, difference + _float64_hint(fn, tensors, sample, mode, seed, result, reference, tolerance)
        return (FALLBACK, "") if _fallback_calls() > fallbacks else (PASS, "")
    difference = compare_runs(result, _as_stored(reference, result), key, torch.float32)
    if difference and metadata_only_reason(key) is None:  # a rounding difference, or a wrong result?
        exact = _float64_run(fn, tensors, sample, mode, seed)
        if exact is not None:
            difference = compare_runs(result, _as_stored(reference, result), key, torch.float32, exact)
    if difference:
        return MISMATCH, difference
    return (FALLBACK, "") if _fallback_calls() > fallbacks else (PASS, "")


def _float64_hint(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], sample: Any, mode: str, seed: int,
                  result: _Run, reference: _Run, tolerance: Tolerance) -> str:
    """For triage: whether the device's outputs are as close to the float64 answer as CPU's."""
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tree_leaves(reference.outputs)):
        return ""
    exact = _float64_run(fn, tensors, sample, mode, seed)
    if exact is None:
        return ""
    try:
        close = _as_close_as_eager(result.outputs, reference.outputs, exact.outputs, tolerance)
    except Exception:
        return ""
    return " [float64: device as close as CPU]" if close else " [float64: device further than CPU]"


def run_device_mode(op: Any, mode: str, config: SweepConfig, known: str | None = None) -> ModeResult:
    """Every sample of ``op`` in ``mode`` (up to ``config.max_samples``) on the device."""
    start = time.monotonic()
    letters: list[str] = []
    notes: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = list(samples_for(op, mode, config.seed, config.max_samples,
                                       getattr(torch, config.dtype) if config.dtype else None))
        except Exception as exc:
            return ModeResult(op_key(op), mode, EAGER_FAILS, f"sample_inputs raises {describe(exc)}")
        before = neuroncc.get_fallback_ops()
        for index, sample in enumerate(samples):
            letter, reason = run_device_sample(op, sample, mode, index, config)
            letters.append(letter)
            notes.setdefault(letter, f"sample {index}: {reason}")
        fell_back = sorted(name for name, calls in neuroncc.get_fallback_ops().items() if calls > before.get(name, 0))
    if fell_back:
        notes[FALLBACK] = "CPU fallback: " + ", ".join(fell_back)
    worst = next((notes[x] for x in (MISMATCH, CRASH, "T", FALLBACK, EAGER_FAILS) if x in notes), "")
    return ModeResult(op_key(op), mode, "".join(letters), worst, time.monotonic() - start)
