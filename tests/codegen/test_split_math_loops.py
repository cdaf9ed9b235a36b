"""AVX2's map stages whose elements evaluate two independent polynomials compute all but the last by loops of their
own into L1 buffers (``CpuTarget.splits_polynomial_math_loops``, ``map_stages.MapStages._split_math``): float32
gelu(x*w+b)*sigmoid(x)'s gelu, then sigmoid and the product; the same bits, with the session's math decisions
(``test_exp_one_step.py``) too; AVX-512's and SSE's code as before. Rows of whole pieces take AVX2's pieces instead
(``CpuTarget.function_piece_lines``, ``test_function_pieces.py``): these tests turn them off."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose

AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f,-avx512vl,-avx512bw")
ZEN4 = CpuTarget("znver4", "+avx,+avx2,+fma,+f16c,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd,+avx512bf16")
SSE = CpuTarget("x86-64", "+sse2,+sse4.2,+popcnt,-avx,-avx2,-fma,-avx512f,-avx512vl,-avx512bw")
#: this session's three decisions for float32 row (a)
DECISIONS = ("splits_polynomial_math_loops", "scales_one_plus_exp_in_one_step", "halves_gelu_in_its_erf")


def gelu_sigmoid(rows: int, cols: int, approximate: str = "none", dtype: DType = DType.f32) -> Function:
    b = Builder("gelu_sigmoid")
    x = b.param(TensorType((rows, cols), dtype), "x")
    w = b.param(TensorType((cols,), dtype), "w")
    bias = b.param(TensorType((cols,), dtype), "b")
    gelu = b.op("gelu", b.op("add", b.op("mul", x, w), bias), approximate=approximate)
    return b.build([b.op("mul", gelu, b.op("sigmoid", x))])


def silu(rows: int, cols: int) -> Function:
    b = Builder("silu")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    return b.build([b.op("mul", x, b.op("sigmoid", x))])


def _llvm_ir(fn: Function, target: CpuTarget) -> str:
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    return "".join(emit_kernel(plan, "k", target)[0])


def _forced(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **dict.fromkeys(DECISIONS, on))


def _without_pieces(monkeypatch) -> None:
    """Rows of whole pieces split their math as before AVX2's pieces (``CpuTarget.function_piece_lines`` 0)."""
    choose(monkeypatch, function_piece_lines=0)


def _math_loops(text: str) -> int:
    return text.count("!llvm.loop")


def test_the_decision():
    assert AVX2.splits_polynomial_math_loops
    assert not ZEN4.splits_polynomial_math_loops and not SSE.splits_polynomial_math_loops


def test_zen3s_row_a_computes_its_gelu_by_a_loop_of_its_own(monkeypatch):
    _without_pieces(monkeypatch)
    text = _llvm_ir(gelu_sigmoid(64, 1024), AVX2)
    assert _math_loops(text) == 2 and "alloca [1024 x float]" in text
    gelu = 'call float @"ncc.math.gelu_divided"'  # (its erf's ratio divided: ``CpuTarget.divides_gelu_erf_ratio``)
    assert text.count(gelu) == 1 and text.count('call float @"ncc.math.sigmoid"') == 1
    assert text.index(gelu) < text.index('call float @"ncc.math.sigmoid"')


def test_one_polynomial_long_rows_and_bf16_tables_keep_one_loop(monkeypatch):
    _without_pieces(monkeypatch)
    assert _math_loops(_llvm_ir(silu(64, 1024), AVX2)) == 1
    assert _math_loops(_llvm_ir(gelu_sigmoid(4, 4096), AVX2)) == 1  # (over SPLIT_MATH_MAX: the buffers leave L1)
    bf16 = _llvm_ir(gelu_sigmoid(64, 1024, dtype=DType.bf16), AVX2)  # (its math read from tables: no polynomial)
    assert "ncc.math." not in bf16 and "x float]" not in bf16


def test_polynomials_written_as_outputs_are_not_split():
    # (their loop would copy each buffer to its output)
    b = Builder("outputs")
    x = b.param(TensorType((64, 256), DType.f32), "x")
    assert _math_loops(_llvm_ir(b.build([b.op(name, x) for name in ("exp", "sigmoid", "tanh")]), AVX2)) == 1


def test_zen4s_and_sses_row_a_is_unchanged(monkeypatch):
    fn = gelu_sigmoid(64, 1024)
    for target in (ZEN4, SSE):
        now = _llvm_ir(fn, target)
        assert _math_loops(now) == 1 and "alloca [1024 x float]" not in now
        _forced(monkeypatch, False)
        assert _llvm_ir(fn, target) == now
        monkeypatch.undo()


def _inputs(rng, rows: int, cols: int) -> list[np.ndarray]:
    """Normal values with specials in every input: NaNs of both signs and other payloads, infinities, zeros,
    subnormals, and values at the math's clamps (sigmoid's +-86 and +-88.8, gelu's -5.7 and erf's +-4 sqrt 2)."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-30, 86.0, -86.0, 88.8, -88.8,
                         100.0, -100.0, 5.7, -5.7, -6.0, 5.657, -5.657, 3e38, -3e38], dtype=np.float32)
    payloads = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0xFF812345, 0x7FFFFFFF], dtype=np.uint32).view(np.float32)
    arrays = [(rng.standard_normal(shape) * 4).astype(np.float32) for shape in ((rows, cols), (cols,), (cols,))]
    for k, array in enumerate(arrays):
        flat = array.reshape(-1)
        flat[:specials.size] = specials
        flat[100 + 7 * k:100 + 7 * k + payloads.size] = payloads
        flat[-3 * specials.size::3] = specials
    arrays[0][1:, :] = np.roll(arrays[0][1:, :], 17, axis=1)  # (other rows see the specials at other columns)
    return arrays


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("cols", [1024, 1024 + 2 * 7])  # (and a scalar remainder)
def test_row_a_keeps_every_bit(rng, monkeypatch, approximate, cols):
    fn = fuse_whole_function(gelu_sigmoid(8, cols, approximate))
    params = _inputs(rng, 8, cols)
    _without_pieces(monkeypatch)
    _forced(monkeypatch, True)
    (now,) = build_cpu_executable(fn, {"threads": 2})(*params)
    _forced(monkeypatch, False)
    (before,) = build_cpu_executable(fn, {"threads": 2})(*params)
    np.testing.assert_array_equal(now.view(np.uint32), before.view(np.uint32))
