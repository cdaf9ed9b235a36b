"""bf16 softmax's row caches placed at run time past its output rows on AVX2
(``CpuTarget.places_delayed_word_write_buffers_past_the_output``, ``row_buffers.write_buffer_shift``): the delayed
write loop that rounds the previous row's outputs to bf16 words loads that row's cached exponentials while its
non-temporal stores queue; with the caches on a 4 KiB boundary those loads were 4K-aliased with the stores wherever
the output rows started a little past a 2 KiB boundary. The caches now start 1 KiB past the output rows modulo
2 KiB, whatever the output's address; the bits are the same, and float32 softmax's code is unchanged. Zen 4 too
(session 40 bfsm40: its one row cache, the exponentials, whose halves its write loop loads 2 KiB apart); Intel's
AVX-512 cores keep their code."""

from __future__ import annotations

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_pairs import AVX2, _softmax_bits, to_bits
from test_widened_exp_rows import _assembly
from test_write_buffer_placement import placed_output

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

PROPERTY = "places_delayed_word_write_buffers_past_the_output"
#: the two row caches of bf16 softmax [*, 1024] (the exponentials and the widened row, two row copies each, 6 KiB
#: apart), one 2 KiB period (512 floats) longer when placed at run time
PLACED, FRAMED = "alloca [3072 x float], align 4096", "alloca [2560 x float], align 4096"


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def test_avx2_bf16_softmax_places_its_row_caches_past_the_output(monkeypatch):
    fn, avx2 = _softmax_bits(2201, 1024), CpuTarget("znver3", AVX2)  # (4 MiB out: streamed, the write delayed)
    assert getattr(avx2, PROPERTY)
    on_ir, on = _assembly(fn, avx2)
    _switch(monkeypatch, False)
    off_ir, off = _assembly(fn, avx2)
    assert on_ir.count(PLACED) == 2 and off_ir.count(FRAMED) == 2 and PLACED not in off_ir
    assert "ptrtoint" in on_ir and "and i64" in on_ir and "1984" in on_ir  # (the output's address + 1 KiB, mod 2 KiB)
    # the same write loop: two products, the rounding in word lanes, one streamed store per 16 elements
    for asm in (on, off):
        write = asm[asm.index("vpmaxuw") - 400:asm.index("vmovntdq") + 40]
        assert write.count("vmulps") == 2 and write.count("vpblendw") == 2


def test_zen4_places_its_exponentials_past_the_output_and_intel_and_float32_softmax_are_unchanged(monkeypatch):
    zen4, avx2 = CpuTarget("znver4", ZEN4), CpuTarget("znver3", AVX2)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert getattr(zen4, PROPERTY) and not getattr(intel, PROPERTY)
    fn = _softmax_bits(2201, 1024)
    zen4_ir, zen4_code = _assembly(fn, zen4)
    # (Zen 4 widens the row again in its exp pass: one row cache, the exponentials, two row copies)
    assert zen4_ir.count(PLACED) == 1 and "1984" in zen4_ir
    intel_ir, intel_code = _assembly(fn, intel)
    assert PLACED not in intel_ir and "1984" not in intel_ir
    f32_code = _assembly(_softmax(1030, 1024), avx2)
    _switch(monkeypatch, False)
    off_ir, off = _assembly(fn, zen4)
    assert PLACED not in off_ir and FRAMED in off_ir and "1984" not in off_ir
    # the same write loop: two products by the reciprocal, the pair conversion, one streamed store per 32 words
    for asm in (zen4_code, off):
        write = asm[asm.index("vcvtne2ps2bf16") - 200:asm.index("vmovntdq") + 40]
        assert write.count("vmulps") == 2 and "vpermw" in write
    assert _assembly(fn, intel) == (intel_ir, intel_code)
    _switch(monkeypatch, True)  # (float32's write is fused into its exp loop, not a loop over words: nothing placed)
    assert _assembly(_softmax(1030, 1024), avx2) == f32_code


def test_placed_row_caches_give_the_same_bits(rng, monkeypatch):
    rows, cols = 2201, 1024  # (an odd row count: each thread's last row written after its row loop)
    x = special_floats(rng, (rows, cols), scale=4.0)
    x[1, 100], x[2], x[3, 17], x[4, ::2], x[5] = np.nan, -np.inf, np.inf, -0.0, 0.0
    fn, inputs = fuse_whole_function(_softmax_bits(rows, cols)), [to_bits(x)]
    for threads in (2, 1):
        _switch(monkeypatch, False)
        (want,) = build_cpu_executable(fn, {"threads": threads})(*inputs)
        _switch(monkeypatch, True)
        call = AddressCall(build_cpu_executable(fn, {"threads": threads}))
        for offset in (0, 64, 1280, 2048 + 960):  # (past the output row modulo 2 KiB: 0, 64, 1280, 960)
            got = placed_output(want.nbytes, offset)
            call([a.ctypes.data for a in inputs], [got.ctypes.data])
            np.testing.assert_array_equal(got.reshape(want.shape), want)
