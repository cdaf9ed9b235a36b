"""The code other CPUs get: kernels emitted and compiled for named LLVM CPU models (any host can compile for
them; nothing here runs the code), checked in the assembly: vector width, and no C library calls in the
polynomial math (LLVM lowers a vector ``llvm.ldexp`` to one ``ldexpf`` call per lane without AVX-512)."""

from __future__ import annotations

import re

import pytest

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType

AVX2 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f,-avx512vl,-avx512bw,-avx512dq"
AVX512 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd"
TARGETS = {
    "zen3": CpuTarget("znver3", AVX2),
    "haswell": CpuTarget("haswell", AVX2),
    "zen4": CpuTarget("znver4", AVX512 + ",+avx512bf16"),
    "skylake-sp": CpuTarget("skylake-avx512", AVX512),  # LLVM's model prefers 256-bit vectors here
    "sapphire-rapids": CpuTarget("sapphirerapids", AVX512 + ",+avx512bf16,+avx512fp16"),
}


def _kernel_assembly(target: CpuTarget, ops: list[str]) -> str:
    b = Builder("math")
    x = b.param(TensorType((64, 256), DType.f32), "x")
    fn = b.build([b.op(name, x) for name in ops])
    plan = plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    asm = jit.assembly(texts, target)
    return asm.split("k_p0:")[1].split(".Lfunc_end")[0]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_polynomial_math_is_inline_vector_code_on_every_cpu(name):
    target = TARGETS[name]
    body = _kernel_assembly(target, ["exp", "sigmoid", "tanh", "gelu", "erf", "exp2", "log"])
    assert "call" not in body, re.findall(r"call\w*\s+\S+", body)[:4]  # no ldexpf (or any libm) per lane
    register = "zmm" if target.vector_bits == 512 else "ymm"
    assert register in body
    if target.vector_bits == 512:
        assert "vscalefps" in body  # ldexp is one instruction with AVX-512
    else:
        assert "zmm" not in body


def test_vector_width_follows_the_cpu_not_llvms_tuning_model():
    assert TARGETS["skylake-sp"].vector_bits == TARGETS["zen4"].vector_bits == 512
    assert TARGETS["zen3"].vector_bits == 256
    assert "-prefer-256-bit" in TARGETS["skylake-sp"].machine_features
    assert TARGETS["zen3"].machine_features == AVX2
    # an elementwise loop: 512-bit on Skylake-SP too, where LLVM's own tuning would pick 256
    body = _kernel_assembly(TARGETS["skylake-sp"], ["neg"])
    assert re.search(r"vxorps\s+.*zmm", body) or "zmm" in body


def test_the_host_target_is_the_code_the_executables_run():
    host = jit.host_target()
    assert (host.name, host.features) == jit.host_cpu()
    assert host.has("avx512f") == (host.vector_bits == 512)


def test_a_libm_call_on_loop_invariant_operands_runs_once_not_per_element():
    # AdamW's bias corrections, pow(beta, step) on 0-d tensors, broadcast into the update of every element:
    # the C library's math functions are declared free of memory effects, so the call leaves the loop and
    # the loop vectorizes (it ran 10M scalar powf calls per optimizer step).
    b = Builder("hoist")
    x = b.param(TensorType((64, 256), DType.f32), "x")
    beta = b.param(TensorType((), DType.f32), "beta")
    step = b.param(TensorType((), DType.f32), "step")
    fn = b.build([b.op("mul", x, b.op("sin", b.op("pow", beta, step)))])
    layouts = [Layout.of(0, x.type), Layout.of(1, beta.type), Layout.of(2, step.type)]
    plan = plan_kernel(fn, layouts, [Layout.of(3, fn.outputs[0].type)])
    texts, _ = emit_kernel(plan, "k", jit.host_target())
    module, _ = jit.optimize(texts)
    loop = str(module).split("vector.body:")[1].split("\n\n")[0]  # the vectorized loop's block
    assert "@powf" not in loop and "@sinf" not in loop
    assert "<8 x float>" in loop or "<16 x float>" in loop


def _graph_assembly(target: CpuTarget, fn) -> str:
    layouts = [Layout.of(k, p.type) for k, p in enumerate(fn.params)]
    outputs = [Layout.of(len(layouts) + k, v.type) for k, v in enumerate(fn.outputs)]
    texts, _ = emit_kernel(plan_kernel(fn, layouts, outputs), "k", target)
    asm = jit.assembly(texts, target)
    return asm.split("k_p0:")[1].split(".Lfunc_end")[0]


@pytest.mark.parametrize("name", ["zen3", "haswell"])
def test_an_integer_iota_is_integer_vector_code_without_avx512(name):
    # cross-entropy's backward: the one-hot of the targets compares an int64 iota with each row's label. The
    # iota went through float64 (int64 -> double -> int64), which has no vector instruction without AVX-512:
    # the loop over the 32k-wide rows ran one scalar conversion pair per element.
    # (Two one-hots of the rows: the loop computes both compares. One alone leaves the loop: codegen/llvm/
    # one_hot_rows.py, tests/codegen/test_one_hot_rows.py.)
    b = Builder("onehot")
    logits = b.param(TensorType((16, 1000), DType.f32), "logits")
    labels = b.param(TensorType((16, 1), DType.i64), "labels")
    others = b.param(TensorType((16, 1), DType.i64), "others")
    iota = b.op("reshape", b.op("iota", length=1000, dtype=DType.i64), shape=(1, 1000))
    hot = b.op("logical_or", b.op("eq", iota, labels), b.op("eq", iota, others))
    minus_one = b.op("where", hot, b.op("full", shape=(), dtype=DType.f32, value=-1.0),
                     b.op("full", shape=(), dtype=DType.f32, value=0.0))
    fn = b.build([b.op("add", b.op("exp", logits), minus_one)])
    body = _graph_assembly(TARGETS[name], fn)
    conversions = re.findall(r"vcvt\w*si2sd|vcvtt?sd2si", body)
    assert not conversions, conversions
    # and the compare runs on 8 float lanes (the iota's values are exact in f32), not 4 int64 ones packed down
    assert re.search(r"vcmpeqps\s+.*ymm", body), body
    assert "vpcmpeqq" not in body and "vpackssdw" not in body


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_bf16_bits_convert_with_vector_integer_instructions(name):
    # bf16 tensors cross the cpu target's boundary as int16 bits (the torch backend's bf16_bits), read and
    # written as pairs of a 32-bit word (codegen/llvm/pairs.py): in, a shift by 16 (and the word itself, its low
    # half cleared) per vector of words; out, a shift back and a word blend. No zero extension (vpmovzxwd) or
    # pack (vpackusdw, vpermq), as element by element; no float compare or blend (the rounding of an
    # already-bf16 value with its NaN select, which the conversion used to carry).
    b = Builder("bits")
    x = b.param(TensorType((64, 256), DType.i16), "x")
    fn = b.build([b.op("bitcast", b.op("neg", b.op("bitcast", x, dtype=DType.bf16)), dtype=DType.i16)])
    body = _graph_assembly(TARGETS[name], fn)
    register = "zmm" if TARGETS[name].vector_bits == 512 else "ymm"
    assert re.search(rf"vpslld\s+\$16, %{register}", body), body
    for shuffle in ("vpmovzxwd", "vpackusdw", "vpermq"):
        assert shuffle not in body, body
    assert "vcmpunordps" not in body and "vblendv" not in body


@pytest.mark.parametrize("name", ["zen3", "zen4"])
def test_loops_computing_polynomial_math_interleave_vectors(name):
    # gelu(x*w+b)*sigmoid(x) (issue #19's row (a)): LLVM's own interleave count for it was 1 with AVX2's 16
    # registers; such a loop is bound by its dependent chains, so it runs math_interleave(target) vector
    # iterations side by side (loop_hints.py): that many vector stores per iteration of its loop. The loops of
    # the max pass and the write pass of a softmax, which compute no polynomial, keep LLVM's choice (no hint).
    # Where the target runs such a stage in pieces (CpuTarget.function_piece_lines: Zen 4 and AVX2,
    # test_function_pieces.py), a piece's vectors.
    from neuroncc.codegen.llvm.loop_hints import math_interleave

    target = TARGETS[name]
    b = Builder("row_a")
    x = b.param(TensorType((64, 1024), DType.f32), "x")
    w = b.param(TensorType((1024,), DType.f32), "w")
    bias = b.param(TensorType((1024,), DType.f32), "b")
    y = b.op("mul", b.op("gelu", b.op("add", b.op("mul", x, w), bias)), b.op("sigmoid", x))
    fn = b.build([y])
    layouts = [Layout.of(k, p.type) for k, p in enumerate(fn.params)]
    plan = plan_kernel(fn, layouts, [Layout.of(3, y.type)])
    texts, _ = emit_kernel(plan, "k", target)
    count = target.function_piece_lines * 512 // target.vector_bits or math_interleave(target)
    assert f'!"llvm.loop.interleave.count", i32 {count}' in "".join(texts)
    body = jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]
    register = "zmm" if target.vector_bits == 512 else "ymm"
    blocks = re.split(r"\n\.LBB\d+_\d+:", body)
    stores = [len(re.findall(rf"vmovups\t%{register}\d+, [^(]*\(%r\w+,%r\w+", block)) for block in blocks]
    assert max(stores) == count, stores


def test_polynomial_loops_interleave_two_avx512_vectors_and_four_avx2_vectors():
    # the same 32 float lanes in flight; on Zen 4, 2 zmm chains were as fast as 4 or faster (session 19 softmax1t)
    from neuroncc.codegen.llvm.loop_hints import math_interleave

    assert [math_interleave(TARGETS[name]) for name in ("zen3", "haswell", "zen4", "skylake-sp")] == [4, 4, 2, 2]


def test_loops_without_polynomial_math_get_no_hint():
    b = Builder("plain")
    x = b.param(TensorType((64, 1024), DType.f32), "x")
    fn = b.build([b.op("div", x, b.op("sum", x, dims=(1,), keepdim=True))])
    plan = plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1, fn.outputs[0].type)])
    texts, _ = emit_kernel(plan, "k", TARGETS["zen3"])
    assert "llvm.loop" not in "".join(texts)
