"""Softmax's delayed write in the exp loop on AVX2 (``CpuTarget.writes_delayed_elements_in_the_exp_loop``,
``delayed_writes.DelayedGroups.fused``): each block of 32 exponentials of row r is followed, in the same vectorized
loop iteration, by the previous row's 32 outputs stored with ``vmovntps``, instead of a write loop of its own in
each group (session 26 softmax26). AVX-512's code is as before; the bits do not change."""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import ZEN4
from test_delayed_write_order import _softmax
from test_pairs import AVX2, _softmax_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm import stages
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget

BLOCK = re.compile(r"\n\.LBB\d+_\d+:")


def _in_the_exp_loop(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(CpuTarget, "writes_delayed_elements_in_the_exp_loop", property(lambda self: on))


def _stores_beside_exponentials(asm: str) -> bool:
    """Whether a basic block has both exp's rounding FMA and a streamed store (the fused loop's body)."""
    return any("vfmsub" in block and "vmovnt" in block for block in BLOCK.split(asm))


def test_avx2_writes_the_previous_row_in_the_exp_loop_and_avx512_as_before(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.writes_delayed_elements_in_the_exp_loop
    assert not zen4.writes_delayed_elements_in_the_exp_loop
    fn = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed)
    on = _assembly(fn, zen3)[1]
    assert _stores_beside_exponentials(on)
    assert "vfmadd213ss" not in on  # (the fused loop vectorized: its row caches at known offsets)
    zen4_code = _assembly(fn, zen4)
    _in_the_exp_loop(monkeypatch, False)
    assert not _stores_beside_exponentials(_assembly(fn, zen3)[1])
    assert _assembly(fn, zen4) == zen4_code
    # bf16 outputs (words written in pairs) and rows of one group (256 float32) keep their write loops
    monkeypatch.undo()
    kept = [_assembly(fn, zen3)[1] for fn in (_softmax_bits(2201, 1024), _softmax(4100, 256))]
    _in_the_exp_loop(monkeypatch, False)
    assert [_assembly(fn, zen3)[1] for fn in (_softmax_bits(2201, 1024), _softmax(4100, 256))] == kept


def test_the_write_in_the_exp_loop_gives_the_same_bits(rng, monkeypatch):
    x = special_floats(rng, (1033, 1024), scale=4.0)  # (row 0: NaN, +-inf, +-0, extremes; an odd row count)
    x[1, 100], x[2], x[3, 17], x[4, ::2], x[5] = np.nan, -np.inf, np.inf, -0.0, 0.0
    x[6, :5] = np.array([-np.inf, np.nan, np.inf, -np.inf, np.nan], np.float32)
    fn = fuse_whole_function(_softmax(1033, 1024))
    # the sum in a loop of its own over the row cache (AVX2's) or in the exp loop (AVX-512's): a fused loop that
    # carried the sum added each block's lanes up on its own (other bits on Zen 4), so it is taken only for the first
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
