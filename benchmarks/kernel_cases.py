"""The kernel rows of ``bench_kernels.py`` and ``roofline.py``: what each computes, on what inputs, and the
work its roofline is made of.

In bench_kernels.py rows (a)-(c') run neuroncc as a hand-built one-kernel graph through ``build_cpu_executable``
(as the fusion pass would make it; the same numbers as earlier sessions measured); in roofline.py (since session
19) every row is what a user meets, as the other rows are here:
the same Python function through ``torch.compile(backend="neuron")``, tensor boundary included, against eager
and ``torch.compile`` (Inductor).

Work per call, for the roofline: ``reads``/``writes`` are the bytes a kernel cannot avoid moving (each input
read once, each output written once, at the user's dtype), ``math`` the polynomial function evaluations,
``flops`` the other float operations, and for bf16 rows the conversions the dtype's semantics ask for:
``widened`` bf16 elements read as float32 (each input element once), ``rounded`` results rounded to bf16 and
written (each output element once), ``rounded_kept`` results of bf16 ops that the next op reads (eager rounds
after every op: gelu(x*w+b)*sigmoid(x) rounds x*w, +b, gelu and sigmoid before its last product). A row's exponentials
are counted as the function its kernel evaluates: ``exp_nonpositive`` for exp(x - max(x)) (softmax, and cross-entropy's
forward: ``ir/signs.at_most_zero``, faster than ``exp``, and since session 14 cross-entropy's backward too: exp(x - amax -
log) of the forward's saved max and log-sum, whose facts the front end hands the backward graph,
``frontend/saved_facts.py``), on Zen 4 and AVX2 bf16 softmax's as ``exp_nonpositive_for_bf16`` (its degree-5 polynomial:
``CpuTarget.evaluates_exp_for_bf16_results_in_degree_five``, sessions 37, 39), ``exp`` where the sign is not known. Each
function's throughput is measured on its own (``microkernels.py``), so a row's roof is what its own functions allow, not
the slower general exp's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType

F = torch.nn.functional


def bf16_softmax_exp() -> str:
    """The math function bf16 softmax's kernel evaluates on this host (its exponentials' results are bf16 alone)."""
    return "exp_nonpositive_for_bf16" if host_cpu().evaluates_exp_for_bf16_results_in_degree_five else "exp_nonpositive"


@dataclass
class Work:
    reads: int  # bytes
    writes: int  # bytes
    math: dict[str, int] = field(default_factory=dict)  # polynomial function -> evaluations per call
    flops: int = 0  # other float operations per call
    widened: int = 0  # bf16 elements widened to float32 (inputs, once each)
    rounded: int = 0  # float32 results rounded to bf16 and written (outputs, once each)
    rounded_kept: int = 0  # float32 results rounded to bf16 precision that the next op reads
    #: ``math`` is of bf16 values with bf16 results: where the CPU looks such math up
    #: (``CpuTarget.looks_up_bf16_unary_math``) each evaluation is a table read and its rounding is in the table
    bf16_math: bool = False


@dataclass
class Case:
    """One kernel row. ``make(rng)`` returns the inputs (torch tensors); ``eager(*inputs)`` is the reference
    and what Inductor compiles; ``graph`` (rows (a)-(c')) is neuroncc's hand-built kernel graph, else neuroncc
    compiles ``eager`` through torch.compile. A row with ``setup`` (the optimizer step) builds one closure per
    implementation over its own copy of the state: ``setup(compile_with, inputs) -> (step, current values)``,
    ``compile_with`` None (eager) or a wrapper into torch.compile."""

    key: str
    title: str
    make: Callable[[np.random.Generator], list[torch.Tensor]]
    eager: Callable[..., Any]
    work: Work
    graph: Function | None = None
    setup: Callable[..., tuple[Callable[[], Any], Callable[[], list[torch.Tensor]]]] | None = None
    tolerance: tuple[float, float] = (1.3e-6, 1e-5)
    #: an inference graph a user can serve with ``neuroncc.compile_program`` (:func:`served_program`); False for a
    #: training step (cross-entropy's forward and backward), which ``torch.export`` gives no inference program of
    inference: bool = True


# ---- hand-built graphs of rows (a)-(c') ---------------------------------------------------------------------

def gelu_graph(rows: int, cols: int) -> Function:
    b = Builder("gelu_sigmoid")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    y = b.op("mul", b.op("gelu", b.op("add", b.op("mul", x, w), bias)), b.op("sigmoid", x))
    return fuse_whole_function(b.build([y]))


def softmax_graph(rows: int, cols: int) -> Function:
    b = Builder("softmax")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return fuse_whole_function(b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))]))


def layernorm_graph(rows: int, cols: int) -> Function:
    b = Builder("layernorm")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    centered = b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True))
    var = b.op("mean", b.op("mul", centered, centered), dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    return fuse_whole_function(b.build([b.op("add", b.op("mul", b.op("mul", centered, rstd), w), bias)]))


def stream_graph(rows: int, cols: int) -> Function:
    """x*w+b: LayerNorm's bytes (read x, write y) without its row reductions."""
    b = Builder("stream")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    return fuse_whole_function(b.build([b.op("add", b.op("mul", x, w), bias)]))


# ---- the functions every implementation runs ------------------------------------------------------------------

def gelu_sigmoid(x, w, b):
    return F.gelu(x * w + b) * torch.sigmoid(x)


def softmax(x):
    return torch.softmax(x, dim=-1)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def affine(x, w, b):
    return torch.addcmul(b, x, w)


def rmsnorm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def cross_entropy_step(logits, target):
    """Forward and backward of the mean cross-entropy: the loss and d loss / d logits."""
    logits = logits.detach().requires_grad_()
    loss = F.cross_entropy(logits, target)
    loss.backward()
    return loss.detach(), logits.grad


def _owned(array: np.ndarray) -> torch.Tensor:
    """``array`` copied into torch's allocator, 64-byte aligned as a model's tensors are: numpy's own buffers are
    only 16-byte aligned here, which cost LayerNorm's row sums 13-17% at 2 threads (session 15, Zen 4) in a case
    a user's tensors rarely are."""
    return torch.from_numpy(array).clone()


def _inputs(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Callable[[np.random.Generator], list]:
    def make(rng: np.random.Generator) -> list[torch.Tensor]:
        return [_owned(rng.standard_normal(s).astype(np.float32)).to(dtype) for s in shapes]

    return make


def _cross_entropy_inputs(rows: int, vocab: int) -> Callable[[np.random.Generator], list]:
    def make(rng: np.random.Generator) -> list[torch.Tensor]:
        logits = _owned((rng.standard_normal((rows, vocab)) * 2).astype(np.float32))
        return [logits, _owned(rng.integers(0, vocab, rows))]

    return make


# ---- the AdamW step over a transformer's parameter list -------------------------------------------------------

#: 10.1M parameters in the shapes of a 3-layer d=768 transformer's weights (40 tensors), as an optimizer sees them.
ADAMW_SHAPES = [shape for _ in range(3) for shape in [
    (2304, 768), (2304,), (768, 768), (768,), (768,), (768,), (3072, 768), (3072,), (768, 3072), (768,), (768,),
    (768,)]] + [(768,), (768,), (768, 768), (768,)]


def _adamw_inputs(rng: np.random.Generator) -> list[torch.Tensor]:
    params = [_owned((rng.standard_normal(s) * 0.02).astype(np.float32)) for s in ADAMW_SHAPES]
    grads = [_owned((rng.standard_normal(s) * 1e-3).astype(np.float32)) for s in ADAMW_SHAPES]
    return params + grads


def adamw_setup(compile_with: Callable[[Callable], Callable] | None, inputs: list[torch.Tensor]):
    """Fresh parameters (copies of ``inputs``' first half) with their gradients (the second half), an AdamW
    optimizer over them (foreach, PyTorch's default on CPU), and its step (compiled by ``compile_with``, or
    eager). Returns the step and a function giving the parameters' current values."""
    count = len(inputs) // 2
    params = [torch.nn.Parameter(t.clone()) for t in inputs[:count]]
    for p, g in zip(params, inputs[count:]):
        p.grad = g.clone()
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, foreach=True)

    def step() -> None:
        optimizer.step()

    run = compile_with(step) if compile_with is not None else step
    return run, lambda: [p.detach() for p in params]


def adamw_eager(*inputs):
    """The AdamW row's reference: one eager step from the inputs' state (the row itself runs ``adamw_setup``)."""
    step, result = adamw_setup(None, list(inputs))
    step()
    return result()


def _elements(*shapes: tuple[int, ...]) -> int:
    return sum(int(np.prod(s)) for s in shapes)


def cases() -> list[Case]:
    n_a, n_c = 4096 * 1024, 8192 * 1024
    rows_ce, vocab = 512, 32000
    n_ce = rows_ce * vocab
    n_adamw = _elements(*ADAMW_SHAPES)
    return [
        Case("a", "(a) gelu(x*w+b)*sigmoid(x) [4096,1024]", _inputs((4096, 1024), (1024,), (1024,)), gelu_sigmoid,
             Work(4 * n_a + 8192, 4 * n_a, {"gelu": n_a, "sigmoid": n_a}, 3 * n_a), graph=gelu_graph(4096, 1024)),
        Case("b", "(b) softmax [4096,1024]", _inputs((4096, 1024)), softmax,
             Work(4 * n_a, 4 * n_a, {"exp_nonpositive": n_a}, 4 * n_a), graph=softmax_graph(4096, 1024)),
        Case("c", "(c) LayerNorm [8192,1024]", _inputs((8192, 1024), (1024,), (1024,)), layernorm,
             Work(4 * n_c + 8192, 4 * n_c, {}, 8 * n_c), graph=layernorm_graph(8192, 1024)),
        Case("c'", "(c') x*w+b [8192,1024]: (c)'s bytes, no reductions", _inputs((8192, 1024), (1024,), (1024,)),
             affine, Work(4 * n_c + 8192, 4 * n_c, {}, 2 * n_c), graph=stream_graph(8192, 1024)),
        Case("a16", "(a) bf16 gelu(x*w+b)*sigmoid(x) [4096,1024]",
             _inputs((4096, 1024), (1024,), (1024,), dtype=torch.bfloat16), gelu_sigmoid,
             Work(2 * n_a + 4096, 2 * n_a, {"gelu": n_a, "sigmoid": n_a}, 3 * n_a, widened=n_a + 2048,
                  rounded=n_a, rounded_kept=4 * n_a, bf16_math=True), tolerance=(1.6e-2, 1e-5)),
        Case("b16", "(b) bf16 softmax [4096,1024]", _inputs((4096, 1024), dtype=torch.bfloat16), softmax,
             Work(2 * n_a, 2 * n_a, {bf16_softmax_exp(): n_a}, 4 * n_a, widened=n_a, rounded=n_a),
             tolerance=(1.6e-2, 1e-5)),
        Case("c16", "(c) bf16 LayerNorm [8192,1024]", _inputs((8192, 1024), (1024,), (1024,), dtype=torch.bfloat16),
             layernorm, Work(2 * n_c + 4096, 2 * n_c, {}, 8 * n_c, widened=n_c + 2048, rounded=n_c),
             tolerance=(1.6e-2, 1e-5)),
        Case("rms", "RMSNorm [8192,1024]", _inputs((8192, 1024), (1024,)), rmsnorm,
             Work(4 * n_c + 4096, 4 * n_c, {}, 4 * n_c)),
        Case("ce", "cross-entropy fwd+bwd [512,32000]", _cross_entropy_inputs(rows_ce, vocab), cross_entropy_step,
             Work(2 * 4 * n_ce + 8 * rows_ce, 4 * n_ce, {"exp_nonpositive": 2 * n_ce}, 6 * n_ce), inference=False),
        Case("adamw", f"AdamW step, {n_adamw / 1e6:.1f}M params in {len(ADAMW_SHAPES)} tensors", _adamw_inputs,
             adamw_eager, Work(4 * 4 * n_adamw, 3 * 4 * n_adamw, {}, 14 * n_adamw), setup=adamw_setup),
    ]


def served_program(case: Case, inputs: list[torch.Tensor], threads: int):
    """The row served as a user serves a model without TorchDynamo: its function as a module's forward,
    ``torch.export.export`` on the row's inputs, ``neuroncc.compile_program`` of it with ``threads`` as the row's
    torch.compile calls take them (docs/cli.md, "From Python"). The inputs stay the call's arguments, as in the
    row's other columns (the same tensors, not weights copied into the program's state). None for a row that is
    not an inference graph (a training step, an optimizer's state)."""
    if case.setup is not None or not case.inference:
        return None
    import neuroncc

    class Row(torch.nn.Module):
        def forward(self, *args):
            return case.eager(*args)

    return neuroncc.compile_program(torch.export.export(Row(), tuple(inputs)), options={"threads": threads})


def implementations(case: Case, inputs: list[torch.Tensor], threads: int,
                    graphs: bool = True, dynamic: bool | None = False, served: bool = False) -> dict[str, tuple]:
    """name -> (call, result) for eager, Inductor and neuroncc, built for ``threads`` threads, and with ``served``
    "neuroncc served" for an inference row (:func:`served_program`; the call has the program as ``.program``).
    ``graphs``: a row with a hand-built graph runs it through ``build_cpu_executable``'s numpy path
    (bench_kernels.py); False: every row's neuroncc is ``eager`` through torch.compile, as Inductor's is
    (roofline.py). ``dynamic``: torch.compile's argument for both backends; roofline.py passes None, torch.compile's
    default, as a user calls it (``False`` costs every call TorchDynamo's config patch, entered and left: 20-45 us a
    call on a roofline row's caches, session 28 rowgap28, ``bench_call_path.py --row-gap``); rows with a ``setup``
    (the optimizer step) keep False."""
    torch._dynamo.reset()
    if case.setup is not None:
        dynamic = False
    # threads as an option: without it a graph runs with torch's thread count at its first compile, and the
    # 1-thread rows reused the 2-thread rows' executables from the graph cache (their CPU time was the calling
    # thread's share of a 2-thread run: RMSNorm at "110%" of its roofline)
    neuron = lambda f: torch.compile(f, backend="neuron", dynamic=dynamic,  # noqa: E731
                                     options={"threads": threads})
    inductor = lambda f: torch.compile(f, dynamic=dynamic)  # noqa: E731
    if case.setup is not None:
        return {"eager": case.setup(None, inputs), "inductor": case.setup(inductor, inputs),
                "neuroncc": case.setup(neuron, inputs)}
    impls = {"eager": case.eager, "inductor": inductor(case.eager)}
    if case.graph is not None and graphs:
        exe = build_cpu_executable(case.graph, {"threads": threads})
        arrays = [t.numpy() for t in inputs]
        impls["neuroncc"] = lambda *_: [torch.from_numpy(a) for a in exe(*arrays)]
    else:
        impls["neuroncc"] = neuron(case.eager)
    program = served_program(case, inputs, threads) if served else None
    if program is not None:
        impls["neuroncc served"] = program
    made = {name: ((lambda f=f: f(*inputs)), None) for name, f in impls.items()}
    if program is not None:
        made["neuroncc served"][0].program = program
    return made


#: the most inputs a row's graph is tried in every order of (:func:`in_graph_order`)
MAX_REORDERED_INPUTS = 4


def in_graph_order(inputs: list, count: int, run: Callable[[list], torch.Tensor | None], expected: torch.Tensor,
                   tolerance: tuple[float, float]) -> list | None:
    """The first ``count`` of ``inputs``, in the first order (the function's own first) whose result ``run(order)``
    is ``expected`` at ``tolerance``, or None. A graph takes its inputs in the order TorchDynamo met them, which
    need not be the function's (row (c')'s ``torch.addcmul(b, x, w)``: b, x, w); inputs of one shape in swapped roles
    give another result (x*b+w for x*w+b), so only the graph's own order passes. ``run`` returns None (or raises
    ``neuroncc.errors.InputError``) where the order's shapes are not the graph's."""
    from neuroncc.errors import InputError

    if count > len(inputs) or len(inputs) > MAX_REORDERED_INPUTS:
        return None
    rtol, atol = tolerance
    for order in itertools.permutations(inputs, count):
        try:
            got = run(list(order))
        except InputError:
            continue
        if got is None:
            continue
        try:
            torch.testing.assert_close(got.float(), expected.float(), rtol=rtol, atol=atol)
        except AssertionError:
            continue
        return list(order)
    return None


def _flat(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _flat(item)] if isinstance(result, (list, tuple)) else []


def check(case: Case, impls: dict[str, tuple], inputs: list[torch.Tensor]) -> None:
    """Each implementation's first result against eager's (the stateful rows: after one step each), at the
    row's tolerance. Inductor computes bf16 chains in float32 and rounds once at the end, where eager (and
    neuroncc, whose reference is eager's numerics) round after every op: its bf16 results are only checked
    to be close (0.05 absolute)."""
    expected = _flat(case.eager(*inputs))
    for name, (call, current) in impls.items():
        rtol, atol = case.tolerance
        if name == "inductor" and any(t.dtype == torch.bfloat16 for t in expected):
            atol = 0.05
        got = call()
        got = _flat(current() if current is not None else got)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.float(), e.float(), rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def settled_calls(case: Case, inputs: list[torch.Tensor], threads: int, graphs: bool,
                  served: bool = False) -> dict[str, Callable]:
    """The row's implementations (``dynamic=None``: torch.compile's default, as users call it; ``served``: and the
    served call, :func:`served_program`) as calls, checked against eager, each run twice and then settled on
    neuroncc's optimized code (``common.settle_neuroncc``)."""
    from common import settle_neuroncc

    impls = implementations(case, inputs, threads, graphs=graphs, dynamic=None, served=served)
    check(case, impls, inputs)
    calls = {name: call for name, (call, _) in impls.items()}
    for _ in range(2):
        for call in calls.values():
            call()
    settle_neuroncc(calls)
    return calls
