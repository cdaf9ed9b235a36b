"""layout: transposes fold into matmul flags, top-level views get their strides, NKI partition dims."""

import numpy as np
import pytest
from hypothesis import given

from neuroncc.ir import Builder, DType, TensorType, parse
from neuroncc.passes import ChooseLayouts, run_pipeline
from neuroncc.ir.strides import reshape_strides
from neuroncc.ir.view_windows import StridedView, apply_view
from neuroncc.testing import models
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

F32 = DType.f32


def test_permutes_fold_into_matmul_flags():
    fn = parse("""func @f(%a: tensor<8x4xf32>, %b: tensor<5x8xf32>, %c: tensor<2x6x3xf32>, %d: tensor<2x3x6xf32>, %bias: tensor<5xf32>) -> (tensor<4x5xf32>, tensor<2x3x3xf32>, tensor<4x5xf32>) {
  %at = permute %a {dims = [1, 0]} : tensor<4x8xf32>
  %bt = permute %b {dims = [1, 0]} : tensor<8x5xf32>
  %0 = mm %at, %bt : tensor<4x5xf32>
  %ct = permute %c {dims = [0, 2, 1]} : tensor<2x3x6xf32>
  %dt = permute %d {dims = [0, 2, 1]} : tensor<2x6x3xf32>
  %1 = bmm %ct, %dt : tensor<2x3x3xf32>
  %2 = addmm %bias, %at, %bt : tensor<4x5xf32>
  return %0, %1, %2
}""")
    out = assert_pass_preserves_semantics(ChooseLayouts(), fn)
    flags = {op.name: (op.attrs["transpose_a"], op.attrs["transpose_b"]) for op in out.ops if "mm" in op.name}
    assert flags == {"mm": (True, True), "bmm": (True, True), "addmm": (True, True)}
    assert [op.operands for op in out.ops if op.name == "mm"] == [fn.params[:2]]
    assert not any(op.name == "permute" for op in out.ops)  # dead once folded


def test_transposes_fold_inside_kernels_too():
    fn = run_pipeline("fuse,layout", models.transformer_block(seq=8, d_model=16, heads=2))
    for op in fn.walk():
        if op.name in ("mm", "addmm"):
            assert op.attrs["transpose_b"]
    assert sum(op.name == "bmm" and op.attrs["transpose_b"] for op in fn.walk()) == 1  # q @ k^T


def test_top_level_views_get_the_strides_of_their_window():
    b = Builder("f")
    x, w = b.param(TensorType((6, 4), F32)), b.param(TensorType((3, 4), F32))
    window = b.op("slice", x, dim=0, start=0, end=6, step=2)
    fn = b.build([b.op("mm", w, b.op("permute", window, dims=(1, 0)), transpose_b=False)])
    out = assert_pass_preserves_semantics("fuse,layout{fold_transposes=false}", fn)
    types = {op.name: op.result.type for op in out.ops}
    assert types["slice"].strides == (8, 1)
    assert types["permute"].strides == (1, 8)


def test_nki_partition_dim_avoids_reduced_dims():
    column_sum = parse("""func @f(%x: tensor<512x64xf32>) -> (tensor<64xf32>) {
  %0 = exp %x : tensor<512x64xf32>
  %1 = sum %0 {dims = [0]} : tensor<64xf32>
  return %1
}""")
    out = run_pipeline("fuse,layout{target=trn2}", column_sum)
    assert out.ops[0].attrs["partition_dim"] == 1 and out.ops[0].attrs["domain"] == (512, 64)
    row_softmax = run_pipeline("fuse,layout{target=trn1}", models.softmax_graph(rows=64, cols=256))
    assert row_softmax.ops[0].attrs["partition_dim"] == 0
    total = parse("""func @f(%x: tensor<8x8xf32>) -> (tensor<f32>) {
  %0 = exp %x : tensor<8x8xf32>
  %1 = sum %0 {dims = [0, 1]} : tensor<f32>
  return %1
}""")
    # a terminal total: per-partition partial sums add up across partitions
    assert run_pipeline("fuse,layout{target=trn3}", total).ops[0].attrs["partition_dim"] == 0
    vector_softmax = run_pipeline("fuse,layout{target=trn3}", models.softmax_graph(rows=1, cols=64))
    assert vector_softmax.ops[0].attrs["partition_dim"] is None  # the one row is reduced and read again
    cpu = run_pipeline("fuse,layout{target=cpu}", column_sum)
    assert cpu.ops[0].attrs["partition_dim"] is None  # only NKI targets lay out partitions


def _strided(shape, strides):
    base = np.arange(1000, dtype=np.float32)
    return np.lib.stride_tricks.as_strided(base, shape, [s * 4 for s in strides])


@pytest.mark.parametrize("shape,strides,new_shape", [
    ((2, 3, 4), (12, 4, 1), (6, 4)), ((2, 3, 4), (12, 4, 1), (24,)), ((4, 3), (1, 4), (12,)),
    ((4, 3), (1, 4), (2, 2, 3)), ((2, 1, 3), (3, 3, 1), (2, 3)), ((3, 4), (8, 1), (3, 2, 2)),
    ((3, 4), (8, 1), (12,)), ((2, 3), (0, 1), (6,)), ((), (), (1, 1)), ((1,), (1,), ()),
])
def test_reshape_strides_agree_with_numpy_views(shape, strides, new_shape):
    source = _strided(shape, strides)
    found = reshape_strides(shape, strides, new_shape)
    try:
        expected = source.reshape(new_shape, copy=False)
    except ValueError:
        assert found is None
        return
    if found is None:
        pytest.fail(f"numpy views {shape}/{strides} as {new_shape} in place but reshape_strides refused")
    np.testing.assert_array_equal(_strided(new_shape, found), expected)


def test_apply_view_offsets_for_slice_and_select():
    b = Builder("f")
    x = b.param(TensorType((4, 5), F32))
    sliced = b.op("slice", x, dim=1, start=1, end=5, step=2)
    picked = b.op("select", x, dim=0, index=2)
    fn = b.build([sliced, picked])
    base = StridedView.contiguous((4, 5))
    assert apply_view(fn.ops[0], base) == StridedView((4, 2), (5, 2), 1)
    assert apply_view(fn.ops[1], base) == StridedView((5,), (1,), 10)


@given(graphs())
def test_layout_preserves_semantics(fn):
    assert_pass_preserves_semantics("layout", fn, seeds=(0,))
    assert_pass_preserves_semantics("fuse,layout{target=trn2}", fn, seeds=(0,))
