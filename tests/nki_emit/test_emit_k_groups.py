"""K-major matmul operands load in partition-major K groups (``matmul_k_group``, passes/tile_nki.py): one DMA
per group of K tiles with long per-partition runs, the same results as numpy, and faster on the cost model."""

from __future__ import annotations

import numpy as np
import pytest
from emit_helpers import BF16, F32, check_against_interpreter, graph, lower

import neuroncc.passes.tile_nki as tile_nki
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.hardware.neuron import DMA_FULL_RATE_BYTES, NEURON_CORES
from neuroncc.passes.tile_nki import MatmulBlocks, choose_matmul_blocks, estimate_matmul_ns, full_rate_k_group

TRN2 = NEURON_CORES["trn2"]


def _lhs_t_matmul(m: int, k: int, n: int, dtype, name: str = "mm_lhsT"):
    """``lhsT.T @ rhs``: both operands K-major once the layout pass folds the transpose (``transpose_a``)."""
    b, (lhs_t, rhs) = graph(name, ((k, m), dtype), ((k, n), dtype))
    return b.build([b.op("mm", b.op("permute", lhs_t, dims=[1, 0]), rhs)])


def test_the_k_group_is_the_smallest_that_reaches_full_rate_runs():
    # [512, 1024] x [1024, 1024] bf16: lhsT rows are 1 KiB, rhs rows 2 KiB; 4 rows per partition reach 4 KiB
    blocks = choose_matmul_blocks(512, 1024, 1024, 2, True, True, TRN2)
    assert blocks == MatmulBlocks(128, 512, 128, 4, 2, 4, k_group=4)
    assert full_rate_k_group(512, 1024, 2, blocks) * 512 * 2 == DMA_FULL_RATE_BYTES
    # grouping is chosen because the estimate says it is faster than K in order
    in_order = MatmulBlocks(128, 512, 128, 4, 2, 4)
    assert estimate_matmul_ns(512, 1024, 1024, 2, True, True, blocks, TRN2) < \
        estimate_matmul_ns(512, 1024, 1024, 2, True, True, in_order, TRN2)
    # an operand stored K innermost is transposed on TensorE in K order: no grouping
    assert choose_matmul_blocks(512, 1024, 1024, 2, False, True, TRN2).k_group == 1
    # blocks narrower than the rows gain nothing from grouping (the runs stay one block row long)
    assert choose_matmul_blocks(2048, 2048, 4096, 2, True, True, TRN2).k_group == 1


def test_grouped_k_loads_are_one_dma_per_group_and_match_numpy(rng):
    exe = check_against_interpreter(_lhs_t_matmul(512, 1024, 1024, BF16), rng, atol=0.25)
    lowered = lower(_lhs_t_matmul(512, 1024, 1024, BF16))
    assert [op.attrs.get("transpose_a") for op in lowered.ops] == [True]
    # K blocks of 4 tiles, one group: partition p reads rows 4p .. 4p + 3 of the block, 4 KiB in one run
    assert "nisa.dma_copy(dst=lhsT, src=x0.reshape((256, 4, 512))[nl.ds(k2 * 128, 128), :, :])" in exe.source
    assert "nisa.dma_copy(dst=rhs, src=x1.reshape((256, 4, 1024))[nl.ds(k2 * 128, 128), :, :])" in exe.source
    assert "nisa.nc_transpose" not in exe.source


@pytest.mark.parametrize("m, k, n", [(300, 1024, 260), (200, 2048, 600)])
def test_partial_m_and_n_tiles_with_grouped_k(m, k, n, rng):
    fn = _lhs_t_matmul(m, k, n, F32)
    assert choose_matmul_blocks(m, n, k, 4, True, True, TRN2).k_group == 2
    exe = check_against_interpreter(fn, rng, atol=1e-3)
    assert ".reshape(" in exe.source and "nisa.nc_transpose" not in exe.source


def test_several_groups_per_block_batches_and_an_epilogue(monkeypatch, rng):
    """A forced k_group smaller than the block (two DMAs per block per operand, a loop over the groups),
    several K blocks (the SBUF accumulator), a batch dim and a fused epilogue."""
    forced = MatmulBlocks(128, 256, 128, 2, 1, 4, k_group=2)
    monkeypatch.setattr(tile_nki, "choose_matmul_blocks", lambda *args, **kwargs: forced)  # the tile pass's
    b, (a_t, rhs, bias) = graph("bmm", ((2, 1024, 256), F32), ((2, 1024, 256), F32), ((256,), F32))
    out = b.op("relu", b.op("add", b.op("bmm", a_t, rhs, transpose_a=True), bias))
    exe = check_against_interpreter(b.build([out]), rng, atol=1e-3)
    assert "epilogue: add, relu" in exe.source
    assert "for kg in nl.affine_range(2):" in exe.source
    assert "nl.zeros(" in exe.source  # two K blocks: accumulated in SBUF


def test_grouped_k_is_faster_on_the_cost_model_and_does_the_same_work(monkeypatch):
    fn = lower(_lhs_t_matmul(512, 1024, 1024, BF16))
    (grouped,) = estimate_costs(fn, "trn2").kernels
    in_order = MatmulBlocks(128, 512, 128, 4, 2, 4)
    monkeypatch.setattr(tile_nki, "choose_matmul_blocks", lambda *args, **kwargs: in_order)
    (plain,) = estimate_costs(lower(_lhs_t_matmul(512, 1024, 1024, BF16, "mm_in_order")), "trn2").kernels
    assert grouped.dma_bytes == plain.dma_bytes and grouped.tensor_flops == plain.tensor_flops
    assert grouped.latency_us < 0.9 * plain.latency_us, (grouped.latency_us, plain.latency_us)
    assert np.isfinite(grouped.latency_us)
