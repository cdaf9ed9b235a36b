"""Ops with bf16 results (eager's bf16 ops round after each op) round without the NaN case on AVX-512
(``CpuTarget.rounds_bf16_op_results_without_nan_case``, ``codegen/llvm/nan_payloads.py``) where their NaNs are quiet
with zero low halves: x86 arithmetic, exp, sigmoid and gelu's erf form on bf16 values; on AVX2 too since session 24
(Zen 3: bf16 row (a) 0.83-0.84 of the time). Every bit as with the case and as the reference's, NaN payloads
included, in AVX-512's and AVX2's code; a CPU without AVX2 keeps the case."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_bf16_rounding import ZEN4
from test_pairs import _NAN_PATTERNS, AVX2, from_bits, to_bits

from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.nan_payloads import NanPayloads
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware import host
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType, interpret

#: An x86-64 CPU without AVX (128-bit vectors)
SSE = "+sse2,+sse4.2,+popcnt,-avx,-avx2,-fma,-avx512f,-avx512vl,-avx512bw"


def gelu_sigmoid_graph(rows: int, cols: int, approximate: str = "none") -> Function:
    """gelu(x*w+b)*sigmoid(x) on bf16 tensors as torch.compile hands it to the backend (benchmarks' row (a))."""
    b = Builder("gelu_sigmoid_bits")
    x, w, bias = (b.op("bitcast", b.param(TensorType(shape, DType.i16), name), dtype=DType.bf16)
                  for shape, name in (((rows, cols), "x"), ((cols,), "w"), ((cols,), "b")))
    y = b.op("mul", b.op("gelu", b.op("add", b.op("mul", x, w), bias), approximate=approximate), b.op("sigmoid", x))
    return b.build([b.op("bitcast", y, dtype=DType.i16)])


def _math_casts_graph(rows: int, cols: int) -> Function:
    """Casts to bf16 of sigmoid and gelu of widened bf16 values: every target drops their NaN case."""
    b = Builder("math_casts")
    x = b.op("cast", b.op("bitcast", b.param(TensorType((rows, cols), DType.i16), "x"), dtype=DType.bf16),
             dtype=DType.f32)
    outputs = [b.op("cast", b.op(name, x, **attrs), dtype=DType.bf16)
               for name, attrs in (("sigmoid", {}), ("gelu", {"approximate": "none"}))]
    return b.build([b.op("bitcast", y, dtype=DType.i16) for y in outputs])


def _rounding_ops(fn: Function, op_results: bool) -> list[str]:
    payloads = NanPayloads(fn, op_results=op_results)
    return [op.name for op in fn.ops if op.results[0].type.dtype is DType.bf16
            and op.name not in ("bitcast", "full") and payloads.needs_nan_case(op)]


def _llvm_ir(fn: Function, target: CpuTarget) -> str:
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    return "".join(emit_kernel(plan, "k", target)[0])


def test_the_decision_for_ops_with_bf16_results():
    # every rounding of row (a) drops the case with op_results; gelu's tanh form is not promised (kept); without
    # op_results (AVX2) every op with a bf16 result keeps it, as before
    assert _rounding_ops(gelu_sigmoid_graph(4, 64), True) == []
    assert _rounding_ops(gelu_sigmoid_graph(4, 64, "tanh"), True) == ["gelu"]
    assert _rounding_ops(gelu_sigmoid_graph(4, 64), False) == ["mul", "add", "gelu", "sigmoid", "mul"]
    assert _rounding_ops(_math_casts_graph(4, 64), False) == []


def test_zen4_and_zen3_code_have_no_nan_case_in_row_a_and_sse_code_keeps_it():
    # the NaN case's compare: one per rounding of row (a) (five per element, in each loop that computes it) before,
    # none on AVX-512 (session 18) and AVX2 (session 24) now; 128-bit SSE code (not measured) keeps it
    fn = gelu_sigmoid_graph(64, 1024)
    assert CpuTarget("znver4", ZEN4).rounds_bf16_op_results_without_nan_case
    assert "fcmp uno" not in _llvm_ir(fn, CpuTarget("znver4", ZEN4))
    assert CpuTarget("znver3", AVX2).rounds_bf16_op_results_without_nan_case
    assert "fcmp uno" not in _llvm_ir(fn, CpuTarget("znver3", AVX2))
    sse = _llvm_ir(fn, CpuTarget("x86-64", SSE))
    assert sse.count("fcmp uno") % 5 == 0 and "fcmp uno" in sse


def _inputs(rng, rows: int, cols: int) -> list[np.ndarray]:
    x = to_bits(rng.standard_normal((rows, cols)).astype(np.float32) * 3)
    x[:, :len(_NAN_PATTERNS)] = _NAN_PATTERNS  # each pattern in every row, against every weight
    x[:len(_NAN_PATTERNS), len(_NAN_PATTERNS):2 * len(_NAN_PATTERNS)] = _NAN_PATTERNS[:, None]
    x[-1, -4:] = to_bits(np.array([-np.inf, np.inf, -6.0, 5.0], np.float32))  # gelu(-inf) is NaN, saturations
    w = to_bits(rng.standard_normal(cols).astype(np.float32))
    w[:len(_NAN_PATTERNS)] = _NAN_PATTERNS  # NaN weights too (one NaN operand at a time, or the same one)
    w[len(_NAN_PATTERNS):2 * len(_NAN_PATTERNS)] = to_bits(np.full(len(_NAN_PATTERNS), 1.5, np.float32))
    w[-4:] = to_bits(np.zeros(4, np.float32))  # inf * 0: the default NaN
    bias = to_bits(rng.standard_normal(cols).astype(np.float32))
    bias[2 * len(_NAN_PATTERNS):3 * len(_NAN_PATTERNS)] = _NAN_PATTERNS
    return [x, w, bias]


@pytest.mark.parametrize("cpu", ["host", "avx2"])
@pytest.mark.parametrize("cols", [64, 1024 + 2 * 7])  # and a scalar remainder
def test_row_a_keeps_every_nan_bit_without_the_case(rng, monkeypatch, cols, cpu):
    # AVX-512's code and AVX2's (its four-vector interleave and exp), both run on this host
    if cpu == "avx2":
        monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), name="znver3", features=AVX2)])
    fn = gelu_sigmoid_graph(len(_NAN_PATTERNS) + 2, cols)
    params = _inputs(rng, len(_NAN_PATTERNS) + 2, cols)
    (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*params)
    monkeypatch.setattr(NanPayloads, "needs_nan_case", lambda self, op: True)
    (with_case,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*params)
    np.testing.assert_array_equal(got, with_case)
    (want,) = interpret(fn, params)
    nan = np.isnan(from_bits(want))
    assert nan[:, :7].all() and np.isnan(from_bits(got)[nan]).all()
    # NaNs with payloads reach the roundings: the all-ones one (0x7FFF) kept through every op
    assert {0xFFC0, 0x7FFF, 0xFFFF} <= set(got[nan].view(np.uint16).tolist())
    np.testing.assert_array_equal(got[nan], want[nan])


@pytest.mark.parametrize("cpu", ["host", "avx2"])
def test_casts_of_sigmoid_and_gelu_keep_every_nan_bit_without_the_case(rng, monkeypatch, cpu):
    # AVX-512's exp (vscalefps) and AVX2's (powers of two from exponent bits), both run on this host
    if cpu == "avx2":
        monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), name="znver3", features=AVX2)])
    fn = _math_casts_graph(len(_NAN_PATTERNS), 64)
    x = to_bits(rng.standard_normal((len(_NAN_PATTERNS), 64)).astype(np.float32) * 3)
    x[:, :len(_NAN_PATTERNS)] = _NAN_PATTERNS
    got = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x)
    monkeypatch.setattr(NanPayloads, "needs_nan_case", lambda self, op: True)
    with_case = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x)
    for g, e, reference in zip(got, with_case, interpret(fn, [x]), strict=True):
        np.testing.assert_array_equal(g, e)
        nan = np.isnan(from_bits(reference))
        assert nan[:, :7].all()  # (the first seven patterns are NaNs)
        np.testing.assert_array_equal(g[nan], reference[nan])
