"""bf16 softmax's row widened to float32 once on AVX2, by its max pass, for its exp pass
(``CpuTarget.caches_widened_bf16_rows_for_exp``, ``refine.widened_row_cache``'s ``read_by``; session 25 softmax25:
bf16 softmax [4096, 1024] 0.98-0.99 of the time at 1 and 2 threads on Zen 3): the exp loop loads float32 from L1
instead of widening each word again. AVX-512's code (which keeps every such row widened already) and bf16
LayerNorm's (no transcendental pass) do not change; the bits are those of the code that widens in both passes."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import ZEN4
from test_pairs import AVX2, _softmax_bits, layernorm_graph, to_bits
from test_widened_rows import _widenings

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Function
from neuroncc.testing.choices import choose

ROW_BUFFER = re.compile(r"alloca \[\d+ x float\], align 4096")  # (row caches: ``row_buffers.allocate_rows``)


def _assembly(fn: Function, target: CpuTarget) -> tuple[str, str]:
    """The IR and assembly for ``target``, the buffers aligned as the launch plan's and a last-level cache of
    unknown size: large outputs stream, so softmax's write pass is delayed into the next row's exp pass."""
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    plan = dataclasses.replace(plan, aligned_args=frozenset(range(plan.n_args)))
    texts, _ = emit_kernel(plan, "k", dataclasses.replace(target, last_level_cache_bytes=0))
    return "".join(texts), jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]


def _widen_for_exp(monkeypatch, on: bool) -> None:
    choose(monkeypatch, caches_widened_bf16_rows_for_exp=on)


def test_avx2_widens_softmax_rows_once_and_zen4_and_layernorm_as_before(monkeypatch):
    softmax, layernorm = _softmax_bits(2201, 1024), layernorm_graph(64, 1024)  # (4 MiB out: streamed)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.caches_widened_bf16_rows_for_exp and not zen4.caches_widened_bf16_rows_for_exp
    on, zen4_code, layernorm_code = _assembly(softmax, zen3), _assembly(softmax, zen4), _assembly(layernorm, zen3)
    assert "vmovntdq" in on[1]  # (the streamed, delayed write pass)
    _widen_for_exp(monkeypatch, False)
    off = _assembly(softmax, zen3)
    # the max pass widens each word; the exp pass no longer does it again
    assert _widenings(on[1]) < _widenings(off[1])
    assert len(ROW_BUFFER.findall(on[0])) == len(ROW_BUFFER.findall(off[0])) + 1  # (the widened row's)
    assert _assembly(layernorm, zen3) == layernorm_code  # (bf16 LayerNorm: no pass computes a transcendental)
    _widen_for_exp(monkeypatch, True)
    # (AVX-512 keeps every such row widened already; Zen 4's exp pass widens again:
    # ``CpuTarget.widens_bf16_rows_again_in_the_exp_pass``)
    assert _assembly(softmax, zen4) == zen4_code


def test_softmax_rows_widened_for_exp_give_the_same_bits(rng, monkeypatch):
    # outputs past the emitter's streaming threshold: the delayed write pass (and so the widened row) on any host
    for rows, cols in ((2201, 1024), (1101, 2048)):  # (rows of whole lines: a delayed write needs them)
        fn = fuse_whole_function(_softmax_bits(rows, cols))
        x = special_floats(rng, (rows, cols), scale=4.0)  # (row 0: NaN, +-inf, +-0, extremes)
        x[1, 100], x[2], x[3, 17], x[4, ::2] = np.nan, -np.inf, np.inf, -0.0
        inputs = [to_bits(x)]
        (got,) = build_cpu_executable(fn, {"threads": 2})(*inputs)
        _widen_for_exp(monkeypatch, False)
        (want,) = build_cpu_executable(fn, {"threads": 2})(*inputs)
        _widen_for_exp(monkeypatch, True)
        np.testing.assert_array_equal(got, want)
