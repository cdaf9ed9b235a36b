"""bf16 softmax's exponentials in degree 5 on Zen 4 (``CpuTarget.evaluates_exp_for_bf16_results_in_degree_five``,
session 37 bfsm37): an exp whose every result is rounded to bf16 through sums, products and quotients only
(``elementwise.reaches_only_bf16``) evaluates ``mathlib._exp_nonpositive_for_bf16``, two FMAs fewer per element
(a degree-5 polynomial, r in one FMA) and within 2.7 ulp of e**x for x >= -20, 5 below (the degree-6 exp: ~1).
Its outputs are as accurate as the degree-6 code's (a bf16 rounding is 2**-9): NaN where they were, as many correctly
rounded. AVX2 too (session 39 reg39n, Zen 3: no vscalefps, the non-positive exp's scale by 2**(n + 24)). Other exps
and Intel's AVX-512 cores keep their code."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mxcsr_probe import with_flags
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_next_row_max import outputs_off_and_on
from test_pairs import AVX2, _bf16, _bits, _softmax_bits, from_bits, to_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.elementwise import reaches_only_bf16
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

PROPERTY = "evaluates_exp_for_bf16_results_in_degree_five"
DEGREE_5 = '@"ncc.math.exp_nonpositive_for_bf16"'


def _degree_5(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def test_zen4_and_avx2_evaluate_bf16_softmax_exps_in_degree_5(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert getattr(zen4, PROPERTY) and getattr(zen3, PROPERTY) and not getattr(intel, PROPERTY)
    bf16_softmax = _softmax_bits(64, 1024)
    codes = {target.name: _assembly(bf16_softmax, target) for target in (zen4, zen3)}
    for target in (zen4, zen3):
        assert DEGREE_5 in codes[target.name][0]
        assert DEGREE_5 not in _assembly(_softmax(64, 1024), target)[0]  # (float32 results)
    assert DEGREE_5 not in _assembly(bf16_softmax, intel)[0]
    _degree_5(monkeypatch, False)
    for target in (zen4, zen3):
        ir_before, before = _assembly(bf16_softmax, target)
        assert DEGREE_5 not in ir_before and '@"ncc.math.exp_nonpositive"' in ir_before
        # one Horner FMA fewer per vector of exponentials, and r in one FMA (no second Cody-Waite step)
        code = codes[target.name][1]
        assert code.count("vfmadd213ps") < before.count("vfmadd213ps")
        assert code.count("vfmadd231ps") + code.count("vfnmadd231ps") < \
            before.count("vfmadd231ps") + before.count("vfnmadd231ps")


def _exp_graph(tail) -> tuple:
    """exp(x - max(x)) of a bf16 row widened, and the function's outputs ``tail(b, e)`` makes of it."""
    b = Builder("exp_rows")
    x = _bf16(b, b.param(TensorType((4, 64), DType.i16), "x"))
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    fn = b.build(tail(b, e))
    exp = next(op for op in fn.ops if op.name == "exp")
    return fn, exp.results[0]


@pytest.mark.parametrize("tail, only_bf16", [
    (lambda b, e: [_bits(b, b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True)))], True),  # bf16 softmax
    (lambda b, e: [_bits(b, b.op("mul", e, b.op("sum", e, dims=(1,), keepdim=True)))], True),
    (lambda b, e: [b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))], False),  # float32 results
    (lambda b, e: [_bits(b, b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))),
                   b.op("sum", e, dims=(1,), keepdim=True)], False),  # its float32 sum an output too
    (lambda b, e: [_bits(b, b.op("sub", e, b.op("sum", e, dims=(1,), keepdim=True)))], False),  # a difference
    (lambda b, e: [_bits(b, b.op("log", b.op("sum", e, dims=(1,), keepdim=True)))], False),
])
def test_only_exps_reaching_bf16_roundings_alone(tail, only_bf16):
    fn, e = _exp_graph(tail)
    assert reaches_only_bf16(fn, e) is only_bf16


def _evaluated(xs: np.ndarray) -> np.ndarray:
    """``exp_nonpositive_for_bf16`` of each float32 of ``xs`` on the host (scalar code)."""
    return with_flags("exp_nonpositive_for_bf16", jit.host_target(), np.ascontiguousarray(xs, np.float32))[1]


def test_the_exp_for_bf16_results_within_a_few_ulp_of_e_to_the_x():
    # every 61st float32 pattern from -0 down to -110, and the edges: within 2.7 ulp where x >= -20 (the degree-5
    # polynomial's 2.1 and r's rounding), 5 below (r's one FMA by ln 2's float: n times its 1.9e-9)
    patterns = np.arange(0x80000000, np.float32(-110.0).view(np.uint32), 61, dtype=np.uint64).astype(np.uint32)
    xs = np.concatenate([patterns.view(np.float32), np.float32([0.0, -0.0, -87.0, -87.5, -103.9, -104.0, -1e4])])
    got = _evaluated(xs).astype(np.float64)
    want = np.exp(xs.astype(np.float64))
    ulps = np.abs(got - want) / np.maximum(np.spacing(want.astype(np.float32)).astype(np.float64), 2.0 ** -149)
    near = xs >= -20.0
    assert ulps[near].max() <= 2.7, xs[near][np.argmax(ulps[near])]
    assert ulps.max() <= 5.0, xs[np.argmax(ulps)]
    np.testing.assert_array_equal(_evaluated(np.float32([0.0, -0.0])), [1.0, 1.0])
    special = _evaluated(np.float32([-np.inf, np.nan, -np.nan]))
    assert special[0] == 0.0 and np.isnan(special[1:]).all()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_bf16_softmax_as_accurate(rng, monkeypatch, threads, scale):
    """Against float64 softmax rounded to bf16: every output within a bf16 ulp, as many correctly rounded as the
    degree-6 code's (give or take a few: which ones differ), rows of special values NaN where they were."""
    x = (rng.standard_normal((1030, 1024)) * scale).astype(np.float32)
    x[3, 5], x[7, :] = np.nan, -np.inf  # (a NaN row, a wholly -inf row: found by their sums)
    x[9, 17] = np.inf
    bits = to_bits(x)
    before, after = outputs_off_and_on(monkeypatch, PROPERTY, fuse_whole_function(_softmax_bits(1030, 1024)), bits,
                                       threads)
    want = torch.softmax(torch.from_numpy(from_bits(bits)).double(), -1)
    want_bits = want.to(torch.bfloat16).view(torch.int16).numpy()
    nan = np.isnan(from_bits(before))
    np.testing.assert_array_equal(np.isnan(from_bits(after)), nan)
    np.testing.assert_array_equal(after[nan], before[nan])  # (their bits: NaN payloads as before)
    np.testing.assert_array_equal(nan, np.isnan(want.numpy()))
    for out in (before, after):
        got = from_bits(out)[~nan].astype(np.float64)
        reference = want.numpy()[~nan]
        assert np.all(np.abs(got - reference) <= 2.0 ** -8 * np.abs(reference) + 2.0 ** -133)
    wrong = [int(np.count_nonzero(out[~nan] != want_bits[~nan])) for out in (before, after)]
    assert wrong[1] <= 2 * wrong[0] + 20, wrong
    assert np.count_nonzero(before != after) < 1e-4 * before.size
