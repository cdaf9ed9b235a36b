"""The online log-sum-exp's block max loops without the amax's NaN bits on AVX2 and Zen 4
(``CpuTarget.online_block_max_without_nan_bits``; session 25 xent25: cross-entropy's forward [512, 32000] 4-6%
faster at 1 and 2 threads on Zen 3; session 35 xent35: 4-6% on Zen 4). A row whose total may hold a NaN is taken
again with the NaN bits, so every row gives the bits it gave before, NaN payloads included; Intel's AVX-512 code
does not change. And each block's max
taken a block early, between the previous block's chunks (``CpuTarget.online_block_max_ahead``, session 28 xent28),
with the same bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2
from test_reductions import _log_sum_exp_graph, log_sum_exp_assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.testing.choices import choose

#: The host's online log-sum-exp blocks (``CpuTarget.online_block_elements``)
BLOCK = host_cpu().online_block_elements


def _with_nan_bits(monkeypatch) -> None:
    choose(monkeypatch, online_block_max_without_nan_bits=False)


def _block_max_loops(monkeypatch) -> None:
    """Each block's max in a max loop (Zen 4 takes it in the previous block's exp loop since session 36, its sums
    in another order: ``test_next_block_max.py``)."""
    choose(monkeypatch, takes_the_next_block_max_in_the_exp_loop=False)


def _max_loops_from_memory(asm: str, register: str = "ymm") -> int:
    """vmaxps reading x from memory into ``register``s: the max loop without the NaN bits (the loop with them
    loads x into a register first, for its and and umax)."""
    return len(re.findall(r"vmaxps\s+-?\d*\(%r\w+(,%r\w+)?(,\d)?\),\s*%" + register, asm))


def test_avx2_and_zen4_take_block_maxima_without_the_nan_bits_and_intel_avx512_as_before(monkeypatch):
    assembly = log_sum_exp_assembly
    # (each block's max in its own block, as before session 28: the chunk loop emitted once)
    choose(monkeypatch, online_block_max_ahead=0)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen3.online_block_max_without_nan_bits and zen4.online_block_max_without_nan_bits
    assert not intel.online_block_max_without_nan_bits
    fast, intel_code = assembly(zen3), assembly(intel)
    assert _max_loops_from_memory(fast) == 4 and "vpmaxud" in fast  # (the loop with the NaN bits: its retake)
    # (Zen 4 (session 35): a quarter of the max loop's instructions, the row retaken where its total may be NaN)
    assert _max_loops_from_memory(assembly(zen4), "zmm") > 0 and "vpmaxud" in assembly(zen4)
    _with_nan_bits(monkeypatch)
    assert _max_loops_from_memory(assembly(zen3)) == 0
    assert _max_loops_from_memory(assembly(zen4), "zmm") == 0
    assert assembly(intel) == intel_code


def _special_rows(rng: np.random.Generator, cols: int) -> np.ndarray:
    x = (rng.standard_normal((12, cols)) * 4).astype(np.float32)
    x[1, 17] = np.nan  # a NaN in the first block
    x[2, -3] = np.nan  # ... in the last (partial) block
    x[3] = -np.inf  # every element -inf
    x[4, :BLOCK] = -np.inf  # a first block of -inf holding a NaN, then finite values
    x[4, 5] = np.nan
    x[5, :BLOCK] = -np.inf  # a first block of -inf, then finite values (counted as 0, no NaN)
    x[6, BLOCK + 9] = np.inf
    x[7, BLOCK - 1] = np.nan  # the last element of a lane: the max loop's vmaxps keeps it
    x[8, 40] = -np.nan  # a NaN of the other sign
    x[8, 2 * BLOCK + 7] = np.float32(np.nan) + np.float32(1.0)
    x[9, ::5] = -np.inf
    x[10] = np.linspace(-30, 60, cols)  # a max growing from block to block
    x[11, :BLOCK] = -np.inf  # a NaN after a block of -inf
    x[11, BLOCK + 3] = np.nan
    return x


@pytest.mark.parametrize("cols", [32000, 2 * BLOCK + 300])
def test_the_block_maxima_without_nan_bits_give_the_same_bits(rng, monkeypatch, cols):
    _block_max_loops(monkeypatch)
    fn = fuse_whole_function(_log_sum_exp_graph(12, cols))
    x = _special_rows(rng, cols)
    got = build_cpu_executable(fn, {"threads": 2})(x)
    _with_nan_bits(monkeypatch)
    want = build_cpu_executable(fn, {"threads": 2})(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(w).view(np.uint32))
    assert np.isnan(np.asarray(got[1])[[1, 2, 4, 7, 8, 11]]).all()
    assert np.isfinite(np.asarray(got[1])[[0, 5, 10]]).all() and np.isnan(np.asarray(got[0])[[1, 3, 11]]).all()


def _loop_kinds(asm: str) -> list[str]:
    """The loops of an online log-sum-exp's assembly in order: "max" (a block max loop reading x from memory),
    "exp" (a chunk's exponentials, with their prefetches), "sum" (a chunk's sum over its buffer on the stack)."""
    kinds: list[str] = []
    for line in asm.splitlines():
        kind = "exp" if "prefetcht0" in line else "max" if re.search(r"vmaxps\s+-?\d*\(%r\w+,%r\w+,4\)", line) \
            else "sum" if re.search(r"vaddps\s+-?\d*\(%rsp", line) else None
        if kind and kinds[-1:] != [kind]:
            kinds.append(kind)
    return kinds


def test_avx2_takes_the_next_blocks_max_between_a_blocks_chunks_and_avx512_as_before(monkeypatch):
    # CpuTarget.online_block_max_ahead (AVX2: 2): the row's first block max before its loop, then in each block
    # the next block's max loop between its first chunk (exponentials, sum) and its second, so that no block's
    # exponentials wait for their max loop and the first chunk's sum chain has independent work beside it
    # (session 28 xent28: cross-entropy's forward [512, 32000] 0.97 of its time at 1 thread, Zen 3)
    assembly = log_sum_exp_assembly
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert (zen3.online_block_max_ahead, zen4.online_block_max_ahead) == (2, 0)
    ahead, zen4_code = assembly(zen3), assembly(zen4)
    assert _loop_kinds(ahead) == ["max", "exp", "sum", "max", "exp", "sum"]
    assert _loop_kinds(assembly(zen3, 4, 1000)) == ["max", "exp", "sum"]  # one block: nothing ahead
    choose(monkeypatch, online_block_max_ahead=0)
    assert _loop_kinds(assembly(zen3)) == ["max", "exp", "sum"]  # before: each block's max before its chunks
    assert assembly(zen4) == zen4_code


@pytest.mark.parametrize("cols", [32000, 3 * BLOCK, 2 * BLOCK + 300, 2 * BLOCK + 8])
def test_the_next_blocks_max_taken_early_gives_the_same_bits(rng, monkeypatch, cols):
    _block_max_loops(monkeypatch)
    fn = fuse_whole_function(_log_sum_exp_graph(12, cols))
    x = _special_rows(rng, cols)
    x[10] = np.linspace(60, -30, cols)  # (and a max falling from block to block)
    got = {}
    for where in (2, 1, 0):
        choose(monkeypatch, online_block_max_ahead=where)
        got[where] = build_cpu_executable(fn, {"threads": 2})(x)
    for where in (2, 1):
        for g, w in zip(got[where], got[0], strict=True):
            np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(w).view(np.uint32))
