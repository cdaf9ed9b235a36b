"""Large outputs start where they are not 4K-aliased with their inputs (``hardware/host.py``:
``placement_shift``): at none of ``aliased_distances()`` past any input modulo ALIAS_PERIOD_BYTES (0 or at least
the host's ``alias_window_bytes`` past each, or before it; other distances, Zen 3's 1 to 255 and the 0 to 1023
session 34 measured on Zen 4, by argument). An output a little past its input there made RMSNorm [8192, 1024] up to
52% slower (docs/performance-history.md)."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware import host
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, CACHE_LINE_BYTES, PLACED_OUTPUT_MIN_BYTES, placement_shift
from neuroncc.ir import Builder, DType, TensorType

ROWS, COLS = 512, 512  # 1 MiB of float32: a placed output
ZEN3 = range(1, 256)  # the aliased distances without AVX-512 (CpuTarget.alias_window_bytes)
ZEN4 = range(0, 1024)  # Zen 4's slow ones at 1 thread (session 34: measured, not taken)


def aliased(output: int, inputs: list[int], distances: range | None = None) -> list[int]:
    """The inputs ``output`` starts at an aliased distance past (``host.aliased_distances()`` unless given), modulo
    the period."""
    distances = host.aliased_distances() if distances is None else distances
    return [a for a in inputs if (output - a) % ALIAS_PERIOD_BYTES in distances]


def test_the_shift_is_the_smallest_cache_line_multiple_off_every_input():
    base = 1 << 20  # page-aligned
    assert placement_shift(base, [], ZEN3) == 0
    assert placement_shift(base, [base], ZEN3) == 0  # the same page offset: the loads never meet older stores
    assert placement_shift(base, [base - 48], ZEN3) == 256  # 48 bytes past: the first cache line 256 past
    assert placement_shift(base, [base - 48, base + 200 - 4096], ZEN3) == 512  # 200 + 256, to a cache line
    for inputs in ([base + 16 * k for k in range(5)], [base - 64 * k - 8 for k in range(15)]):
        shift = placement_shift(base, inputs, ZEN3)
        assert shift % CACHE_LINE_BYTES == 0 and shift < ALIAS_PERIOD_BYTES
        assert not aliased(base + shift, inputs, ZEN3)
    assert PLACED_OUTPUT_MIN_BYTES <= ROWS * COLS * 4


def test_wider_distances_move_an_output_at_its_input_s_page_offset_past_them():
    base = 1 << 20
    assert placement_shift(base, [base], ZEN4) == 1024  # 0 past: slow on Zen 4
    assert placement_shift(base, [base - 48], ZEN4) == 1024  # 48 past: the first cache line 1024 past (1072)
    assert placement_shift(base, [base + 64], ZEN4) == 0  # 64 before it: left where it is
    assert placement_shift(base, [base - 2048], ZEN4) == 0
    assert placement_shift(base, [base, base + 2048], ZEN4) == 1024  # 1024 past one, 1024 before the other


def _scale_shift(rows: int, cols: int):
    b = Builder("scale_shift")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    return fuse_whole_function(b.build([b.op("add", b.op("mul", x, w), x), b.op("mul", x, w)]))


def test_the_numpy_path_places_each_large_output_off_its_inputs_at_every_input_offset():
    exe = build_cpu_executable(_scale_shift(ROWS, COLS), {"threads": 1})
    memory = np.zeros(ROWS * COLS + ALIAS_PERIOD_BYTES, dtype=np.float32)
    w = np.linspace(-1, 1, COLS, dtype=np.float32)
    for offset in range(0, ALIAS_PERIOD_BYTES // 4, 4):  # x at every 16-byte page offset
        x = memory[offset:offset + ROWS * COLS].reshape(ROWS, COLS)
        x[0, 0] = offset
        first, second = exe(x, w)
        np.testing.assert_array_equal(first, x * w + x)
        np.testing.assert_array_equal(second, x * w)
        inputs = [x.ctypes.data, w.ctypes.data]
        assert not aliased(first.ctypes.data, inputs), offset
        assert not aliased(second.ctypes.data, inputs + [first.ctypes.data]), offset
        assert first.ctypes.data % CACHE_LINE_BYTES == 0 and second.ctypes.data % CACHE_LINE_BYTES == 0


def test_small_outputs_are_left_where_the_allocator_puts_them():
    exe = build_cpu_executable(_scale_shift(4, 8), {"threads": 1})
    first, _ = exe(np.ones((4, 8), np.float32), np.ones(8, np.float32))
    assert first.base.nbytes < 4 * 8 * 4 + ALIAS_PERIOD_BYTES  # not one alias period longer


def test_the_aliasing_window_is_the_cpu_s_and_divides_the_page():
    """Zen 4's window is 512 bytes (softmax's fused loop slow to 320 past its input: session 41 place41), Zen 3's
    and the unmeasured Intel AVX-512 cores' 256; each a cache-line multiple dividing the page (the device's blocks
    step through it), and the host's distances are its own window's."""
    from neuroncc.hardware.host import CpuTarget, host_cpu

    avx2 = "+avx,+avx2,+fma,-avx512f"
    avx512 = "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16"
    windows = {"znver3": CpuTarget("znver3", avx2).alias_window_bytes,
               "znver4": CpuTarget("znver4", avx512).alias_window_bytes,
               "sapphirerapids": CpuTarget("sapphirerapids", avx512 + ",+avx512fp16").alias_window_bytes}
    assert windows == {"znver3": 256, "znver4": 512, "sapphirerapids": 256}
    for window in windows.values():
        assert window % CACHE_LINE_BYTES == 0 and ALIAS_PERIOD_BYTES % window == 0
    assert host.aliased_distances() == range(1, host_cpu().alias_window_bytes)


@pytest.mark.parametrize("distances", [ZEN3, ZEN4], ids=["zen3", "zen4"])
def test_the_shift_is_the_smallest_of_all_cache_line_shifts(distances):
    """Against trying every cache-line shift, for random inputs (1-16 of them)."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        base = int(rng.integers(0, 1 << 30)) * CACHE_LINE_BYTES
        inputs = [int(a) for a in rng.integers(0, 1 << 36, size=int(rng.integers(1, 17))) * 16]
        valid = [s for s in range(0, ALIAS_PERIOD_BYTES, CACHE_LINE_BYTES)
                 if not aliased(base + s, inputs, distances)]
        assert placement_shift(base, inputs, distances) == (valid[0] if valid else 0)


@pytest.mark.parametrize("distances", [ZEN3, ZEN4], ids=["zen3", "zen4"])
def test_the_numpy_path_keeps_each_cpu_s_distances(distances, monkeypatch):
    """The numpy path's outputs at none of the distances ``host.aliased_distances`` names, whichever they are."""
    monkeypatch.setattr(host, "aliased_distances", lambda: distances)
    test_the_numpy_path_places_each_large_output_off_its_inputs_at_every_input_offset()
