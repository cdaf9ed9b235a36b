"""The stack buffers bf16 LayerNorm's streamed write pass loads placed at run time past its output rows on AVX2
(``CpuTarget.places_write_buffers_past_the_output``, ``row_buffers.write_buffer_shift``): the cached deviations and
the widened weight and bias start half a 2 KiB period past the output row modulo 2 KiB, whatever the output's
address, so that the write loop's loads are not 4K-aliased with its queued non-temporal stores; the bits are the
same; Zen 4 places them too, Intel's AVX-512 cores' and float32 LayerNorm's code is unchanged."""

from __future__ import annotations

import numpy as np
from codegen_helpers import aligned_kernel_code
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2, layernorm_graph, to_bits
from test_row_pass_bursts import var_mean_layernorm

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

#: a row buffer one 2 KiB period (512 floats) longer than its row: placed at run time
PLACED = "alloca [1536 x float], align 4096"


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, places_write_buffers_past_the_output=on)


def test_avx2_and_zen4_bf16_layernorm_place_their_write_buffers_past_the_output(monkeypatch):
    fn = layernorm_graph(4096, 1024)
    for target, placed in ((CpuTarget("znver3", AVX2), 3), (CpuTarget("znver4", ZEN4), 4)):
        monkeypatch.undo()
        # (Zen 4's variance from its mean pass's squares pinned off: it has no deviations, ``test_dot_variance.py``)
        choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
        on_ir, on = aligned_kernel_code(fn, target)
        _switch(monkeypatch, False)
        off_ir, off = aligned_kernel_code(fn, target)
        # the deviations' row cache and the widened weight and bias (Zen 4: and its widened row cache): one period
        # longer, started at the output's address plus half a period, modulo the period, in cache lines
        assert on_ir.count(PLACED) == placed and PLACED not in off_ir
        assert "ptrtoint" in on_ir and "and i64" in on_ir and "1984" in on_ir
        # the same loops: the write loop reads its three buffers through registers, not at offsets from the frame
        write_on, write_off = on[on.rindex("vsqrtss"):], off[off.rindex("vsqrtss"):]
        assert write_on.count("vmulps") == write_off.count("vmulps") and "vmovntdq" in write_on
        assert "(%rsp," in write_off and "(%rsp," not in write_on


def test_intel_avx512_and_float32_layernorm_code_is_unchanged(monkeypatch):
    intel, avx2 = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CpuTarget("znver3", AVX2)
    assert not intel.places_write_buffers_past_the_output and avx2.places_write_buffers_past_the_output
    default_intel = aligned_kernel_code(layernorm_graph(4096, 1024), intel)
    default_f32 = aligned_kernel_code(var_mean_layernorm(4096, 1024), avx2)
    _switch(monkeypatch, True)  # (Intel caches no deviations, float32 LayerNorm neither: nothing to place)
    assert aligned_kernel_code(layernorm_graph(4096, 1024), intel) == default_intel
    assert aligned_kernel_code(var_mean_layernorm(4096, 1024), avx2) == default_f32


def placed_output(nbytes: int, offset: int) -> np.ndarray:
    """A bf16 output buffer starting ``offset`` bytes past a 4 KiB boundary."""
    raw = np.empty(nbytes + 8192, np.uint8)
    start = -raw.ctypes.data % 4096 + offset
    return raw[start:start + nbytes].view(np.int16)


def assert_placed_bits_equal(rng, switch, rows: int, cols: int, offsets: tuple[int, ...]) -> None:
    """bf16 LayerNorm [rows, cols] (special values in its first rows) with ``switch(True)``, called into outputs at
    each of ``offsets`` past a page, gives ``switch(False)``'s bits, at 2 and 1 threads."""
    fn = fuse_whole_function(layernorm_graph(rows, cols))
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    x[0, :3], x[1, 5], x[2, :2] = [np.inf, 1e30, -0.0], np.nan, [3e38, -3e38]
    inputs = [to_bits(x)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]
    for threads in (2, 1):
        switch(False)
        (want,) = build_cpu_executable(fn, {"threads": threads})(*inputs)
        switch(True)
        call = AddressCall(build_cpu_executable(fn, {"threads": threads}))
        for offset in offsets:
            got = placed_output(want.nbytes, offset)
            call([a.ctypes.data for a in inputs], [got.ctypes.data])
            np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_placed_write_buffers_give_the_same_bits(rng, monkeypatch):
    # 16 MiB in and out: streamed, as the placement needs; past the output row: 1024, 1088, 256, 0 modulo 2 KiB
    assert_placed_bits_equal(rng, lambda on: _switch(monkeypatch, on), 4096, 1024, (0, 64, 1280, 2048 + 960))
