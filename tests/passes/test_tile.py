"""tile: NKI tiles respect partitions, PSUM and the SBUF budget of each generation; CPU row blocks."""

import math

import pytest
from hypothesis import given

from neuroncc.errors import PassError
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import PassContext, Tile, run_pipeline
from neuroncc.passes.targets import NKI_TARGETS
from neuroncc.passes.tile import live_tile_bytes
from neuroncc.testing import models
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

F32 = DType.f32


def kernels(fn):
    return [op for op in fn.ops if op.name == "kernel"]


def normalize_rows(cols: int):
    b = Builder("normalize_rows")
    x = b.param(TensorType((256, cols), DType.bf16), "x")
    return b.build([b.op("div", x, b.op("sum", x, dims=(1,), keepdim=True))])


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_nki_tiles_fit_the_hardware(target):
    hw = NKI_TARGETS[target]
    fn = run_pipeline(f"canonicalize,fuse,layout{{target={target}}},tile{{target={target}}}",
                      models.transformer_block(batch=2))
    for kernel in kernels(fn):
        a = kernel.attrs
        assert a["target"] == target and len(a["tile"]) == len(a["domain"])
        assert all(1 <= t <= max(d, 1) for t, d in zip(a["tile"], a["domain"]))
        if a["partition_dim"] is not None:
            assert a["tile"][a["partition_dim"]] <= hw.partitions
        assert 0 < a["sbuf_bytes"] <= hw.sbuf_partition_bytes
        if a["matmul_tile"]:
            m, n, k = a["matmul_tile"]
            assert m <= hw.stationary_free and n <= hw.psum_free_fp32 and k <= hw.contraction


def test_sbuf_budget_differs_per_generation():
    # rows of 50000 bf16 values and their normalized copy: 200 KB per partition, more than trn1's 192 KiB
    fn = run_pipeline("fuse", normalize_rows(50000))
    with pytest.raises(PassError, match="needs 200002 bytes of SBUF per partition; trn1 has 196608"):
        Tile(target="trn1").apply(fn, PassContext())
    (kernel,) = kernels(Tile(target="trn2").apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (128, 50000) and kernel.attrs["sbuf_bytes"] == 200002


def test_terminal_reductions_accumulate_across_tiles():
    b = Builder("sums")
    x = b.param(TensorType((256, 50000), F32), "x")
    fn = run_pipeline("fuse", b.build([b.op("sum", x, dims=(1,)), b.op("sum", x, dims=(0,))]))
    (kernel,) = kernels(Tile(target="trn1").apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (128, 2048)


def test_free_tiles_shrink_until_the_live_tiles_fit():
    b = Builder("wide")
    x = b.param(TensorType((128, 1 << 20), F32), "x")
    fn = run_pipeline("fuse", b.build([b.op("tanh", b.op("exp", x))]))
    (kernel,) = kernels(Tile(target="trn1").apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (128, 2048)
    assert kernel.attrs["sbuf_bytes"] == live_tile_bytes(kernel.regions[0], (128, 1 << 20), (128, 2048), 0)


def test_fixed_tiles_are_checked():
    fn = run_pipeline("fuse", models.softmax_graph(rows=256, cols=1024))
    (kernel,) = kernels(Tile(target="trn2", tile=(64, 256)).apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (64, 1024)  # the reduced dim is never split
    with pytest.raises(PassError, match="partition tile 256 exceeds the 128 partitions"):
        Tile(target="trn2", tile=(256, 128)).apply(fn, PassContext())
    b = Builder("mm")
    x, w = b.param(TensorType((256, 64), F32)), b.param(TensorType((64, 2048), F32))
    mm = run_pipeline("fuse", b.build([b.op("relu", b.op("mm", x, w))]))
    with pytest.raises(PassError, match="matmul free tile 1024 exceeds one PSUM bank"):
        Tile(target="trn2", tile=(128, 1024)).apply(mm, PassContext())
    (kernel,) = kernels(Tile(target="trn2", tile=(128, 256)).apply(mm, PassContext()))
    assert kernel.attrs["matmul_tile"] == (128, 256, 64)
    with pytest.raises(PassError, match="more than the L2 budget"):
        Tile(target="cpu", tile=(512, 1024), l2_bytes=1 << 20).apply(fn, PassContext())


def test_cpu_row_blocks_fit_l1_and_record_the_vector_width():
    fn = run_pipeline("fuse,tile{target=cpu vector_width=16}", models.layer_norm_graph(rows=512, cols=256))
    (kernel,) = kernels(fn)
    a = kernel.attrs
    assert a["vector_width"] == 16 and a["domain"] == (512, 256)
    rows, cols = a["tile"]
    assert cols == 256 and rows == 2 ** int(math.log2(rows))
    assert live_tile_bytes(kernel.regions[0], a["domain"], a["tile"], None) <= 32 * 1024
    assert live_tile_bytes(kernel.regions[0], a["domain"], (rows * 2, cols), None) > 32 * 1024


@given(graphs())
def test_tiling_changes_no_result(fn):
    for target in ("cpu", "trn2"):
        out = assert_pass_preserves_semantics(f"fuse,tile{{target={target}}}", fn, seeds=(0,))
        for kernel in kernels(out):
            assert len(kernel.attrs["tile"]) == len(kernel.attrs["domain"])
