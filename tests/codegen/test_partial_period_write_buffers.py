"""bf16 LayerNorm's write buffers placed past output rows that are whole 512 or 1024 bytes but not whole 2 KiB on
AVX2 (``CpuTarget.places_write_buffers_past_partial_period_rows``, ``row_buffers.write_buffer_shift``): those rows
start at every multiple of the period modulo 4 KiB in turn, and the cached deviations and the widened weight and
bias start half a period less 128 bytes past each of them modulo the period; the bits are the same, rows of whole
2 KiB and the code of AVX-512 CPUs (Zen 4: not measured; Intel's, which caches no deviations) are unchanged."""

from __future__ import annotations

import re

from codegen_helpers import aligned_kernel_code
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2, layernorm_graph
from test_write_buffer_placement import assert_placed_bits_equal

from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, places_write_buffers_past_partial_period_rows=on)


def test_avx2_places_the_write_buffers_past_rows_of_whole_512_and_1024_bytes(monkeypatch):
    avx2 = CpuTarget("znver3", AVX2)
    assert avx2.places_write_buffers_past_partial_period_rows
    for cols, mask, distance in ((768, 448, 128), (1536, 960, 384)):  # rows of 1536 / 3072 bytes
        on_ir, _ = aligned_kernel_code(layernorm_graph(4096, cols), avx2)
        # the three buffers one 2 KiB period longer, started at the output's address plus the distance, modulo
        # the row period in cache lines
        placed = f"alloca [{cols + 512} x float], align 4096"
        assert on_ir.count(placed) == 3, cols
        assert re.search(rf"add i64 %\S+, {distance}\n.*\n?.*and i64 %\S+, {mask}\n", on_ir), cols
        _switch(monkeypatch, False)
        off_ir, _ = aligned_kernel_code(layernorm_graph(4096, cols), avx2)
        assert placed not in off_ir and "ptrtoint" not in off_ir, cols
        monkeypatch.undo()


def test_whole_period_rows_and_avx512_code_are_unchanged(monkeypatch):
    zen4, avx2 = CpuTarget("znver4", ZEN4), CpuTarget("znver3", AVX2)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert not zen4.places_write_buffers_past_partial_period_rows
    assert not intel.places_write_buffers_past_partial_period_rows
    default_1024 = aligned_kernel_code(layernorm_graph(4096, 1024), avx2)
    default_zen4 = aligned_kernel_code(layernorm_graph(4096, 768), zen4)
    default_intel = aligned_kernel_code(layernorm_graph(4096, 768), intel)
    assert "1984" in default_1024[0]  # (rows of whole 2 KiB: placed as before, 1 KiB past modulo 2 KiB)
    assert "ptrtoint" not in default_zen4[0]  # (Zen 4 places whole 2 KiB rows' buffers only)
    _switch(monkeypatch, False)
    assert aligned_kernel_code(layernorm_graph(4096, 1024), avx2) == default_1024
    _switch(monkeypatch, True)  # (Intel's AVX-512 cores cache no deviations: nothing to place)
    assert aligned_kernel_code(layernorm_graph(4096, 768), intel) == default_intel
    # rows of 1000 bf16 (2000 bytes: every 16 bytes modulo 4 KiB in turn) are not placed
    assert "ptrtoint" not in aligned_kernel_code(layernorm_graph(4096, 1000), avx2)[0]


def test_placed_write_buffers_give_the_same_bits(rng, monkeypatch):
    for rows, cols in ((8192, 768), (4096, 1536)):  # (12 MiB in and out: streamed, as the placement needs)
        assert_placed_bits_equal(rng, lambda on: _switch(monkeypatch, on), rows, cols, (0, 64, 1536, 3008))
