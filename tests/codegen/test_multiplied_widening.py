"""bf16 words widened by ``vpmulld`` by 65536 in a mean's and a variance's sums on Zen 4
(``CpuTarget.widens_summed_bf16_by_multiplication``, ``codegen/llvm/widening.py``): the shift ran on the add pipes those
loops are bound by. The same bits; the write pass, AVX2 and Intel's AVX-512 cores keep their shifts."""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2, layernorm_graph, to_bits
from test_row_pass_bursts import var_mean_layernorm
from test_variance_deviations import _same_bits_with_and_without

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

PROPERTY = "widens_summed_bf16_by_multiplication"


def _loops(asm: str) -> tuple[str, str]:
    """(the mean and deviation passes, the write pass) of a bf16 LayerNorm kernel's assembly."""
    write = asm.rindex("vsqrtss")
    return asm[:write], asm[write:]


def _widening(asm: str) -> tuple[int, int]:
    """(shifts by 16, multiplies) of 32-bit lanes in ``asm``."""
    return len(re.findall(r"vpslld\s+\$16, %zmm", asm)), asm.count("vpmulld")


def test_zen4_sums_widen_by_multiplication(monkeypatch):
    # (the mean passes' pair loops as they were before their dot products, ``test_dot_sums.py``: with those the pair
    # loops are only a row's fallback, laid out after the write pass)
    choose(monkeypatch, sums_bf16_rows_by_dot_products=False)
    fn, zen4 = layernorm_graph(64, 1024), CpuTarget("znver4", ZEN4)
    assert zen4.widens_summed_bf16_by_multiplication
    on_ir, on = _assembly(fn, zen4)
    choose(monkeypatch, **{PROPERTY: False})
    off_ir, off = _assembly(fn, zen4)
    (sums_on, write_on), (sums_off, write_off) = _loops(on), _loops(off)
    # the first row's mean pass, the deviation pass and the next row's mean pass (4 words a loop iteration each)
    # multiply; the weight's and the bias's widening before the rows (not sums) keeps its shifts
    shifts, multiplies = _widening(sums_off)
    shifts_on, multiplies_on = _widening(sums_on)
    assert multiplies == 0 and multiplies_on >= 12 and shifts_on + multiplies_on == shifts
    assert _widening(write_on) == _widening(write_off)  # (the write pass loads the cached deviations)
    # one opaque factor per phase function; every other instruction of the sums is the same
    assert len(re.findall(r'asm\s+"", "=r,0"\(i32 65536\)', on_ir)) == 1
    # (off: no opaque 65536; the write's empty asm on its converted words is bf16_words.py's, session 36 bfw36)
    assert not re.findall(r'asm\s+"", "=r,0"\(i32 65536\)', off_ir)
    assert on.count("vaddps") == off.count("vaddps") and on.count("vsubps") == off.count("vsubps")


def test_avx2_and_intel_avx512_keep_their_shifts():
    fn = layernorm_graph(64, 1024)
    targets = [CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)]
    assert not any(target.widens_summed_bf16_by_multiplication for target in targets)
    for target in targets:  # no opaque factor made, no multiply anywhere in the kernel
        ir_text, asm = _assembly(fn, target)
        assert " asm " not in ir_text and "vpmulld" not in asm, target.name


def test_float32_sums_keep_their_code(monkeypatch):
    # (a float32 mean or variance widens nothing: no factor is made, the module's text is the same)
    fn, zen4 = var_mean_layernorm(64, 1024), CpuTarget("znver4", ZEN4)
    default = _assembly(fn, zen4)
    choose(monkeypatch, **{PROPERTY: False})
    assert _assembly(fn, zen4) == default


def test_multiplied_widening_gives_the_same_bits(rng, monkeypatch):
    for rows, cols, threads in ((67, 1024, 2), (5, 2 * 16 * 3 + 2 * 5, 1)):  # whole vectors of pairs; a remainder
        fn = fuse_whole_function(layernorm_graph(rows, cols))
        x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
        x[0] = special_floats(rng, (cols,))  # NaN and infinities
        x[1, :4], x[2, 5], x[3, :3] = [1e30, -1e30, 1e-30, -0.0], np.inf, [3e38, 3e38, -3e38]
        inputs = [to_bits(x)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]
        _same_bits_with_and_without(monkeypatch, PROPERTY, fn, inputs, threads)
