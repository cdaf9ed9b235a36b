"""A streamed map stage computing no transcendental function with float32 outputs prefetches its inputs
``CpuTarget.one_pass_stream_prefetch_lines`` lines ahead in its row loop's first pass over them on AVX2, one
prefetch per one-vector piece (``map_stages.py``; session 26 stream26: float32 x*w+b [8192, 1024]'s kernel 5-11%
faster at 1 thread on Zen 3, 4-10% at 2). A norm's write pass (its row prefetched by the row loop's bursts), bf16
outputs and AVX-512's code do not change; the bits do not either."""

from __future__ import annotations

import numpy as np
import pytest
from test_bf16_rounding import ZEN4
from test_generated_code_unchanged import _digest, llvm_ir
from test_pairs import AVX2, affine_graph, layernorm_graph
from test_row_pass_bursts import rmsnorm, var_mean_layernorm
from test_streamed_map_prefetch import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose


def affine(rows: int, cols: int) -> Function:
    """b + x*w as torch.addcmul hands it over (row (c'); 4 MiB out at [1024, 1024] float32: streamed)."""
    b = Builder("affine")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    return b.build([b.op("add", bias, b.op("mul", x, w))])


def _none(monkeypatch) -> None:
    choose(monkeypatch, one_pass_stream_prefetch_lines=0)


def test_avx2_prefetches_a_one_pass_stream_24_lines_ahead(monkeypatch):
    fn, zen3 = affine(1024, 1024), CpuTarget("znver3", AVX2)
    assert zen3.one_pass_stream_prefetch_lines == 24
    asm = _assembly(fn, zen3)
    # one prefetch per piece of one vector (32 bytes), 1536 bytes past the piece, beside its non-temporal store
    assert asm.count("prefetcht0") == 1 and "prefetcht0\t1536(" in asm and asm.count("vmovntps") == 1
    _none(monkeypatch)
    assert "prefetcht0" not in _assembly(fn, zen3)


def test_norms_bf16_and_zen4_code_is_unchanged(monkeypatch):
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen4.one_pass_stream_prefetch_lines == 0
    graphs = [rmsnorm(1024, 1024), var_mean_layernorm(1024, 1024), affine_graph(2048, 1024), layernorm_graph(2048, 1024)]
    avx2 = [_assembly(fn, zen3) for fn in graphs]
    zen4_code = _assembly(affine(1024, 1024), zen4)
    assert "prefetcht0" not in zen4_code and "vmovntps" in zen4_code
    _none(monkeypatch)
    # the norms' write passes read rows their row loops' bursts prefetched: nothing added there; bf16 outputs
    # (bf16 x*w+b and LayerNorm on bf16 bits) as they were
    assert [_assembly(fn, zen3) for fn in graphs] == avx2
    assert _assembly(affine(1024, 1024), zen4) == zen4_code


@pytest.mark.normal_build
def test_the_stream_kernels_text_without_them_is_the_former_one(monkeypatch):
    _none(monkeypatch)
    assert _digest(llvm_ir("stream", "whole")) == "87075beada9470bc"  # (test_generated_code_unchanged's, before)


def test_the_prefetches_give_the_same_bits(rng, monkeypatch):
    for rows, cols in ((1024, 1024), (1031, 1024)):  # 4 MiB and more out: streamed on any host with a 32 MiB L3
        fn = fuse_whole_function(affine(rows, cols))
        inputs = [(rng.standard_normal(s) * 3).astype(np.float32) for s in ((rows, cols), (cols,), (cols,))]
        choose(monkeypatch, one_pass_stream_prefetch_lines=24)
        got = build_cpu_executable(fn, {"threads": 2})(*inputs)
        _none(monkeypatch)
        want = build_cpu_executable(fn, {"threads": 2})(*inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got[0], inputs[2] + inputs[0] * inputs[1])
