"""bf16 LayerNorm's words copied by its early mean pass for its write pass on Zen 4
(``CpuTarget.copies_bf16_rows_for_the_write_pass``, ``codegen/llvm/word_copies.py``): the mean pass stores each
vector of words it sums into one of two stack rows placed past the output rows, the write pass loads the row's words
from the copy of its parity instead of the input. The same bits as without it."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import aligned_kernel_code
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_dot_sums import layernorm_on_and_off
from test_dot_variance import DEVIATION_PASS_ROWS, layernorm_inputs
from test_pairs import AVX2, layernorm_graph

from neuroncc.codegen.llvm.dot_sums import VECTORS
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.testing.choices import choose

PROPERTY = "copies_bf16_rows_for_the_write_pass"


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def _copies(ir_text: str, cols: int) -> int:
    """The kernel's stack rows of copied words: two rows and the period they are placed within."""
    return ir_text.count(f"alloca [{2 * cols + 1024} x i16], align 4096")


def test_zen4s_mean_passes_copy_the_words_the_write_pass_reads(monkeypatch):
    cols = 1024
    fn, zen4 = layernorm_graph(4096, cols), CpuTarget("znver4", ZEN4)
    assert zen4.copies_bf16_rows_for_the_write_pass
    on, code = aligned_kernel_code(fn, zen4)
    _switch(monkeypatch, False)
    off, _ = aligned_kernel_code(fn, zen4)
    assert _copies(on, cols) == 1 and _copies(off, cols) == 0 and "vmovntdq" in code
    # the first row's mean pass and the next row's: a store of each of the 8 vectors of words a block sums
    assert on.count("store <32 x i16>") - off.count("store <32 x i16>") == 2 * VECTORS


def test_rows_not_streamed_or_without_the_dot_variance_copy_nothing(monkeypatch):
    zen4 = CpuTarget("znver4", ZEN4)
    assert _copies(aligned_kernel_code(layernorm_graph(64, 1024), zen4)[0], 1024) == 0  # (not streamed)
    # (rows of 768 words: Zen 4 places no write buffers past partial-period rows)
    assert _copies(aligned_kernel_code(layernorm_graph(4096, 768), zen4)[0], 768) == 0
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    assert not zen4.copies_bf16_rows_for_the_write_pass
    assert _copies(aligned_kernel_code(layernorm_graph(4096, 1024), zen4)[0], 1024) == 0


def test_avx2_and_intel_avx512_copy_nothing():
    for target in (CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)):
        assert not target.copies_bf16_rows_for_the_write_pass, target.name


@pytest.mark.skipif(not host_cpu().copies_bf16_rows_for_the_write_pass, reason="the host does not take it")
@pytest.mark.parametrize(("cols", "threads"), [(1024, 1), (1024, 2), (768, 1)])
def test_the_same_bits_as_without_the_copies(rng, monkeypatch, cols, threads):
    # streamed rows (the copies are placed past them), every fallback row of the dot variance among them
    rows = 4096
    fn = layernorm_graph(rows, cols)
    inputs = layernorm_inputs(rng, rows, cols)
    got = layernorm_on_and_off(monkeypatch, _switch, fn, inputs, threads)
    np.testing.assert_array_equal(got[True], got[False])
    assert len(DEVIATION_PASS_ROWS) < rows
