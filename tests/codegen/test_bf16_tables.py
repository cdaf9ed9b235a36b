"""bf16 unary math by table (``codegen/llvm/bf16_tables.py``, session 25 table25): on AVX2 and Intel's AVX-512
(session 32; ``CpuTarget.looks_up_bf16_unary_math``) a unary polynomial op of a bf16 value with a bf16 result reads
its rounded result from a 65536-entry table made by the op's own polynomial and rounding: every bit as computing it,
for every input (NaN payloads, infinities, subnormals), and as the reference's NaN bits in row (a); Zen 4 (session
37: ``CpuTarget.bf16_table_loop_lanes``, ``test_bf16_table_loops.py``) reads them in 8-lane loops; CPUs without AVX2
compute as before, and so does float32 math on AVX2."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir
from test_bf16_op_results import SSE, _inputs, _llvm_ir, gelu_sigmoid_graph
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import _NAN_PATTERNS, AVX2, from_bits

from neuroncc.codegen.llvm import bf16_tables, jit
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.driver.artifact import ARTIFACT_CODECS, ComponentRecord, read_artifact, write_artifact
from neuroncc.driver.compile_request import ArtifactContents
from neuroncc.executors.cpu.code_files import CODE_FILES
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.executors.executable import build_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType, interpret
from neuroncc.testing.choices import choose

#: Every bf16 bit pattern, as a [256, 256] int16 tensor.
EVERY_INPUT = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.int16).reshape(256, 256)

#: The ops a table replaces (``elementwise.MATH_FUNCTION_OF``) with their attributes: polynomials, then the C
#: library's functions (a scalar call per lane without the table).
FUNCTIONS = [("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"}), ("sigmoid", {}), ("exp", {}),
             ("exp2", {}), ("log", {}), ("log2", {}), ("tanh", {}), ("erf", {}),
             ("sin", {}), ("cos", {}), ("tan", {}), ("atan", {}), ("expm1", {}), ("log1p", {})]


def _unary_graph(name: str, attrs: dict, dtype: DType = DType.bf16) -> Function:
    """op(x) on the bf16 values of int16 bits (an op with a bf16 result; ``dtype`` f32: on the widened values)."""
    b = Builder(f"unary_{name}")
    x = b.op("bitcast", b.param(TensorType(EVERY_INPUT.shape, DType.i16), "x"), dtype=DType.bf16)
    if dtype is DType.f32:
        return b.build([b.op(name, b.op("cast", x, dtype=DType.f32), **attrs)])
    return b.build([b.op("bitcast", b.op(name, x, **attrs), dtype=DType.i16)])


def _built(monkeypatch, fn: Function, tables: bool):
    choose(monkeypatch, looks_up_bf16_unary_math=tables)
    return build_cpu_executable(fuse_whole_function(fn), {"threads": 2})


def test_the_decision():
    assert CpuTarget("znver3", AVX2).looks_up_bf16_unary_math
    assert CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).looks_up_bf16_unary_math  # (session 32: Intel's AVX-512)
    assert CpuTarget("znver4", ZEN4).looks_up_bf16_unary_math  # (session 37: in 8-lane loops)
    assert not CpuTarget("x86-64", SSE).looks_up_bf16_unary_math


@pytest.mark.parametrize("name,attrs", FUNCTIONS, ids=[f"{n}-{a.get('approximate', '')}" for n, a in FUNCTIONS])
def test_a_table_gives_the_computed_bits_for_every_input(monkeypatch, name, attrs):
    fn = _unary_graph(name, attrs)
    (looked_up,) = _built(monkeypatch, fn, True)(EVERY_INPUT)
    (computed,) = _built(monkeypatch, fn, False)(EVERY_INPUT)
    np.testing.assert_array_equal(looked_up, computed)


def test_the_table_is_the_kernels_results():
    # the table itself (the entry at each input's bits) against a kernel computing the function without it
    table = np.frombuffer(bf16_tables.lookup_table("gelu", False, host_cpu()), np.int16)
    assert table.size == bf16_tables.ENTRIES
    monkeypatch = pytest.MonkeyPatch()
    try:
        (computed,) = _built(monkeypatch, _unary_graph("gelu", {"approximate": "none"}), False)(EVERY_INPUT)
    finally:
        monkeypatch.undo()
    np.testing.assert_array_equal(table, computed.reshape(-1))


@pytest.mark.parametrize("name", ["gelu", "sigmoid"])
def test_special_inputs_as_the_reference(monkeypatch, name):
    # NaNs (their payloads), infinities and zeros exactly as the interpreter's; subnormal inputs within a bf16 ulp
    fn = _unary_graph(name, {"approximate": "none"} if name == "gelu" else {})
    (got,) = _built(monkeypatch, fn, True)(EVERY_INPUT)
    (want,) = interpret(fn, [EVERY_INPUT])
    x = from_bits(EVERY_INPUT)
    special = ~np.isfinite(x) | (x == 0)
    np.testing.assert_array_equal(got[special], want[special])
    subnormal = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    assert subnormal.sum() == 2 * 127
    np.testing.assert_allclose(from_bits(got[subnormal]), from_bits(want[subnormal]), rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_row_a_through_tables_keeps_every_bit(rng, monkeypatch, approximate):
    fn = gelu_sigmoid_graph(len(_NAN_PATTERNS) + 2, 1024 + 2 * 7)  # (and a scalar remainder)
    params = _inputs(rng, len(_NAN_PATTERNS) + 2, 1024 + 2 * 7)
    (looked_up,) = _built(monkeypatch, fn, True)(*params)
    (computed,) = _built(monkeypatch, fn, False)(*params)
    np.testing.assert_array_equal(looked_up, computed)
    (want,) = interpret(fn, params)
    nan = np.isnan(from_bits(want))
    np.testing.assert_array_equal(looked_up[nan], want[nan])


def test_avx2_reads_tables_where_sse_and_float32_math_compute():
    fn = gelu_sigmoid_graph(64, 1024)
    for cpu in (CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)):
        code = _llvm_ir(fn, cpu)
        assert "@\"ncc.bf16_table.gelu.plain\"" in code and "@\"ncc.bf16_table.sigmoid.plain\"" in code
        assert "ncc.math." not in code  # no polynomial left in the kernel
    for other in (CpuTarget("x86-64", SSE),):
        code = _llvm_ir(fn, other)
        assert "ncc.bf16_table" not in code and "@\"ncc.math.gelu\"" in code and "@\"ncc.math.sigmoid\"" in code
    # a float32 result (or operand) is no function of 16 bits: computed
    widened = _llvm_ir(_unary_graph("gelu", {"approximate": "none"}, DType.f32), CpuTarget("znver3", AVX2))
    # (AVX2's float32 gelu divides its erf's ratio: ``CpuTarget.divides_gelu_erf_ratio``)
    assert "ncc.bf16_table" not in widened and "@\"ncc.math.gelu_divided\"" in widened


@pytest.mark.parametrize("name,symbol", [("sin", "sinf"), ("expm1", "expm1f")])
def test_every_cpu_reads_the_c_librarys_functions_of_bf16_from_tables(name, symbol):
    # a bf16 sin is a function of 16 bits too: its table replaces a scalar call per lane (0.02-0.04 of the time),
    # on every CPU (CpuTarget.looks_up_bf16_library_math); a float32 result still calls the C library
    for target in (CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4), CpuTarget("x86-64", SSE)):
        assert target.looks_up_bf16_library_math
        code = _llvm_ir(_unary_graph(name, {}), target)
        assert f"@\"ncc.bf16_table.{name}." in code and f"@\"{symbol}\"" not in code and f"@{symbol}(" not in code
    widened = _llvm_ir(_unary_graph(name, {}, DType.f32), CpuTarget("znver3", AVX2))
    assert "ncc.bf16_table" not in widened and symbol in widened


def test_an_artifact_carries_its_tables_in_its_code(tmp_path, rng, monkeypatch):
    # the tables are constants of the kernels' modules: in the code file the artifact checks and loads (nothing
    # else is read at load, and no table is made again), and the loaded code gives the same bits
    fn = gelu_sigmoid_graph(len(_NAN_PATTERNS) + 2, 256)
    params = _inputs(rng, len(_NAN_PATTERNS) + 2, 256)
    choose(monkeypatch, looks_up_bf16_unary_math=True)
    executable = build_executable(fn, "cpu")
    contents = ArtifactContents(
        key="ab" * 32, key_components={"graph": ComponentRecord(digest="0" * 64, summary="g")}, target="cpu",
        input_function=fn, options={}, pipeline="", stages={}, timings={}, neuroncc_version="0.1.0",
        created_at="2026-12-05T06:00:00+00:00")
    directory = tmp_path / contents.key
    directory.mkdir()
    manifest = write_artifact(directory, executable, contents, ARTIFACT_CODECS["cpu"])
    code = next((directory / name).read_bytes() for name in manifest.target_files if name in CODE_FILES.values())
    for function in ("gelu", "sigmoid"):
        assert bf16_tables.lookup_table(function, False, host_cpu()) in code

    def made_again(*args):
        raise AssertionError("a table made at load")

    monkeypatch.setattr(bf16_tables, "lookup_table", made_again)
    _, loaded = read_artifact(directory, ARTIFACT_CODECS["cpu"])
    np.testing.assert_array_equal(loaded(*params)[0], executable(*params)[0])


def test_an_entry_is_read_as_the_high_half_of_32_bits():
    # a 32-bit read folds into the vectorized lanes' inserts (vinsertps from memory, then one and per vector):
    # bf16 row (a) 0.91-0.92 of the time of 16-bit reads (movzwl, vpinsrw, a shift) on Zen 3
    module = ir.Module("m")
    fn = ir.Function(module, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(bf16_tables.looked_up(b, "sigmoid", False, host_cpu(), fn.args[0]))
    text = str(module)
    assert f"[{2 + 2 * bf16_tables.ENTRIES} x i8]" in text  # (2 bytes before entry 0)
    assert "load i32" in text and "and i32" in text and "load i16" not in text and "shl" not in text
    code = jit.compile_ir([text])
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(code.address("f"))
    table = np.frombuffer(bf16_tables.lookup_table("sigmoid", False, host_cpu()), np.uint16)
    for bits in (0x0000, 0x3F80, 0xC0A0, 0x7F80, 0xFF80, 0x7FC0, 0xFFFF):
        got = np.float32(call(from_bits(np.array([bits], np.uint16).view(np.int16))[0]))
        assert int(got.view(np.uint32)) == int(table[bits]) << 16


def _computed_operand_graph(name: str, attrs: dict) -> Function:
    """op(x * w) on bf16 values (w all ones: x * w is x, a computed operand, for every input but the NaNs)."""
    b = Builder(f"computed_{name}")
    x = b.op("bitcast", b.param(TensorType(EVERY_INPUT.shape, DType.i16), "x"), dtype=DType.bf16)
    w = b.op("bitcast", b.param(TensorType(EVERY_INPUT.shape[-1:], DType.i16), "w"), dtype=DType.bf16)
    return b.build([b.op("bitcast", b.op(name, b.op("mul", x, w), **attrs), dtype=DType.i16)])


def test_the_lane_pairs_decision():
    assert CpuTarget("znver3", AVX2).reads_bf16_tables_by_lane_pairs
    assert CpuTarget("znver4", ZEN4).reads_bf16_tables_by_lane_pairs  # (session 37: its 8-lane table loops)
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).reads_bf16_tables_by_lane_pairs
    assert not CpuTarget("x86-64", SSE).reads_bf16_tables_by_lane_pairs


@pytest.mark.parametrize("name,attrs", FUNCTIONS[:4] + FUNCTIONS[9:10],
                         ids=["gelu-none", "gelu-tanh", "sigmoid", "exp", "sin"])
def test_lane_pairs_read_the_same_bits_for_every_input(monkeypatch, name, attrs):
    fn = _computed_operand_graph(name, attrs)
    ones = np.full(EVERY_INPUT.shape[-1:], 0x3F80, np.int16)
    results = []
    for pairs in (True, False):
        choose(monkeypatch, reads_bf16_tables_by_lane_pairs=pairs)
        (got,) = _built(monkeypatch, fn, True)(EVERY_INPUT, ones)
        results.append(got)
    np.testing.assert_array_equal(*results)
    finite = np.isfinite(from_bits(EVERY_INPUT))  # (x * 1 is x there: every finite input's entry read)
    (plain,) = _built(monkeypatch, _unary_graph(name, attrs), True)(EVERY_INPUT)
    np.testing.assert_array_equal(results[0][finite], plain[finite])


def test_zen3_takes_a_computed_operands_indices_two_lanes_at_a_time():
    # row (a): gelu's operand x*w+b is computed (its indices by vmovq/vpextrq, no vpextrw); sigmoid's is x, whose
    # words are read as 64-bit words, four indices each (session 39: ``reads_bf16_table_indices_from_loaded_words``);
    # SSE keeps its code (Zen 4's: test_bf16_table_loops.py)
    fn = gelu_sigmoid_graph(64, 1024)
    zen3 = _llvm_ir(fn, CpuTarget("znver3", AVX2))
    assert "ncc.bf16_lookup.gelu.plain" in zen3 and '"ncc.bf16_lookup.sigmoid.plain.word0"' in zen3
    for other in (CpuTarget("x86-64", SSE),):
        assert "ncc.bf16_lookup" not in _llvm_ir(fn, other)
    code = jit.assembly([zen3], CpuTarget("znver3", AVX2))
    kernel = code[:code.index(".Lfunc_end")]
    assert "vpextrq" in kernel and "vpextrw" not in kernel and "ncc.bf16_lookup" not in kernel  # (inlined)
