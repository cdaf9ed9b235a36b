"""Transposing map phases (codegen/llvm/transpose.py): blocked order, in-register transposes, exact results.

Every case is a transpose plus exact elementwise ops, so the native result must equal the interpreter's bit
for bit. The shapes reach each copy route: whole blocks of rows and whole squares of columns (vector
transposes), a short last block of rows (static: one block; dynamic: the tail after full blocks), and column
chunks that are not whole squares (element by element).
"""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.kernel_plan import TransposedMap
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.ir import Builder, DType, TensorType, interpret, round_to_bf16
from neuroncc.executors.cpu.launcher import build_cpu_executable


def _plan(fn):
    region = fn.ops[0].regions[0]
    n = len(region.params)
    return plan_kernel(region, [Layout.of(k, p.type) for k, p in enumerate(region.params)],
                       [Layout.of(n + k, v.type) for k, v in enumerate(region.outputs)])


def _transposed(fn) -> list[bool]:
    """Per phase of the graph's one kernel: whether it runs in the blocked transposed order."""
    return [isinstance(phase, TransposedMap) for phase in _plan(fn).phases]


def _shuffles(fn) -> int:
    """shufflevector instructions in the kernel's LLVM IR (the in-register transposes: none elsewhere)."""
    texts, _ = emit_kernel(_plan(fn), "k")
    return sum(text.count("shufflevector") for text in texts)


def _inputs(rng, fn):
    arrays = []
    for p in fn.params:
        shape, dtype = p.type.shape, p.type.dtype
        if dtype is DType.i64:
            arrays.append(rng.integers(-(1 << 40), 1 << 40, shape).astype(np.int64))
        elif dtype is DType.bf16:
            arrays.append(round_to_bf16(rng.standard_normal(shape).astype(np.float32)))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def _check_exact(fn, rng, threads=2):
    inputs = _inputs(rng, fn)
    exe = build_cpu_executable(fn, {"threads": threads})
    assert exe.stats["interpreted_kernels"] == 0, exe.stats["interpreted_reasons"]
    for got, want in zip(exe(*inputs), interpret(fn, inputs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def transpose_graph(shape, dtype=DType.f32, op="neg"):
    """x [..., K, M] -> op(copy(x.transpose(-1, -2))) [..., M, K]."""
    b = Builder("transpose")
    x = b.param(TensorType(tuple(shape), dtype), "x")
    dims = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
    t = b.op("copy", b.op("permute", x, dims=dims))
    y = b.op(op, t) if op == "neg" else b.op(op, t, t)
    return fuse_whole_function(b.build([y]))


def broadcast_graph(k, m, batch):
    """x [K, M] transposed, plus a bias along the output's rows, broadcast against [batch, M, K]."""
    b = Builder("transpose_broadcast")
    x = b.param(TensorType((k, m), DType.f32), "x")
    bias = b.param(TensorType((k,), DType.f32), "bias")
    z = b.param(TensorType((batch, m, k), DType.f32), "z")
    t = b.op("add", b.op("permute", x, dims=(1, 0)), bias)
    return fuse_whole_function(b.build([b.op("mul", z, t)]))


@pytest.mark.parametrize("shape, dtype, op", [
    ((37, 53), DType.f32, "neg"),  # sizes that are no multiple of anything: every copy element by element
    ((64, 520), DType.f32, "add"),  # 520 rows: 8 blocks of 4 squares (64 rows) and a dynamic tail of 8
    ((128, 88), DType.f32, "add"),  # 88 rows: blocks of one square (few rows), a dynamic tail; 2 chunks
    ((100, 64), DType.f32, "neg"),  # 100 columns: a whole chunk and a partial one (element by element)
    ((8, 48, 12), DType.f32, "add"),  # batched; 12 rows: one static short block per batch item
    ((2, 96, 72), DType.f32, "mul"),  # batched, full and tail blocks, whole squares
    ((48, 80), DType.bf16, "add"),  # bf16 (stored as f32): 16-lane squares, a 48-column chunk
    ((40, 72), DType.i64, "add"),  # i64: 8-lane squares
    ((40, 300), DType.i64, "add"),  # i64: blocks of 4 squares (32 rows), a dynamic tail of 12
    ((23, 41), DType.i64, "neg"),
])
def test_transpose_matches_interpreter_bit_exactly(shape, dtype, op, rng):
    fn = transpose_graph(shape, dtype, op)
    assert _transposed(fn) == [True]
    _check_exact(fn, rng)


def test_transpose_single_thread_and_larger(rng):
    fn = transpose_graph((256, 320), DType.f32, "neg")
    assert _transposed(fn) == [True]
    _check_exact(fn, rng, threads=1)
    _check_exact(fn, rng, threads=2)


def test_transpose_under_a_broadcast(rng):
    fn = broadcast_graph(40, 70, 3)
    assert _transposed(fn) == [True]
    _check_exact(fn, rng)


def test_blocks_shrink_to_keep_the_threads_busy():
    assert [p.block for p in _plan(transpose_graph((64, 4096))).phases] == [64]  # 4 squares of 16 rows
    assert [p.block for p in _plan(transpose_graph((64, 128))).phases] == [32]  # 4 blocks of 2 squares
    assert [p.block for p in _plan(transpose_graph((64, 48))).phases] == [16]  # 3 blocks of one square
    assert [p.block for p in _plan(transpose_graph((64, 4096), DType.i64)).phases] == [32]


def test_whole_blocks_use_in_register_transposes():
    assert _shuffles(transpose_graph((128, 64))) > 0
    assert _shuffles(transpose_graph((37, 53))) == 0  # no whole square: element by element


def test_non_transposing_kernels_keep_the_plain_order(rng):
    b = Builder("plain")
    x = b.param(TensorType((64, 96), DType.f32), "x")
    bias = b.param(TensorType((96,), DType.f32), "bias")
    plain = fuse_whole_function(b.build([b.op("neg", b.op("add", x, bias))]))
    b = Builder("outer_permute")  # permutes leading dims only: the last dim still reads with unit stride
    x = b.param(TensorType((4, 8, 64), DType.f32), "x")
    outer = fuse_whole_function(b.build([b.op("neg", b.op("copy", b.op("permute", x, dims=(1, 0, 2))))]))
    for fn in (plain, outer):
        assert _transposed(fn) == [False]
        assert _shuffles(fn) == 0
        _check_exact(fn, rng)


def test_strided_output_rows_are_copied_element_by_element():
    fn = transpose_graph((128, 64))
    region = fn.ops[0].regions[0]
    (x,), (y,) = region.params, region.outputs
    m, k = y.type.shape
    column_major = Layout(1, 0, (m, k), (1, m), y.type.dtype)  # the output's rows are not unit-stride
    plan = plan_kernel(region, [Layout.of(0, x.type)], [column_major])
    assert isinstance(plan.phases[0], TransposedMap)
    texts, _ = emit_kernel(plan, "k")
    assert not any("shufflevector" in text for text in texts)
