"""bf16 tensors as their 16-bit patterns (how torch.compile's bf16 tensors cross the CPU boundary) in innermost
loops over element pairs, one 32-bit word per pair (``codegen/llvm/pairs.py``): the same values as element by
element, and the code without AVX2's widening and packing shuffles."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import assert_matches, run_both, special_floats

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType, interpret, round_to_bf16
from neuroncc.testing.choices import choose

AVX2 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f,-avx512vl,-avx512bw,-avx512dq"


def to_bits(values: np.ndarray) -> np.ndarray:
    """The bf16 patterns (int16) of float32 ``values`` rounded to bf16."""
    return (round_to_bf16(values).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


def from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _bf16(b: Builder, bits) -> object:
    return b.op("cast", b.op("bitcast", bits, dtype=DType.bf16), dtype=DType.f32)


def _bits(b: Builder, value) -> object:
    return b.op("bitcast", b.op("cast", value, dtype=DType.bf16), dtype=DType.i16)


def affine_graph(rows: int, cols: int, start: int = 0) -> Function:
    """x*w+b on bf16 bits (torch.compile's addcmul on bf16 tensors); ``start``: x is a column slice from there."""
    b = Builder("affine_bits")
    x = b.param(TensorType((rows, cols + start), DType.i16), "x")
    w = b.param(TensorType((cols,), DType.i16), "w")
    bias = b.param(TensorType((cols,), DType.i16), "b")
    if start:
        x = b.op("slice", x, dim=1, start=start, end=start + cols)
    y = b.op("add", b.op("mul", _bf16(b, x), _bf16(b, w)), _bf16(b, bias))
    return b.build([_bits(b, y)])


def layernorm_graph(rows: int, cols: int, variance_output: bool = False) -> Function:
    """F.layer_norm on bf16 tensors as AOTAutograd hands it to neuroncc's importer (bf16 bits in and out); with
    ``variance_output``, its float32 variance a second output."""
    b = Builder("layernorm_bits")
    x = b.param(TensorType((rows, cols), DType.i16), "x")
    w = b.param(TensorType((cols,), DType.i16), "w")
    bias = b.param(TensorType((cols,), DType.i16), "b")
    xf = _bf16(b, x)
    var = b.op("var", xf, dims=(1,), keepdim=True, correction=0.0)
    mean = b.op("mean", xf, dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    y = b.op("add", b.op("mul", b.op("mul", b.op("sub", xf, mean), rstd), _bf16(b, w)), _bf16(b, bias))
    return b.build([_bits(b, y), var] if variance_output else [_bits(b, y)])


@pytest.mark.parametrize(("cols", "start"), [(1024, 0), (2, 0), (1023, 0), (1024, 1), (96, 3)])
def test_pairs_compute_the_elementwise_values_bit_for_bit(rng, cols, start):
    # even rows run over pairs (a sliced x from an odd column: its words are unaligned), odd rows element by
    # element; NaN, infinities, zeros and ties in the data
    fn = fuse_whole_function(affine_graph(16, cols, start))
    x = special_floats(rng, (16, cols + start))
    x.reshape(-1)[-4:] = np.array([1.00390625, 1.01171875, -3.0078125, 255.5], np.float32)  # bf16 ties
    w, bias = special_floats(rng, (cols,)), rng.standard_normal(cols).astype(np.float32)
    _, (got,) = run_both(fn, [to_bits(x), to_bits(w), to_bits(bias)])  # int16 results: compared exactly
    assert got.dtype == np.int16


def test_layernorm_on_bf16_bits_matches_the_interpreter(rng):
    fn = fuse_whole_function(layernorm_graph(64, 1024))
    inputs = [rng.standard_normal(s).astype(np.float32) * 3 for s in ((64, 1024), (1024,), (1024,))]
    bits = [to_bits(a) for a in inputs]
    (got,) = build_cpu_executable(fn, {"threads": 2})(*bits)
    (want,) = interpret(fn, bits)
    # the rows' sums are reassociated (vector partial sums): a result may round to the neighbouring bf16
    assert_matches(from_bits(got), from_bits(want), DType.bf16, "layernorm")


@pytest.mark.parametrize("cpu", ["znver3", "haswell"])
def test_bf16_bits_need_no_widening_or_packing_shuffles_on_avx2(cpu):
    # element by element, LLVM widened 8 bf16 values with vpmovzxwd + vpslld and narrowed 8 results with
    # vpsrld + vpackusdw + vpermq; over pairs of a 32-bit word: a shift or a blend each way, no cross-lane shuffle
    fn = layernorm_graph(64, 1024)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", CpuTarget(cpu, AVX2))
    asm = jit.assembly(texts, CpuTarget(cpu, AVX2)).split("k_p0:")[1]
    for shuffle in ("vpmovzxwd", "vpackusdw", "vpermq"):
        assert shuffle not in asm, re.findall(rf"{shuffle}.*", asm)[:3]
    assert re.search(r"vpslld\s+\$16", asm) and "vpblendw" in asm


def test_a_float_sum_over_pairs_adds_each_pair_before_adding_it_to_the_partial():
    # LayerNorm's mean and variance passes: one dependent add per pair on the partial's chain, not two (the mean
    # pass was latency-bound with two: 6 cycles per 32 elements on Zen 3, 4 with one)
    fn = layernorm_graph(64, 1024)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    target = CpuTarget("znver3", AVX2)
    ir_text = "".join(emit_kernel(plan, "k", target)[0])
    partials = set(re.findall(r'(%"[^"]+") = alloca float\n', ir_text))
    loaded = {value: slot for value, slot in re.findall(r'(%"[^"]+") = load float, float\* (%"[^"]+")', ir_text)}
    adds = re.findall(r'(%"[^"]+") = fadd reassoc contract float (%"[^"]+"), (%"[^"]+")', ir_text)
    sums = {result for result, _, _ in adds}
    chain = [(a, b) for _, a, b in adds if loaded.get(a) in partials or loaded.get(b) in partials]
    means = 2 if target.means_a_row_early else 1  # (and the thread's first row's: test_variance_deviations.py)
    assert len(partials) == means + 1 and len(chain) == means + 1  # the mean's partial and the variance's, one add each
    for a, b in chain:
        term = b if loaded.get(a) in partials else a
        assert term in sums  # the pair's sum


def test_a_streamed_bf16_output_is_stored_from_the_registers_that_computed_it(rng, monkeypatch):
    # the non-temporal stores of a streamed output: one vector of words per piece, so that the loop vectorizer's
    # one iteration computes it and LLVM keeps the piece in registers; pieces of a cache line (32 elements) made
    # bf16 LayerNorm's heavy write loop two vector iterations through a stack buffer, then a copy
    import dataclasses

    from neuroncc.hardware import host

    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=1 << 20)])
    fn = fuse_whole_function(layernorm_graph(2048, 1024))  # a 4 MB output: streamed
    inputs = [to_bits(rng.standard_normal(s).astype(np.float32)) for s in ((2048, 1024), (1024,), (1024,))]
    exe = build_cpu_executable(fn, {"threads": 2})
    (got,) = exe(*inputs)
    assert_matches(from_bits(got), from_bits(interpret(fn, inputs)[0]), DType.bf16, "layernorm")
    assembly = jit.assembly(exe.module.llvm_ir)
    computes = ("vpblendw", "vpermt2w", "vcvtne2ps2bf16")
    stores, since_compute = [], ""
    for block in re.split(r"\n\S+:", assembly):
        # a block that only stores joins the conversion's two paths (vcvtne2ps2bf16 or, for a pair of vectors
        # holding a denormal, the word permutes: bf16_words.py): judged with the blocks since the last that computed
        since_compute = block if any(c in block for c in computes) else since_compute + block
        if re.search(r"vmovnt\w+", block):
            stores.append(block if any(c in block for c in computes) else since_compute)
    assert stores
    for block in stores:
        # the loop that computes the words (AVX2's blends, AVX-512 BW's word permutes, the conversion:
        # bf16_words.py)
        assert any(c in block for c in computes), block
        # no words reloaded from a stack buffer (the write loop may load float32 rows from the stack: AVX-512's row
        # cache of the widened x, ``refine.widened_row_cache``; those feed its arithmetic, not its stores)
        last_written: dict[str, str] = {}
        for line in block.splitlines():
            stored = re.match(r"\s*vmovnt\w+\s+(%[xyz]mm\d+),", line)
            if stored:
                assert not re.search(r"\(%rsp", last_written.get(stored[1], "")), block
            elif (written := re.search(r",\s*(%[xyz]mm\d+)\s*$", line)):
                last_written[written[1]] = line


def test_a_compute_bound_pass_over_bf16_pairs_prefetches_the_next_row(rng):
    # softmax's exp pass carries the next row's prefetches (``prefetch.spread_loop``) and, on bf16 bits, runs over
    # element pairs too: each group of elements is a paired loop (two exp calls per iteration), not an element
    # loop that widens each bf16 value on its own
    from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES

    b = Builder("softmax_bits")
    x = _bf16(b, b.param(TensorType((64, 1024), DType.i16), "x"))
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    fn = b.build([_bits(b, b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True)))])
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    target = CpuTarget("znver3", AVX2)
    ir_text = "".join(emit_kernel(plan, "k", target)[0])
    assert ir_text.count(", i32 0, i32 3, i32 1)") == MEMORY_BURST_LINES  # the next row's input
    assert ir_text.count(", i32 1, i32 3, i32 1)") == MEMORY_BURST_LINES  # this row's output, for writing
    # its declaration, then the pair's two calls (AVX2's exp for bf16 results since session 39)
    assert ir_text.count('@"ncc.math.exp_nonpositive_for_bf16"(') == 1 + 2
    inputs = [to_bits(rng.standard_normal((64, 1024)).astype(np.float32) * 3)]
    (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
    assert_matches(from_bits(got), from_bits(interpret(fn, inputs)[0]), DType.bf16, "softmax")


def _softmax_bits(rows: int, cols: int) -> Function:
    b = Builder("softmax_bits")
    x = _bf16(b, b.param(TensorType((rows, cols), DType.i16), "x"))
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([_bits(b, b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True)))])


def test_a_row_cache_between_paired_loops_is_kept_in_pair_order(rng, monkeypatch):
    # softmax's exponentials, stored by the paired exp pass and loaded by the paired write pass: in element order
    # the vectorized loops interleaved the even and odd halves on the way in (vunpcklps/vunpckhps + vperm2f128)
    # and separated them on the way out (vshufps + vpermpd); in pair order each is one contiguous vector
    from neuroncc.codegen.llvm import emit

    fn = _softmax_bits(64, 1024)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    target = CpuTarget("znver3", AVX2)
    asm = jit.assembly(emit_kernel(plan, "k", target)[0], target).split("k_p0:")[1]
    for shuffle in ("vunpcklps", "vunpckhps", "vperm2f128", "vshufps", "vpermpd"):
        assert shuffle not in asm, re.findall(rf"{shuffle}.*", asm)[:3]
    # the same bits as the row in element order (only where the exponentials are kept changed)
    inputs = [to_bits(special_floats(rng, (64, 1024)))]
    (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
    monkeypatch.setattr(emit, "pair_ordered_rows", lambda *args: frozenset())
    (element_order,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
    np.testing.assert_array_equal(got, element_order)


def test_a_row_cache_read_by_an_unpaired_loop_stays_in_element_order():
    # float32 in, bf16 out: the exp pass reads float32 (element by element), only the write pass is paired
    b = Builder("softmax_f32_to_bits")
    x = b.param(TensorType((8, 64), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    fn = b.build([_bits(b, b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True)))])
    from neuroncc.codegen.llvm.kernel_plan import RowLoop
    from neuroncc.codegen.llvm.pairs import pair_ordered_rows
    plan = plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1, fn.outputs[0].type)])
    (phase,) = [p for p in plan.phases if isinstance(p, RowLoop) and p.row_cache]
    assert pair_ordered_rows(plan, phase.row_cache, phase.stages) == frozenset()
    softmax = _softmax_bits(8, 64)
    plan = plan_kernel(softmax, [Layout.of(0, softmax.params[0].type)], [Layout.of(1, softmax.outputs[0].type)])
    (phase,) = [p for p in plan.phases if isinstance(p, RowLoop) and p.row_cache]
    assert pair_ordered_rows(plan, phase.row_cache, phase.stages) == frozenset(phase.row_cache)


def _layernorm_assembly(fn: Function) -> str:
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    target = CpuTarget("znver3", AVX2)
    return jit.assembly(emit_kernel(plan, "k", target)[0], target).split("k_p0:")[1]


def test_the_bf16_weight_and_bias_are_widened_once_not_in_every_row(rng, monkeypatch):
    # LayerNorm's write loop widened its weight and bias (a load, a shift and a blend each per 8 words) in every
    # row: 6 of its 30 vector instructions per 16 elements went to widening its three inputs. Widened once per
    # thread into a buffer in pair order, the loop widens only x and reads the two halves of w and b as floats
    from neuroncc.codegen.llvm import emit

    # (the shifts counted are the widenings' in the 32-bit rounding's loop: AVX2's blended rounding shifts to pack,
    # test_bf16_word_blends.py)
    choose(monkeypatch, rounds_bf16_in_word_lanes_with_blends=False)
    fn = layernorm_graph(64, 1024)
    blocks = re.split(r"\n\.LBB\d+_\d+:", _layernorm_assembly(fn))
    (write,) = [block for block in blocks if "vpsrld" in block]  # the loop that rounds to bf16 (and packs)
    x_widened = 0 if CpuTarget("znver3", AVX2).caches_variance_deviations else 1  # (test_variance_deviations.py)
    assert len(re.findall(r"vpslld\s+\$16", write)) == x_widened, write
    inputs = [to_bits(special_floats(rng, s) * 3) for s in ((64, 1024), (1024,), (1024,))]
    inputs[0][5] = to_bits(np.full(1024, 2.5, np.float32))  # a constant row: variance 0
    (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
    monkeypatch.setattr(emit, "widened_rows", lambda *args: ())
    (before,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
    np.testing.assert_array_equal(got, before)
    blocks = re.split(r"\n\.LBB\d+_\d+:", _layernorm_assembly(fn))
    (write,) = [block for block in blocks if "vpsrld" in block]
    assert len(re.findall(r"vpslld\s+\$16", write)) == x_widened + 2  # (w and b: what the check above tells apart)


#: bf16 patterns of NaNs: signalling (0x7F81, 0xFF81), quiet with payloads, all ones; then infinities, the largest
#: finite values, the smallest subnormal, zeros
_NAN_PATTERNS = np.array([0x7F81, 0xFF81, 0x7FC1, 0xFFC0, 0x7FFF, 0xFFFF, 0x7FA5, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F,
                          0x0001, 0x8000, 0x0000], np.uint16).view(np.int16)


def _arithmetic_bits_graph(rows: int, cols: int, math: bool) -> Function:
    """x*w+b on bf16 values (each op rounds to bf16, as eager's bf16 ops), times sigmoid(x) with ``math``."""
    b = Builder("bf16_ops")
    x = b.op("bitcast", b.param(TensorType((rows, cols), DType.i16), "x"), dtype=DType.bf16)
    w = b.op("bitcast", b.param(TensorType((cols,), DType.i16), "w"), dtype=DType.bf16)
    y = b.op("add", b.op("mul", x, w), b.op("full", shape=(), dtype=DType.bf16, value=0.375))
    if math:
        y = b.op("mul", y, b.op("sigmoid", x))
    return b.build([b.op("bitcast", y, dtype=DType.i16)])


def _round_trip_graph(rows: int, cols: int) -> Function:
    """x (bf16) -> float32 -> bf16, and x * 1 -> bf16: no arithmetic quiets a signalling x (LLVM folds x * 1)."""
    b = Builder("round_trip")
    x = b.op("cast", b.op("bitcast", b.param(TensorType((rows, cols), DType.i16), "x"), dtype=DType.bf16),
             dtype=DType.f32)
    b.param(TensorType((cols,), DType.i16), "w")
    one = b.op("full", shape=(), dtype=DType.f32, value=1.0)
    back = b.op("cast", x, dtype=DType.bf16)
    scaled = b.op("cast", b.op("mul", x, one), dtype=DType.bf16)
    return b.build([b.op("bitcast", back, dtype=DType.i16), b.op("bitcast", scaled, dtype=DType.i16)])


@pytest.mark.parametrize("graph", ["ops", "ops and math", "cast", "layernorm", "round trip"])
def test_arithmetic_rounds_to_bf16_without_the_nan_case_and_keeps_every_nan_bit(rng, graph):
    # x86 arithmetic returns a NaN operand quieted, payload kept: computed from bf16 values (low halves zero), its
    # NaNs round to their own bits, so a cast of it to bf16 drops the NaN case (a compare, an or and a blend per
    # vector, ``nan_payloads.py``); a widened value cast back, or x * 1, keeps it, and so do ops with bf16 results
    # where the target keeps their case (none of AVX-512 and AVX2 since session 24: the code built and read here
    # has none). Every bit as the reference's, NaNs' payloads too
    from neuroncc.codegen.llvm.nan_payloads import NanPayloads

    cols = 64
    fn = {"ops": lambda: _arithmetic_bits_graph(16, cols, False),
          "ops and math": lambda: _arithmetic_bits_graph(16, cols, True),
          "cast": lambda: affine_graph(16, cols), "layernorm": lambda: layernorm_graph(16, cols),
          "round trip": lambda: _round_trip_graph(16, cols)}[graph]()
    payloads = NanPayloads(fn)
    cases = [op.name for op in fn.ops if op.results[0].type.dtype is DType.bf16
             and op.name not in ("bitcast", "full") and payloads.needs_nan_case(op)]  # (the ops that round)
    assert cases == {"ops": ["mul", "add"], "ops and math": ["mul", "add", "sigmoid", "mul"], "cast": [],
                     "layernorm": [], "round trip": ["cast", "cast"]}[graph]
    x = to_bits(rng.standard_normal((16, cols)).astype(np.float32) * 3)
    if graph == "layernorm":  # one NaN per row, or none: the row's NaN payload is the one every result takes
        x[:len(_NAN_PATTERNS), 7] = _NAN_PATTERNS
    else:
        x[:, :len(_NAN_PATTERNS)] = _NAN_PATTERNS  # each pattern in every row, against every weight
        x[:len(_NAN_PATTERNS), len(_NAN_PATTERNS):2 * len(_NAN_PATTERNS)] = _NAN_PATTERNS[:, None]
    params = [x] + [to_bits(rng.standard_normal(cols).astype(np.float32)) for _ in fn.params[1:]]
    params[1][:len(_NAN_PATTERNS)] = _NAN_PATTERNS  # NaN weights too (one NaN operand at a time, or the same one)
    params[1][len(_NAN_PATTERNS):2 * len(_NAN_PATTERNS)] = to_bits(np.full(len(_NAN_PATTERNS), 1.5, np.float32))
    got, *more = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*params)
    want, *more_wanted = interpret(fn, params)
    for other, wanted in zip(more, more_wanted, strict=True):
        np.testing.assert_array_equal(other, wanted)
    nan = np.isnan(from_bits(want))
    assert nan.any() and np.isnan(from_bits(got)[nan]).all()
    if graph == "layernorm":  # the sums are reassociated: numbers may round to a neighbour, NaNs are exact
        np.testing.assert_array_equal(got[nan], want[nan])
        assert_matches(from_bits(got), from_bits(want), DType.bf16, "layernorm")
    else:
        np.testing.assert_array_equal(got, want)
    avx2 = CpuTarget("znver3", AVX2)
    text = "".join(emit_kernel(plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                                           [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)]),
                               "k", avx2)[0])
    kept = [op.name for op in fn.ops if op.results[0].type.dtype is DType.bf16 and op.name not in ("bitcast", "full")
            and NanPayloads(fn, op_results=avx2.rounds_bf16_op_results_without_nan_case).needs_nan_case(op)]
    assert kept == (["cast", "cast"] if graph == "round trip" else [])
    assert ("fcmp uno" in text) == bool(kept)  # the NaN case's compare


def test_a_rounding_with_the_nan_case_clears_the_low_half_once():
    # the NaN's quiet bit is set before the low half is cleared, so one clearing serves the number and the NaN
    # (a vector instruction fewer per rounding than clearing each's low half on its own; the bits: the test above)
    from llvmlite import ir

    from neuroncc.codegen.llvm.scalars import F32, round_to

    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(F32, [F32]), "rounded")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(round_to(b, fn.args[0], DType.bf16, nan_case=True))
    text = str(module)
    assert "fcmp uno" in text and text.count("-65536") == 1, text


@pytest.mark.parametrize("cpu", ["host", "avx2"])
def test_softmax_rounds_without_the_nan_case_and_keeps_every_nan_bit(rng, monkeypatch, cpu):
    # bf16 softmax's output is a cast of exp(x - max(x)) / sum: the math library's exp returns a NaN operand quieted,
    # payload kept, as x86 arithmetic does, and max(x) is an element of x or the default NaN, so the cast needs no NaN
    # case (``nan_payloads.py``). The bits with and without the case, NaN payloads included, on AVX-512's exp
    # (vscalefps) and on AVX2's (powers of two from exponent bits; code that a Zen 4 host runs as well)
    import dataclasses

    from neuroncc.codegen.llvm.nan_payloads import NanPayloads
    from neuroncc.hardware import host

    if cpu == "avx2":
        monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), name="znver3", features=AVX2)])
    assert host.host_cpu().scalef == (cpu == "host" and "+avx512f" in host.host_cpu().features)
    fn = _softmax_bits(40, 64)
    (cast,) = [op for op in fn.ops if op.name == "cast" and op.results[0].type.dtype is DType.bf16]
    assert not NanPayloads(fn).needs_nan_case(cast)
    x = to_bits(rng.standard_normal((40, 64)).astype(np.float32) * 4)
    x[:len(_NAN_PATTERNS), 9] = _NAN_PATTERNS  # one pattern per row (a NaN row's every result is that NaN)
    x[20, 3], x[20, 50] = _NAN_PATTERNS[0], _NAN_PATTERNS[2]  # two NaNs in a row
    x[21, :] = _NAN_PATTERNS[4]  # a row of one NaN
    x[22, 5], x[23, :] = to_bits(np.float32(-np.inf)), to_bits(np.float32(-np.inf))  # exp(-inf - max), -inf - -inf
    (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x)
    monkeypatch.setattr(NanPayloads, "needs_nan_case", lambda self, op: True)
    (with_case,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x)
    np.testing.assert_array_equal(got, with_case)
    nan = np.isnan(from_bits(got))
    assert nan[:7].all() and nan[20:22].all() and nan[23].all() and not nan[24:].any()
    # NaNs with payloads reach the rounding: the all-ones one (0x7FFF rows) kept through exp and the division
    assert {0x7FC0, 0x7FFF} <= set(got[nan].view(np.uint16).tolist())
    assert_matches(from_bits(got[24:]), from_bits(interpret(fn, [x])[0][24:]), DType.bf16, "softmax")
