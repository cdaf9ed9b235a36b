"""The code generated for the benchmark kernels is the code of before the tile decisions moved into the tile
pass (recorded on main at c823aba): the pass's default decisions are the code generators' former choices.

The hashes are of the LLVM IR text (the cpu target: benchmarks/bench_kernels.py's graphs, one kernel each as the
benchmark builds them and through the default pipeline) and of the NKI module (benchmarks/nki_generated_costs.py's
kernels on each generation). The LLVM IR is generated for a pinned host, a Zen 3 with AVX2 (the math library and the
tile pass's vector width depend on the CPU), so the hashes hold on any machine. A change here must be deliberate:
say why in the commit, then update the hashes (``python tests/codegen/test_generated_code_unchanged.py`` prints
them). Changed since c823aba: gelu and softmax (the math library's exp scales by exponent bits instead of
``llvm.ldexp``, which is a C library call per lane without AVX-512; gelu's polynomial), and layernorm (its
variance's first pass stores the mean of the same rows instead of a third pass computing it again); then layernorm
again (session 7: each row prefetches the next row of its input, ``prefetch.py``); every kernel module (session 7:
its ``_team`` function left for the process's one OpenMP team entry; the texts are the former texts without those
functions, checked line for line); softmax, layernorm and stream (session 9: streamed outputs go out a vector at a
time instead of through a 16 KiB buffer, ``streams.stream_bytes``); softmax again (session 9: its exp pass
prefetches the next row, a burst of lines per group of elements, ``prefetch.spread_loop``); gelu and softmax
(session 9: loops computing polynomial math carry an interleave count for the vectorizer, ``loop_hints.py``; sigmoid
negates by 0 - x); layernorm (session 11: the next row's prefetches in bursts, one before each pass over the row,
``prefetch.row_bursts``); softmax (session 11: its exp pass also prefetches the row's output lines for writing and
its write pass stores plainly, ``prefetch.rows_written_by_carried_pass``); softmax (session 12: exp of x - max(x) is
the math library's non-positive exp, without the upper clamp and with a one-step scale, ``signs.at_most_zero``);
softmax (session 13: its write pass one row late, inside the next row's exp pass, with non-temporal stores,
``delayed_writes.py``, its sum over the row cache in a loop of its own, ``stages.SUM_ROW_CACHE_APART``, and its row
cache page-aligned, ``row_buffers.allocate_rows``); layernorm (session 15: its mean and variance passes start their
vector loops at a vector boundary of the row, ``stages._Reducer._aligned_start``); every kernel (session 18: an
index's terms and partial sums are built once per loop body and shared, ``indexing.materialize``; fewer mul/add
instructions, the same O3 assembly for these kernels on Zen 4); softmax (session 20: without AVX-512 the
non-positive exp clamps at -104.5 instead of -104, its one changed constant: the scale is then +0 and the product
does not underflow, ``mathlib.EXP_NONPOSITIVE_FLOOR``); gelu (session 20 underflow: without AVX-512 gelu_tanh clamps
its exponent at -86 instead of -104, its one changed constant: e**w stays normal and 1 + e**w is 1 either way,
``mathlib.ONE_PLUS_EXP_FLOOR``); every kernel (session 22: phase functions named by a digest of their code,
``kernel_names.py``, instead of ``k{op index}``; the texts are the former texts with ``"k0_`` renamed, checked by
hashing them with the name put back); softmax (session 25: without AVX-512 its delayed write group goes before each
group's exponentials, ``CpuTarget.writes_delayed_group_before_the_exponentials``; the text with the property off is
the former one, checked by its hash); stream (session 26: without AVX-512 its one pass over x prefetches x 24 lines
ahead, ``CpuTarget.one_pass_stream_prefetch_lines``; the text with the property off is the former one, checked by
its hash in ``test_one_pass_stream_prefetch.py``); gelu (session 26: without AVX-512 sigmoid's e**-x scales in one
product and folds -x into its constants, ``CpuTarget.scales_one_plus_exp_in_one_step``, and gelu halves inside its
erf, ``CpuTarget.halves_gelu_in_its_erf``; the same bits; the text with both properties off is the former one,
checked by its hash); gelu again (session 26: without AVX-512 its gelu is computed by a loop of its own into an L1
buffer before the loop of sigmoid and the product, ``CpuTarget.splits_polynomial_math_loops``; the text with the
property off is the previous one, checked by its hash); softmax (session 26: without AVX-512 its delayed write runs
in the exp loop, ``CpuTarget.writes_delayed_elements_in_the_exp_loop``; the text with the property off hashes as the
former one, 11d6005453a3cd96); softmax (session 27: without AVX-512 its max pass has no NaN flag and a row whose sum is
NaN runs its max and exp passes again, ``CpuTarget.finds_row_nans_by_the_sum``; the same bits; the text with the
property off hashes as the former one, 00b4ea870e091e1f); softmax (session 28: without AVX-512 a row whose sum is NaN
runs its exp pass again only where its max with the NaN flag differs from the flagless one,
``CpuTarget.reruns_the_exp_pass_only_for_another_max``; the same bits; the text with the property off hashes as the
former one, a08679d2b3be2f42); gelu (session 39: without AVX-512 too its float32 gelu divides its erf's ratio,
``CpuTarget.divides_gelu_erf_ratio``; the text with the property off hashes as the former one, f9023c878becc235);
gelu (session 41: without AVX-512 too its rows of whole pieces run in pieces of 4 lines,
``CpuTarget.function_piece_lines``, before the split loops; the same bits; the text with the property 0 hashes as the
former one, e491473f1bc65d32); gelu (session 43: without AVX-512 a phase running such pieces aligns its stack to
32 bytes, ``CpuTarget.aligns_vector_spill_slots``; the same loop, its spill slots aligned; the text with the
property off hashes as the former one, 054942449ff920b0)."""

from __future__ import annotations

import hashlib

import pytest

from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.hardware import host
from neuroncc.codegen.llvm.regions import fuse_whole_function, wrap_remaining_ops
from neuroncc.executors.nki_sim.executable import nki_source
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import default_pipeline, run_pipeline
from neuroncc.testing.models import layer_norm_graph, softmax_graph

LLVM_IR = {
    ("gelu", "whole"): "829d6d12d595d10c",
    ("gelu", "pipeline"): "829d6d12d595d10c",
    ("softmax", "whole"): "8a46ea65fa7f8dbe",
    ("softmax", "pipeline"): "8a46ea65fa7f8dbe",
    ("layernorm", "whole"): "298787d9e524df41",
    ("layernorm", "pipeline"): "3fbaa5f62d7e5d90",
    ("stream", "whole"): "61025c4c4d528609",
    ("stream", "pipeline"): "61025c4c4d528609",
}

pytestmark = pytest.mark.normal_build  # (the checking build's IR differs: ``--poison-scratch`` skips these)

NKI_SOURCE = {
    ("softmax", "f32", "trn1"): "28937839ab9f4c0c",
    ("layernorm", "f32", "trn1"): "c887fbfdb700bf68",
    ("softmax", "bf16", "trn1"): "2e3351e667538774",
    ("layernorm", "bf16", "trn1"): "7b5bd4c3e66ce689",
    ("mm", "bf16", "trn1"): "f5b3b273b969bdfe",
    ("softmax", "f32", "trn2"): "ae3d0cdecc07dedc",
    ("layernorm", "f32", "trn2"): "dca0c9bcf593f9f9",
    ("softmax", "bf16", "trn2"): "1b26395fa665c177",
    ("layernorm", "bf16", "trn2"): "481723566c5a4ede",
    ("mm", "bf16", "trn2"): "b95d2e9c5b6a48a7",
    ("softmax", "f32", "trn3"): "93ab363d6cf34b03",
    ("layernorm", "f32", "trn3"): "91dbe86392c0cda7",
    ("softmax", "bf16", "trn3"): "02d4029fd118ff68",
    ("layernorm", "bf16", "trn3"): "1504cd1eedcb5500",
    ("mm", "bf16", "trn3"): "79c68a108d4a28e1",
}


def _affine(name: str, rows: int, cols: int, gelu: bool) -> Function:
    """x*w+b over [rows, cols]; with ``gelu``, gelu(x*w+b)*sigmoid(x) (bench_kernels (a) and (c'))."""
    b = Builder(name)
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    y = b.op("add", b.op("mul", x, w), bias)
    if gelu:
        y = b.op("mul", b.op("gelu", y), b.op("sigmoid", x))
    return b.build([y])


def _matmul() -> Function:
    b = Builder("mm")
    x = b.param(TensorType((4096, 8192), DType.bf16), "x")
    w = b.param(TensorType((8192, 8192), DType.bf16), "w")
    return b.build([b.op("mm", x, w)])


CPU_GRAPHS = {"gelu": lambda: _affine("gelu_sigmoid", 4096, 1024, True), "softmax": lambda: softmax_graph(4096, 1024),
              "layernorm": lambda: layer_norm_graph(8192, 1024), "stream": lambda: _affine("stream", 8192, 1024, False)}
NKI_GRAPHS = {"softmax": lambda dtype: softmax_graph(4096, 1024, dtype),
              "layernorm": lambda dtype: layer_norm_graph(4096, 1024, dtype), "mm": lambda dtype: _matmul()}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: The host the LLVM IR is generated for (LLVM's feature string of a Zen 3, trimmed to what codegen reads).
PINNED_HOST = host.HostCpu(name="znver3", features="+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f",
                           triple="x86_64-unknown-linux-gnu", cores=2)


def llvm_ir(name: str, how: str) -> str:
    saved, host._HOST[:] = list(host._HOST), [PINNED_HOST]
    try:
        return _llvm_ir(name, how)
    finally:
        host._HOST[:] = saved


def _llvm_ir(name: str, how: str) -> str:
    fn = CPU_GRAPHS[name]()
    lowered = fuse_whole_function(fn) if how == "whole" else run_pipeline(default_pipeline("cpu"), fn, PassContext())
    _, texts = plan_launch(wrap_remaining_ops(lowered), "cpu", "features")
    return "".join(texts)


def nki_module(name: str, dtype: str, target: str) -> str:
    return nki_source(NKI_GRAPHS[name](DType(dtype)), target)


@pytest.mark.parametrize(("name", "how"), sorted(LLVM_IR))
def test_llvm_ir_of_the_benchmark_kernels_is_unchanged(name, how):
    assert _digest(llvm_ir(name, how)) == LLVM_IR[name, how]


def test_gelus_text_without_the_erf_division_is_the_former_one(monkeypatch):
    monkeypatch.setattr(host.CpuTarget, "divides_gelu_erf_ratio", property(lambda self: False))
    monkeypatch.setattr(host.CpuTarget, "function_piece_lines", property(lambda self: 0))
    assert _digest(llvm_ir("gelu", "pipeline")) == "f9023c878becc235"


def test_gelus_text_without_avx2s_pieces_is_the_former_one(monkeypatch):
    monkeypatch.setattr(host.CpuTarget, "function_piece_lines", property(lambda self: 0))
    assert _digest(llvm_ir("gelu", "pipeline")) == "e491473f1bc65d32"


def test_gelus_text_without_the_aligned_stack_is_the_former_one(monkeypatch):
    monkeypatch.setattr(host.CpuTarget, "aligns_vector_spill_slots", property(lambda self: False))
    assert _digest(llvm_ir("gelu", "pipeline")) == "054942449ff920b0"


@pytest.mark.parametrize(("name", "dtype", "target"), sorted(NKI_SOURCE))
def test_nki_kernels_of_the_benchmarks_are_unchanged(name, dtype, target):
    assert _digest(nki_module(name, dtype, target)) == NKI_SOURCE[name, dtype, target]


if __name__ == "__main__":
    for key in sorted(LLVM_IR):
        print(f"    {key!r}: {_digest(llvm_ir(*key))!r},")
    for key in sorted(NKI_SOURCE):
        print(f"    {key!r}: {_digest(nki_module(*key))!r},")
