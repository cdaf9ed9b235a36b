"""The OpInfo sweep engine: PyTorch's own ``op_db`` samples through ``torch.compile`` against eager.

For one OpInfo and one *mode* (``fwd``: float32 forward; ``bwd``: float32 forward and gradients; ``bf16``:
bfloat16 forward) every sample is run three ways, each on fresh copies of its inputs with the same RNG seed:

1. eager PyTorch (the reference);
2. ``torch.compile(backend=<baseline>)``, dynamo's own ``eager`` backend: if it fails or disagrees with
   eager, the sample is not neuroncc's to pass (``E``) and leaves the denominator;
3. ``torch.compile(backend=<backend>, fullgraph=True, dynamic=False)``, normally ``neuron``.

Each sample gets one letter (:data:`LETTERS`); a mode's letters give the op's status (:func:`op_status`).
A refusal counts only when it is a ``neuroncc.UnsupportedOpError`` (found by following ``__cause__`` and
dynamo's ``BackendCompilerFailed.inner_exception``); any other exception is a crash, a wrong value a
mismatch (the worst outcome: silent). See ``tools/opinfo_sweep.py`` and ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
import signal
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from neuroncc.errors import UnsupportedOpError
from neuroncc.testing.compare import float64_judgement, special_positions_differ
from neuroncc.testing.distributions import check_same_distribution
from neuroncc.testing.opinfo_policy import (
    BF16_EXTRA_OPS,
    BF16_OPINFO_CLASSES,
    RANDOM_ALPHA,
    RANDOM_CALLS,
    metadata_only_reason,
    random_reason,
    tolerance_for,
)

PASS, UNSUPPORTED, MISMATCH, CRASH, TIMEOUT, EAGER_FAILS, NOT_APPLICABLE = "P", "U", "M", "C", "T", "E", "-"

#: One letter per sample.
LETTERS = {
    PASS: "matches eager",
    UNSUPPORTED: "refused with UnsupportedOpError",
    MISMATCH: "ran and returned a different result than eager (silent wrong result)",
    CRASH: "raised something other than UnsupportedOpError",
    TIMEOUT: "ran past the per-sample time limit",
    EAGER_FAILS: "eager or dynamo's own eager backend fails or disagrees (not counted)",
    NOT_APPLICABLE: "nothing to check (no differentiable output for bwd)",
}

MODES = ("fwd", "bwd", "bf16")
_MODE_DTYPE = {"fwd": torch.float32, "bwd": torch.float32, "bf16": torch.bfloat16}


class SampleTimeout(BaseException):
    """Raised by the alarm handler; a BaseException so that dynamo and the backend do not swallow it."""


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """How to run the sweep. ``baseline=None`` trusts ``known`` letters instead of running dynamo's eager."""

    backend: str = "neuron"
    options: Mapping[str, Any] = field(default_factory=dict)
    baseline: str | None = "eager"
    max_samples: int | None = None
    sample_timeout_s: float = 60.0
    seed: int = 0
    #: The device sweep's sample dtype (``torch.bfloat16``'s name without ``torch.``); empty: the mode's dtype.
    dtype: str = ""


@dataclass(frozen=True, slots=True)
class ModeResult:
    """The outcome of one (op, mode): one letter per sample and the first failure's reason."""

    key: str
    mode: str
    letters: str
    note: str = ""
    seconds: float = 0.0

    @property
    def status(self) -> str:
        return op_status(self.letters)


def op_status(letters: str) -> str:
    """An op's status from its samples' letters: the worst outcome wins.

    ``pass`` needs every counted sample to pass; samples where eager's own backend fails are not counted.
    """
    counted = letters.replace(NOT_APPLICABLE, "")
    if not counted:
        return "n/a"
    if set(counted) == {EAGER_FAILS}:
        return "eager-fails"
    for letter, status in ((MISMATCH, "mismatch"), (CRASH, "crash"), (TIMEOUT, "crash"),
                           (UNSUPPORTED, "unsupported")):
        if letter in counted:
            return status
    return "pass"


# ---- which OpInfos, which modes ------------------------------------------------------------------------


def op_key(op: Any) -> str:
    """``name`` or ``name:variant`` (the sweep's identifier of an OpInfo)."""
    return f"{op.name}:{op.variant_test_name}" if op.variant_test_name else op.name


def float32_opinfos() -> list[Any]:
    """Every OpInfo of ``op_db`` that supports float32 on CPU, sorted by key."""
    return opinfos_for(torch.float32)


def opinfos_for(dtype: torch.dtype) -> list[Any]:
    """Every OpInfo of ``op_db`` that supports ``dtype`` on CPU, sorted by key."""
    from torch.testing._internal import common_methods_invocations

    # Random ops call ``wrapper_set_seed(op, ...)``, which saves and restores the RNG state in ways dynamo
    # cannot trace. The sweep seeds the RNG before every run itself, so a plain call is equivalent.
    common_methods_invocations.wrapper_set_seed = _call_unseeded
    ops = [op for op in common_methods_invocations.op_db if dtype in op.supported_dtypes("cpu")]
    return sorted(ops, key=op_key)


def _call_unseeded(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


def modes_for(op: Any) -> tuple[str, ...]:
    """The modes an OpInfo is swept in: fwd always, bwd where it has float32 autograd, bf16 for the
    elementwise/reduction set (see :mod:`neuroncc.testing.opinfo_policy`)."""
    modes = ["fwd"]
    if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu"):
        modes.append("bwd")
    bf16_family = type(op).__name__ in BF16_OPINFO_CLASSES or op_key(op) in BF16_EXTRA_OPS
    if bf16_family and torch.bfloat16 in op.supported_dtypes("cpu"):
        modes.append("bf16")
    return tuple(modes)


@functools.cache
def _lazy_devices_can_initialize() -> bool:
    """Whether CUDA, XPU or MTIA could start in this process (then their queued seeds would apply)."""
    return torch.cuda.is_available() or torch.xpu.is_available() or torch.mtia.is_available()


def seed_generators(seed: int) -> None:
    """``torch.manual_seed(seed)``, without queueing seeds for CUDA, XPU and MTIA where none is available.

    Until CUDA (XPU, MTIA) starts, ``torch.manual_seed`` queues its seed with the caller's whole stack formatted
    (``traceback.format_stack``): 1-5 ms deep in pytest and TorchDynamo, and a random op's sample seeds
    2 x ``RANDOM_CALLS`` runs (8% of the OpInfo status test's time). A device that is not available never
    starts, so its queued seed is never applied: the generators the runs draw from (the CPU's, the neuron
    device's through torch's custom-device seeding, MPS's as torch seeds it) end as ``torch.manual_seed`` leaves
    them. Where any of the three is available this is ``torch.manual_seed``."""
    if _lazy_devices_can_initialize():
        torch.manual_seed(seed)
        return
    seed = int(seed)
    if not torch.mps._is_in_bad_fork():
        torch.mps.manual_seed(seed)
    torch.random._seed_custom_device(seed)
    torch.default_generator.manual_seed(seed)


def samples_for(op: Any, mode: str, seed: int, limit: int | None = None,
                dtype: torch.dtype | None = None) -> Iterator[Any]:
    """The op's samples for ``mode``, in ``dtype`` (default: the mode's)."""
    seed_generators(seed)
    samples = op.sample_inputs("cpu", dtype or _MODE_DTYPE[mode], requires_grad=(mode == "bwd"))
    return itertools.islice(samples, limit) if limit is not None else iter(samples)


# ---- one run of one sample -----------------------------------------------------------------------------


@dataclass
class _Run:
    outputs: Any
    grads: list[torch.Tensor | None] | None
    inputs_after: list[torch.Tensor]


def _fresh_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy with its own storage and the same sizes, strides and storage offset (stride 0 included)."""
    base = t.detach()
    if base.layout != torch.strided:
        copy = base.clone()
    else:
        copy = torch.empty(0, dtype=base.dtype).set_(
            base.untyped_storage().clone(), base.storage_offset(), base.size(), base.stride()
        )
    return copy.requires_grad_(t.requires_grad)


def _detach(tree: Any) -> Any:
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([x.detach() if isinstance(x, torch.Tensor) else x for x in leaves], spec)


def _call(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], sample: Any, mode: str, seed: int,
          grad_seed: int | None = None, place: Callable[[torch.Tensor], torch.Tensor] = _fresh_copy,
          collect: Callable[[Any], Any] = _detach) -> _Run:
    """One run; the output gradients come from a generator seeded with ``grad_seed`` (default ``seed``).

    ``place`` makes each input the op sees (a fresh CPU copy; the device sweep puts it on the device), and
    ``collect`` turns what the run produced into what is compared (detached; the device sweep moves it to CPU).
    """
    inputs = [place(t) for t in tensors]
    seed_generators(seed)
    outputs = fn(*inputs)
    grads = None
    if mode == "bwd":
        differentiable = [o for o in tree_leaves(sample.output_process_fn_grad(outputs))
                          if isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = [t for t in inputs if t.requires_grad]
        if differentiable and wrt:
            generator = torch.Generator().manual_seed(seed if grad_seed is None else grad_seed)
            grad_outputs = [torch.randn(o.shape, generator=generator).to(o.dtype).to(o.device) for o in differentiable]
            grads = collect(list(torch.autograd.grad(differentiable, wrt, grad_outputs, allow_unused=True)))
        else:
            grads = []
    return _Run(collect(outputs), grads, [collect(t) for t in inputs])


def sample_callable(op: Any, sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """A function of the sample's tensors only; every other argument is a constant closed over.

    The function is generated as source (``op(t0, [t1, t2], dim=c0)``) rather than rebuilding the
    arguments with pytree at call time: dynamo would trace the rebuilding too, which triples compile time.
    """
    tensors: list[torch.Tensor] = []
    namespace: dict[str, Any] = {"__op": op.get_op()}

    def spell(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return f"t{len(tensors) - 1}"
        if type(value) in (list, tuple):
            items = ", ".join(spell(v) for v in value)
            return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
        if type(value) is dict and all(isinstance(k, str) for k in value):
            return "{" + ", ".join(f"{k!r}: {spell(v)}" for k, v in value.items()) + "}"
        name = f"c{len(namespace)}"
        namespace[name] = value
        return name

    arguments = [spell(sample.input), *(spell(a) for a in sample.args)]
    arguments += [f"**{{{k!r}: {spell(v)}}}" for k, v in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    source = f"def call_op({params}):\n    return __op({', '.join(arguments)})\n"
    exec(compile(source, f"<opinfo sample of {op_key(op)}>", "exec"), namespace)
    return namespace["call_op"], tensors


# ---- comparing runs ------------------------------------------------------------------------------------


def _metadata(tree: Any) -> Any:
    leaves, spec = tree_flatten(tree)
    described = [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__ for x in leaves]
    return str(spec), described


def _assert_close(actual: Any, expected: Any, rtol: float, atol: float) -> None:
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
    except TypeError:
        if actual != expected:  # values assert_close does not know (torch.Size, strings, dtypes, ...)
            raise AssertionError(f"{actual!r} != {expected!r}") from None


def compare_runs(got: _Run, want: _Run, key: str, dtype: torch.dtype, exact: _Run | None = None,
                 tolerance: Any = None) -> str | None:
    """None when ``got`` matches ``want``; otherwise what differs (outputs, gradients, mutated inputs).

    With ``exact`` (the sample run in float64), a float tensor outside the tolerance still matches when it is
    as close to the float64 answer as eager's is (:mod:`neuroncc.testing.compare`). ``tolerance`` (a
    :class:`~neuroncc.testing.opinfo_policy.Tolerance`) replaces the sweep's own for ``(key, dtype)``.
    """
    tolerance = tolerance or tolerance_for(key, dtype)
    metadata_only = metadata_only_reason(key) is not None or random_reason(key) is not None
    parts = [("output", got.outputs, want.outputs, exact and exact.outputs),
             ("input after the call", got.inputs_after, want.inputs_after, exact and exact.inputs_after)]
    if want.grads is not None:
        parts.append(("gradient", got.grads, want.grads, exact and exact.grads))
    for what, actual, expected, exact_part in parts:
        if metadata_only:
            if _metadata(actual) != _metadata(expected):
                return f"{what}: shapes/dtypes {_metadata(actual)[1]} != eager {_metadata(expected)[1]}"
            continue
        if what == "gradient" and [g is None for g in actual] != [g is None for g in expected]:
            return f"gradient: None pattern {[g is None for g in actual]} != eager {[g is None for g in expected]}"
        try:
            _assert_close(actual, expected, tolerance.rtol, tolerance.atol)
        except AssertionError as exc:
            if exact_part is None or not _as_close_as_eager(actual, expected, exact_part, tolerance):
                return f"{what}: {_one_line(str(exc))}"
    return None


def distribution_difference(compiled: Callable[..., Any], eager: Callable[..., Any], tensors: Sequence[torch.Tensor],
                            sample: Any, mode: str, seed: int) -> str | None:
    """For a random op: None when the compiled function's draws follow eager's distribution, else why not.

    Both sides are called ``RANDOM_CALLS`` times with the same sequence of seeds; each result's (output or
    gradient) values are pooled over the calls and compared with a two-sample Kolmogorov-Smirnov test whose
    critical value counts calls, not values (values of one call may share a random decision). The output
    gradients come from another seed than the op's draws: seeded alike, eager's gradients would be correlated
    with its draws (one Mersenne Twister stream), which is no property of the op."""
    pools: list[list[list[np.ndarray]]] = [[], []]
    for side, fn in enumerate((compiled, eager)):
        for call in range(RANDOM_CALLS):
            run = _call(fn, tensors, sample, mode, seed + 7919 * call, grad_seed=seed + 7919 * call + 104729)
            leaves = [t for t in [*tree_leaves(run.outputs), *(run.grads or [])] if isinstance(t, torch.Tensor)]
            if not pools[side]:
                pools[side] = [[] for _ in leaves]
            for pool, leaf in zip(pools[side], leaves):
                pool.append(leaf.detach().reshape(-1).to(torch.float64).numpy())
    for index, (ours, theirs) in enumerate(zip(*pools)):
        failure = check_same_distribution(np.concatenate(ours), np.concatenate(theirs), f"result #{index}",
                                          alpha=RANDOM_ALPHA, independent=(RANDOM_CALLS, RANDOM_CALLS))
        if failure:
            return failure
    return None


def _as_close_as_eager(actual: Any, expected: Any, exact: Any, tolerance: Any) -> bool:
    """Every tensor of ``actual`` matches eager's, or is no further than eager's from the float64 answer."""
    triples = list(zip(tree_leaves(actual), tree_leaves(expected), tree_leaves(exact)))
    if not len(triples) == len(tree_leaves(actual)) == len(tree_leaves(expected)):
        return False
    for a, e, x in triples:
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and isinstance(x, torch.Tensor)):
            if a != e:
                return False
            continue
        try:
            _assert_close(a, e, tolerance.rtol, tolerance.atol)
            continue
        except AssertionError:
            pass
        if not e.is_floating_point() or a.dtype != e.dtype or a.shape != e.shape:
            return False
        if special_positions_differ(a, e) or float64_judgement(a, e, x) is not None:
            return False
    return True


def _float64_run(fn: Callable[..., Any], tensors: Sequence[torch.Tensor], sample: Any, mode: str,
                 seed: int) -> _Run | None:
    """The sample in float64 (float inputs widened), or None when the op has no float64 kernel."""
    widened = [t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t for t in tensors]
    try:
        return _call(fn, widened, sample, mode, seed)
    except Exception:
        return None


# ---- classifying failures ------------------------------------------------------------------------------


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: ``__cause__`` chains and dynamo's ``inner_exception``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = getattr(current, "inner_exception", None) or current.__cause__


def refusal_in(exc: BaseException) -> UnsupportedOpError | None:
    """The UnsupportedOpError behind ``exc``, if neuroncc refused the graph."""
    return next((e for e in _causes(exc) if isinstance(e, UnsupportedOpError)), None)


_PATH_LINE = re.compile(r"(/[^\s:'\"]+)+\.py:\d+")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def _one_line(text: str, limit: int = 200) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = " | ".join(lines[:2]) if lines else ""
    first = _ADDRESS.sub("0x?", _PATH_LINE.sub("<file>", first))
    return first if len(first) <= limit else first[: limit - 3] + "..."


def describe(exc: BaseException) -> str:
    """A short, stable description of an exception: the innermost wrapped cause, type and first line."""
    innermost = list(_causes(exc))[-1]
    return f"{type(innermost).__name__}: {_one_line(str(innermost))}"


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`SampleTimeout` after ``seconds`` (main thread only; elsewhere no limit)."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise SampleTimeout(f"ran past {seconds:g}s")

    try:
        previous = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---- one sample, one mode ------------------------------------------------------------------------------


def _compiled(fn: Callable[..., Any], backend: str, options: Mapping[str, Any]) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False, options=dict(options) or None)


def run_sample(op: Any, sample: Any, mode: str, index: int, config: SweepConfig,
               baseline_known_good: bool = False) -> tuple[str, str]:
    """(letter, note) for one sample. ``baseline_known_good`` skips the dynamo-eager baseline run."""
    key = op_key(op)
    fn, tensors = sample_callable(op, sample)
    seed = config.seed * 1_000_003 + index
    try:
        with time_limit(config.sample_timeout_s):
            reference = _call(fn, tensors, sample, mode, seed)
    except (Exception, SampleTimeout) as exc:
        return EAGER_FAILS, f"eager raises {describe(exc)}"
    if config.baseline and not baseline_known_good:
        try:
            with time_limit(config.sample_timeout_s):
                baseline = _call(_compiled(fn, config.baseline, {}), tensors, sample, mode, seed)
        except (Exception, SampleTimeout) as exc:
            return EAGER_FAILS, f"backend={config.baseline} raises {describe(exc)}"
        difference = compare_runs(baseline, reference, key, _MODE_DTYPE[mode])
        if difference:
            return EAGER_FAILS, f"backend={config.baseline} differs from eager: {difference}"
    if mode == "bwd" and reference.grads == []:
        return NOT_APPLICABLE, ""
    try:
        with time_limit(config.sample_timeout_s):
            compiled = _compiled(fn, config.backend, config.options)
            result = _call(compiled, tensors, sample, mode, seed)
            difference = compare_runs(result, reference, key, _MODE_DTYPE[mode])
            if not difference and random_reason(key) is not None:
                difference = distribution_difference(compiled, fn, tensors, sample, mode, seed)
    except SampleTimeout as exc:
        return TIMEOUT, str(exc)
    except Exception as exc:
        refusal = refusal_in(exc)
        if refusal is not None:
            return UNSUPPORTED, f"{type(refusal).__name__}: {_one_line(str(refusal))}"
        return CRASH, describe(exc)
    finally:
        torch._dynamo.reset()
    if difference and metadata_only_reason(key) is None and random_reason(key) is None:  # rounding, or wrong?
        exact = _float64_run(fn, tensors, sample, mode, seed)
        if exact is not None:
            difference = compare_runs(result, reference, key, _MODE_DTYPE[mode], exact)
    return (MISMATCH, difference) if difference else (PASS, "")


def run_mode(op: Any, mode: str, config: SweepConfig, known: str | None = None) -> ModeResult:
    """Every sample of ``op`` in ``mode`` (up to ``config.max_samples``).

    ``known`` is the letters a previous sweep recorded (same torch, same samples): samples it marks
    ``E`` are not rerun, and with ``config.baseline=None`` the others skip the baseline run.
    """
    start = time.monotonic()
    letters: list[str] = []
    notes: dict[str, str] = {}  # the first reason per letter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            samples = list(samples_for(op, mode, config.seed, config.max_samples))
        except Exception as exc:
            return ModeResult(op_key(op), mode, EAGER_FAILS, f"sample_inputs raises {describe(exc)}")
        for index, sample in enumerate(samples):
            previous = known[index] if known is not None and index < len(known) else None
            if previous == EAGER_FAILS:
                letters.append(EAGER_FAILS)
                continue
            trusted = previous is not None and config.baseline is None
            letter, reason = run_sample(op, sample, mode, index, config, baseline_known_good=trusted)
            letters.append(letter)
            notes.setdefault(letter, f"sample {index}: {reason}")
    # The note explains the op's status: the worst failure, else why eager's own backend fails.
    worst = next((notes[x] for x in (MISMATCH, CRASH, TIMEOUT, UNSUPPORTED, EAGER_FAILS) if x in notes), "")
    return ModeResult(op_key(op), mode, "".join(letters), worst, time.monotonic() - start)
