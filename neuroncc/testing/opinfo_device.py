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
    _Run,
    compare_runs,
    describe,
    op_key,
    sample_callable,
    samples_for,
    time_limit,
)
from neuroncc.testing.opinfo_policy import metadata_only_reason

FALLBACK = "F"
LETTERS = {PASS: "ran on the device and matches CPU", FALLBACK: "matches CPU, with ops run by the CPU fallback",
           MISMATCH: "a different result than CPU", CRASH: "raised where CPU did not",
           EAGER_FAILS: "CPU itself raises (not counted)", NOT_APPLICABLE: "nothing to check"}
DEVICE_MODES = ("fwd", "bwd")


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
    difference = compare_runs(result, _as_stored(reference, result), key, torch.float32)
    if difference and metadata_only_reason(key) is None:  # a rounding difference, or a wrong result?
        exact = _float64_run(fn, tensors, sample, mode, seed)
        if exact is not None:
            difference = compare_runs(result, _as_stored(reference, result), key, torch.float32, exact)
    if difference:
        return MISMATCH, difference
    return (FALLBACK, "") if _fallback_calls() > fallbacks else (PASS, "")


def run_device_mode(op: Any, mode: str, config: SweepConfig, known: str | None = None) -> ModeResult:
    """Every sample of ``op`` in ``mode`` (up to ``config.max_samples``) on the device."""
    start = time.monotonic()
    letters: list[str] = []
    notes: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = list(samples_for(op, mode, config.seed, config.max_samples))
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
