"""Softmax's exp pass without software prefetches of the next row on Zen 4
(``CpuTarget.prefetches_the_next_row_in_the_exp_pass``, session 34 soft34): a float32 row loop whose exp pass carries
the row loop's prefetches (``prefetch.carrier_stage``) leaves the next row to the hardware's prefetchers there; its
groups (``prefetch.spread_loop``: each followed by its share of the previous row's delayed write) stay as they were,
sized by the stream it no longer fetches (``context.Ahead.fetched``), so its sums and bits do not change. AVX2 and
Intel's AVX-512 cores prefetch as before, and so do bf16 rows."""

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

PREFETCH = re.compile(r"\bprefetch(t0|t1|t2|nta|w)\b")
BLOCK = re.compile(r"\n(?=\.LBB\d+_\d+:)")
OPERAND = re.compile(r"%\w+|-?\d+")


def _prefetching(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(CpuTarget, "prefetches_the_next_row_in_the_exp_pass", property(lambda self: on))


def _exp_loops(asm: str) -> set[tuple[str, ...]]:
    """The exp loops' bodies (blocks with exp's rounding FMA and the delayed write's streamed stores), each as its
    instructions without registers and offsets."""
    blocks = BLOCK.split(asm)
    return {tuple(OPERAND.sub("_", line.strip()) for line in block.strip().split("\n")[1:]
                  if line.strip() and not line.strip().startswith((".", "#")))
            for block in blocks if "vfmsub" in block and "vmovntps" in block}


def test_zen4_leaves_float32_softmax_next_row_to_the_hardware_and_the_others_prefetch(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen3.prefetches_the_next_row_in_the_exp_pass and intel.prefetches_the_next_row_in_the_exp_pass
    assert not zen4.prefetches_the_next_row_in_the_exp_pass
    softmax = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed into the exp pass)
    zen4_code = _assembly(softmax, zen4)[1]
    assert "vmovntps" in zen4_code and "vscalefps" in zen4_code  # (the exp pass and its delayed write)
    assert not PREFETCH.search(zen4_code)
    for target in (zen3, intel):
        assert len(re.findall(r"\bprefetcht0\b", _assembly(softmax, target)[1])) >= 16  # (a group's 16 lines)
    # bf16 rows keep their prefetches on Zen 4; LayerNorm's bursts (cheap passes) are not the exp pass's
    kept = [_assembly(fn, zen4)[1] for fn in (_softmax_bits(2201, 1024), layernorm_graph(4100, 1024))]
    assert PREFETCH.search(kept[0]) and PREFETCH.search(kept[1])
    _prefetching(monkeypatch, True)
    forced = _assembly(softmax, zen4)[1]
    assert len(re.findall(r"\bprefetcht0\b", forced)) >= 16
    assert _exp_loops(forced) == _exp_loops(zen4_code)  # (the same exp loops, the prefetches before them aside)
    assert [_assembly(fn, zen4)[1] for fn in (_softmax_bits(2201, 1024), layernorm_graph(4100, 1024))] == kept


@pytest.mark.parametrize("threads", [1, 2])
def test_the_exp_pass_without_prefetches_gives_the_same_bits(rng, monkeypatch, threads):
    x = _nan_rows(rng, 1033)  # (NaN, +-inf, +-0 and extremes, payload NaNs; an odd row count)
    fn = fuse_whole_function(_softmax(1033, 1024))
    results = []
    for on in (True, False):
        _prefetching(monkeypatch, on)
        (out,) = build_cpu_executable(fn, {"threads": threads})(x)
        results.append(np.asarray(out).view(np.uint32))
    np.testing.assert_array_equal(results[1], results[0])
