"""Softmax's max pass without its NaN flag on AVX2, a row's NaNs found by its sum (``CpuTarget.finds_row_nans_by_the_sum``,
``codegen/llvm/nan_rows.py``): the max loop has no magnitude bits (no ``vpmaxud``), a row whose sum is NaN runs its
max pass again as before, and its exp pass again only where that max differs in bits from the flagless one (session 28
softmax28: a wholly -inf row, fully masked attention, ran both passes twice); the same bits for NaN rows of every kind
(session 27 softmax27). AVX-512's code is as before."""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import ZEN4
from test_delayed_write_order import _softmax
from test_pairs import AVX2, _softmax_bits, to_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

BLOCK = re.compile(r"\n\.LBB\d+_\d+:")


def _by_sum(monkeypatch, on: bool) -> None:
    choose(monkeypatch, finds_row_nans_by_the_sum=on)


def _flagless_max_loop(asm: str) -> bool:
    """Whether a loop block takes vmaxps of the row without the magnitudes' vpmaxud beside it."""
    return any("vmaxps" in block and "vpmaxud" not in block and "vfmsub" not in block and "jne" in block
               for block in BLOCK.split(asm))


def test_avx2_max_pass_without_nan_flag_and_avx512_as_before(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.finds_row_nans_by_the_sum and not zen4.finds_row_nans_by_the_sum
    functions = (_softmax(1030, 1024), _softmax_bits(2201, 1024))  # (4 MiB outputs: streamed, the write delayed)
    on = [_assembly(fn, zen3)[1] for fn in functions]
    zen4_code = [_assembly(fn, zen4) for fn in functions]
    assert all(_flagless_max_loop(asm) for asm in on)
    _by_sum(monkeypatch, False)
    assert not any(_flagless_max_loop(_assembly(fn, zen3)[1]) for fn in functions)
    assert [_assembly(fn, zen4) for fn in functions] == zen4_code


def _nan_rows(rng, rows: int) -> np.ndarray:
    x = special_floats(rng, (rows, 1024), scale=4.0)  # (row 0: NaN, +-inf, +-0, extremes)
    x[1, 100], x[2], x[3, 17], x[4, ::2], x[5] = np.nan, -np.inf, np.inf, -0.0, 0.0
    x[6, :5] = np.array([-np.inf, np.nan, np.inf, -np.inf, np.nan], np.float32)
    x[7] = np.nan
    bits = x.view(np.uint32)
    bits[8, 1023] = 0xFFC01234  # (a negative quiet NaN with a payload, the row's last element)
    bits[9, 0], bits[9, 515] = 0x7F800001, 0xFF812345  # (signaling NaNs)
    bits[10, 31] = 0x7FBFFFFF
    x[11, 300], x[12, :] = np.inf, np.inf
    x[13, ::3] = np.nan
    x[14:18] = -np.inf  # (wholly -inf, and -inf with a NaN last, a NaN with a payload first, +inf)
    x[15, 1023] = np.nan
    bits[16, 0] = 0x7FC0ABCD
    x[17, 5] = np.inf
    return x


def test_a_nan_sum_row_runs_its_exp_pass_again_only_for_another_max(monkeypatch):
    """In the znver3 IR, after the branch on a NaN row sum, the max pass again, then a compare of the two maxima's
    bits guards the exp pass (``CpuTarget.reruns_the_exp_pass_only_for_another_max``)."""
    zen3 = CpuTarget("znver3", AVX2)
    assert zen3.reruns_the_exp_pass_only_for_another_max
    for fn in (_softmax(1030, 1024), _softmax_bits(2201, 1024)):
        redo = _assembly(fn, zen3)[0].split("fcmp uno")[1]
        assert redo.index("icmp ne i32") < redo.index("exp_nonpositive")


def test_nan_rows_give_the_same_bits(rng, monkeypatch):  # (with the flag as before; the exp pass as it reruns now)
    x = _nan_rows(rng, 1033)
    bf16_x = to_bits(np.resize(x, (2201, 1024)))
    for fn, inputs in ((_softmax(1033, 1024), [x]), (_softmax_bits(2201, 1024), [bf16_x])):
        fn = fuse_whole_function(fn)
        results = []
        for on in (False, True):
            _by_sum(monkeypatch, on)
            for threads in (1, 2):
                (out,) = build_cpu_executable(fn, {"threads": threads})(*inputs)
                out = np.asarray(out)
                results.append(out.view(np.uint32 if out.itemsize == 4 else np.uint16).copy())
        for result in results[1:]:
            np.testing.assert_array_equal(result, results[0])
