"""Zen 4's and AVX2's float32 gelu divides its erf's ratio (``CpuTarget.divides_gelu_erf_ratio``,
``mathlib._gelu_divided``): a true division instead of the reciprocal estimate and its Newton step (fewer cycles of
the two FMA pipes of Zen 4 and of Zen 3, session 39 a39), 1/2 + erf/2 raised to +0 instead of the compare below
-5.7, the 1/sqrt 2 in erf's coefficients; bf16 gelu, Intel's AVX-512 cores, SSE and gelu_tanh keep their forms.
Its results (AVX2's code, the estimate form with AVX2's halved erf): within 2**-21 |x| of the estimate form's (a few
ulp of 1 + erf, times x), as close to erf's own gelu, and PyTorch's -0 and NaN in the far negative tail and at -inf
(docs/performance-history.md, session 34 poly34)."""

from __future__ import annotations

import math
import platform

import numpy as np
import pytest

from neuroncc.codegen.llvm.elementwise import gelu_function
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir.dtypes import DType

from codegen_helpers import math_function_body
from mxcsr_probe import with_flags

AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")
ZEN4 = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16")
INTEL = CpuTarget("sapphirerapids", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16,+avx512fp16")
SSE = CpuTarget("x86-64", "+sse2,+sse4.2,-avx,-avx2,-fma,-avx512f")



def test_zen4s_and_avx2s_float32_gelu_divides():
    assert ZEN4.divides_gelu_erf_ratio and AVX2.divides_gelu_erf_ratio  # (AVX2: session 39 a39, Zen 3)
    assert not INTEL.divides_gelu_erf_ratio and not SSE.divides_gelu_erf_ratio
    assert gelu_function(ZEN4, "none", DType.f32) == gelu_function(AVX2, "none", DType.f32) == "gelu_divided"
    # bf16 gelu keeps the estimate (measured no faster there; AVX2's reads tables), as do the other CPUs and the
    # tanh form
    assert gelu_function(ZEN4, "none", DType.bf16) == gelu_function(AVX2, "none", DType.bf16) == "gelu"
    assert gelu_function(INTEL, "none", DType.f32) == gelu_function(SSE, "none", DType.f32) == "gelu"
    assert gelu_function(ZEN4, "tanh", DType.f32) == gelu_function(AVX2, "tanh", DType.f32) == "gelu_tanh"


def test_the_divided_form_divides_without_the_compare():
    divided, estimated = math_function_body("gelu_divided", ZEN4), math_function_body("gelu", ZEN4)
    assert "fdiv arcp" in estimated and "fdiv arcp" not in divided and "fdiv float" in divided
    # the estimate's form selects 0 where x < -5.7 (a vcmpps); the divided form raises 1 + erf to 0 (a vmaxps)
    assert "fcmp olt float %\".1\", 0xc016cccc" in estimated and "0xc016cccc" not in divided
    assert "fcmp ogt float              0x0" in divided


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86 code")
def test_the_divided_forms_results():
    x = np.concatenate([np.linspace(-8.0, 8.0, 400001, dtype=np.float32),
                        np.arange(0, 2 ** 32, 65537, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    _, divided = with_flags("gelu_divided", AVX2, x)
    _, estimated = with_flags("gelu", AVX2, x)
    both_nan = np.isnan(divided) & np.isnan(estimated)
    finite = np.isfinite(x) & (np.abs(x) < 1e30)
    # erf moves by a few ulp of 1 + erf (its ratio's rounding, its coefficients times 1/sqrt 2): gelu by that times x
    assert (np.abs(divided - estimated)[finite] <= 2.0 ** -21 * np.maximum(np.abs(x[finite]), 1.0)).all()
    assert (np.isnan(divided) == np.isnan(estimated)).all()
    assert (divided.view(np.uint32)[both_nan] == estimated.view(np.uint32)[both_nan]).all()  # (NaN payloads kept)
    grid = x[:400001]
    exact = np.array([0.5 * float(v) * (1.0 + math.erf(float(v) / math.sqrt(2.0))) for v in grid])
    error, before = np.abs(divided[:400001] - exact), np.abs(estimated[:400001] - exact)
    # (the largest error of either form on [-8, 8] is 1.48e-6, near x = 5.65, on a 4x denser grid)
    assert error.max() < 1.5e-6 and error.mean() < 1.02 * before.mean()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86 code")
def test_the_divided_forms_tail_and_specials():
    x = np.array([-np.inf, -1e30, -100.0, -10.0, -5.7, -5.66, np.inf, 1e30, 0.0, -0.0, 1.0, -1.0], np.float32)
    _, divided = with_flags("gelu_divided", AVX2, x)
    assert np.isnan(divided[0])  # -inf * 0, as PyTorch
    assert (divided[1:6].view(np.uint32) == 0x80000000).all()  # -0, as PyTorch's float32 gelu
    assert divided[6] == np.inf and divided[7] == np.float32(1e30)
    assert divided[8].view(np.uint32) == 0 and divided[9].view(np.uint32) == 0x80000000
    assert divided[10] == pytest.approx(0.8413447, rel=2e-7) and divided[11] == pytest.approx(-0.15865526, rel=2e-7)
    # far below -4 sqrt 2 every result is -0 (1 + erf raised to +0 there), none positive
    tail = np.linspace(-50.0, -5.0, 100001, dtype=np.float32)
    _, results = with_flags("gelu_divided", AVX2, tail)
    assert (results <= 0).all() and (results[tail < -5.6568545].view(np.uint32) == 0x80000000).all()
