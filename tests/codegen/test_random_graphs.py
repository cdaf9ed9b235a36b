"""Differential fuzzing: random fused graphs (elementwise, broadcasts, row/column/full reductions, views)
compiled as ONE kernel each must match the interpreter. This exercises phase formation and row caching."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.ir import Builder, DType, TensorType

ROWS, COLS = 12, 40
# Unary ops that do not amplify rounding differences without bound when chained (exp only of tanh).
UNARY = ["tanh", "sigmoid", "neg", "abs", "relu", "gelu", "erf", "sin"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


def random_graph(seed: int):
    rng = np.random.default_rng(seed)
    b = Builder(f"random{seed}")
    values = [b.param(TensorType((ROWS, COLS), DType.f32), "x"), b.param(TensorType((COLS,), DType.f32), "v"),
              b.param(TensorType((ROWS, 1), DType.f32), "c")]
    full = [values[0]]
    for _ in range(int(rng.integers(4, 12))):
        kind = rng.choice(["unary", "binary", "rowreduce", "colreduce", "fullreduce", "view"])
        x = full[int(rng.integers(len(full)))]
        if kind == "unary":
            name = str(rng.choice(UNARY + ["exp"]))
            full.append(b.op("exp", b.op("tanh", x)) if name == "exp" else b.op(name, x))
        elif kind == "binary":
            other = values[int(rng.integers(len(values)))]
            full.append(b.op(str(rng.choice(BINARY)), x, other))
        elif kind == "rowreduce":
            r = b.op(str(rng.choice(["sum", "amax", "mean"])), x, dims=(1,), keepdim=True)
            values.append(r)
            full.append(b.op("sub", x, r))
        elif kind == "colreduce":
            r = b.op(str(rng.choice(["sum", "amin"])), x, dims=(0,))
            values.append(r)
            full.append(b.op("mul", x, b.op("tanh", r)))
        elif kind == "fullreduce":
            r = b.op("mean", b.op("abs", x), dims=(0, 1))
            full.append(b.op("div", x, b.op("add", r, b.op("full", shape=(), dtype=DType.f32, value=1.0))))
        else:
            t = b.op("permute", x, dims=(1, 0))
            full.append(b.op("permute", b.op("sigmoid", t), dims=(1, 0)))
    picks = rng.choice(len(full) - 1, size=min(2, len(full) - 1), replace=False) + 1
    outputs = [full[-1]] + [full[int(i)] for i in picks] + values[3:5]
    return fuse_whole_function(b.build(outputs))


@pytest.mark.parametrize("seed", range(16))
def test_random_fused_graph(seed):
    rng = np.random.default_rng(100 + seed)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(ROWS, COLS), (COLS,), (ROWS, 1)]]
    run_both(random_graph(seed), inputs)
