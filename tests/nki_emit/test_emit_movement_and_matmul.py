"""Views, data movement, matmuls (TensorE) and host steps, emitted and simulated, against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from emit_helpers import BF16, F32, I64, check_against_interpreter, graph
from neuroncc.executors.nki_sim.executable import NkiUnsupportedError


def test_views_read_in_place(rng):
    b, (x, y, z) = graph("views", ((4, 6, 5), F32), ((10, 12), F32), ((10, 1, 12), F32))
    permuted = b.op("exp", b.op("permute", x, dims=[2, 0, 1]))
    strided = b.op("exp", b.op("slice", y, dim=1, start=2, end=11, step=3))
    row = b.op("exp", b.op("select", y, dim=0, index=3))
    one = b.op("full", shape=[], dtype=F32, value=1.0)
    expanded = b.op("add", b.op("expand", z, shape=[10, 4, 12]), one)
    reshaped = b.op("exp", b.op("reshape", x, shape=[24, 5]))
    check_against_interpreter(b.build([permuted, strided, row, expanded, reshaped]), rng)


def test_a_transposed_read_feeding_a_reduction(rng):
    b, (x,) = graph("transposed", ((40, 300), F32))
    check_against_interpreter(b.build([b.op("sum", b.op("permute", x, dims=[1, 0]), dims=[1])]), rng)


def test_transfers(rng):
    b, (x, y, s, r) = graph("moves", ((4, 3), F32), ((4, 5), F32), ((6, 8), F32), ((6, 3), F32))
    ex, ey = b.op("exp", x), b.op("exp", y)
    outputs = [
        b.op("exp", b.op("cat", ex, ey, dim=1)),
        b.op("constant_pad", ex, pad=[1, 2, -1, 1], value=0.5),
        b.op("flip", b.op("exp", b.op("cat", ex, ex, dim=0)), dims=[0, 1]),
        b.op("slice_scatter", b.op("exp", s), r, dim=1, start=1, end=7, step=2),
        b.op("select_scatter", b.op("exp", s), b.op("exp", b.op("select", s, dim=0, index=1)), dim=0, index=2),
        b.op("repeat", ex, repeats=[2, 3, 2]),
        b.op("as_strided", ey, shape=[3, 3], strides=[5, 1], offset=2),
    ]
    check_against_interpreter(b.build(outputs), rng)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_mm_reads_either_layout(transpose_a, transpose_b, rng):
    m, k, n = 37, 300, 130
    b, (x, y) = graph("mm", ((k, m) if transpose_a else (m, k), F32), ((n, k) if transpose_b else (k, n), F32))
    fn = b.build([b.op("mm", x, y, transpose_a=transpose_a, transpose_b=transpose_b)])
    exe = check_against_interpreter(fn, rng, atol=1e-4)
    assert "nisa.nc_matmul" in exe.source
    assert ("nisa.nc_transpose" in exe.source) == (not transpose_a or transpose_b)


def test_blocked_matmul_with_partial_blocks(rng):
    """Several K blocks (an SBUF accumulator: K is more than 16 tiles), partial M, N and K tiles."""
    b, (x, y) = graph("mm", ((200, 2100), F32), ((2100, 600), F32))
    exe = check_against_interpreter(b.build([b.op("mm", x, y)]), rng, atol=5e-4)
    assert "nl.zeros(" in exe.source  # the fp32 accumulator across K blocks


def test_bmm_and_addmm_with_an_epilogue(rng):
    b, (x, y, c, p, q) = graph("mms", ((3, 20, 17), F32), ((3, 17, 9), F32), ((9,), F32), ((20, 17), F32),
                               ((9, 17), F32))
    batched = b.op("bmm", x, y)
    affine = b.op("addmm", c, p, q, alpha=0.5, beta=2.0, transpose_b=True)
    fused = b.op("gelu", b.op("addmm", c, p, q, transpose_b=True))
    check_against_interpreter(b.build([batched, affine, b.op("add", fused, affine)]), rng)


def test_bf16_matmul_with_residual(rng):
    b, (x, y, r) = graph("mm", ((64, 96), BF16), ((96, 80), BF16), ((64, 80), BF16))
    check_against_interpreter(b.build([b.op("add", b.op("mm", x, y), r)]), rng)


def test_host_steps_for_gathers_and_scatters(rng):
    b, (w, i, x, j) = graph("host", ((20, 8), F32), ((2, 5), I64), ((6, 5), F32), ((6, 1), I64))
    embedded = b.op("exp", b.op("embedding", w, i))
    picked = b.op("neg", b.op("gather", b.op("exp", x), j, dim=1))
    zeros = b.op("full", shape=[6, 5], dtype=F32, value=0.0)
    scattered = b.op("exp", b.op("scatter", zeros, j, picked, dim=1))
    largest = b.op("argmax", x, dim=1)
    exe = check_against_interpreter(b.build([embedded, picked, scattered, largest]), rng, integers=(0, 5))
    assert exe.stats["host_steps"] >= 4


def test_identity_outputs_and_empty_tensors(rng):
    b, (x, e) = graph("edges", ((3, 4), F32), ((0, 4), F32))
    exe = check_against_interpreter(b.build([x, x, b.op("exp", e), b.op("sum", e, dims=[0])]), rng)
    first, second, _, _ = exe(*[np.ones((3, 4), np.float32), np.ones((0, 4), np.float32)])
    assert first is not second  # every output is a fresh array


def test_too_wide_a_reduction_is_refused_with_its_sbuf_need(rng):
    b, (x,) = graph("wide", ((4, 200000), F32))
    with pytest.raises(NkiUnsupportedError, match="bytes of SBUF per partition"):
        check_against_interpreter(b.build([b.op("sum", x, dims=[1])]), rng)


def test_int64_arithmetic_and_integer_matmuls_run_exactly_on_the_host(rng):
    b, (x, y, i) = graph("int64", ((3, 4), I64), ((4, 2), I64), ((3, 4), I64))
    big = b.op("full", shape=[], dtype=I64, value=2 ** 40)
    shifted = b.op("add", x, big)  # beyond int32: exact on the host
    check_against_interpreter(b.build([b.op("mm", x, y), shifted, b.op("maximum", x, i), b.op("sum", i, dims=[1])]),
                              rng)


def test_argmax_of_a_zero_dim_tensor(rng):
    b, (x,) = graph("argmax0", ((), F32))
    check_against_interpreter(b.build([b.op("argmax", x, dim=0), b.op("exp", x)]), rng)
