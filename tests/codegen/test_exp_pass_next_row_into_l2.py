"""Softmax's exp pass prefetches the next row into the L2 on Zen 4
(``CpuTarget.prefetches_the_next_row_into_l2_in_the_exp_pass``, session 34 soft34): a float32 row loop whose exp pass
carries the row loop's prefetches (``prefetch.carrier_stage``) issues them as ``prefetcht2`` (``context.Ahead.locality``
1) instead of ``prefetcht0``; the loops are otherwise the same, and so are the bits. AVX2 and Intel's AVX-512 cores
prefetch into L1 as before, and so do bf16 rows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import _nan_rows
from test_pairs import AVX2, _softmax_bits, layernorm_graph
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose


def _into_l2(monkeypatch, on: bool) -> None:
    choose(monkeypatch, prefetches_the_next_row_into_l2_in_the_exp_pass=on)


def _count(mnemonic: str, asm: str) -> int:
    return len(re.findall(rf"\b{mnemonic}\b", asm))


def test_zen4_prefetches_float32_softmax_next_row_into_l2_and_the_others_into_l1(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.prefetches_the_next_row_into_l2_in_the_exp_pass
    assert not zen3.prefetches_the_next_row_into_l2_in_the_exp_pass
    assert not intel.prefetches_the_next_row_into_l2_in_the_exp_pass
    softmax = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed into the exp pass)
    zen4_code = _assembly(softmax, zen4)[1]
    assert "vmovntps" in zen4_code and "vscalefps" in zen4_code  # (the exp pass and its delayed write)
    assert _count("prefetcht2", zen4_code) >= 16 and _count("prefetcht0", zen4_code) == 0  # (a group's 16 lines)
    for target in (zen3, intel):
        code = _assembly(softmax, target)[1]
        assert _count("prefetcht0", code) >= 16 and _count("prefetcht2", code) == 0
    # bf16 rows keep prefetcht0 on Zen 4; LayerNorm's bursts (cheap passes) are not the exp pass's
    kept = [_assembly(fn, zen4)[1] for fn in (_softmax_bits(2201, 1024), layernorm_graph(4100, 1024))]
    assert all(_count("prefetcht0", code) and not _count("prefetcht2", code) for code in kept)
    _into_l2(monkeypatch, False)
    into_l1 = _assembly(softmax, zen4)[1]
    assert _count("prefetcht0", into_l1) == _count("prefetcht2", zen4_code) and _count("prefetcht2", into_l1) == 0
    assert into_l1.replace("prefetcht0", "prefetcht2") == zen4_code  # (nothing else changes)
    assert [_assembly(fn, zen4)[1] for fn in (_softmax_bits(2201, 1024), layernorm_graph(4100, 1024))] == kept


@pytest.mark.parametrize("threads", [1, 2])
def test_the_exp_pass_prefetching_into_l2_gives_the_same_bits(rng, monkeypatch, threads):
    x = _nan_rows(rng, 1033)  # (NaN, +-inf, +-0 and extremes, payload NaNs; an odd row count)
    fn = fuse_whole_function(_softmax(1033, 1024))
    results = []
    for on in (False, True):
        _into_l2(monkeypatch, on)
        (out,) = build_cpu_executable(fn, {"threads": threads})(x)
        results.append(np.asarray(out).view(np.uint32))
    np.testing.assert_array_equal(results[1], results[0])
