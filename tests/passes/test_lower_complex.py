"""lower-complex: complex arithmetic as f32 arithmetic on parts, checked against the reference interpreter (which
computes c64 with numpy's complex64), and the invariant codegen relies on: after the cpu and nki pipelines no
kernel region holds a c64 value."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.errors import PassError
from neuroncc.ir import DType, interpret, parse
from neuroncc.passes import PassContext, run_pipeline
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.testing.semantics import assert_pass_preserves_semantics, random_inputs

C64, F32 = DType.c64, DType.f32

GRAPHS = {
    "arithmetic": """
func @arithmetic(%a: tensor<3x4xc64>, %b: tensor<4xc64>, %x: tensor<3x4xf32>) -> (tensor<3x4xc64>, tensor<3x4xc64>, tensor<3x4xc64>, tensor<3x4xc64>) {
  %0 = mul %a, %b : tensor<3x4xc64>
  %1 = div %a, %b : tensor<3x4xc64>
  %2 = cast %x {dtype = c64} : tensor<3x4xc64>
  %3 = sub %2, %a : tensor<3x4xc64>
  %4 = neg %3 : tensor<3x4xc64>
  %5 = conj %4 : tensor<3x4xc64>
  return %0, %1, %3, %5
}""",
    "predicates": """
func @predicates(%a: tensor<5xc64>, %b: tensor<5xc64>, %m: tensor<5xbool>) -> (tensor<5xbool>, tensor<5xbool>, tensor<5xc64>, tensor<5xf32>, tensor<5xi32>) {
  %0 = eq %a, %b : tensor<5xbool>
  %1 = ne %a, %a : tensor<5xbool>
  %2 = where %m, %a, %b : tensor<5xc64>
  %3 = abs %2 : tensor<5xf32>
  %4 = cast %a {dtype = i32} : tensor<5xi32>
  return %0, %1, %2, %3, %4
}""",
    "movement_and_reductions": """
func @movement_and_reductions(%a: tensor<2x3xc64>) -> (tensor<3x2xc64>, tensor<2x8xc64>, tensor<4x3xc64>, tensor<2xc64>, tensor<3xc64>, tensor<2x1xc64>, tensor<2x2xc64>) {
  %0 = permute %a {dims = [1, 0]} : tensor<3x2xc64>
  %1 = constant_pad %a {pad = [1, 1]} : tensor<2x5xc64>
  %2 = cat %1, %a {dim = 1} : tensor<2x8xc64>
  %i = iota {dtype = i64, length = 4, start = 2, step = -1} : tensor<4xi64>
  %3 = index_select %a, %i {dim = 1} : tensor<2x4xc64>
  %4 = permute %3 {dims = [1, 0]} : tensor<4x2xc64>
  %5 = full {dtype = c64, shape = [4, 1], value = 2.5} : tensor<4x1xc64>
  %6 = expand %5 {shape = [4, 3]} : tensor<4x3xc64>
  %7 = sum %a {dims = [1]} : tensor<2xc64>
  %8 = mean %a {dims = [0]} : tensor<3xc64>
  %9, %10 = split %a {dim = 1, sizes = [1, 2]} : tensor<2x1xc64>, tensor<2x2xc64>
  %11 = flip %10 {dims = [1]} : tensor<2x2xc64>
  return %0, %2, %6, %7, %8, %9, %11
}""",
    "views": """
func @views(%p: tensor<3x2xf32>, %c: tensor<3xc64>) -> (tensor<3xc64>, tensor<3x2xf32>, tensor<3x2xf32>) {
  %0 = view_as_complex %p : tensor<3xc64>
  %1 = mul %0, %c : tensor<3xc64>
  %2 = view_as_real %1 : tensor<3x2xf32>
  %3 = view_as_real %c : tensor<3x2xf32>
  return %1, %2, %3
}""",
    "ffts": """
func @ffts(%x: tensor<3x6xf32>, %c: tensor<3x4xc64>) -> (tensor<3x4xc64>, tensor<3x6xc64>, tensor<3x4xc64>, tensor<3x6xf32>, tensor<3x6xf32>) {
  %0 = fft_r2c %x {dims = [1]} : tensor<3x4xc64>
  %1 = fft_r2c %x {dims = [0, 1], norm = "by_root_n", onesided = false} : tensor<3x6xc64>
  %2 = fft_c2c %c {dims = [1, 0], forward = false, norm = "by_n"} : tensor<3x4xc64>
  %3 = fft_c2r %c {dims = [0, 1], last_dim_size = 6, norm = "by_n"} : tensor<3x6xf32>
  %4 = fft_c2r %c {dims = [1], last_dim_size = 7} : tensor<3x7xf32>
  %5 = slice %4 {dim = 1, start = 0, end = 6} : tensor<3x6xf32>
  return %0, %1, %2, %3, %5
}""",
}


@pytest.mark.parametrize("fft", ["library", "dft"])
@pytest.mark.parametrize("name", GRAPHS)
def test_lowering_preserves_semantics(name, fft):
    fn = parse(GRAPHS[name])
    # movement is exact; arithmetic may round differently from numpy's complex64 kernels (an ulp or two), and
    # the DFT matmuls accumulate in float32 where the reference uses float64
    tolerance = {} if name == "movement_and_reductions" else {"rtol": 1e-5, "atol": 1e-5}
    out = assert_pass_preserves_semantics(f"lower-complex{{fft={fft}}}", fn, **tolerance)
    kept = {op.name for op in out.ops if any(v.type.dtype is C64 for v in op.operands + op.results)}
    allowed = {"view_as_real", "view_as_complex"} | ({"fft_r2c", "fft_c2r", "fft_c2c"} if fft == "library" else set())
    assert kept <= allowed, f"complex values left in {kept - allowed}"


def test_division_and_magnitude_on_hard_values():
    """Smith's division and the scaled hypot: no overflow in |b|^2 or re^2 + im^2, infinities and zeros."""
    fn = parse("""
func @hard(%a: tensor<8xc64>, %b: tensor<8xc64>) -> (tensor<8xc64>, tensor<8xf32>) {
  %0 = div %a, %b : tensor<8xc64>
  %1 = abs %a : tensor<8xf32>
  return %0, %1
}""")
    a = np.array([3e30 + 4e30j, 1 + 1j, 0, np.inf + 1j, 2e-30 - 1e-30j, -5 + 0j, 1 + 2j, 7 - 3j], np.complex64)
    b = np.array([1e30 + 2e30j, 0, 1 + 1j, 2 + 0j, 1e-30 + 1e-30j, 3e25 + 4e25j, 0 + 1e-20j, -2 + 5j], np.complex64)
    lowered = run_pipeline("lower-complex", fn, PassContext(verify_each=True))
    quotient, magnitude = interpret(lowered, [a, b])
    with np.errstate(all="ignore"):
        expected = (a.astype(np.complex128) / b.astype(np.complex128)).astype(np.complex64)
    finite = np.isfinite(expected)
    np.testing.assert_allclose(quotient[finite], expected[finite], rtol=1e-6)
    np.testing.assert_allclose(magnitude, np.abs(a.astype(np.complex128)).astype(np.float32), rtol=1e-6)
    assert np.isinf(magnitude[3]) and np.isfinite(magnitude[0]) and magnitude[4] > 0


def test_real_graphs_are_unchanged():
    fn = parse("""
func @real(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = exp %x : tensor<4xf32>
  return %0
}""")
    assert run_pipeline("lower-complex", fn) is fn


@pytest.mark.parametrize("target", ["cpu", "nki"])
def test_after_the_target_pipeline_kernels_never_see_c64(target):
    for name, text in GRAPHS.items():
        fn = run_pipeline(default_pipeline(target), parse(text), PassContext(verify_each=True))
        for op in fn.ops:
            for region in op.regions:
                inner = [v for o in region.walk() for v in o.operands + o.results] + list(region.params)
                assert not any(v.type.dtype is C64 for v in inner), f"{name}: kernel {op.attrs['name']} holds c64"


def test_errors_are_typed():
    fn = parse(GRAPHS["arithmetic"])
    with pytest.raises(PassError, match="fft must be one of"):
        run_pipeline("lower-complex{fft=fftw}", fn)
    fused = run_pipeline("fuse", fn)
    with pytest.raises(PassError, match="before fuse"):
        run_pipeline("lower-complex", fused)


def test_inputs_include_complex_values():
    fn = parse(GRAPHS["views"])
    inputs = random_inputs(fn)
    assert inputs[1].dtype == np.complex64 and np.abs(inputs[1].imag).sum() > 0
