"""Concatenations written as kernel outputs: each piece into its slice of the output (``schedule.cat_pieces``).

The attention backward's dq/dk/dv [B*H, L, E] go into the in_proj gradient's [B, L, 3 * H * E] through
reshape, permute, reshape and cat. Each piece written into its own slice reads only itself, and its reshapes
fold into factor loops (no division per element); every case also runs against the reference interpreter.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm.schedule import MAX_CAT_PIECES
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.ir import Builder, DType, TensorType


def _divisions(exe, divisors: tuple[int, ...]) -> list[str]:
    pattern = re.compile(r"= (?:udiv|urem)(?: exact)? i64 %\"[^\"]+\", (\d+)$", re.M)
    text = "\n".join(exe.module.llvm_ir)
    return [m.group(0) for m in pattern.finditer(text) if int(m.group(1)) in divisors]


def _qkv_concatenation(batch: int, heads: int, seq: int, dim: int, dtype: DType = DType.f32):
    """fused_7_mul_cat: dq, dk scaled, dv, each [B*H, L, E] -> [B, L, H*E], concatenated along the last dim."""
    b = Builder("qkv_cat")
    pieces = []
    for k in range(3):
        x = b.param(TensorType((batch * heads, seq, dim), dtype), f"g{k}")
        if k < 2:
            x = b.op("mul", x, b.op("full", dtype=dtype, shape=(), value=0.25))
        x = b.op("reshape", x, shape=(batch, heads, seq, dim))
        x = b.op("reshape", b.op("permute", x, dims=(0, 2, 1, 3)), shape=(batch, seq, heads * dim))
        pieces.append(x)
    return fuse_whole_function(b.build([b.op("cat", *pieces, dim=2)]))


def _inputs(rng, fn) -> list[np.ndarray]:
    out = []
    for p in fn.params:
        if p.type.dtype is DType.i64:
            out.append(rng.integers(-1000, 1000, p.type.shape).astype(np.int64))
        else:
            out.append(rng.standard_normal(p.type.shape).astype(np.float32))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_qkv_concatenation_divides_nothing_per_element(threads, rng):
    # 24 columns per piece = 3 heads x 8: read through a select over clamped indices, each column was
    # divided by 8 (and the pieces' starts compared) per element
    fn = _qkv_concatenation(batch=2, heads=3, seq=5, dim=8)
    exe, _ = run_both(fn, _inputs(rng, fn), threads=threads)
    assert _divisions(exe, (8, 24)) == []
    text = "\n".join(exe.module.llvm_ir)
    assert "select" not in text  # no piece is chosen per element


def test_qkv_concatenation_at_the_issue_shape_runs_a_stage_per_piece(rng):
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.codegen.llvm.kernel_plan import MapStage, RowLoop
    from neuroncc.codegen.llvm.schedule import plan_kernel

    fn = _qkv_concatenation(batch=32, heads=4, seq=16, dim=16)
    region = fn.ops[0].regions[0]
    n = len(region.params)
    plan = plan_kernel(region, [Layout.of(k, p.type) for k, p in enumerate(region.params)],
                       [Layout.of(n + k, v.type) for k, v in enumerate(region.outputs)])
    (phase,) = plan.phases
    assert isinstance(phase, RowLoop) and phase.outer == (32, 16)  # one row of the output per iteration
    assert all(isinstance(stage, MapStage) for stage in phase.stages)
    assert [(t.offset, t.shape) for s in phase.stages for _, t in s.items] == \
        [(0, (32, 16, 64)), (64, (32, 16, 64)), (128, (32, 16, 64))]
    exe, _ = run_both(fn, _inputs(rng, fn))
    asm = jit.assembly(exe.module.llvm_ir)
    assert "ymm" in asm or "zmm" in asm


def _graph(build):
    b = Builder("cat")
    return fuse_whole_function(b.build(build(b)))


def _f32(b, shape, name):
    return b.param(TensorType(shape, DType.f32), name)


CASES = {
    # uneven pieces along the leading dim: phases of their own
    "dim0": lambda b: [b.op("cat", _f32(b, (2, 3), "x"), b.op("exp", _f32(b, (5, 3), "y")), dim=0)],
    # a concatenation of concatenations, and an empty piece
    "nested": lambda b: [b.op("cat", b.op("cat", _f32(b, (4, 2), "x"), _f32(b, (4, 0), "e"), dim=1),
                              b.op("neg", _f32(b, (4, 3), "y")), dim=1)],
    # the same value twice, and the concatenation also read by another output
    "repeated": lambda b: (lambda x: (lambda c: [c, b.op("sum", c, dims=(1,))])(b.op("cat", x, x, dim=1)))(
        _f32(b, (3, 7), "x")),
    # a piece broadcast against another operand before the concatenation
    "broadcast": lambda b: [b.op("cat", b.op("add", _f32(b, (6, 4), "x"), _f32(b, (4,), "bias")),
                                 _f32(b, (6, 1), "y"), dim=-1)],
    # integers
    "i64": lambda b: [b.op("cat", b.param(TensorType((3, 2), DType.i64), "i"),
                           b.op("neg", b.param(TensorType((3, 5), DType.i64), "j")), dim=1)],
    # more pieces than are written one by one: the select per element stays, and stays right
    "many": lambda b: [b.op("cat", *[_f32(b, (2, 1), f"x{k}") for k in range(MAX_CAT_PIECES + 1)], dim=1)],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_concatenations_match_the_interpreter(case, rng):
    fn = _graph(CASES[case])
    run_both(fn, _inputs(rng, fn))
