"""Kernels written from the API reference with one mistake each: the error names the rule and the kernel's
own line (as NKI's compiler reports it), not a line inside the simulator."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl
from neuroncc.nki import NKISimulationError


def _line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@nki.jit
def exp_of_256_partitions(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)  # mistake: 256 partitions
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def matmul_into_two_psum_banks(a, b):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    bt = nl.load(b)
    acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=at, moving=bt)  # mistake: N = 1024 > 512
    nl.store(out, acc)
    return out


@nki.jit
def store_psum_with_dma(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=nl.load(a), moving=nl.load(b))
    nisa.dma_copy(dst=out, src=acc)  # mistake: DMA cannot read PSUM
    return out


@nki.jit
def add_of_mismatched_tiles(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=nl.load(a), data2=nl.load(b[:, 0:256]), op=nl.add)  # mistake: shapes
    nl.store(out, s)
    return out


@nki.jit
def load_indexed_by_a_tile(a, idx):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    i_f = nl.arange(512)[None, :]
    nl.store(out, nl.load(a[rows, i_f]))  # indirect DMA: not simulated
    return out


A = np.ones((128, 128), dtype=np.float32)
B = np.ones((128, 1024), dtype=np.float32)


@pytest.mark.parametrize("kernel, args, message, text", [
    (exp_of_256_partitions, (np.ones((256, 64), np.float32),), "dma_copy dst partition dimension 256 exceeds maximum 128",
     "mistake: 256"),
    (matmul_into_two_psum_banks, (A, B), "nc_matmul moving free dimension 1024 exceeds maximum 512", "mistake: N"),
    (store_psum_with_dma, (A, B[:, :512]), "got a tile in 'psum' instead", "mistake: DMA"),
    (add_of_mismatched_tiles, (B[:, :512], B[:, :512]), "data2 shape (128, 256) does not match data1 shape (128, 512)",
     "mistake: shapes"),
    (load_indexed_by_a_tile, (B[:, :512], np.zeros((64, 1), np.int32)), "indirect DMA", "indirect DMA"),
])
def test_a_broken_rule_names_the_kernel_line(kernel, args, message, text):
    with pytest.raises(NKISimulationError) as caught:
        kernel(*args)
    assert message in str(caught.value)
    assert f"at {__file__}:{_line_of(kernel, text)} in {kernel.__name__}" in str(caught.value)


@nki.jit
def top8_of_rows(a):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.max8(src=nl.load(a)))  # not simulated
    return out


@nki.jit
def random_tile(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.rand((128, 512), dtype=nl.float32))  # not simulated
    return out


@pytest.mark.parametrize("kernel, name", [(top8_of_rows, "nki.isa.max8"), (random_tile, "nki.language.rand")])
def test_an_unsupported_nki_api_is_a_typed_error_at_the_kernel_line(kernel, name):
    with pytest.raises(nki.NKIUnsupportedError, match=f"{name} is not supported by neuroncc's NKI simulator") as caught:
        kernel(A)
    assert f"at {__file__}:{_line_of(kernel, 'not simulated')} in {kernel.__name__}" in str(caught.value)


def test_names_nki_does_not_have_stay_attribute_errors():
    assert not hasattr(nisa, "no_such_instruction") and not hasattr(nl, "no_such_function")
    from neuroncc.nki.isa import max8  # an unsupported API imports; only calling it fails
    assert max8.__name__ == "max8"
