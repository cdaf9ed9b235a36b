"""The online log-sum-exp's next block's max taken in this block's exponential loop on Zen 4
(``CpuTarget.takes_the_next_block_max_in_the_exp_loop``, ``online._fused_chunks``; session 36 xent36:
cross-entropy's forward [512, 32000] 0.92-0.93 of its time at 1 thread): only a row's first block runs a max loop
of its own, each block's sums in vector lanes reduced once per block. The max is the same value; the sums are
added in another order (as accurate: the interpreter's tolerance); NaN rows are taken again as before."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_online_max_nan_bits import _special_rows
from test_pairs import AVX2
from test_reductions import _log_sum_exp_graph, log_sum_exp_assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.testing.choices import choose

BLOCK = host_cpu().online_block_elements


def _unfused(monkeypatch) -> None:
    choose(monkeypatch, takes_the_next_block_max_in_the_exp_loop=False)


def _loops(asm: str) -> list[str]:
    """The bodies of the assembly's innermost loops (from a label to the jump back to it, no label between)."""
    lines = asm.splitlines()
    found = []
    for end, line in enumerate(lines):
        jump = re.match(r"\s+j\w+\s+(\.LBB\w+)$", line)
        if jump:
            start = next((k for k in range(end - 1, -1, -1) if lines[k].startswith(jump.group(1) + ":")), None)
            if start is not None and not any(re.match(r"\.LBB\w+:", text) for text in lines[start + 1:end]):
                found.append("\n".join(lines[start:end + 1]))
    return found


def _fused_loops(asm: str) -> list[str]:
    """Loops computing exponentials (``vscalefps``) that also take a max of x read from memory 16 KiB (a 4096-element
    block of float32) past the exponentials' own loads."""
    return [loop for loop in _loops(asm) if "vscalefps" in loop
            and re.search(r"vmaxps\s+-?\d*\(%r\w+(,%r\w+)?\),\s*%zmm", loop)]


def test_zen4_takes_the_next_blocks_max_in_the_exp_loop_and_other_cpus_as_before(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.takes_the_next_block_max_in_the_exp_loop
    assert not zen3.takes_the_next_block_max_in_the_exp_loop and not intel.takes_the_next_block_max_in_the_exp_loop
    codes = {name: log_sum_exp_assembly(target) for name, target in (("zen3", zen3), ("zen4", zen4), ("intel", intel))}
    fused = _fused_loops(codes["zen4"])
    assert len(fused) == 1  # (the chunk loop of the block's chunks whose elements a block on are in the row)
    assert len(re.findall(r"vmaxps\s+-?\d*\(%r", fused[0])) == 2  # (2 zmm of the next block per 2 of exponentials)
    # the prefetches into L2 before each whole chunk (with the next block's max and without); into L1 only in the
    # row taken again with the NaN bits (the exp loop loads the next block itself)
    assert codes["zen4"].count("prefetcht2") == 3 * 16 and codes["zen4"].count("prefetcht0") == 16
    assert not any(re.search(r"vextract|vshufpd|vmovshdup", loop) for loop in fused)  # no horizontal sum per chunk
    _unfused(monkeypatch)
    assert not _fused_loops(log_sum_exp_assembly(zen4))
    assert log_sum_exp_assembly(zen3) == codes["zen3"] and log_sum_exp_assembly(intel) == codes["intel"]


@pytest.mark.parametrize("cols", [32000, 2 * BLOCK + 300, 3 * BLOCK, 2 * BLOCK + 8, 3 * BLOCK - 100, BLOCK + 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_next_blocks_max_in_the_exp_loop_gives_the_two_passes_values(rng, monkeypatch, cols, threads):
    # rows with NaN, +-inf, all -inf, -inf blocks before finite values, maxima growing and falling from block to
    # block, a next block shorter than a chunk or a block, whose last elements a max loop of their own takes
    fn = fuse_whole_function(_log_sum_exp_graph(14, cols))
    if cols >= 2 * BLOCK + 8:
        special = _special_rows(rng, cols)
    else:  # (a row of one block and one element)
        special = (rng.standard_normal((12, cols)) * 4).astype(np.float32)
        special[1, 17], special[2, -1], special[3], special[4, :BLOCK], special[5, BLOCK] = np.nan, np.nan, -np.inf, \
            -np.inf, np.inf
    x = np.concatenate([special, np.stack([np.linspace(60, -30, cols), np.full(cols, -5.0)])]).astype(np.float32)
    x[13, -1] = 90.0  # (the row's max in its last element)
    exe, got = run_both(fn, [x], threads=threads)
    _unfused(monkeypatch)
    want = build_cpu_executable(fn, {"threads": threads})(x)
    # the max is the same value (an output of its own: cross-entropy's backward reads it), NaN rows the same bits
    np.testing.assert_array_equal(np.asarray(got[1]).view(np.uint32), np.asarray(want[1]).view(np.uint32))
    nan_rows = np.isnan(np.asarray(want[0])).any(axis=1)
    np.testing.assert_array_equal(np.asarray(got[0])[nan_rows].view(np.uint32),
                                  np.asarray(want[0])[nan_rows].view(np.uint32))
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=2e-6, atol=1e-6)
