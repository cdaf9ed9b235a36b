"""Complex graphs on the cpu and nki-sim targets against the reference interpreter: c64 parameters, outputs and
FFT results reinterpreted in place as f32 pairs (view_as_real/view_as_complex at the top level), copies where a
layout cannot be reinterpreted, and the FFTs as ATen calls (cpu) or DFT matmul kernels (nki-sim)."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.driver.compile import compile_graph
from neuroncc.ir import TensorType, interpret, parse
from neuroncc.testing.semantics import random_inputs

SPECTRAL = """
func @spectral(%x: tensor<4x8xf32>, %w: tensor<5x2xf32>) -> (tensor<4x8xf32>, tensor<4x5xc64>, tensor<4x5xf32>) {
  %0 = fft_r2c %x {dims = [1], norm = "by_root_n"} : tensor<4x5xc64>
  %1 = view_as_complex %w : tensor<5xc64>
  %2 = mul %0, %1 : tensor<4x5xc64>
  %3 = fft_c2r %2 {dims = [1], last_dim_size = 8, norm = "by_root_n"} : tensor<4x8xf32>
  %4 = abs %2 : tensor<4x5xf32>
  return %3, %2, %4
}"""

FFT2 = """
func @fft2(%c: tensor<6x5xc64>) -> (tensor<6x5xc64>, tensor<5x6x2xf32>) {
  %0 = fft_c2c %c {dims = [0, 1], forward = true, norm = "by_n"} : tensor<6x5xc64>
  %1 = conj %0 : tensor<6x5xc64>
  %2 = mul %0, %1 : tensor<6x5xc64>
  %3 = fft_c2c %2 {dims = [0, 1], forward = false} : tensor<6x5xc64>
  %4 = permute %3 {dims = [1, 0]} : tensor<5x6xc64>
  %5 = view_as_real %4 : tensor<5x6x2xf32>
  return %3, %5
}"""


def _check(text: str, target: str, inputs=None, rtol=2e-5, atol=2e-5):
    fn = parse(text)
    inputs = inputs if inputs is not None else random_inputs(fn, seed=3)
    exe = compile_graph(fn, target=target)
    got = exe(*inputs)
    want = interpret(fn, inputs)
    for index, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output #{index}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output #{index}")
    return exe


@pytest.mark.parametrize("target", ["cpu", "nki-sim"])
@pytest.mark.parametrize("text", [SPECTRAL, FFT2], ids=["spectral", "fft2"])
def test_complex_graphs_match_the_interpreter(target, text):
    exe = _check(text, target)
    if target == "cpu":
        assert exe.stats["interpreted_kernels"] == 0, exe.stats["interpreted_reasons"]


def test_cpu_reinterprets_in_place_and_calls_pocketfft():
    exe = _check(SPECTRAL, "cpu")
    steps = [s.kind for s in exe.plan.steps]
    assert steps.count("extern") == 2  # fft_r2c, fft_c2r
    assert "view-copy" not in steps  # every view_as_real/view_as_complex read its buffer in place


def test_nki_sim_runs_the_ffts_as_matmul_kernels():
    exe = _check(SPECTRAL, "nki-sim")
    host = [s for s in exe.plan.steps if s.kind == "host"]
    assert not any("fft" in s.name for s in host)  # the transforms are DFT matmuls on the device


def test_strided_complex_input_and_a_pair_layout_that_needs_a_copy():
    # a transposed c64 input (view_as_real of it is strided), and view_as_complex of pairs whose last dimension
    # is not adjacent in memory (a permuted f32 tensor): the launcher copies instead of reinterpreting
    text = """
func @layouts(%c: tensor<3x4xc64, strides=[1, 3]>, %p: tensor<2x3x2xf32, strides=[1, 4, 2]>) -> (tensor<3x4xc64>, tensor<3x2xf32>) {
  %0 = mul %c, %c : tensor<3x4xc64>
  %1 = view_as_complex %p : tensor<2x3xc64>
  %2 = permute %1 {dims = [1, 0]} : tensor<3x2xc64>
  %3 = abs %2 : tensor<3x2xf32>
  return %0, %3
}"""
    rng = np.random.default_rng(0)
    c = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np.complex64).T
    p = np.transpose(rng.standard_normal((2, 3, 2)).astype(np.float32).copy(order="F"), (0, 1, 2))
    p = np.lib.stride_tricks.as_strided(np.arange(16, dtype=np.float32), (2, 3, 2), (4, 16, 8))
    fn = parse(text)
    assert fn.params[0].type == TensorType((3, 4), fn.params[0].type.dtype, (1, 3))
    _check(text, "cpu", [c, np.array(p)])
