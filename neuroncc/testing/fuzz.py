"""Differential fuzzer: random small torch programs, eager PyTorch vs ``torch.compile(backend="neuron")``.

A :class:`Program` is a straight-line list of statements over torch tensors (elementwise chains,
broadcasts, mixed dtypes, reductions, views, matmuls, softmax/norm/attention patterns; see
:mod:`neuroncc.testing.fuzz_ops`). It renders as a Python function, runs in eager (the reference), in
eager at float64 (to judge rounding differences), and through ``torch.compile`` for each target, forward
and backward (gradients of the sum of the float outputs). A mismatch or crash is shrunk
(:mod:`neuroncc.testing.fuzz_shrink`) and written as a ready pytest file.

    from neuroncc.testing.fuzz import generate_program, check_program
    program = generate_program(seed=0, index=7)
    findings = check_program(program, targets=("interp",))
"""

from __future__ import annotations

import inspect
import math
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from neuroncc.errors import UnsupportedOpError
from neuroncc.testing.compare import float64_judgement, special_positions_differ
from neuroncc.testing.distributions import check_same_distribution
from neuroncc.testing.fuzz_ops import OPS, OPS_BY_NAME, Ctx, Spec, render
from neuroncc.testing.fuzz_random import DRAW_ALPHA, Draw, RandomStmt, Replay, add_randomness, draws_of

__all__ = [
    "FuzzConfig", "Finding", "Input", "Program", "RandomStmt", "Spec", "Stmt", "check_program", "check_regression",
    "generate_program", "make_inputs",
]

OUTPUT_DTYPES = ("float32", "bfloat16", "int64", "bool")


@dataclass(frozen=True, slots=True)
class Input:
    name: str
    spec: Spec


@dataclass(frozen=True, slots=True)
class Stmt:
    """``name = <op's template>(fields)``; ``spec`` is the result's (inferred on meta tensors)."""

    name: str
    op: str
    fields: tuple[tuple[str, Any], ...]
    spec: Spec

    def operands(self) -> list[str]:
        keys = OPS_BY_NAME[self.op].operands
        return [value for key, value in self.fields if key in keys]

    def expression(self, dtype_name: Callable[[str], str] = lambda d: d) -> str:
        return render(OPS_BY_NAME[self.op], dict(self.fields), dtype_name)


@dataclass(frozen=True, slots=True)
class Program:
    """A random program: inputs, statements in order, the returned values, and its input data's seed.

    ``randoms`` run first (:mod:`neuroncc.testing.fuzz_random`); their draws are returned after ``outputs``."""

    inputs: tuple[Input, ...]
    stmts: tuple[Stmt, ...]
    outputs: tuple[str, ...]
    data_seed: int = 0
    specials: bool = False  # plant NaN and +-inf in the first float input
    randoms: tuple[RandomStmt, ...] = ()

    def source(self, name: str = "program", float64: bool = False) -> str:
        dtype_name = (lambda d: "float64" if d in ("float32", "bfloat16") else d) if float64 else (lambda d: d)
        lines = [f"def {name}({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {r.line()}" for r in self.randoms]
        lines += [f"    {s.name} = {s.expression(dtype_name)}" for s in self.stmts]
        lines.append(f"    return ({', '.join([*self.outputs, *(r.draw for r in self.randoms)])},)")
        return "\n".join(lines) + "\n"

    def function(self, float64: bool = False, replay: Sequence[torch.Tensor] | None = None
                 ) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The program as a Python function; ``replay``: draws its random statements hand back instead of
        drawing (the eager replay of a compiled run)."""
        return function_from_source(self.source(float64=float64), "program",
                                    Replay(replay) if replay is not None else Draw)


def function_from_source(source: str, name: str, random_source: Any = Draw) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"torch": torch, "F": F, "_random": random_source}
    exec(compile(source, f"<fuzz program {name}>", "exec"), namespace)
    return namespace[name]


@dataclass(frozen=True, slots=True)
class FuzzConfig:
    max_ops: int = 8
    max_rank: int = 4
    max_numel: int = 1024
    bf16_probability: float = 0.15
    specials_probability: float = 0.1
    int_input_probability: float = 0.1
    random_probability: float = 0.3  # a random statement on an input (fuzz_random.py)


# ---- generation ----------------------------------------------------------------------------------------

_SIZES = (1, 2, 3, 4, 5, 8)


def _random_spec(rng: random.Random, config: FuzzConfig, float_dtype: str) -> Spec:
    rank = rng.choices(range(config.max_rank + 1), [1, 3, 4, 3, 1][: config.max_rank + 1])[0]
    shape = tuple(rng.choice(_SIZES) for _ in range(rank))
    while math.prod(shape) > config.max_numel // 4:
        shape = tuple(max(1, s // 2) for s in shape)
    roll = rng.random()
    if roll < config.int_input_probability:
        return Spec(shape, "int64", 5)
    if roll < config.int_input_probability * 1.5:
        return Spec(shape, "bool")
    return Spec(shape, float_dtype)


def _meta(spec: Spec) -> torch.Tensor:
    return torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device="meta")


def infer_spec(op_name: str, fields: dict[str, Any], values: dict[str, Spec], max_numel: int) -> Spec | None:
    """The statement's result type from running it on meta tensors; None if torch rejects it."""
    op = OPS_BY_NAME[op_name]
    env = {fields[k]: _meta(values[fields[k]]) for k in op.operands}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = eval(render(op, fields), {"torch": torch, "F": F}, env)  # noqa: S307 (our own template)
    except Exception:
        return None
    if not isinstance(result, torch.Tensor) or result.numel() == 0 or result.numel() > max_numel:
        return None
    dtype = str(result.dtype).removeprefix("torch.")
    return Spec(tuple(result.shape), dtype) if dtype in OUTPUT_DTYPES else None


def generate_program(seed: int, index: int, config: FuzzConfig = FuzzConfig()) -> Program:
    """Program ``index`` of the stream ``seed`` (the same pair always gives the same program)."""
    rng = random.Random(f"neuroncc-fuzz:{seed}:{index}")
    weights = [op.weight for op in OPS]
    while True:
        float_dtype = "bfloat16" if rng.random() < config.bf16_probability else "float32"
        inputs = [Input(f"x{i}", _random_spec(rng, config, float_dtype)) for i in range(rng.randint(1, 3))]
        values = {i.name: i.spec for i in inputs}
        raw = set(values)
        stmts: list[Stmt] = []
        length = rng.randint(1, config.max_ops)
        for _ in range(length * 10):
            if len(stmts) == length:
                break
            op = rng.choices(OPS, weights)[0]
            ctx = Ctx(rng, dict(values), set(raw), float_dtype, config.max_numel)
            fields = op.choose(ctx)
            if fields is None:
                continue
            spec = infer_spec(op.name, fields, ctx.values, config.max_numel)
            if spec is None:
                continue
            values, raw = ctx.values, ctx.raw
            inputs += [Input(name, s) for name, s in ctx.fresh_inputs]
            name = f"v{len(stmts)}"
            stmts.append(Stmt(name, op.name, tuple(fields.items()), spec))
            values[name] = spec
        if stmts:
            break
    used = {operand for s in stmts for operand in s.operands()}
    sinks = [s.name for s in stmts[:-1] if s.name not in used]
    outputs = [stmts[-1].name] + rng.sample(sinks, min(len(sinks), rng.randint(0, 2)))
    randoms = add_randomness([s.operands() for s in stmts], [i.name for i in inputs if i.spec.is_float], seed,
                             index, config.random_probability)
    for random_stmt in randoms:  # later statements read the random value in place of the input
        stmts = [rename_operand(s, random_stmt.source, random_stmt.name) for s in stmts]
    return Program(tuple(inputs), tuple(stmts), tuple(outputs), data_seed=rng.randrange(2**31),
                   specials=rng.random() < config.specials_probability, randoms=randoms)


def rename_operand(stmt: Stmt, old: str, new: str) -> Stmt:
    keys = OPS_BY_NAME[stmt.op].operands
    return replace(stmt, fields=tuple((k, new if k in keys and v == old else v) for k, v in stmt.fields))


def make_inputs(inputs: Sequence[Input] | Sequence[Spec], data_seed: int, specials: bool = False) -> list[torch.Tensor]:
    """Deterministic input data: normal floats, small ints (below ``high`` when set), random bools."""
    generator = torch.Generator().manual_seed(data_seed)
    tensors = []
    for item in inputs:
        spec = item.spec if isinstance(item, Input) else item
        if spec.dtype == "int64":
            low, high = (0, spec.high) if spec.high else (-5, 6)
            tensors.append(torch.randint(low, high, spec.shape, generator=generator))
        elif spec.dtype == "bool":
            tensors.append(torch.rand(spec.shape, generator=generator) < 0.5)
        else:
            tensors.append(torch.randn(spec.shape, generator=generator).to(getattr(torch, spec.dtype)))
    if specials:
        for tensor in tensors:
            if tensor.is_floating_point() and tensor.numel() >= 3:
                flat = tensor.view(-1)
                for position, value in zip(torch.randperm(flat.numel(), generator=generator)[:3].tolist(),
                                           (math.nan, math.inf, -math.inf)):
                    flat[position] = value
                break
    return tensors


# ---- running and comparing -----------------------------------------------------------------------------


@dataclass
class Outcome:
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None] | None  # None when no gradient was taken


def execute(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], backward: bool) -> Outcome:
    args = [t.detach().clone().requires_grad_(backward and t.is_floating_point()) for t in inputs]
    result = fn(*args)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    grads = None
    if backward:
        differentiable = [o for o in outputs if o.requires_grad]
        wrt = [a for a in args if a.requires_grad]
        grads = []
        if differentiable and wrt:
            loss = sum(o.float().sum() for o in differentiable)
            grads = list(torch.autograd.grad(loss, wrt, allow_unused=True))
    return Outcome([o.detach() for o in outputs], grads)


#: (rtol, atol) against eager; beyond them the float64 judgement decides (:mod:`neuroncc.testing.compare`).
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (1.6e-2, 1e-2)}


def compare_tensor(got: torch.Tensor | None, want: torch.Tensor | None, ref64: torch.Tensor | None) -> str | None:
    """None when ``got`` is as good as eager's ``want``; floats may differ by rounding (judged in float64)."""
    if got is None or want is None:
        return None if got is None and want is None else f"None vs {'tensor' if want is not None else 'None'}"
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} vs eager {want.dtype}{list(want.shape)}"
    if not want.is_floating_point():
        if torch.equal(got, want):
            return None
        index = (got != want).nonzero()[0].tolist()
        return f"differs at {index}: {got[tuple(index)].item()} vs eager {want[tuple(index)].item()}"
    special = special_positions_differ(got, want)
    if special:
        return special
    rtol, atol = TOLERANCES[want.dtype]
    finite = torch.isfinite(want)
    g, w = got.double()[finite], want.double()[finite]
    if g.numel() == 0 or torch.allclose(g, w, rtol=rtol, atol=atol):
        return None
    worst = int((g - w).abs().argmax())
    detail = f"max |diff| {float((g - w).abs().max()):.3g} ({float(g[worst]):.6g} vs eager {float(w[worst]):.6g})"
    if ref64 is None:
        return detail
    verdict = float64_judgement(got, want, ref64)
    return None if verdict is None else f"{detail}; {verdict}"


def compare_outcomes(got: Outcome, want: Outcome, ref64: Outcome | None) -> str | None:
    for what in ("outputs", "grads"):
        gs, ws = getattr(got, what), getattr(want, what)
        if ws is None:
            continue
        rs = getattr(ref64, what) if ref64 is not None else None
        if gs is None or len(gs) != len(ws):
            return f"{what}: {0 if gs is None else len(gs)} values vs eager {len(ws)}"
        for i, (g, w) in enumerate(zip(gs, ws)):
            r = rs[i] if rs is not None and i < len(rs) else None
            problem = compare_tensor(g, w, r)
            if problem:
                return f"{what[:-1]} #{i}: {problem}"
    return None


# ---- checking one program ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """The result of one program on one target.

    status: pass | refused (UnsupportedOpError) | mismatch | crash | dynamo-fails | invalid (eager rejects) |
    aot-differs (a mismatch that PyTorch's own traced graph has too: see :func:`aot_core_backend`).
    """

    target: str
    status: str
    detail: str = ""
    phase: str = "fwd+bwd"  # fwd+bwd, or fwd when the training graph was refused and forward was checked alone

    @property
    def is_bug(self) -> bool:
        return self.status in ("mismatch", "crash")


def _causes(exc: BaseException) -> list[BaseException]:
    chain, current = [], exc
    while current is not None and current not in chain:
        chain.append(current)
        current = getattr(current, "inner_exception", None) or current.__cause__
    return chain


def _describe(exc: BaseException) -> str:
    innermost = _causes(exc)[-1]
    text = re.sub(r"0x[0-9a-f]+", "0x?", str(innermost).strip().split("\n", 1)[0])
    return f"{type(innermost).__name__}: {text[:300]}"


def compile_for(fn: Callable[..., Any], backend: str, target: str | None) -> Callable[..., Any]:
    torch._dynamo.reset()
    options = {"target": target} if backend == "neuron" and target else None
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False, options=options)


def _run_compiled(fn: Callable[..., Any], inputs: list[torch.Tensor], backend: str, target: str,
                  backward: bool) -> Outcome | BaseException:
    try:
        return execute(compile_for(fn, backend, target), inputs, backward)
    except Exception as exc:
        return exc
    finally:
        torch._dynamo.reset()


def check_program(program: Program, targets: Sequence[str] = ("interp",), *, backend: str = "neuron",
                  backward: bool = True) -> list[Finding]:
    """Run ``program`` in eager and compiled for each target; one :class:`Finding` per target."""
    fn = program.function()
    inputs = make_inputs(program.inputs, program.data_seed, program.specials)
    try:
        eager = execute(fn, inputs, backward)
    except Exception as exc:
        return [Finding(t, "invalid", f"eager raises {_describe(exc)}") for t in targets]
    eager_forward = execute(fn, inputs, False) if backward else eager
    try:
        inputs64 = [t.double() if t.is_floating_point() else t for t in inputs]
        ref64: Outcome | None = execute(program.function(float64=True), inputs64, backward)
    except Exception:
        ref64 = None
    findings = []
    for target in targets:
        phase, got = "fwd+bwd" if backward else "fwd", _run_compiled(fn, inputs, backend, target, backward)
        if isinstance(got, Exception) and backward and _refusal(got):
            phase, got = "fwd", _run_compiled(fn, inputs, backend, target, False)  # forward alone
        if program.randoms and isinstance(got, Outcome):
            findings.append(_judge_random(program, fn, inputs, target, backend, phase, got, eager))
            continue
        findings.append(_judge(fn, inputs, target, backend, phase, got, eager_forward if phase == "fwd" else eager,
                               ref64))
    return findings


def _replay(program: Program, inputs: list[torch.Tensor], draws: list[torch.Tensor],
            backward: bool) -> tuple[Outcome, Outcome | None]:
    """Eager's outcome of ``program`` fed the draws of a compiled run, and its float64 reference."""
    replayed = execute(program.function(replay=draws), inputs, backward)
    try:
        inputs64 = [t.double() if t.is_floating_point() else t for t in inputs]
        return replayed, execute(program.function(float64=True, replay=draws), inputs64, backward)
    except Exception:
        return replayed, None


def _judge_random(program: Program, fn: Callable[..., Any], inputs: list[torch.Tensor], target: str, backend: str,
                  phase: str, got: Outcome, eager: Outcome) -> Finding:
    """A program with random statements: exact against the eager replay of its draws, and each draw against
    eager's own by distribution (:mod:`neuroncc.testing.fuzz_random`)."""
    count = len(program.randoms)
    draws = draws_of(got.outputs, count)
    replayed, ref64 = _replay(program, inputs, draws, phase == "fwd+bwd")
    if ref64 is not None and phase == "fwd":
        ref64 = replace(ref64, grads=None)
    finding = _judge(fn, inputs, target, backend, phase, got, replayed, ref64)
    if finding.status != "pass":
        return finding
    for stmt, ours, theirs in zip(program.randoms, draws, draws_of(eager.outputs, count)):
        problem = check_same_distribution(ours.double().numpy(), theirs.double().numpy(), f"draw of {stmt.line()}",
                                          alpha=DRAW_ALPHA)
        if problem:
            return Finding(target, "mismatch", problem, phase)
    return finding


def _refusal(exc: BaseException) -> UnsupportedOpError | None:
    return next((e for e in _causes(exc) if isinstance(e, UnsupportedOpError)), None)


def _judge(fn: Callable[..., Any], inputs: list[torch.Tensor], target: str, backend: str, phase: str,
           got: Outcome | BaseException, eager: Outcome, ref64: Outcome | None) -> Finding:
    if isinstance(got, BaseException):
        refusal = _refusal(got)
        if refusal is not None:
            return Finding(target, "refused", f"{type(refusal).__name__}: {str(refusal).splitlines()[0][:300]}", phase)
        baseline = _run_compiled(fn, inputs, "aot_eager", target, phase == "fwd+bwd")
        if isinstance(baseline, BaseException):  # dynamo or AOTAutograd itself fails: not neuroncc's bug
            return Finding(target, "dynamo-fails", _describe(baseline), phase)
        return Finding(target, "crash", _describe(got), phase)
    if ref64 is not None and phase == "fwd":
        ref64 = replace(ref64, grads=None)
    problem = compare_outcomes(got, eager, ref64)
    if problem is None:
        return Finding(target, "pass", "", phase)
    baseline = _run_compiled(fn, inputs, aot_core_backend(), target, phase == "fwd+bwd")
    if (not isinstance(baseline, BaseException) and compare_outcomes(baseline, eager, ref64) is not None
            and compare_outcomes(got, baseline, None) is None):
        return Finding(target, "aot-differs", problem, phase)
    return Finding(target, "mismatch", problem, phase)


def aot_core_backend() -> Callable[..., Any]:
    """AOTAutograd with PyTorch's core-ATen decompositions only, run by eager kernels (no neuroncc).

    A mismatch this baseline shares (and neuroncc agrees with it) is a property of the graph PyTorch traces,
    not of neuroncc: e.g. prod's traced backward (products of the other elements, no division) differs from
    eager's ``grad * result / input`` at NaN/inf inputs, and the core ``hardtanh_backward`` decomposition
    passes the gradient through at a NaN input where eager's vectorized kernel gives 0 (its scalar tail
    gives the gradient, like the decomposition). neuroncc's own decompositions are not in the baseline, so
    their bugs are still mismatches.
    """
    from torch._decomp import _core_aten_decompositions_post_autograd
    from torch._dynamo.backends.common import aot_autograd

    def run_graph(gm, example_inputs):
        return gm

    return aot_autograd(fw_compiler=run_graph, bw_compiler=run_graph,
                        decompositions=_core_aten_decompositions_post_autograd())


# ---- regression tests ----------------------------------------------------------------------------------


def check_regression(program: Callable[..., Any], inputs: Sequence[Spec], *, data_seed: int, specials: bool,
                     target: str, backward: bool, backend: str = "neuron", draws: int = 0) -> None:
    """The body of a fuzzer regression test: fail (AssertionError or the crash) unless compiled == eager.

    A clean refusal (UnsupportedOpError) also passes: the contract is "never wrong, refused clearly otherwise".
    ``draws``: how many random statements the program has; eager then replays the compiled run's draws.
    """
    source = inspect.getsource(program)
    fn = function_from_source(source, program.__name__)
    tensors = make_inputs(list(inputs), data_seed, specials)
    f64_source = re.sub(r"torch\.(float32|bfloat16)\b", "torch.float64", source)
    inputs64 = [t.double() if t.is_floating_point() else t for t in tensors]
    try:
        got = execute(compile_for(fn, backend, target), tensors, backward)
    except Exception as error:
        if _refusal(error) is not None:
            return
        raise
    replay = Replay(draws_of(got.outputs, draws)) if draws else Draw
    replay64 = Replay(draws_of(got.outputs, draws)) if draws else Draw
    eager = execute(function_from_source(source, program.__name__, replay), tensors, backward)
    ref64 = execute(function_from_source(f64_source, program.__name__, replay64), inputs64, backward)
    problem = compare_outcomes(got, eager, ref64)
    assert problem is None, f"target {target}: {problem}"


@dataclass
class FuzzStats:
    """Counts per (target, status), and the findings that are bugs."""

    programs: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    bugs: list[tuple[int, Finding, str]] = field(default_factory=list)  # (index, finding, regression path)
    refusals: dict[str, int] = field(default_factory=dict)

    def add(self, index: int, findings: Sequence[Finding]) -> None:
        self.programs += 1
        for finding in findings:
            key = (finding.target, finding.status)
            self.counts[key] = self.counts.get(key, 0) + 1
            if finding.status == "refused":
                reason = finding.detail.split(": ", 1)[-1][:100]
                self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def merge(self, other: FuzzStats) -> None:
        self.programs += other.programs
        for key, count in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + count
        for reason, count in other.refusals.items():
            self.refusals[reason] = self.refusals.get(reason, 0) + count
        self.bugs += other.bugs
