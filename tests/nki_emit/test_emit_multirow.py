"""Several rows per partition (neuroncc/codegen/nki/multirow.py): row-wise kernels over short rows load
``[128, k, row]`` tiles so each DMA run reaches 4 KiB, and must still match the reference interpreter.

Row counts that are multiples of 128 * k (whole blocks), that leave a partial last block of row groups, that
only divide by a smaller k, and that do not divide at all (one row per partition)."""

from __future__ import annotations

import numpy as np
import pytest

from emit_helpers import BF16, F32, I32, check_against_interpreter, compile_nki, graph, random_inputs
from neuroncc.codegen.nki import stages
from neuroncc.testing.models import layer_norm_graph, softmax_graph


def _row_sum(rows: int, cols: int, dtype):
    b, (x,) = graph("row_sum", ((rows, cols), dtype))
    return b.build([b.op("sum", x, dims=[1], keepdim=False)])


#: (rows, cols, dtype, rows per partition expected): f32 rows of 128 (512 B) want k = 8; bf16 rows of 1024
#: (2 KiB) want k = 2.
SHAPES = [
    (1024, 128, F32, 8),   # 1024 = 128 * 8: whole blocks
    (1032, 128, F32, 8),   # 129 groups of 8: a partial last block
    (1028, 128, F32, 4),   # divides by 4, not 8
    (1030, 128, F32, 2),   # divides by 2 only
    (1031, 128, F32, 1),   # odd: one row per partition
    (384, 128, F32, 2),    # 3 whole blocks of rows, but 192 groups of 2: a partial last block appears
    (264, 1024, BF16, 2),  # 132 groups of 2: a partial last block
    (256, 1024, BF16, 2),  # whole block
]


@pytest.mark.parametrize("make", [softmax_graph, layer_norm_graph, _row_sum], ids=["softmax", "layernorm", "sum"])
@pytest.mark.parametrize("rows,cols,dtype,k", SHAPES, ids=[f"{r}x{c}_{d.value}" for r, c, d, _ in SHAPES])
def test_multirow_kernels_match_the_interpreter(make, rows, cols, dtype, k, monkeypatch):
    fn = make(rows, cols, dtype)
    rng = np.random.default_rng(rows + cols)
    inputs = random_inputs(fn, rng)
    # bf16 LayerNorm rounds its statistics to bf16 like the one-row layout does (a few ulps from the reference)
    atol = 0.07 if dtype is BF16 and make is layer_norm_graph else None
    exe = check_against_interpreter(fn, rng, inputs=inputs, atol=atol)
    source = exe.program.source
    if k > 1:
        assert f"({k} consecutive rows per partition)" in source
        assert f"reshape(({rows // k}, {k}, {cols}))" in source
    else:
        assert "consecutive rows per partition" not in source
    # the same instructions on the same rows: bit-identical to one row per partition
    monkeypatch.setattr(stages, "rows_per_partition", lambda *args: 1)
    single = compile_nki(fn)
    assert "consecutive rows per partition" not in single.program.source
    for got, want in zip(exe(*inputs), single(*inputs)):
        np.testing.assert_array_equal(got, want)


def test_long_rows_keep_one_row_per_partition():
    exe = compile_nki(softmax_graph(256, 1024, F32))  # 4 KiB rows already reach full DMA bandwidth
    assert "consecutive rows per partition" not in exe.program.source


def test_few_rows_keep_the_partitions_full():
    exe = compile_nki(softmax_graph(200, 128, F32))  # 200 rows / 2 would leave partitions idle
    assert "consecutive rows per partition" not in exe.program.source


def _softmax_3d(dtype):
    from neuroncc.testing.models import softmax
    b, (x,) = graph("softmax_3d", ((2, 512, 64), dtype))
    return b.build([softmax(b, x, dim=2)])


def _select_by_row_max(dtype):
    b, (x,) = graph("select_rows", ((1024, 128), dtype))
    peak = b.op("amax", x, dims=[1], keepdim=True)
    zero = b.op("full", shape=[], value=0.0, dtype=dtype)
    return b.build([b.op("where", b.op("gt", x, zero), x, b.op("mul", x, peak))])


def _weighted_row_sum(dtype):
    b, (x, w) = graph("weighted", ((1024, 128), dtype), ((1024, 1), dtype))
    return b.build([b.op("sum", b.op("mul", x, w), dims=[1], keepdim=False), b.op("exp", x)])


def _int_row_sum(dtype):
    b, (x,) = graph("int_rows", ((1024, 128), I32))
    return b.build([b.op("sum", x, dims=[1], keepdim=True)])


#: (graph, rows per partition expected): 3-D rows merged to [1024, 64], a select reading a row statistic, a
#: per-row column operand with an elementwise second output, integer rows.
ASSORTED = [(_softmax_3d, 8), (_select_by_row_max, 8), (_weighted_row_sum, 8), (_int_row_sum, 8)]


@pytest.mark.parametrize("make,k", ASSORTED, ids=[m.__name__.strip("_") for m, _ in ASSORTED])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_assorted_row_stages_match_one_row_per_partition(make, k, dtype, monkeypatch):
    fn = make(dtype)
    rng = np.random.default_rng(7)
    inputs = random_inputs(fn, rng)
    exe = check_against_interpreter(fn, rng, inputs=inputs)
    assert "consecutive rows per partition" in exe.program.source
    monkeypatch.setattr(stages, "rows_per_partition", lambda *args: 1)
    single = compile_nki(fn)
    for got, want in zip(exe(*inputs), single(*inputs)):
        np.testing.assert_array_equal(got, want)
