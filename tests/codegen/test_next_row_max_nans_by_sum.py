"""Float32 softmax's next row's max taken in the exp loop without its NaN magnitudes on Zen 4
(``CpuTarget.finds_next_row_max_nans_by_the_sum``, session 36 sm36): the fused exp loop keeps the next row's ``vmaxps``
but not the magnitudes' ``vandps`` and ``vpmaxud`` (the loop is bound by its FP pipes); a row whose sum is NaN runs
its max pass again with them, and its exp pass where that max differs (``nan_rows.redo_nan_row``), so every row keeps
its bits (NaN rows of every kind, payloads, wholly -inf rows) at 1 and 2 threads and for ranges of one to five rows.
AVX2 and Intel's AVX-512 cores keep their code."""

from __future__ import annotations

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import BLOCK, _nan_rows
from test_next_row_max import _exp_loops_taking_a_max, outputs_off_and_on, special_rows
from test_pairs import AVX2
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose


def _flagless(monkeypatch, on: bool) -> None:
    choose(monkeypatch, finds_next_row_max_nans_by_the_sum=on)


def _flagless_exp_loops_taking_a_max(asm: str) -> int:
    """Exp loop blocks (``vscalefps``) that take more ``vmaxps`` than their exponentials' clamps (one each: the next
    row's max beside them) and no NaN magnitudes (``vpmaxud``)."""
    return sum(block.count("vmaxps") > block.count("vscalefps") and "vpmaxud" not in block and "jne" in block
               for block in BLOCK.split(asm) if "vscalefps" in block)


def test_zen4_float32_exp_loop_takes_the_next_row_max_without_its_nan_magnitudes(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.finds_next_row_max_nans_by_the_sum
    assert not intel.finds_next_row_max_nans_by_the_sum and not zen3.finds_next_row_max_nans_by_the_sum
    softmax = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed into the exp loop)
    ir_text, code = _assembly(softmax, zen4)
    # the exp loop's copies (odd and even rows, and the copies LLVM makes per the reciprocal's case) take the next
    # row's max and no magnitudes; a NaN-sum row's rerun of the max pass takes them
    assert _flagless_exp_loops_taking_a_max(code) >= 2 and _exp_loops_taking_a_max(code) == 0
    assert "fcmp uno float" in ir_text  # (the row sum's test: a NaN sum reruns the max pass)
    kept = {target.name: _assembly(softmax, target)[1] for target in (zen3, intel)}
    _flagless(monkeypatch, False)
    ir_before, before = _assembly(softmax, zen4)
    assert _flagless_exp_loops_taking_a_max(before) == 0 and _exp_loops_taking_a_max(before) == 2
    assert "fcmp uno float" not in ir_before
    assert {target.name: _assembly(softmax, target)[1] for target in (zen3, intel)} == kept


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 1033])
def test_the_flagless_next_row_max_gives_the_same_bits(rng, monkeypatch, threads, rows):
    x = special_rows(rng, monkeypatch, rows)
    before, after = outputs_off_and_on(monkeypatch, "finds_next_row_max_nans_by_the_sum",
                                       fuse_whole_function(_softmax(rows, 1024)), x, threads)
    np.testing.assert_array_equal(after.view(np.uint32), before.view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_special_rows_between_plain_ones_and_masked_rows_give_the_same_bits(rng, monkeypatch, threads):
    """Each kind of special row right after and right before a plain one (every row's max from the exp loop of the
    row before), then runs of wholly -inf rows (fully masked attention rows: their max pass runs twice)."""
    x = rng.standard_normal((120, 1024)).astype(np.float32)
    x[1:80:2] = _nan_rows(rng, 40)
    x[90:100] = -np.inf
    x[104:120:3] = -np.inf
    before, after = outputs_off_and_on(monkeypatch, "finds_next_row_max_nans_by_the_sum",
                                       fuse_whole_function(_softmax(120, 1024)), x, threads)
    np.testing.assert_array_equal(after.view(np.uint32), before.view(np.uint32))
