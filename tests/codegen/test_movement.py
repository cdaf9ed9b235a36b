"""Movement, indexing and creation ops through the LLVM path, on parameters and on computed values."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.ir import Builder, DenseAttr, DType, TensorType
from neuroncc.executors.cpu.launcher import KernelIndexError, build_cpu_executable


@pytest.mark.parametrize("computed", [False, True])
def test_views_and_data_movement(computed, rng):
    b = Builder("movement")
    p = b.param(TensorType((4, 6, 5), DType.f32), "x")
    x = b.op("neg", p) if computed else p
    outs = [
        b.op("reshape", x, shape=(24, 5)), b.op("reshape", x, shape=(2, 60)), b.op("permute", x, dims=(2, 0, 1)),
        b.op("reshape", x, shape=(4, 3, 2, 5)), b.op("reshape", x, shape=(120,)), b.op("reshape", x, shape=(1, 4, 30, 1)),
        b.op("reshape", b.op("permute", x, dims=(0, 2, 1)), shape=(20, 6)),
        b.op("expand", b.op("slice", x, dim=0, start=1, end=2), shape=(3, 4, 6, 5)),
        b.op("slice", x, dim=1, start=1, end=6, step=2), b.op("select", x, dim=2, index=3),
        b.op("squeeze", b.op("unsqueeze", x, dim=1), dims=(1,)), b.op("unsqueeze", x, dim=3),
        b.op("cat", x, b.op("exp", x), dim=1), b.op("cat", x, x, x, dim=2),
        b.op("constant_pad", x, pad=(1, 2, 0, 1), value=-7.0), b.op("constant_pad", x, pad=(-1, -2)),
        b.op("copy", x), b.op("flip", x, dims=(0, 2)), b.op("repeat", x, repeats=(2, 1, 1, 2)),
        b.op("as_strided", x, shape=(3, 4), strides=(7, 2), offset=5),
        b.op("slice_scatter", x, b.op("full", shape=(4, 2, 5), dtype=DType.f32, value=9.0), dim=1, start=1, end=5,
             step=2),
        b.op("select_scatter", x, b.op("full", shape=(4, 5), dtype=DType.f32, value=3.0), dim=1, index=4),
    ]
    outs += list(b.op("split", x, dim=1, sizes=(2, 4)))
    run_both(b.build(outs), [rng.standard_normal((4, 6, 5)).astype(np.float32)])


def test_strided_views_of_parameters_read_in_place(rng):
    b = Builder("views")
    x = b.param(TensorType((6, 8), DType.f32), "x")
    t = b.op("permute", x, dims=(1, 0))
    s = b.op("slice", t, dim=0, start=1, end=8, step=3)
    outs = [b.op("add", s, b.op("expand", b.op("select", x, dim=1, index=0), shape=(3, 6))),
            b.op("mul", b.op("reshape", t, shape=(2, 4, 6)), 2 and b.op("full", shape=(), dtype=DType.f32, value=2.0))]
    run_both(b.build(outs), [rng.standard_normal((6, 8)).astype(np.float32)])


def test_index_ops(rng):
    b = Builder("index")
    x = b.param(TensorType((5, 7), DType.f32), "x")
    gi = b.param(TensorType((5, 3), DType.i64), "gi")
    si = b.param(TensorType((2, 7), DType.i64), "si")
    src = b.param(TensorType((3, 7), DType.f32), "src")
    rows = b.param(TensorType((4,), DType.i32), "rows")
    ids = b.param(TensorType((2, 3), DType.i64), "ids")
    i0 = b.param(TensorType((3,), DType.i64), "i0")
    i1 = b.param(TensorType((2, 1), DType.i64), "i1")
    vals = b.param(TensorType((3,), DType.f32), "vals")
    outs = [
        b.op("gather", x, gi, dim=1), b.op("index_select", x, rows, dim=0), b.op("index_select", x, rows, dim=1),
        b.op("embedding", x, ids), b.op("index", x, i0, dims=(1,)), b.op("index", x, i1, i0, dims=(0, 1)),
        b.op("scatter", x, si, src, dim=0), b.op("scatter", x, si, src, dim=0, reduce="add"),
        b.op("index_put", x, b.op("unsqueeze", vals, dim=1), i0, dims=(0,)),
        b.op("index_put", x, vals, i0, i0, dims=(0, 1), accumulate=True),
        b.op("add", b.op("embedding", b.op("exp", x), ids), b.op("full", shape=(7,), dtype=DType.f32, value=1.0)),
    ]
    inputs = [rng.standard_normal((5, 7)).astype(np.float32), rng.integers(-7, 7, (5, 3)),
              rng.integers(-5, 5, (2, 7)), rng.standard_normal((3, 7)).astype(np.float32),
              np.array([4, 0, -1, 2], np.int32), np.array([[0, 4, 1], [-2, 3, 3]]), np.array([1, -1, 1]),
              np.array([[0], [4]]), np.array([1.0, 2.0, 3.0], np.float32)]
    run_both(b.build(outs), inputs)


def test_out_of_range_index_raises_typed_error():
    b = Builder("oob")
    w = b.param(TensorType((4, 3), DType.f32), "w")
    i = b.param(TensorType((2,), DType.i64), "i")
    exe = build_cpu_executable(b.build([b.op("embedding", w, i)]), {"threads": 1})
    w0 = np.ones((4, 3), np.float32)
    assert exe.stats["interpreted_kernels"] == 0
    with pytest.raises(KernelIndexError, match="embedding"):
        exe(w0, np.array([1, 4]))
    np.testing.assert_array_equal(exe(w0, np.array([1, -4]))[0], np.ones((2, 3), np.float32))  # recovers


def test_out_of_range_gather_index_raises_typed_error():
    # gather wrapped an index out of range modulo the size (a silently wrong value; eager and the interpreter raise)
    b = Builder("gather_oob")
    x = b.param(TensorType((4, 4), DType.f32), "x")
    i = b.param(TensorType((1, 2), DType.i64), "i")
    exe = build_cpu_executable(b.build([b.op("gather", x, i, dim=1)]), {"threads": 1})
    x0 = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert exe.stats["interpreted_kernels"] == 0
    for bad in ([[9, 0]], [[0, -5]]):
        with pytest.raises(KernelIndexError, match="gather"):
            exe(x0, np.array(bad))
    np.testing.assert_array_equal(exe(x0, np.array([[3, -1]]))[0], [[3.0, 3.0]])  # recovers; -1 counts from the end


def test_creation_ops_and_constants():
    b = Builder("create")
    x = b.param(TensorType((3, 70), DType.f32), "x")
    big = DenseAttr(np.arange(210, dtype=np.float32).reshape(3, 70) / 7)
    outs = [b.op("iota", length=11, start=2, step=3, dtype=DType.i64),
            b.op("iota", length=5, start=0.5, step=0.25, dtype=DType.f32),
            b.op("iota", length=9, start=4, step=-3, dtype=DType.i32),  # integer arithmetic, negative values
            b.op("iota", length=4, start=-1, step=1, dtype=DType.bool),
            b.op("iota", length=6, start=0.5, step=1.5, dtype=DType.i64),  # not integral: through float64
            b.op("iota", length=7, start=3, step=2, dtype=DType.f32),
            b.op("full", shape=(2, 3), dtype=DType.bool, value=1),
            b.op("add", x, b.op("constant", value=big)),
            b.op("mul", x, b.op("constant", value=DenseAttr(np.array(2.5, np.float32)))),
            b.op("constant", value=DenseAttr(np.array([True, False, True])))]
    run_both(b.build(outs), [np.ones((3, 70), np.float32)])


def test_one_hot_compares_of_an_iota_hold_for_every_label():
    # an integer iota whose values f32 holds exactly is compared with an int64 as floats (8 lanes on AVX2, see
    # elementwise.narrow_equality): labels outside the iota's range (negative, at its length, at 2**24, beyond
    # 2**32 with the iota's low bits) must compare unequal, labels inside equal at their one position
    labels = np.array([0, 3, 999, 1000, -1, -100, 2**24, 2**24 + 5, 2**32 + 5, 2**63 - 1, -(2**63), 998],
                      np.int64).reshape(-1, 1)
    b = Builder("one_hot")
    target = b.param(TensorType(labels.shape, DType.i64), "target")
    scale = b.param(TensorType((labels.shape[0], 1), DType.f32), "scale")
    classes = b.op("unsqueeze", b.op("iota", length=1000, dtype=DType.i64), dim=0)
    shifted = b.op("unsqueeze", b.op("iota", length=1000, start=5, step=3, dtype=DType.i64), dim=0)
    wide = b.op("unsqueeze", b.op("iota", length=8, start=2**24 - 4, dtype=DType.i64), dim=0)  # not exact in f32
    hot = b.op("eq", classes, target)
    minus = b.op("where", hot, b.op("full", shape=(), dtype=DType.f32, value=-1.0),
                 b.op("full", shape=(), dtype=DType.f32, value=0.0))
    outs = [hot, b.op("ne", target, classes), b.op("eq", shifted, target), b.op("ne", shifted, target),
            b.op("eq", wide, target), b.op("sum", b.op("mul", minus, scale), dims=(1,))]
    scales = np.linspace(0.5, 2.0, labels.shape[0], dtype=np.float32).reshape(-1, 1)
    _, got = run_both(b.build(outs), [labels, scales])
    classes_np = np.arange(1000)
    np.testing.assert_array_equal(got[0], classes_np == labels)  # 0, 3, 999 and 517 at their positions
    np.testing.assert_array_equal(got[2], 5 + 3 * classes_np == labels)
    assert got[0].sum() == 4 and got[2].sum() == 1 and got[4].sum() == 1  # 998 = 5 + 3 * 331; 2**24
