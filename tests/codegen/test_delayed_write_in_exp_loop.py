"""Softmax's delayed write in the exp loop on AVX2 and Zen 4 (``CpuTarget.writes_delayed_elements_in_the_exp_loop``,
``delayed_writes.DelayedGroups.fused``): each block of one vector iteration's exponentials of row r is followed, in the
same vectorized loop iteration, by the previous row's outputs stored with ``vmovntps``, instead of a write loop of its
own in each group (session 26 softmax26 on Zen 3, session 33 soft33 on Zen 4). With AVX-512 the row's sum stays in
the exp loop: the fused loop adds it lane by lane in the order of the group's own vectorized loop
(``reductions.LaneSums``), no horizontal add per block. Intel's AVX-512 cores' code is as before; the bits do not
change."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import _nan_rows
from test_pairs import AVX2, _softmax_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm import stages
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware import host
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

BLOCK = re.compile(r"\n\.LBB\d+_\d+:")


def _in_the_exp_loop(monkeypatch, on: bool) -> None:
    choose(monkeypatch, writes_delayed_elements_in_the_exp_loop=on)


def _stores_beside_exponentials(asm: str) -> bool:
    """Whether a basic block has both exp's rounding FMA and a streamed store (the fused loop's body)."""
    return any("vfmsub" in block and "vmovnt" in block for block in BLOCK.split(asm))


def test_avx2_and_zen4_write_the_previous_row_in_the_exp_loop_and_intel_avx512_as_before(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen3.writes_delayed_elements_in_the_exp_loop and zen4.writes_delayed_elements_in_the_exp_loop
    assert not intel.writes_delayed_elements_in_the_exp_loop
    fn = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed)
    on = _assembly(fn, zen3)[1]
    assert _stores_beside_exponentials(on)
    assert "vfmadd213ss" not in on  # (the fused loop vectorized: its row caches at known offsets)
    zen4_on = _assembly(fn, zen4)[1]
    fused = [block for block in BLOCK.split(zen4_on) if "vfmsub" in block and "vmovnt" in block]
    assert fused and "vfmadd213ss" not in zen4_on
    # (the row's sum carried in vector lanes through the blocks: no horizontal add in the fused loop's body)
    assert not any("vextractf" in block or "vaddss" in block for block in fused)
    intel_code = _assembly(fn, intel)
    _in_the_exp_loop(monkeypatch, False)
    assert not _stores_beside_exponentials(_assembly(fn, zen3)[1])
    assert not _stores_beside_exponentials(_assembly(fn, zen4)[1])
    assert _assembly(fn, intel) == intel_code
    # bf16 outputs (words written in pairs) and rows of one group (256 float32) keep their write loops
    monkeypatch.undo()
    for target in (zen3, zen4):
        kept = [_assembly(fn, target)[1] for fn in (_softmax_bits(2201, 1024), _softmax(4100, 256))]
        _in_the_exp_loop(monkeypatch, False)
        assert [_assembly(fn, target)[1] for fn in (_softmax_bits(2201, 1024), _softmax(4100, 256))] == kept
        monkeypatch.undo()


@pytest.mark.parametrize("cpu", ["host", "avx2"])
def test_the_write_in_the_exp_loop_gives_the_same_bits(rng, monkeypatch, cpu):
    if cpu == "avx2":  # (AVX2's code, its four-vector interleave of 8-lane sums, run on this host too)
        monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), name="znver3", features=AVX2)])
    x = _nan_rows(rng, 1033)  # (NaN, +-inf, +-0 and extremes; NaNs with payloads, signaling NaNs: an odd row count)
    fn = fuse_whole_function(_softmax(1033, 1024))
    # (the sum's lanes through the row's groups add in another order: tests/codegen/test_row_sum_lanes.py)
    choose(monkeypatch, carries_the_row_sum_in_lanes_through_the_groups=False)
    # the sum in a loop of its own over the row cache (AVX2's) or in the exp loop (AVX-512's, whose fused loop adds
    # the sum's lanes in the group loop's order: reductions.LaneSums), on every host
    for apart in (True, False):
        monkeypatch.setattr(stages, "SUM_ROW_CACHE_APART", apart)
        results = []
        for on in (False, True):
            _in_the_exp_loop(monkeypatch, on)
            for threads in (1, 2):
                (out,) = build_cpu_executable(fn, {"threads": threads})(x)
                results.append(np.asarray(out).view(np.uint32))
        for result in results[1:]:
            np.testing.assert_array_equal(result, results[0])
