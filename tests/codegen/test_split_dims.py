"""Kernels whose indices split a loop dim (a reshape after a permute): affine index folding and loop factoring.

Each case runs natively against the reference interpreter; where the split is affine, the emitted LLVM IR
must not divide by the split's factors (the division folds into factor loops), and the one-hot ``where``
masks of a select_scatter decomposition must fold per piece (no mask loads in the map phase).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm.affine import Affine, Var, fold_divmod, split_wishes
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.ir import Builder, DenseAttr, DType, TensorType


def _divisions(exe, divisors: tuple[int, ...]) -> list[str]:
    """udiv/urem instructions of the emitted IR by any of ``divisors``."""
    pattern = re.compile(r"= (?:udiv|urem)(?: exact)? i64 %\"[^\"]+\", (\d+)$", re.M)
    text = "\n".join(exe.module.llvm_ir)
    return [m.group(0) for m in pattern.finditer(text) if int(m.group(1)) in divisors]


def _qkv_graph(batch: int, heads: int, seq: int, dim: int, dtype: DType, with_sum: bool):
    """d(qkv) [seq * batch, 3 * heads * dim] from three attention gradients [batch, heads, seq, dim], as the
    backward graph assembles it (select_scatter decomposed into one-hot wheres), plus its row sum."""
    b = Builder("qkv")
    grads = [b.param(TensorType((batch, heads, seq, dim), dtype), f"g{k}") for k in range(3)]
    width = heads * dim
    zero = b.op("full", shape=(3, seq, batch, width), dtype=dtype, value=0.0)
    total = None
    for k, g in enumerate(grads):
        onehot = np.zeros((3, 1, 1, 1), dtype=bool)
        onehot[2 - k] = True
        mask = b.op("constant", value=DenseAttr(onehot, DType.bool))
        x = b.op("reshape", g, shape=(batch * heads, seq, dim))
        x = b.op("permute", x, dims=(1, 0, 2))
        x = b.op("reshape", x, shape=(1, seq, batch, width))
        piece = b.op("where", mask, b.op("expand", x, shape=(3, seq, batch, width)), zero)
        total = piece if total is None else b.op("add", total, piece)
    t = b.op("reshape", total, shape=(3, seq, batch, 1, width))
    t = b.op("permute", t, dims=(3, 1, 2, 0, 4))
    outs = [b.op("copy", b.op("reshape", t, shape=(seq * batch, 3 * width)))]
    if with_sum:
        rows = b.op("reshape", t, shape=(seq, batch, 3 * width))
        outs.insert(0, b.op("sum", rows, dims=(0, 1), keepdim=True))
    return fuse_whole_function(b.build(outs))


def _inputs(rng, fn, dtype: DType) -> list[np.ndarray]:
    from neuroncc.ir.dtypes import round_to_bf16

    xs = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    return [round_to_bf16(x) for x in xs] if dtype is DType.bf16 else xs


@pytest.mark.parametrize("with_sum", [False, True])
def test_qkv_gradient_assembly_folds_its_splits(with_sum, rng):
    # 108 columns = 3 pieces x 3 heads x 12: the column index is divided by 36 and by 12
    fn = _qkv_graph(batch=2, heads=3, seq=5, dim=12, dtype=DType.f32, with_sum=with_sum)
    exe, _ = run_both(fn, _inputs(rng, fn, DType.f32))
    assert _divisions(exe, (36, 12)) == []
    # the one-hot masks fold per piece (an unrolled loop over the 3 pieces): no mask is loaded
    assert "load i8" not in "\n".join(exe.module.llvm_ir)


def test_qkv_gradient_assembly_at_vector_widths(rng):
    # power-of-two sizes: the row sum splits its 256 columns into blocks that never straddle a piece
    fn = _qkv_graph(batch=2, heads=4, seq=8, dim=16, dtype=DType.f32, with_sum=True)
    exe, _ = run_both(fn, _inputs(rng, fn, DType.f32))
    from neuroncc.codegen.llvm import jit

    asm = jit.assembly(exe.module.llvm_ir)
    assert "ymm" in asm or "zmm" in asm
    # the column sum accumulates per-chunk partials in the copy's row phase (then a combining phase); its
    # column loop is cut at the pieces and unrolled over them like the copy's, so the masks fold per piece
    step = next(s for s in exe.plan.steps if s.kind == "kernel")
    assert len(step.phases) == 2 and step.phases[1].serial
    assert "load i8" not in "\n".join(exe.module.llvm_ir)


def test_qkv_gradient_assembly_bf16(rng):
    fn = _qkv_graph(batch=2, heads=3, seq=5, dim=12, dtype=DType.bf16, with_sum=True)
    exe, _ = run_both(fn, _inputs(rng, fn, DType.bf16))
    assert _divisions(exe, (36, 12)) == []


def test_split_of_a_non_innermost_dim(rng):
    b = Builder("middle")
    x = b.param(TensorType((2, 3, 4, 5), DType.f32), "x")
    y = b.op("reshape", b.op("permute", x, dims=(0, 2, 1, 3)), shape=(2, 12, 5))  # 12 = 4 x 3, stride 5 and 20
    # a row reduction loops over the 12 inside each row (a map iterates it in the parallel outer loop)
    fn = fuse_whole_function(b.build([b.op("sum", b.op("exp", y), dims=(1, 2))]))
    exe, _ = run_both(fn, [rng.standard_normal((2, 3, 4, 5)).astype(np.float32)])
    assert _divisions(exe, (3,)) == []


def test_split_of_a_broadcast_operand(rng):
    b = Builder("broadcast")
    y = b.param(TensorType((4, 15), DType.f32), "y")
    bias = b.param(TensorType((15,), DType.f32), "bias")
    shuffled = b.op("reshape", b.op("permute", b.op("reshape", bias, shape=(3, 5)), dims=(1, 0)), shape=(15,))
    fn = fuse_whole_function(b.build([b.op("add", y, shuffled)]))
    exe, _ = run_both(fn, [rng.standard_normal((4, 15)).astype(np.float32),
                           rng.standard_normal(15).astype(np.float32)])
    assert _divisions(exe, (3, 5)) == []


def test_split_inside_the_blocks_of_a_long_flat_map(rng):
    # a transposed [512, 64] flattened: 32768 elements run in blocks of 16384, each cut at 512
    b = Builder("flat")
    x = b.param(TensorType((512, 64), DType.f32), "x")
    y = b.op("reshape", b.op("permute", b.op("neg", x), dims=(1, 0)), shape=(32768,))
    fn = fuse_whole_function(b.build([b.op("exp", y)]))
    exe, _ = run_both(fn, [rng.standard_normal((512, 64)).astype(np.float32)])
    assert _divisions(exe, (512,)) == []


def test_a_split_that_is_not_affine_keeps_dividing(rng):
    # [10, 6] read as [4, 15]: a column c of 15 lands at (15 r + c) // 6 and % 6; 6 does not divide 15,
    # so no loop factoring can fold it, and the division stays (and stays right)
    b = Builder("ragged")
    x = b.param(TensorType((6, 10), DType.f32), "x")
    y = b.op("reshape", b.op("permute", x, dims=(1, 0)), shape=(4, 15))
    fn = fuse_whole_function(b.build([b.op("neg", y)]))
    exe, _ = run_both(fn, [rng.standard_normal((6, 10)).astype(np.float32)])
    assert _divisions(exe, (6,)) != []


def _exhaustive(x: Affine, d: int) -> None:
    fold = fold_divmod(x, d)
    assert fold is not None
    vars_ = [v for v, _ in x.terms]
    for values in itertools.product(*(range(v.lo, v.hi + 1, v.align) for v in vars_)):
        env = dict(zip(vars_, values))

        def value(form: Affine) -> int:
            return form.const + sum(c * env[v] for v, c in form.terms)

        whole, high = value(x), value(fold.high)
        assert high % fold.m == 0 and 0 <= value(fold.low) < fold.m
        assert whole // d == value(fold.quotient) + high // d
        assert whole % d == value(fold.low) + high % d


def test_fold_divmod_is_exact():
    c0, c1, c2 = Var(None, 1, 0, 2), Var(None, 2, 0, 7), Var(None, 3, 0, 11)
    # c = 96 c0 + 12 c1 + c2 (a loop over 288 cut at 96 and 12): // 96 and // 12 fold completely
    c = Affine(((c0, 96), (c1, 12), (c2, 1)))
    for d in (96, 12, 48, 24, 5):
        _exhaustive(c, d)
    assert fold_divmod(c, 96).high == Affine() and fold_divmod(c, 12).high == Affine()
    # an aligned opaque part (a block start) plus a counter below the alignment
    block, j = Var(None, 4, 0, 40, align=8), Var(None, 5, 0, 7)
    _exhaustive(Affine(((block, 1), (j, 1)), 3), 16)
    assert fold_divmod(Affine(((block, 1), (j, 1))), 16).low == Affine(((j, 1),))
    # negative coefficients never fold
    assert fold_divmod(Affine(((c1, -1),), 20), 4) is None


def test_split_wishes_cut_the_straddling_counter():
    c = Var(None, 1, 0, 1535, key=("loop",), extent=1536)
    assert split_wishes(Affine(((c, 1),)), 512) == [(("loop",), 512)]
    assert split_wishes(Affine(((c, 1),)), 7) == []  # 7 does not divide the trip count
