"""Softmax's delayed write (``delayed_writes.py``) goes before each group's exponentials on AVX2, after the group's
prefetches (``CpuTarget.writes_delayed_group_before_the_exponentials``, ``prefetch.spread_loop``; session 25
softmax25: float32 softmax [4096, 1024] 0.980 / 0.986 of the time at 1 / 2 threads on Zen 3, medians of ten A/Bs;
bf16 0.92-0.98). AVX-512's order is as before; the bits do not change."""

from __future__ import annotations

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import ZEN4
from test_pairs import AVX2, _softmax_bits, to_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose


def _softmax(rows: int, cols: int) -> Function:
    b = Builder("softmax")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))])


def _write_first(monkeypatch, on: bool) -> None:
    choose(monkeypatch, writes_delayed_group_before_the_exponentials=on)


def _stores_before_exponentials(asm: str) -> bool:
    """Whether the row loop's first streamed store comes before its first exponential (the rounding FMA of
    exp's range reduction; the max pass before both has no FMA)."""
    return asm.index("vmovnt") < asm.index("vfmsub")


def test_avx2_writes_each_group_before_its_exponentials_and_avx512_as_before(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.writes_delayed_group_before_the_exponentials
    assert not zen4.writes_delayed_group_before_the_exponentials
    for fn in (_softmax(1030, 1024), _softmax_bits(2201, 1024)):  # (outputs of 4 MiB: streamed, the write delayed)
        # (AVX2 writes float32 outputs in the exp loop itself: ``test_delayed_write_in_exp_loop.py``; here the
        # groups' own write loops)
        choose(monkeypatch, writes_delayed_elements_in_the_exp_loop=False)
        assert _stores_before_exponentials(_assembly(fn, zen3)[1])
        zen4_code = _assembly(fn, zen4)
        assert not _stores_before_exponentials(zen4_code[1])
        _write_first(monkeypatch, False)
        assert not _stores_before_exponentials(_assembly(fn, zen3)[1])
        assert _assembly(fn, zen4) == zen4_code
        monkeypatch.undo()


def test_the_write_order_gives_the_same_bits(rng, monkeypatch):
    x = special_floats(rng, (1031, 1024), scale=4.0)  # (row 0: NaN, +-inf, +-0, extremes)
    x[1, 100], x[2], x[3, 17], x[4, ::2] = np.nan, -np.inf, np.inf, -0.0
    bf16_x = to_bits(np.resize(x, (2201, 1024)))
    for fn, inputs in ((_softmax(1031, 1024), [x]), (_softmax_bits(2201, 1024), [bf16_x])):
        fn = fuse_whole_function(fn)
        results = []
        for on in (True, False):
            _write_first(monkeypatch, on)
            for threads in (1, 2):
                results += build_cpu_executable(fn, {"threads": threads})(*inputs)
        for result in results[1:]:
            np.testing.assert_array_equal(result, results[0])
