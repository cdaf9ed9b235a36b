"""Extern mm/addmm: large float32 products go to oneDNN, the rest to ATen's BLAS call; both match torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuroncc.ir.dtypes import DType
from neuroncc.hardware.host import CpuTarget
from neuroncc.executors.cpu import extern

N = 128  # 128^3 multiply-adds: at the oneDNN threshold


@pytest.fixture(autouse=True)
def onednn_from_2m_macs(monkeypatch):
    """oneDNN from 2M multiply-adds (AVX-512's threshold) on any host, so these products take it here too."""
    monkeypatch.setattr(CpuTarget, "onednn_takes", lambda self, rows, depth, cols: rows * depth * cols >= 1 << 21)


def _operand(rng, shape, transposed):
    """A float32 array of ``shape`` stored transposed when asked (the layout pass's transpose_a/_b)."""
    array = rng.standard_normal(shape[::-1] if transposed else shape).astype(np.float32)
    return np.ascontiguousarray(array)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("bias_shape", [None, (N,), (1, N), (N, N)])
def test_matmul_paths_match_torch(transpose_a, transpose_b, bias_shape, monkeypatch):
    rng = np.random.default_rng(0)
    a, b = _operand(rng, (N, N), transpose_a), _operand(rng, (N, N), transpose_b)
    ta = torch.from_numpy(a).T if transpose_a else torch.from_numpy(a)
    tb = torch.from_numpy(b).T if transpose_b else torch.from_numpy(b)
    attrs = {"transpose_a": transpose_a, "transpose_b": transpose_b}
    if bias_shape is None:
        name, operands, expected = "mm", [a, b], ta @ tb
    else:
        bias = rng.standard_normal(bias_shape).astype(np.float32)
        name, operands, expected = "addmm", [bias, a, b], torch.from_numpy(bias) + ta @ tb
        attrs.update(alpha=1.0, beta=1.0)
    calls = []
    onednn = extern._onednn_matmul
    monkeypatch.setattr(extern, "_onednn_matmul", lambda *args: calls.append(1) or onednn(*args))
    out = np.empty((N, N), dtype=np.float32)
    extern.run_extern(name, attrs, operands, [out], DType.f32)
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-5, atol=1e-4)
    # a full [M, N] bias is not a oneDNN linear bias, and MKL is faster on a transposed first operand: ATen
    assert bool(calls) == (extern._onednn_available(torch) and bias_shape != (N, N) and not transpose_a)


def test_small_and_scaled_products_stay_on_aten(monkeypatch):
    monkeypatch.setattr(extern, "_onednn_matmul", lambda *args: pytest.fail("oneDNN used"))
    rng = np.random.default_rng(1)
    small = rng.standard_normal((16, 16)).astype(np.float32)
    out = np.empty((16, 16), dtype=np.float32)
    extern.run_extern("mm", {}, [small, small], [out], DType.f32)
    np.testing.assert_allclose(out, small @ small, rtol=1e-5, atol=1e-5)
    big = rng.standard_normal((N, N)).astype(np.float32)
    bias = rng.standard_normal((N,)).astype(np.float32)
    out = np.empty((N, N), dtype=np.float32)
    extern.run_extern("addmm", {"alpha": 2.0, "beta": 0.5}, [bias, big, big], [out], DType.f32)
    np.testing.assert_allclose(out, 0.5 * bias + 2.0 * (big @ big), rtol=1e-4, atol=1e-3)
