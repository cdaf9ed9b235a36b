"""e**x * s for x <= 0 and s one value per row (cross-entropy's and log-softmax's gradients) as one function on Zen 4
(``CpuTarget.folds_row_scale_into_exp``, ``mathlib._exp_nonpositive_times``; session 36 xent36b): s's mantissa in
the polynomial's coefficients, its exponent in vscalefps' scale, no multiply per element. One rounding where the
product rounds twice: within an ulp of the product's value, the product's bits where s is a power of two, and s of
+-0, denormal or NaN come out as the product's."""

from __future__ import annotations

import ctypes
import math
import re
import struct

import numpy as np
import pytest
from codegen_helpers import run_both
from llvmlite import ir
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.scalars import F32
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

pytestmark = pytest.mark.skipif(not host_cpu().scalef, reason="AVX-512's vscalefps")


def _graph(rows: int = 8, cols: int = 1000):
    """softmax's exponentials times a row's scale: exp(x - amax(x)) * s (s: [rows, 1])."""
    b = Builder("exp_times_row_scale")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    s = b.param(TensorType((rows, 1), DType.f32), "s")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([b.op("mul", e, s)])


def _assembly(target: CpuTarget) -> str:
    fn = _graph()
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    return jit.assembly(emit_kernel(plan, "k", target)[0], target)


def _exp_loops(asm: str) -> list[str]:
    """The innermost loops computing exponentials (from a label to the jump back to it, no label between)."""
    lines, found = asm.splitlines(), []
    for end, line in enumerate(lines):
        jump = re.match(r"\s+j\w+\s+(\.LBB\w+)$", line)
        if jump:
            start = next((k for k in range(end - 1, -1, -1) if lines[k].startswith(jump.group(1) + ":")), None)
            if start is not None and not any(re.match(r"\.LBB\w+:", text) for text in lines[start + 1:end]):
                if "vscalefps" in "\n".join(lines[start:end]) and "zmm" in "\n".join(lines[start:end]):
                    found.append("\n".join(lines[start:end + 1]))
    return found


def test_zen4_folds_the_row_scale_into_the_exponential_and_other_cpus_multiply(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.folds_row_scale_into_exp and not zen3.folds_row_scale_into_exp
    assert not intel.folds_row_scale_into_exp
    loops = _exp_loops(_assembly(zen4))
    assert loops and not any("vmulps" in loop for loop in loops)  # (the scale's coefficients hoisted out)
    assert "vmulps" in "".join(_exp_loops(_assembly(intel)))
    choose(monkeypatch, folds_row_scale_into_exp=False)
    assert "vmulps" in "".join(_exp_loops(_assembly(zen4)))


def _f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _functions():
    """(product, folded): e**x * s by exp_nonpositive and a multiply, and by exp_nonpositive_times, as C functions."""
    module = ir.Module("exp_times")
    for name, make in (("product", lambda b, x, s, t: b.fmul(math_call(b, "exp_nonpositive", x, target=t), s)),
                       ("folded", lambda b, x, s, t: math_call(b, "exp_nonpositive_times", x, s, target=t))):
        fn = ir.Function(module, ir.FunctionType(F32, [F32, F32]), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(make(b, fn.args[0], fn.args[1], jit.host_target()))
    compiled = jit.compile_ir([str(module)])
    kind = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float)
    functions = [kind(compiled.address(name)) for name in ("product", "folded")]
    for function in functions:
        function.module = compiled  # keep the code loaded while the functions are in use
    return functions


def _ulp(value: float) -> float:
    """float32's ulp at ``value`` (2**-149 at and below the denormals)."""
    return float(np.spacing(np.float32(abs(value)))) if math.isfinite(value) else 0.0


@pytest.mark.parametrize("s", [1.0, -1.0 / 512, 1.0 / 3, -7.25e-3, 3.0e20, -2.5e-30, 1.0e-40, -3.0e-44, 5.0e37])
def test_the_folded_scale_is_within_an_ulp_of_the_product(s, rng):
    product, folded = _functions()
    s = _f32(s)
    xs = np.concatenate([-rng.exponential(3.0, 3000), -rng.uniform(80.0, 110.0, 1000), [0.0, -0.0, -104.0]])
    power_of_two = math.frexp(abs(s))[0] == 0.5
    for x in xs.astype(np.float32).tolist():
        want = math.exp(x) * s  # (float64: the exact product within 2**-52)
        got, before = folded(x, s), product(x, s)
        if power_of_two and not (abs(before) < 2.0 ** -126):
            assert got == before, (x, s)  # (the coefficients times +-1: the same bits where nothing is denormal)
        assert abs(got - want) <= _ulp(want) + _ulp(before), (x, s, got, want)


def test_zero_nan_and_infinite_scales_and_arguments():
    product, folded = _functions()
    for x in (0.0, -0.0, -1.5, -50.0, -103.0, -120.0, -math.inf, math.nan):
        for s in (0.0, -0.0, math.nan, 1.0e-45, -1.0e-45):
            got, before = folded(x, s), product(x, s)
            assert struct.pack("<f", got) == struct.pack("<f", before) or (math.isnan(got) and math.isnan(before)), (
                x, s, got, before)
        for s in (math.inf, -math.inf):  # inf times e**x: +-inf; where e**x underflowed to 0 the product is NaN
            got, before = folded(x, s), product(x, s)
            assert (math.isnan(got) and math.isnan(before)) or got == s * (1.0 if before == before else 0.0) or (
                before != before and not math.isnan(x) and got == s), (x, s, got, before)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_gives_the_interpreters_values(rng, threads):
    fn = _graph(8, 1000)
    x = (rng.standard_normal((8, 1000)) * 30).astype(np.float32)
    x[1, 3], x[2, :] = np.nan, -np.inf
    s = np.array([[1.0], [-1 / 3], [2.0 ** -140], [0.0], [-0.0], [np.nan], [7.0e30], [-1.0e-3]], np.float32)
    run_both(fn, [x, s], threads=threads)
