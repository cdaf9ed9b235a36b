"""A row index split by a division that does not fold and flattened again by a contiguous array's strides is the
row index again (``affine._recombine``): addresses stay affine in the loop counters, and LLVM's Loop Strength
Reduction does not spend its time on division results (session 19 coldo3: the transformer step's LayerNorm
backward modules, half their object emission).
"""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import run_both

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.affine import Affine, Var
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.models import layer_norm_backward


def _split(x: Affine, n: int, serial: int) -> tuple[Var, Var]:
    quotient = Var("q", serial, lo=0, divided=(x, n, True, False))
    remainder = Var("r", serial + 1, lo=0, hi=n - 1, divided=(x, n, False, False))
    return quotient, remainder


def test_quotient_times_divisor_plus_remainder_is_the_dividend():
    start = Var("start", 1, lo=0)
    row = Var("row", 2, lo=0, hi=127)
    x = Affine.of(start).scale(128)
    q, r = _split(x, 256, 3)
    # (x // 256) * 131072 + (x % 256) * 512 + row * 512 + 7 == x * 512 + row * 512 + 7
    address = Affine.of(q).scale(131072) + Affine.of(r).scale(512) + Affine.of(row).scale(512) + Affine((), 7)
    assert address == Affine(((start, 65536), (row, 512)), 7)


def test_unmatched_or_other_dividend_stays():
    start, other = Var("start", 1, lo=0), Var("other", 2, lo=0)
    q, _ = _split(Affine.of(start), 256, 3)
    _, r_other = _split(Affine.of(other), 256, 5)
    mixed = Affine.of(q).scale(256) + Affine.of(r_other)
    assert {var.value for var, _ in mixed.terms} == {"q", "r"}
    q2, r2 = _split(Affine.of(start), 256, 7)
    wrong_ratio = Affine.of(q2).scale(128) + Affine.of(r2)
    assert {var.value for var, _ in wrong_ratio.terms} == {"q", "r"}


def test_exact_quotient_times_divisor_is_the_dividend():
    start = Var("start", 1, lo=0, align=512)
    q = Var("q", 2, lo=0, divided=(Affine.of(start), 256, True, True))
    assert Affine.of(q).scale(512) + Affine((), 1) == Affine(((start, 2),), 1)


def test_layer_norm_backward_of_3d_rows_addresses_without_divisions(rng):
    # [2, 96, 64]: the parallel loop's rows are split by 96 (not a power of two, so LLVM keeps a division that
    # addresses memory); the row digits are flattened again by the contiguous strides
    shape = (2, 96, 64)
    b = Builder("lnb")
    grad, x = b.param(TensorType(shape, DType.f32), "grad"), b.param(TensorType(shape, DType.f32), "x")
    stats = [b.param(TensorType(shape[:2] + (1,), DType.f32), name) for name in ("mean", "rstd")]
    weight = b.param(TensorType(shape[2:], DType.f32), "weight")
    fn = b.build(list(layer_norm_backward(b, grad, x, *stats, weight)))
    exe, _ = run_both(fn, [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params])
    optimized = str(jit.optimize(exe.module.llvm_ir)[0])
    assert re.findall(r"= (?:udiv|urem)", optimized) == []
