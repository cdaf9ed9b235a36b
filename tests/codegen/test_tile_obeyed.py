"""The cpu code obeys the tile pass's decisions (tests/filecheck/tile-llvm.nir shows the IR): a narrower
vector width reaches the machine code, another inner block changes the loop nest, and neither changes a
result."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm import jit, vector_variants
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.hardware.host import host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.passes.pipeline import run_pipeline


def gelu_rows(rows: int, cols: int) -> Function:
    b = Builder("gelu_rows")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    y = b.op("mul", b.op("gelu", x), b.op("sigmoid", x))
    return b.build([y, b.op("sum", y, dims=(1,))])


def assembly(fn: Function) -> str:
    """The kernels' assembly without the vector variants' own copies (``vector_variants.py``: dead code that
    ``llvm.compiler.used`` keeps; each is inlined where the vectorizer called it, at the kernel's width)."""
    _, texts = plan_launch(wrap_remaining_ops(fn), "cpu", "features")
    functions = re.split(r"(?m)^(?=\t\.type\t)", jit.assembly(texts))
    return "".join(f for f in functions if not f.startswith(tuple(f"\t.type\t{s}" for s in vector_variants.SYMBOLS)))


@pytest.mark.skipif(host_cpu().vector_bits < 256, reason="the host has no 256-bit vectors to narrow")
def test_a_narrower_vector_width_reaches_the_machine_code(rng):
    fn = gelu_rows(64, 256)
    wide = run_pipeline("fuse,tile{target=cpu}", fn)
    narrow = run_pipeline("fuse,tile{target=cpu vector_width=4}", fn)
    assert "ymm" in assembly(wide)
    code = assembly(narrow)
    assert "ymm" not in code and "zmm" not in code and "xmm" in code  # 4 float32 lanes: 128-bit vectors
    x = rng.standard_normal((64, 256)).astype(np.float32)
    run_both(narrow, [x])


def test_the_inner_block_shapes_the_parallel_loop(rng):
    b = Builder("long_rows")
    x = b.param(TensorType((3, 50000), DType.f32), "x")
    fn = b.build([b.op("tanh", b.op("exp", x))])
    x = rng.standard_normal((3, 50000)).astype(np.float32)
    counts = {}
    for block in (16384, 4096):
        exe, _ = run_both(run_pipeline(f"fuse,tile{{target=cpu inner_block={block}}}", fn), [x])
        (step,) = exe.plan.steps
        (phase,) = step.phases
        counts[block] = phase.n_outer  # 3 rows x blocks of the 50000 columns
    assert counts == {16384: 3 * 4, 4096: 3 * 13}
