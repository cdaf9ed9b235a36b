"""Float32 softmax's row sum carried in vector lanes through all the groups of its fused exp loop on Zen 4
(``CpuTarget.carries_the_row_sum_in_lanes_through_the_groups``, session 36 sm36b): one horizontal sum a row instead
of one a group of 256 elements. The sum's terms are added in another order, so plain rows' bits may differ from the
groups' form by an ulp or so: every row stays within float32 softmax's tolerances of a float64 reference, and rows
whose sum is NaN (NaN, +inf, wholly -inf: found by the sum, ``nan_rows.py``) are NaN exactly where they were, at 1
and 2 threads, for ranges of one to five rows and many. AVX2 and Intel's AVX-512 cores keep their code."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import _nan_rows
from test_next_row_max import outputs_off_and_on, special_rows
from test_pairs import AVX2
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

REDUCE = '@"llvm.vector.reduce.fadd.v16f32"('


def _reductions(ir_text: str) -> int:
    """Calls of the 16 lanes' horizontal sum in ``ir_text``."""
    return sum(" call " in line and REDUCE in line for line in ir_text.splitlines())


def _lanes(monkeypatch, on: bool) -> None:
    choose(monkeypatch, carries_the_row_sum_in_lanes_through_the_groups=on)


def test_zen4_reduces_the_row_sum_once_a_row(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.carries_the_row_sum_in_lanes_through_the_groups
    assert not intel.carries_the_row_sum_in_lanes_through_the_groups
    assert not zen3.carries_the_row_sum_in_lanes_through_the_groups
    softmax = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed into the exp loop)
    ir_text, code = _assembly(softmax, zen4)
    # one reduction of the lanes after the row's groups (not one in each of the odd and even rows' group loops)
    assert _reductions(ir_text) == 1
    kept = {target.name: _assembly(softmax, target) for target in (zen3, intel)}
    _lanes(monkeypatch, False)
    ir_before, before = _assembly(softmax, zen4)
    assert _reductions(ir_before) == 2
    assert code.count("vextractf64x4") < before.count("vextractf64x4")
    assert {target.name: _assembly(softmax, target) for target in (zen3, intel)} == kept


def _both(monkeypatch, fn, x, threads: int) -> list[np.ndarray]:
    return outputs_off_and_on(monkeypatch, "carries_the_row_sum_in_lanes_through_the_groups", fn, x, threads)


def _as_before_within_tolerance(x: np.ndarray, before: np.ndarray, after: np.ndarray) -> None:
    """NaN exactly where the groups' form has NaN (its bits: a NaN row's max and sum are taken as before), every
    other output within float32 softmax's tolerance of a float64 reference, as the groups' form is."""
    nan = np.isnan(before)
    np.testing.assert_array_equal(np.isnan(after), nan)
    np.testing.assert_array_equal(after[nan].view(np.uint32), before[nan].view(np.uint32))
    reference = torch.softmax(torch.from_numpy(x).double(), -1).numpy()
    for out in (before, after):
        torch.testing.assert_close(torch.from_numpy(out[~nan]).double(), torch.from_numpy(reference[~nan]),
                                   rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 1033])
def test_special_and_plain_rows_as_before(rng, monkeypatch, threads, rows):
    x = special_rows(rng, monkeypatch, rows)
    before, after = _both(monkeypatch, fuse_whole_function(_softmax(rows, 1024)), x, threads)
    _as_before_within_tolerance(x, before, after)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [512, 1024, 2048, 5120])
def test_plain_rows_within_tolerance_and_summing_to_one(rng, monkeypatch, threads, cols):
    """Rows of two groups to several chunks of the sum (4096 elements each: a chunk's lanes from its own start),
    spread over wide ranges of values."""
    x = (rng.standard_normal((300, cols)) * rng.choice([0.1, 1.0, 10.0, 30.0], (300, 1))).astype(np.float32)
    before, after = _both(monkeypatch, fuse_whole_function(_softmax(300, cols)), x, threads)
    _as_before_within_tolerance(x, before, after)
    assert np.abs(after.astype(np.float64).sum(-1) - 1).max() < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_special_rows_between_plain_ones_and_masked_rows(rng, monkeypatch, threads):
    x = rng.standard_normal((120, 1024)).astype(np.float32)
    x[1:80:2] = _nan_rows(rng, 40)
    x[90:100] = -np.inf
    x[104:120:3] = -np.inf
    x[100:104, 512:] = -np.inf  # (half-masked rows: lanes of -inf terms, 0 after exp)
    before, after = _both(monkeypatch, fuse_whole_function(_softmax(120, 1024)), x, threads)
    _as_before_within_tolerance(x, before, after)
