"""Softmax's next row's max taken in this row's exp loop on Zen 4 (``CpuTarget.takes_the_next_row_max_in_the_exp_loop``,
``codegen/llvm/next_max.py``, session 35 sm35): a float32 row loop whose exp loop carries the previous row's delayed
write also loads the next row and takes its max and NaN magnitudes (``vmaxps`` and ``vpmaxud`` beside the
exponentials), its prefetches go two rows ahead, and only the first row of a thread's range runs a max pass (for
itself and the row after it); the same bits (NaN rows of every kind, payloads too) at 1 and 2 threads and for ranges
of one, two and odd numbers of rows. bf16 rows take the next row's words in their exp loop too (a max without the
NaN flag: their NaN rows' bits are ``test_bf16_nan_rows_by_sum.py``'s). AVX2 and Intel's AVX-512 cores keep their
code."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import BLOCK, _nan_rows
from test_pairs import AVX2, _softmax_bits, to_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm import streams
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose


#: Rows of ``_nan_rows`` for the small cases: plain rows with a NaN row and a NaN-payload row between them
SMALL = [20, 1, 21, 8, 22]


def special_rows(rng, monkeypatch, rows: int) -> np.ndarray:
    """``rows`` rows of ``_nan_rows`` for a float32 softmax whose write is delayed into its exp loop: fewer than 32
    rows take SMALL's and have their small output streamed too (so that the write is delayed: ranges of 1-3 rows)."""
    if rows < 32:
        monkeypatch.setattr(streams, "STREAM_MIN_BYTES", 0)
        monkeypatch.setattr(CpuTarget, "streams_outputs", lambda self, nbytes: True)
    x = _nan_rows(rng, 1033)
    return x[SMALL[:rows]] if rows <= len(SMALL) else x


def outputs_off_and_on(monkeypatch, decision: str, fn, x: np.ndarray, threads: int) -> list[np.ndarray]:
    """``fn``'s output on ``x`` built with the CpuTarget property ``decision`` off, then on."""
    results = []
    for on in (False, True):
        choose(monkeypatch, **{decision: on})
        (out,) = build_cpu_executable(fn, {"threads": threads})(x)
        results.append(np.asarray(out).copy())
    return results


def _next_max(monkeypatch, on: bool) -> None:
    choose(monkeypatch, takes_the_next_row_max_in_the_exp_loop=on)


def _exp_loops_taking_a_max(asm: str) -> int:
    """Loop blocks with the exponentials (``vscalefps``) and a running max with its NaN magnitudes beside them."""
    return sum("vscalefps" in block and "vpmaxud" in block and "jne" in block for block in BLOCK.split(asm))


def _bf16_exp_loops_taking_a_max(asm: str) -> bool:
    """Whether an exp loop block (``vscalefps``) takes more ``vmaxps`` than its exponentials' clamps (one each)."""
    return any(block.count("vmaxps") > block.count("vscalefps") and "jne" in block
               for block in BLOCK.split(asm) if "vscalefps" in block)


def _max_loops(asm: str) -> int:
    """Loop blocks of a max pass: ``vmaxps`` and ``vpmaxud``, no exponentials."""
    return sum("vpmaxud" in block and "vscalefps" not in block and "jne" in block for block in BLOCK.split(asm))


def test_zen4_float32_softmax_takes_the_next_row_max_in_its_exp_loop(monkeypatch):
    # (with its NaN magnitudes, as session 35 built it: without them is ``test_next_row_max_nans_by_sum.py``'s)
    choose(monkeypatch, finds_next_row_max_nans_by_the_sum=False)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.takes_the_next_row_max_in_the_exp_loop and not intel.takes_the_next_row_max_in_the_exp_loop
    softmax = _softmax(1030, 1024)  # (an output of 4 MiB: streamed, the write delayed into the exp loop)
    code = _assembly(softmax, zen4)[1]
    # the exp loop's copies (odd and even rows) take the next row's max; the max pass is the first row's two only
    assert _exp_loops_taking_a_max(code) == 2 and _max_loops(code) == 2
    assert re.search(r"prefetcht2\s+8192\(", code) and not re.search(r"prefetcht2\s+4096\(", code)  # (2 rows on)
    kept = {target.name: _assembly(softmax, target)[1] for target in (zen3, intel)}
    assert not any(_exp_loops_taking_a_max(asm) for asm in kept.values())
    # bf16 rows: the exp loop's vmaxps of the next row's widened words beside its clamp's (a max without the flag)
    bf16 = _assembly(_softmax_bits(2201, 1024), zen4)[1]
    assert _bf16_exp_loops_taking_a_max(bf16) and re.search(r"prefetcht0\s+4096\(", bf16)
    kept_bf16 = _assembly(_softmax_bits(2201, 1024), intel)[1]
    _next_max(monkeypatch, False)
    before = _assembly(softmax, zen4)[1]
    assert _exp_loops_taking_a_max(before) == 0 and _max_loops(before) == 1
    assert re.search(r"prefetcht2\s+4096\(", before) and not re.search(r"prefetcht2\s+8192\(", before)
    assert {target.name: _assembly(softmax, target)[1] for target in (zen3, intel)} == kept
    bf16_before = _assembly(_softmax_bits(2201, 1024), zen4)[1]
    assert not _bf16_exp_loops_taking_a_max(bf16_before) and re.search(r"prefetcht0\s+2048\(", bf16_before)
    assert _assembly(_softmax_bits(2201, 1024), intel)[1] == kept_bf16


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 1033])
def test_the_next_row_max_in_the_exp_loop_gives_the_same_bits(rng, monkeypatch, threads, rows):
    x = special_rows(rng, monkeypatch, rows)
    before, after = outputs_off_and_on(monkeypatch, "takes_the_next_row_max_in_the_exp_loop",
                                       fuse_whole_function(_softmax(rows, 1024)), x, threads)
    np.testing.assert_array_equal(after.view(np.uint32), before.view(np.uint32))


def test_nan_and_infinite_rows_next_to_each_other(rng, monkeypatch):
    """Each kind of special row right after and right before a plain one, so that every row's max comes from the
    exp loop of the row before (the range's first row aside)."""
    special = _nan_rows(rng, 40)
    x = rng.standard_normal((80, 1024)).astype(np.float32)
    x[1::2] = special
    fn = fuse_whole_function(_softmax(80, 1024))
    results = []
    for on in (False, True):
        _next_max(monkeypatch, on)
        (out,) = build_cpu_executable(fn, {"threads": 1})(x)
        results.append(np.asarray(out).view(np.uint32))
    np.testing.assert_array_equal(results[1], results[0])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [3, 2201])
def test_bf16_rows_taking_the_next_row_max_give_the_same_bits(rng, monkeypatch, threads, rows):
    if rows < 32:  # (streamed, so that the write is delayed: a range of 1-2 rows at 2 threads)
        monkeypatch.setattr(streams, "STREAM_MIN_BYTES", 0)
        monkeypatch.setattr(CpuTarget, "streams_outputs", lambda self, nbytes: True)
    x = _nan_rows(rng, 1033)  # (NaN rows of every kind, -inf rows, payloads)
    x = to_bits(x[SMALL[:rows]] if rows <= len(SMALL) else np.resize(x, (rows, 1024)))
    fn = fuse_whole_function(_softmax_bits(rows, 1024))
    results = []
    for on in (False, True):
        _next_max(monkeypatch, on)
        (out,) = build_cpu_executable(fn, {"threads": threads})(x)
        results.append(np.asarray(out).view(np.uint16).copy())
    np.testing.assert_array_equal(results[1], results[0])
