"""Zen 4's map stages over bf16 element pairs whose elements evaluate two independent polynomials split them
(``CpuTarget.bf16_pair_split_interleave``, ``map_stages.MapStages._split_math``): bf16 gelu(x*w+b)*sigmoid(x)'s
sigmoid by a paired loop of its own into an L1 buffer in pair order, then gelu and the product by the stage's paired
loop, 4 vectors interleaved in each; the same bits (NaN payloads, infinities, zeros, subnormals, ties); other CPUs,
odd rows and rows past ``SPLIT_MATH_MAX`` as before. Row (a) reads its gelu and sigmoid from bf16 tables on Zen 4
since session 37 (``CpuTarget.bf16_table_loop_lanes``: no polynomial left to split): here the tables are off, as for
a bf16 map of two polynomials that its stage cannot read by table (a float32 polynomial beside them)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import aligned_kernel_code
from test_bf16_op_results import _inputs as _nan_inputs
from test_bf16_op_results import gelu_sigmoid_graph
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2
from test_split_math_loops import _inputs
from test_streamed_map_prefetch import _chosen

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

CHOICE = "bf16_pair_split_interleave"


@pytest.fixture(autouse=True)
def _polynomials(monkeypatch):
    """Zen 4's polynomials (its tables off: ``CpuTarget.bf16_table_loop_lanes``)."""
    choose(monkeypatch, bf16_table_loop_lanes=0)


def _loops(text: str) -> list[int]:
    """The interleave counts of the kernel's hinted (math) loops, in order."""
    counts = dict(re.findall(r'^(!\d+) = !\{ !"llvm.loop.interleave.count", i32 (\d+) \}$', text, re.M))
    hints = dict(re.findall(r"^(!\d+) = distinct !\{ !\d+, (!\d+) \}$", text, re.M))
    return [int(counts[hints[ref]]) for ref in re.findall(r"!llvm.loop (!\d+)", text)]


def _code(rows: int, cols: int) -> tuple[str, list[int]]:
    """Zen 4's LLVM IR of bf16 row (a) and its math loops' interleave counts."""
    text, _ = aligned_kernel_code(gelu_sigmoid_graph(rows, cols), CpuTarget("znver4", ZEN4))
    return text, _loops(text)


def test_the_decision():
    assert getattr(CpuTarget("znver4", ZEN4), CHOICE) == 4
    assert getattr(CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CHOICE) == 0
    assert getattr(CpuTarget("znver3", AVX2), CHOICE) == 0


def test_zen4_computes_sigmoid_by_a_paired_loop_of_its_own(monkeypatch):
    text, loops = _code(64, 1024)
    assert loops == [4, 4]
    assert text.index('@"ncc.math.sigmoid') < text.index('@"ncc.math.gelu')  # (gelu's loop first measured slower)
    _chosen(monkeypatch, CHOICE, 0)
    before, loops = _code(64, 1024)
    assert loops == [2]  # one pair loop, as before
    assert text.count("alloca [1024 x float]") == before.count("alloca [1024 x float]") + 1  # sigmoid's buffer


@pytest.mark.parametrize("cols", [1023, 4096])
def test_odd_and_long_rows_keep_one_loop(cols):
    # odd rows do not run over pairs; rows past SPLIT_MATH_MAX would take the buffers out of L1
    assert len(_code(8, cols)[1]) == 1


def _bf16_inputs(rng, rows: int, cols: int) -> list[np.ndarray]:
    """Row (a)'s NaN patterns (``test_bf16_op_results``) with ``_inputs``'s specials as bf16 bits (their high halves:
    more NaN payloads, infinities, zeros, subnormals, the math's clamps), bf16 subnormals and values near ties."""
    arrays = _nan_inputs(rng, rows, cols)
    tiny = np.array([0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x3F81, 0xBF83, 0x4303], np.uint16).view(np.int16)
    for k, (array, special) in enumerate(zip(arrays, _inputs(rng, rows, cols), strict=True)):
        bits = (special.view(np.uint32) >> 16).astype(np.uint16).view(np.int16).reshape(-1)
        array.reshape(-1)[-(bits.size // 4):] = bits[-(bits.size // 4):]
        array.reshape(-1)[50 + 3 * k:50 + 3 * k + tiny.size] = tiny
    return arrays


@pytest.mark.parametrize("cols", [1024, 1024 + 2 * 7])  # (and a scalar remainder of pairs)
def test_the_split_keeps_every_bit(rng, monkeypatch, cols):
    fn = fuse_whole_function(gelu_sigmoid_graph(16, cols))
    params = _bf16_inputs(rng, 16, cols)
    results = []
    for interleave in (4, 0):
        _chosen(monkeypatch, CHOICE, interleave)
        (out,) = build_cpu_executable(fn, {"threads": 2})(*params)
        results.append(out)
    assert results[0].dtype == np.int16
    np.testing.assert_array_equal(results[0], results[1])
