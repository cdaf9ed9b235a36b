"""tile: the decisions the code generators obey, from each target's hardware facts.

NKI: partitions per block, the free block that fits the SBUF budget, matmul tiles and blocks. CPU: the
vector width (the host's), the inner block of long map loops, the row block of matmul epilogues. That the
code generators obey them is tested in tests/filecheck/tile-nki.nir and tile-llvm.nir, and with results in
tests/codegen/test_tile_obeyed.py and tests/nki_emit/test_emit_tiles.py.
"""

import pytest
from hypothesis import given

from neuroncc.errors import PassError, PipelineError
from neuroncc.hardware.host import host_cpu
from neuroncc.hardware.neuron import NEURON_CORES
from neuroncc.ir import Builder, DType, Op, TensorType, verify
from neuroncc.passes import PassContext, Tile, run_pipeline
from neuroncc.passes.pipeline import parse_pipeline
from neuroncc.passes.tile import CPU_INNER_BLOCK, tile_kernel
from neuroncc.testing import models
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

F32 = DType.f32


def kernels(fn):
    return [op for op in fn.ops if op.name == "kernel"]


def matmul(m: int, k: int, n: int, dtype: DType = F32, epilogue: bool = True, transpose_b: bool = False):
    b = Builder("mm")
    x = b.param(TensorType((m, k), dtype), "x")
    w = b.param(TensorType((n, k) if transpose_b else (k, n), dtype), "w")
    y = b.op("mm", x, w, transpose_b=transpose_b)
    return run_pipeline("fuse", b.build([b.op("relu", y) if epilogue else y]))


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_nki_tiles_fit_the_hardware(target):
    core = NEURON_CORES[target]
    fn = run_pipeline(f"canonicalize,fuse,layout{{target={target}}},tile{{target={target}}}",
                      models.transformer_block(batch=2), PassContext(verify_each=True))
    for kernel in kernels(fn):
        a = kernel.attrs
        partitions, free = a["tile"]
        assert a["target"] == target and partitions == core.partitions and free >= 0
        assert a["sbuf_budget"] == core.sbuf_partition_bytes // 2
        if a["matmul_tile"]:
            m, n, k = a["matmul_tile"]
            assert m <= core.stationary_free and n <= core.psum_free_fp32 and k <= core.contraction
            assert len(a["matmul_blocks"]) == 3 and min(a["matmul_blocks"]) >= 1


def test_free_blocks_halve_until_one_iterations_tiles_fit_the_budget():
    b = Builder("wide")
    x = b.param(TensorType((128, 1 << 20), F32), "x")
    fn = run_pipeline("fuse", b.build([b.op("tanh", b.op("exp", x))]))
    # two ops with their operands: 4 float32 tiles of the free block must fit half the SBUF per partition
    expected = {"trn1": 4096, "trn2": 4096, "trn3": 8192}
    for target, free in expected.items():
        (kernel,) = kernels(Tile(target=target).apply(fn, PassContext()))
        assert kernel.attrs["tile"] == (128, free)
        assert 4 * free * 4 <= kernel.attrs["sbuf_budget"] < 4 * 2 * free * 4


def test_reduced_dims_stay_whole():
    fn = run_pipeline("fuse", models.softmax_graph(rows=256, cols=1024))
    (kernel,) = kernels(Tile(target="trn2").apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (128, 0)  # the row is reduced: no free dim to split
    (kernel,) = kernels(Tile(target="trn2", tile=(64, 256)).apply(fn, PassContext()))
    assert kernel.attrs["tile"] == (64, 0)


def test_matmul_tiles_and_blocks():
    # the blocked bf16 matmul of docs/nki.md: output blocks of 256 x 4096, K blocks of 1024 on trn2
    (kernel,) = kernels(Tile(target="trn2").apply(matmul(4096, 8192, 8192, DType.bf16), PassContext()))
    assert kernel.attrs["matmul_tile"] == (128, 512, 128) and kernel.attrs["matmul_blocks"] == (2, 8, 8)
    (small,) = kernels(Tile(target="trn2").apply(matmul(100, 60, 300), PassContext()))
    assert small.attrs["matmul_tile"] == (100, 300, 60) and small.attrs["matmul_blocks"] == (1, 1, 1)


def test_fixed_tiles_are_checked():
    fn = run_pipeline("fuse", models.softmax_graph(rows=256, cols=1024))
    with pytest.raises(PassError, match="kernel 'fused_0_softmax': partition tile 256 exceeds the 128 partitions"):
        Tile(target="trn2", tile=(256, 128)).apply(fn, PassContext())
    mm = matmul(256, 64, 2048)
    with pytest.raises(PassError, match="matmul free tile 1024 exceeds one PSUM bank"):
        Tile(target="trn2", tile=(128, 1024)).apply(mm, PassContext())
    (kernel,) = kernels(Tile(target="trn2", tile=(128, 256)).apply(mm, PassContext()))
    assert kernel.attrs["matmul_tile"] == (128, 256, 64)
    with pytest.raises(PipelineError, match="fixes NKI tiles; on cpu use vector_width= and inner_block="):
        parse_pipeline("tile{target=cpu tile=[1,4096]}")


def test_cpu_decisions():
    fn = run_pipeline("fuse,tile{target=cpu}", models.layer_norm_graph(rows=512, cols=256))
    (kernel,) = kernels(fn)
    a = kernel.attrs
    assert a["domain"] == (512, 256) and a["tile"] == () and a["sbuf_budget"] == 0
    assert a["vector_width"] == host_cpu().f32_lanes and a["inner_block"] == CPU_INNER_BLOCK
    (fixed,) = kernels(run_pipeline("fuse,tile{target=cpu vector_width=4 inner_block=1024}",
                                    models.layer_norm_graph(rows=512, cols=256)))
    assert fixed.attrs["vector_width"] == 4 and fixed.attrs["inner_block"] == 1024


@pytest.mark.parametrize(("m", "k", "n", "rows"), [
    (4096, 64, 256, 512),  # 512 KiB of output rows per block, at least K rows in one
    (4096, 1024, 1024, 4096),  # a block of 128 rows would be shorter than K: one block
    (300, 64, 256, 300),  # the output is no bigger than a block
])
def test_cpu_matmul_row_blocks(m, k, n, rows):
    (kernel,) = kernels(Tile(target="cpu").apply(matmul(m, k, n), PassContext()))
    assert kernel.attrs["matmul_tile"] == (rows, n, k)


def test_a_product_of_bf16_words_is_one_block():
    """ATen's bf16 GEMM reorders its whole second operand at every call: a words product is not row-blocked
    where the float32 product of the same shape is."""
    (f32,) = kernels(Tile(target="cpu").apply(matmul(4096, 64, 256), PassContext()))
    b = Builder("mm")
    x, w = b.param(TensorType((4096, 64), DType.bf16), "x"), b.param(TensorType((64, 256), DType.bf16), "w")
    graph = b.build([b.op("relu", b.op("mm", x, w))])
    words = run_pipeline("bf16-product-words,fuse,tile{target=cpu}", graph)
    (product,) = [k for k in kernels(words) if any(op.attrs.get("words") for op in k.regions[0].ops)]
    assert f32.attrs["matmul_tile"] == (512, 256, 64) and product.attrs["matmul_tile"] == (4096, 256, 64)


def test_retiling_for_another_target_replaces_every_decision():
    fn = run_pipeline("layout{target=trn2},tile{target=trn2}", matmul(512, 256, 1024))
    (trn2,) = kernels(fn)
    assert tile_kernel(trn2, "trn2") is trn2
    trn1 = tile_kernel(trn2, "trn1")
    assert trn1.attrs["target"] == "trn1"
    assert trn1.attrs["sbuf_budget"] == NEURON_CORES["trn1"].sbuf_partition_bytes // 2
    cpu = tile_kernel(trn2, "cpu")
    assert cpu.attrs["tile"] == () and cpu.attrs["matmul_blocks"] == () and cpu.attrs["sbuf_budget"] == 0
    assert cpu.attrs["matmul_tile"] == (512, 1024, 256) and cpu.attrs["vector_width"] == host_cpu().f32_lanes
    for kernel in (trn1, cpu):
        verify(fn.with_ops([kernel]))
    # a kernel marked for a target but missing a decision (written by hand) gets every decision
    bare = Op(trn2.name, trn2.operands, trn2.results, trn2.attrs.replace(target="cpu"), trn2.regions)
    assert tile_kernel(bare, "cpu").attrs["inner_block"] == CPU_INNER_BLOCK
    bare = Op(trn2.name, trn2.operands, trn2.results, trn2.attrs.replace(tile=()), trn2.regions)
    assert tile_kernel(bare, "trn2").attrs["tile"] == trn2.attrs["tile"]


@given(graphs())
def test_tiling_changes_no_result(fn):
    for target in ("cpu", "trn2"):
        assert_pass_preserves_semantics(f"fuse,layout{{target={target}}},tile{{target={target}}}", fn, seeds=(0,))
