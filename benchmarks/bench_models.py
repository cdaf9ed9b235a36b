"""Model benchmarks (d)-(f): a torch module through eager, Inductor and ``torch.compile(backend="neuron")``.

    (d)  MLP 1024-4096-1024 (Linear-GELU-Linear), batch 256, inference
    (e)  transformer encoder block (d_model 512, 8 heads, FFN 2048, ReLU), batch 8, seq 256, inference
    (e') (e) on PyTorch's fused inference fast path (eval, no_grad, batch_first: aten._transformer_encoder_layer_fwd,
         which eager runs as ATen's fused kernel and neuroncc decomposes); (e'') the same at d_model 64, 4 heads,
         FFN 256, batch 32, seq 16 (a small classifier's layer)
    (f1) training step of (d); (f2) training step of (e): zero_grad, forward, loss = mean(out^2), backward,
         SGD step (lr 1e-3, torch's default foreach implementation, run eagerly for all three: only the model
         is compiled)
    (e16), (f2_16) (e) and (f2) with the block's parameters and input in bf16 (the training step at batch 2,
         seq 128: eager's bf16 products run ATen's own loops where the CPU has no AVX-512 BF16, ~1 s a step)

Steady state: the three implementations interleaved call by call in one process, medians of ``--repeat``.
Cold compile / warm first call: a fresh process per measurement (``--first-call``) times ``torch.compile`` +
the first call (for training: the first full step); "cold" starts from empty ``NEURONCC_CACHE_DIR`` /
``TORCHINDUCTOR_CACHE_DIR`` directories, "warm" from the directories the cold run filled. The first-call time
starts after ``import torch._dynamo`` (torch's import cost, the same for every backend) and includes
TorchDynamo tracing and AOTAutograd (paid by both compilers: for neuroncc AOTAutograd's joint tracing and
min-cut partitioner, whose first call imports much of torch._inductor, are most of it); "own compile" is the
time each backend's graph compiler takes (neuroncc: ``compile_aten_graph``, import to IR, passes, code
generation, cache, and in parentheses the executables' build: launch planning, LLVM IR, O3, object code;
Inductor: ``_compile_fx_inner``), summed over the forward and backward graphs.

Except in the fast-path rows, the MHA fast path is disabled (``torch.backends.mha.set_fastpath_enabled(False)``)
so the transformer block traces to plain ops; eager runs the same (non-fast-path) code, which still uses
ATen's fused CPU flash-attention kernel. Run: ``python benchmarks/bench_models.py [--rows d,e,f1,f2]
[--repeat 15]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MALLOC_ENV, ensure_environment, interleaved, table  # noqa: E402

ensure_environment(threads=2)

import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.backends.mha.set_fastpath_enabled(False)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))


def transformer_block() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True, dropout=0.0)


def small_transformer_block() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, batch_first=True, dropout=0.0)


#: row -> (label, model factory, input factory, train)
ROWS: dict[str, tuple[str, Callable[[], nn.Module], Callable[[], torch.Tensor], bool]] = {
    "d": ("(d) MLP 1024-4096-1024, batch 256", mlp, lambda: torch.randn(256, 1024), False),
    "e": ("(e) transformer block d=512 h=8, [8, 256]", transformer_block, lambda: torch.randn(8, 256, 512), False),
    "e_fast": ("(e') transformer block d=512 h=8, [8, 256], fast path", transformer_block,
               lambda: torch.randn(8, 256, 512), False),
    "e_fast_small": ("(e'') transformer block d=64 h=4, [32, 16], fast path", small_transformer_block,
                     lambda: torch.randn(32, 16, 64), False),
    "f1": ("(f) MLP training step (SGD)", mlp, lambda: torch.randn(256, 1024), True),
    "f2": ("(f) transformer training step (SGD)", transformer_block, lambda: torch.randn(8, 256, 512), True),
    "e16": ("(e) in bf16", lambda: transformer_block().to(torch.bfloat16),
            lambda: torch.randn(8, 256, 512, dtype=torch.bfloat16), False),
    "f2_16": ("(f2) in bf16, [2, 128]", lambda: transformer_block().to(torch.bfloat16),
              lambda: torch.randn(2, 128, 512, dtype=torch.bfloat16), True),
}


#: Rows that run with the MHA fast path enabled (traced and called with it on).
FAST_PATH_ROWS = frozenset({"e_fast", "e_fast_small"})


@contextlib.contextmanager
def mha_fast_path(enabled: bool):
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def make_step(row: str, backend: str) -> Callable[[], object]:
    """A fresh model (seed 0) compiled with ``backend`` ("eager", "inductor", "neuron") and its step."""
    _, factory, make_input, train = ROWS[row]
    torch.manual_seed(0)
    model = factory().train(train)
    x = make_input()
    if backend == "inductor":
        run = torch.compile(model, dynamic=False)
    elif backend == "neuron":
        run = torch.compile(model, backend="neuron", dynamic=False)
    else:
        run = model
    if not train:
        fast_path = row in FAST_PATH_ROWS

        def infer() -> object:
            with torch.no_grad(), mha_fast_path(fast_path):
                return run(x)

        return infer
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        loss = run(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss

    return step


def steady_state(row: str, repeat: int) -> dict[str, float]:
    # each row's compiles start from an empty TorchDynamo cache: the transformer rows compile the same forward (its
    # code object) with both backends, and past torch._dynamo.config.recompile_limit (8) TorchDynamo runs a frame
    # eagerly with a warning; the bf16 rows (e16, f2_16), the 9th and later, measured eager's time for both compilers
    import torch._dynamo

    torch._dynamo.reset()
    impls = {name: make_step(row, backend) for name, backend in
             (("eager", "eager"), ("inductor", "inductor"), ("neuroncc", "neuron"))}
    return interleaved(impls, repeats=repeat, warmup=3)


def first_call(row: str, backend: str) -> dict[str, float]:
    """In this (fresh) process: seconds for compile + first call, and the backend's own compile time: for
    neuroncc the seconds spent in compile_aten_graph (import to IR, passes, code generation, cache; "build":
    the part building executables, LLVM included), for Inductor in ``_compile_fx_inner`` (its graph passes,
    code generation, C++ compilation, cache), each called once for the forward and once for the backward."""
    import torch._dynamo  # noqa: F401 - torch.compile's own import (~3-5 s here), paid alike by every backend
    import torch._inductor.compile_fx as inductor_compile

    from neuroncc.frontend import aot_compile  # the graph cache's miss path, which calls compile_aten_graph

    spent = {"compile": 0.0, "build": 0.0}
    compile_aten_graph = aot_compile.compile_aten_graph
    compile_fx_inner = inductor_compile._compile_fx_inner

    def timed(*args: object, **kwargs: object) -> object:
        begin = time.perf_counter()
        compiled = compile_aten_graph(*args, **kwargs)
        spent["compile"] += time.perf_counter() - begin
        spent["build"] += compiled.executable.stats.get("compile_seconds", 0.0)
        return compiled

    def timed_inductor(*args: object, **kwargs: object) -> object:
        begin = time.perf_counter()
        try:
            return compile_fx_inner(*args, **kwargs)
        finally:
            spent["compile"] += time.perf_counter() - begin

    aot_compile.compile_aten_graph = timed
    inductor_compile._compile_fx_inner = timed_inductor
    start = time.perf_counter()
    make_step(row, backend)()
    return {"seconds": time.perf_counter() - start, **spent}


def spawn_first_call(row: str, backend: str, neuron_cache: str, inductor_cache: str) -> dict[str, float]:
    env = {**os.environ, **MALLOC_ENV, "NEURONCC_CACHE_DIR": neuron_cache, "TORCHINDUCTOR_CACHE_DIR": inductor_cache}
    env.pop("NEURONCC_DISABLE_CACHE", None)
    out = subprocess.run([sys.executable, __file__, "--first-call", row, backend], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compile_times(row: str) -> dict[str, dict[str, float]]:
    """Cold and warm first-call seconds of Inductor and neuroncc, each in a fresh process."""
    times: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as root:
        for backend in ("inductor", "neuron"):
            neuron_cache, inductor_cache = f"{root}/{backend}-ncc", f"{root}/{backend}-inductor"
            times[f"{backend} cold"] = spawn_first_call(row, backend, neuron_cache, inductor_cache)
            times[f"{backend} warm"] = spawn_first_call(row, backend, neuron_cache, inductor_cache)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--first-call", nargs=2, metavar=("ROW", "BACKEND"))
    parser.add_argument("--no-compile-times", action="store_true")
    args = parser.parse_args()
    if args.first_call:
        print(json.dumps(first_call(*args.first_call)))
        return
    rows = []
    for row in args.rows.split(","):
        t = steady_state(row, args.repeat)
        c = {} if args.no_compile_times else compile_times(row)
        if c:
            print(json.dumps(c), flush=True)
        cells = [ROWS[row][0], f"{t['eager'] * 1e3:.1f}", f"{t['inductor'] * 1e3:.1f}", f"{t['neuroncc'] * 1e3:.1f}",
                 f"{t['eager'] / t['neuroncc']:.2f}x", f"{t['inductor'] / t['neuroncc']:.2f}x"]
        cells += [f"{c[k]['seconds']:.2f}" if k in c else "-" for k in
                  ("inductor cold", "neuron cold", "inductor warm", "neuron warm")]
        if c:
            inductor, neuron = c["inductor cold"], c["neuron cold"]
            cells.append(f"{inductor['seconds'] / neuron['seconds']:.1f}x")
            cells.append(f"{inductor['compile']:.2f} / {neuron['compile']:.2f} ({neuron['build']:.2f}) = "
                         f"{inductor['compile'] / neuron['compile']:.1f}x")
        else:
            cells += ["-", "-"]
        rows.append(cells)
        print(" | ".join(cells), flush=True)
    print(table(rows, ["model", "eager ms", "Inductor ms", "neuroncc ms", "vs eager", "vs Inductor",
                       "Inductor cold s", "neuroncc cold s", "Inductor warm s", "neuroncc warm s", "cold: Inductor/neuroncc",
                       "cold, own compile s: Inductor / neuroncc (build)"]))


if __name__ == "__main__":
    main()
