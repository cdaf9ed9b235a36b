"""exp of x - max(x): the math library's non-positive exp (``mathlib._exp_nonpositive``), where ``signs.at_most_zero``
says the argument is <= 0, gives exp's bits for every such float, and only such arguments get it."""

from __future__ import annotations

import ctypes
import platform
import struct

import numpy as np
import pytest
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import fuse_whole_function, wrap_remaining_ops
from neuroncc.codegen.llvm.scalars import F32, I32, I64
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType

from codegen_helpers import run_both, special_floats
from mxcsr_probe import UNDERFLOW, with_flags


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _mismatch_counter(name: str, first, second) -> ctypes.CFUNCTYPE:
    """``mismatches(lo, hi)``: how many float bit patterns x in [lo, hi) give ``first(b, x, target)`` and
    ``second(b, x, target)`` (float32 IR values built by ``b``) different bits."""
    module = ir.Module(name)
    fn = ir.Function(module, ir.FunctionType(I64, [I32, I32]), "mismatches")
    entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i, count = b.phi(I32), b.phi(I64)
    i.add_incoming(fn.args[0], entry)
    count.add_incoming(ir.Constant(I64, 0), entry)
    x = b.bitcast(i, F32)
    target = jit.host_target()
    one, other = (b.bitcast(make(b, x, target), I32) for make in (first, second))
    counted = b.add(count, b.zext(b.icmp_unsigned("!=", one, other), I64))
    following = b.add(i, ir.Constant(I32, 1))
    i.add_incoming(following, loop)
    count.add_incoming(counted, loop)
    b.cbranch(b.icmp_unsigned("<", following, fn.args[1]), loop, done)
    b.position_at_end(done)
    b.ret(counted)
    compiled = jit.compile_ir([str(module)])
    counter = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint32)(compiled.address("mismatches"))
    counter.module = compiled  # keep the code loaded while the function is in use
    return counter


def _exp_counter() -> ctypes.CFUNCTYPE:
    """Float bit patterns whose exp and exp_nonpositive differ."""
    return _mismatch_counter("exp_nonpositive_check", lambda b, x, target: math_call(b, "exp", x, target=target),
                             lambda b, x, target: math_call(b, "exp_nonpositive", x, target=target))


def test_exp_nonpositive_is_exp_on_every_nonpositive_float():
    counter = _exp_counter()
    # -0.0 up to -105 (below -104.5 both clamp: exp at -104, the non-positive exp at -104 with AVX-512, else at
    # -104.5), every float32 (1.1e9 of them, ~3 s), and +0.0 and a NaN
    assert counter(_bits(-0.0), _bits(-105.0) + 1) == 0
    assert counter(_bits(0.0), _bits(0.0) + 1) == 0
    assert counter(_bits(float("-inf")), _bits(float("-inf")) + 1) == 0


def _softmax_like(subtracted: str, keepdim: bool = True) -> tuple:
    b = Builder("exp_of_difference")
    x = b.param(TensorType((8, 33), DType.f32), "x")
    y = b.param(TensorType((8, 33), DType.f32), "y")
    of = {"x": x, "y": y}[subtracted]
    maximum = b.op("amax", of, dims=(1,), keepdim=keepdim)
    if not keepdim:
        maximum = b.op("unsqueeze", maximum, dim=1)
    e = b.op("exp", b.op("sub", x, maximum))
    return b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))])


def _uses_nonpositive_exp(fn) -> bool:
    _, texts = plan_launch(wrap_remaining_ops(fuse_whole_function(fn)), "cpu", "features")
    text = "".join(texts)
    assert "ncc.math.exp" in text
    return "ncc.math.exp_nonpositive" in text


@pytest.mark.parametrize(("subtracted", "keepdim", "expected"), [
    ("x", True, True),  # x - amax(x): <= 0
    ("y", True, False),  # x - amax(y): either sign
    ("x", False, False),  # amax without keepdim, then unsqueezed: not the pattern (left to the general exp)
])
def test_only_x_minus_its_max_gets_the_nonpositive_exp(subtracted, keepdim, expected, rng):
    fn = _softmax_like(subtracted, keepdim)
    assert _uses_nonpositive_exp(fn) is expected
    x = special_floats(rng, (8, 33)).astype(np.float32)
    x[2, :] = -np.inf  # an all -inf row: NaN, as eager's
    x[3, 5] = np.nan
    x[4, 7] = np.inf
    x[5, :] = rng.standard_normal(33).astype(np.float32) * 60  # exponentials down to denormals and 0
    run_both(fn, [x, special_floats(rng, (8, 33)).astype(np.float32)])


@pytest.mark.parametrize("features", ["+avx,+avx2,+fma,-avx512f",
                                      "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq"])
def test_the_nonpositive_exp_is_inline_vector_code_with_and_without_avx512(features):
    fn = _softmax_like("x")
    target = CpuTarget("znver4" if "avx512f," in features else "znver3", features)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    assert "ncc.math.exp_nonpositive" in "".join(texts)
    body = jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]
    assert "call" not in body
    assert ("vscalefps" in body) == target.scalef  # AVX-512 scales by any n in one instruction


def test_avx512_scales_by_the_float_n_without_an_integer_n():
    """On AVX-512 exp's scale is vscalefps of the float n (``vector_variants.scaled_by_float``): no integer n
    (vpaddd) and no conversion of it back to float (vcvtdq2ps) in the vector loop nor in its scalar remainder
    (vscalefss; the scalar function's definition is linked in and inlined after O3, no call)."""
    fn = _softmax_like("x")
    target = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq")
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    body = jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]
    assert "vscalefps" in body and "vscalefss" in body  # the vector loop's and the scalar remainder's
    assert "vcvt" not in body and "call" not in body


def _ldexp_form_counter() -> ctypes.CFUNCTYPE:
    """Float bit patterns whose exp differs from exp scaled by ``llvm.ldexp`` of the integer n (the form before the
    scale by the float n)."""
    from neuroncc.codegen.llvm import mathlib

    def by_integer(b, x, target):
        xc = mathlib._clamp_keeping_nan(b, x, -104.0, 88.8)
        n, whole = mathlib._round_to_integer(b, b.fmul(xc, mathlib._c(1.4426950408889634), flags=mathlib.FAST))
        r = b.fsub(xc, b.fmul(n, mathlib._c(0.693359375), flags=mathlib.FAST), flags=mathlib.FAST)
        r = b.fsub(r, b.fmul(n, mathlib._c(-2.12194440e-4), flags=mathlib.FAST), flags=mathlib.FAST)
        return mathlib._scale(b, mathlib._exp_reduced(b, r), whole, target)

    return _mismatch_counter("exp_scale_check", by_integer, lambda b, x, target: math_call(b, "exp", x, target=target))


@pytest.mark.skipif(not jit.host_target().scales_by_float_exponent, reason="the scale by the float n is AVX-512's")
def test_the_scale_by_the_float_n_gives_the_integer_ns_bits():
    counter = _ldexp_form_counter()
    # every float from -0 down to -105 and from +0 up to 89 (past both clamps), the infinities and a NaN
    assert counter(_bits(-0.0), _bits(-105.0) + 1) == 0
    assert counter(_bits(0.0), _bits(89.0) + 1) == 0
    for special in (float("inf"), float("-inf"), float("nan")):
        assert counter(_bits(special), _bits(special) + 1) == 0


def test_avx512_exp2_scales_by_the_float_n_without_an_integer_n():
    """exp2 as exp (above): vscalefps of the float n, no vcvtdq2ps of an integer n back to float."""
    b = Builder("exp2")
    x = b.param(TensorType((64, 256), DType.f32), "x")
    fn = b.build([b.op("exp2", x)])
    target = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq")
    plan = plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1, fn.outputs[0].type)])
    texts, _ = emit_kernel(plan, "k", target)
    body = jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]
    assert "vscalefps" in body and "vcvt" not in body and "call" not in body


def _exp2_ldexp_form_counter() -> ctypes.CFUNCTYPE:
    """Float bit patterns whose exp2 differs from exp2 scaled by ``llvm.ldexp`` of the integer n (its form before
    session 19 softmax1t)."""
    from neuroncc.codegen.llvm import mathlib

    def by_integer(b, x, target):
        xc = mathlib._clamp_keeping_nan(b, x, -151.0, 129.0)
        n, whole = mathlib._round_to_integer(b, xc)
        r = b.fmul(b.fsub(xc, n), mathlib._c(0.6931471805599453))
        return mathlib._scale(b, mathlib._exp_reduced(b, r), whole, target)

    return _mismatch_counter("exp2_scale_check", by_integer,
                             lambda b, x, target: math_call(b, "exp2", x, target=target))


@pytest.mark.skipif(not jit.host_target().scales_by_float_exponent, reason="the scale by the float n is AVX-512's")
def test_exp2s_scale_by_the_float_n_gives_the_integer_ns_bits():
    counter = _exp2_ldexp_form_counter()
    # every float from -0 down to -152 and from +0 up to 130 (past both clamps), the infinities and a NaN
    assert counter(_bits(-0.0), _bits(-152.0) + 1) == 0
    assert counter(_bits(0.0), _bits(130.0) + 1) == 0
    for special in (float("inf"), float("-inf"), float("nan")):
        assert counter(_bits(special), _bits(special) + 1) == 0


def _log_softmax_gradient_part(metadata) -> tuple:
    """exp(x - m - l) * g from parameters: cross-entropy's backward reads the forward's saved max m and log-sum l
    (their facts, when given, come from the front end: frontend/saved_facts.py)."""
    b = Builder("exp_of_saved", metadata)
    x = b.param(TensorType((8, 33), DType.f32), "x")
    m = b.param(TensorType((8, 1), DType.f32), "m")
    l = b.param(TensorType((8, 1), DType.f32), "l")
    g = b.param(TensorType((8, 1), DType.f32), "g")
    return b.build([b.op("mul", b.op("exp", b.op("sub", b.op("sub", x, m), l)), g)])


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"upper_bounds": ((1, 0),), "nonnegative": (2,)}, True),
    ({}, False),  # without the forward's facts the sign is unknown: the general exp
    ({"upper_bounds": ((1, 0),)}, False),
])
def test_saved_max_and_log_sum_get_the_nonpositive_exp_with_their_facts(metadata, expected, rng):
    fn = _log_softmax_gradient_part(metadata)
    assert _uses_nonpositive_exp(fn) is expected
    x = special_floats(rng, (8, 33)).astype(np.float32)
    x[2, :] = -np.inf
    x[5, :] = rng.standard_normal(33).astype(np.float32) * 60
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=1, keepdims=True)
        l = np.log(np.exp(x - m).sum(axis=1, keepdims=True)).astype(np.float32)
    run_both(fn, [x, m, l, rng.standard_normal((8, 1)).astype(np.float32)])


def test_softmax_by_torchs_logsumexp_gets_the_nonpositive_exp(rng):
    """exp(x - logsumexp(x)) as torch decomposes logsumexp (its max replaced by 0 where it is +-inf): <= 0 or NaN
    for every row, those of +-inf and NaN included, and the interpreter's values."""
    b = Builder("softmax_by_logsumexp")
    x = b.param(TensorType((8, 33), DType.f32), "x")
    maximum = b.op("amax", x, dims=(1,), keepdim=True)
    infinite = b.op("eq", b.op("abs", maximum), b.op("full", shape=(), dtype=DType.f32, value=float("inf")))
    shift = b.op("where", infinite, b.op("full", shape=(), dtype=DType.f32, value=0.0), maximum)
    log_sum = b.op("log", b.op("sum", b.op("exp", b.op("sub", x, shift)), dims=(1,), keepdim=True))
    fn = b.build([b.op("exp", b.op("sub", x, b.op("add", log_sum, shift)))])
    _, texts = plan_launch(wrap_remaining_ops(fuse_whole_function(fn)), "cpu", "features")
    assert "".join(texts).count('call float @"ncc.math.exp_nonpositive"(') >= 1
    values = special_floats(rng, (8, 33)).astype(np.float32)
    values[2, :] = -np.inf
    values[3, 5] = np.nan
    values[4, 7] = np.inf
    values[5, :] = rng.standard_normal(33).astype(np.float32) * 60
    run_both(fn, [values])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86's MXCSR")
def test_avx2s_exp_of_masked_entries_is_zero_without_an_underflowing_product(monkeypatch):
    """Softmax's masked entries (-inf - max) and anything below -104.5 come out +0 from a zero scale, not from a
    product that underflows: on Zen 3 each underflowing vector product takes a microcode assist (the causal
    attention softmax [128, 16, 16] took 1.35-1.55x as long, ``mathlib.EXP_NONPOSITIVE_FLOOR``)."""
    from neuroncc.codegen.llvm import mathlib

    avx2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")
    masked = np.array([-np.inf, -3e38, -1e6, -200.0, -105.0, -104.5] * 4, dtype=np.float32)
    flags, y = with_flags("exp_nonpositive", avx2, masked)
    assert not flags & UNDERFLOW
    assert (y.view(np.uint32) == 0).all()  # +0 bits
    # the probe sees the product's underflow: the clamp at -104 (n = -150) made one, giving the same +0
    monkeypatch.setattr(mathlib, "EXP_NONPOSITIVE_FLOOR", -104.0)
    flags, y = with_flags("exp_nonpositive", avx2, masked)
    assert flags & UNDERFLOW and (y.view(np.uint32) == 0).all()
