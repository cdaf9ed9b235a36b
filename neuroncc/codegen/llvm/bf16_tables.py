"""bf16 unary math by table: a bf16 op's result as one load from a table of its 65536 results.

In a bf16 graph every op rounds its result to bf16 (as eager does), so a unary elementwise op whose operand is a
bf16 value computes a function of that operand's 16 bits: the table of the rounded results over all 65536 bit
patterns, indexed by the operand's bits, replaces the polynomial, its range reduction and its rounding (or the C
library's scalar call per lane: sin, cos, tan, atan, expm1, log1p) by one load. The table is made from the very
code the op has without it: the op's math function (``mathlib.math_call``: a polynomial, or the C library's) and
rounding (``scalars.round_to``, with or without its NaN case as the op's would be), compiled for the CPU whose
kernels read the table and run over every input (:func:`lookup_table`), so the results are the same bits, NaN
payloads included (a polynomial's last bits depend on the machine code LLVM makes of it, which follows the CPU
compiled for: AVX2's gelu table made by an AVX-512 machine differed in 2 of 65536 entries, session 36); a process
compiling through a compile cache keeps each table it makes there for later processes (``table_files.py``: ~30-45
ms of a cold compile per table on Zen 3, named by the digest of what made it). A module
holds each table it reads as a constant (128 KiB of .rodata in its object code: a loaded kernel needs nothing
else). Real activations touch a few thousand entries (normal data: ~13 exponents x 128 mantissas x 2 signs),
which stay in L1/L2.

The loads are scalar in the IR; LLVM's vectorizer makes them a vector of lanes' loads (extract, load, insert),
which measured faster on Zen 3 than AVX2's ``vpgatherdd`` (``benchmarks/bench_math_interleave.py --lookup``). Each
reads 32 bits whose high half is the entry (the table starts 2 bytes after its constant), masked to the float32 of
the bf16 result: the vectorizer folds such a load into its insert (``vinsertps`` from memory, then one ``vpand`` per
vector, where a 16-bit entry took a ``movzwl``, a ``vpinsrw`` and a shift): bf16 row (a)'s kernel 0.91-0.92 of the
16-bit reads' time on Zen 3, within 1-2% of a table of float32 entries twice the size (session 25 table25). For
Intel's AVX-512 cores LLVM makes them one ``vpgatherdd`` per vector of 16 lanes: bf16 row (a)'s kernel 0.45-0.48 of
the time of its polynomials (session 32 math32).
Where it is emitted is :attr:`CpuTarget.looks_up_bf16_unary_math`'s decision and
``elementwise.table_function``'s (which ops).

An operand the loop computes (gelu(x*w+b)) has no word in memory to read its index from: LLVM takes each lane's
index out of the vector by ``vpextrw`` (2 uops each on Zen 3's vector pipes). Where
:attr:`CpuTarget.reads_bf16_tables_by_lane_pairs` says so, such a read is a call with a vector variant
(``vector_variants.py``) that takes the indices out two lanes at a time (``vmovq``/``vpextrq`` of 64 bits, integer
shifts to byte offsets), then loads and inserts the entries as before: bf16 row (a)'s kernel 0.97-0.98 of its time
on Zen 3 (session 26 a16idx26).

Zen 4 (:attr:`CpuTarget.bf16_table_loop_lanes`: 16-lane ``vpgatherdd`` made its tables slower than its
polynomials) runs a loop reading tables 8 lanes a vector iteration (``loop_hints.hint_math_loop``), with AVX2's
reads: computed operands by lane pairs, each pair through an empty ``asm`` (:func:`_opaque`: LLVM's AVX-512
combines otherwise vectorize the pairs' shifts and move every index out alone), and an element the paired loop
loads (sigmoid(x)) by its word (:attr:`CpuTarget.reads_bf16_table_indices_from_loaded_words`,
:func:`_word_read`): four indices in each 64 bits of the loaded words, read from memory by ``movq``; a computed
operand's pair packed into such a word first (:func:`packed_word`,
:attr:`CpuTarget.packs_computed_bf16_table_operands`) and read so (4 moves per 16 elements, not 8).
"""

from __future__ import annotations

import array
import ctypes
import hashlib
import threading

import llvmlite
from llvmlite import binding as llvm
from llvmlite import ir

from neuroncc.codegen.llvm import jit, table_files
from neuroncc.codegen.llvm.entries import RECIPROCAL_ESTIMATES
from neuroncc.codegen.llvm.loop_hints import hint_math_loop
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.native_library import CodeForm
from neuroncc.codegen.llvm.scalars import F32, I16, I32, I64, PTR, VOID, bf16_bits, round_to
from neuroncc.codegen.llvm.vector_variants import keep_until_vectorized, scalar_with_variant
from neuroncc.hardware.host import CACHE_LINE_BYTES, CpuTarget, host_cpu
from neuroncc.hardware.named_cpu import missing_features
from neuroncc.ir.dtypes import DType
from neuroncc.codegen.llvm.fork_safety import renew_in_child

#: Entries of a table: one per bf16 bit pattern.
ENTRIES = 1 << 16
#: The kernel that makes a table, and its loop's symbol.
_MAKER = "ncc.bf16_table.make"

_LOCK = renew_in_child(threading.Lock())
#: (function, nan_case, the name and machine features of the CPU its maker was compiled for) -> the table's bytes
#: (little-endian i16 entries)
_TABLES: dict[tuple[str, bool, str, str], bytes] = {}
#: the same key -> the table as an LLVM constant's text (formatting 128 KiB took ~6 ms a module)
_CONSTANTS: dict[tuple[str, bool, str, str], str] = {}
#: Bytes before a table's first entry in its constant: the 32-bit read of entry 0 starts there.
_PAD = 2
#: The type of a table's constant: the pad and the entries' bytes.
_TABLE_TYPE = ir.ArrayType(ir.IntType(8), _PAD + 2 * ENTRIES)


def _maker_module(function: str, nan_case: bool, target: CpuTarget) -> str:
    """``make(ptr x, ptr y)``: y[i] = the bits of round_to(function(bf16 x[i])) over ENTRIES inputs, the loop
    hinted as a kernel's math loops are."""
    module = ir.Module("bf16_table")
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR]), _MAKER)
    xs, ys = fn.args
    for pointer in fn.args:
        pointer.add_attribute("noalias")
    set.add(fn.attributes, RECIPROCAL_ESTIMATES)  # (as on every generated phase)
    entry, head, body, done = (fn.append_basic_block(n) for n in ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    b.cbranch(b.icmp_signed("<", i, ir.Constant(I64, ENTRIES)), body, done)
    b.position_at_end(body)
    bits = b.load(b.gep(xs, [i], source_etype=I16, inbounds=True), typ=I16)
    value = b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)
    result = round_to(b, math_call(b, function, value, target=target), DType.bf16, nan_case)
    b.store(bf16_bits(b, result), b.gep(ys, [i], source_etype=I16, inbounds=True))
    i.add_incoming(b.add(i, ir.Constant(I64, 1)), body)
    hint_math_loop(b.branch(head), target)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


def maker_cpu(target: CpuTarget) -> CpuTarget:
    """The CPU a table for ``target``'s kernels is made by: ``target`` itself, whose kernels' polynomials the
    table stands for, when this host can run its code (the host's CPU, a named one, AVX2 on an AVX-512 host);
    else the host's (a target only emitted for, in tests: its code is read, never run)."""
    host = host_cpu()
    return target if not missing_features(target.features, host.features) else host


def _key(function: str, nan_case: bool, target: CpuTarget) -> tuple[str, bool, str, str]:
    maker = maker_cpu(target)
    return function, nan_case, maker.name, maker.machine_features


def lookup_table(function: str, nan_case: bool, target: CpuTarget) -> bytes:
    """The bits of the bf16 results of math function ``function`` (``mathlib.POLYNOMIAL`` or ``LIBM``) rounded with
    or without its NaN case, for every bf16 input's bits (index: the input's 16 bits), as ``target``'s code
    computes them (:func:`maker_cpu`): compiled and run once per process and key, or read back from the compile
    cache's tables (``table_files.py``) where an earlier process made it."""
    key = _key(function, nan_case, target)
    with _LOCK:
        table = _TABLES.get(key)
    if table is not None:
        return table
    # (emitted for the CPU that makes it: a target this host cannot run gets the host's table, and its maker must
    # not hold that target's instructions, which LLVM cannot compile for the host)
    maker = _maker_module(function, nan_case, maker_cpu(target))
    name = _kept_name(maker, target)
    table = table_files.load(name, 2 * ENTRIES)
    if table is None:
        table = _made(maker, maker_cpu(target))
        table_files.save(name, table)
    with _LOCK:
        _TABLES.setdefault(key, table)
    return table


def _kept_name(maker: str, target: CpuTarget) -> str:
    """The name a table is kept under: the digest of what its bytes depend on (the maker's text, the CPU it is
    compiled for, the host CPU that runs it (an estimate instruction's bits may differ between makers), the LLVM
    that compiles it)."""
    compiled_for = maker_cpu(target)
    parts = (maker, compiled_for.name, compiled_for.machine_features, host_cpu().fingerprint,
             ".".join(map(str, llvm.llvm_version_info)), llvmlite.__version__)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _made(maker: str, cpu: CpuTarget) -> bytes:
    """The table ``maker``'s module makes: compiled for ``cpu``, and run over every input."""
    # as objects for MCJIT: no linker run for a module called once (3 of its ~30 ms)
    code = jit.compile_ir([maker], form=CodeForm.OBJECTS, target=cpu)
    inputs = array.array("H", range(ENTRIES))  # (a ctypes array from range() took ~12 ms)
    outputs = bytearray(2 * ENTRIES)
    make = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(code.address(_MAKER))
    make(inputs.buffer_info()[0], ctypes.addressof((ctypes.c_char * len(outputs)).from_buffer(outputs)))
    return bytes(outputs)


def looked_up(b: ir.IRBuilder, function: str, nan_case: bool, target: CpuTarget, value: ir.Value,
              computed: bool = False, narrow: bool = False,
              packed: tuple[ir.Value, int] | None = None) -> ir.Value:
    """The bf16 result (a float32 whose low half is zero) of ``function`` of bf16 ``value`` rounded with or without
    its NaN case: the entry of its table at ``value``'s bits, the table a constant of ``b``'s module. ``computed``:
    ``value`` is computed by the loop, not a word it loads (read by lane pairs where the target says so).
    ``narrow``: the loop reads tables in narrow loops (``CpuTarget.bf16_table_loop_lanes``: lane pairs, words);
    else, where the target has such loops, by LLVM's form (``vpgatherdd`` at 16 lanes). ``packed``: (the 32-bit
    word of the pair's two computed operands, :func:`packed_word`; which half ``value`` is), read as a loaded word
    is (``CpuTarget.packs_computed_bf16_table_operands``)."""
    module = b.module
    symbol = f"ncc.bf16_table.{function}.{'nan' if nan_case else 'plain'}"
    table = module.globals.get(symbol)
    if table is None:
        key = _key(function, nan_case, target)
        with _LOCK:
            text = _CONSTANTS.get(key)
        if text is None:
            data = bytearray(_PAD) + lookup_table(function, nan_case, target)
            text = ir.Constant(_TABLE_TYPE, data).get_reference()
            with _LOCK:
                _CONSTANTS[key] = text
        table = ir.GlobalVariable(module, _TABLE_TYPE, symbol)
        table.initializer = ir.FormattedConstant(_TABLE_TYPE, text)
        table.global_constant = True
        table.linkage = "internal"
        table.align = CACHE_LINE_BYTES
    if target.bf16_table_loop_lanes and not narrow:
        return _entry(b, table, value)
    paired = packed if packed is not None else (
        _pair_word(value) if target.reads_bf16_table_indices_from_loaded_words else None)
    if paired is not None:
        return b.call(_word_read(module, symbol, table, paired[1]), [paired[0]])
    if not ((computed or narrow) and target.reads_bf16_tables_by_lane_pairs):
        return _entry(b, table, value)
    name = symbol.replace(_TABLE_SYMBOL, _PAIRS_SYMBOL)
    fn = module.globals.get(name)
    if fn is None:
        variant = _lane_pairs_variant(module, name + ".v8", table, opaque=narrow)
        fn = scalar_with_variant(module, name, ir.FunctionType(F32, [F32]), _PAIR_LANES, variant)
        body = ir.IRBuilder(fn.append_basic_block("entry"))
        body.ret(_entry(body, table, fn.args[0]))
    return b.call(fn, [value])


#: The symbol prefixes of a table and of its read by lane pairs (``vector_variants.SYMBOLS``).
_TABLE_SYMBOL, _PAIRS_SYMBOL = "ncc.bf16_table", "ncc.bf16_lookup"
#: Lanes of the read by lane pairs (AVX2: 256-bit vectors of float32).
_PAIR_LANES = 8
#: The mask of an entry read as the high half of 32 bits.
_HIGH_HALF = 0xFFFF0000 - (1 << 32)


def _entry(b: ir.IRBuilder, table: ir.GlobalVariable, value: ir.Value) -> ir.Value:
    """The float32 of the entry at ``value``'s high half, read as the high half of 32 bits."""
    index = b.zext(b.lshr(b.bitcast(value, I32), ir.Constant(I32, 16)), I64)
    # entry k's bytes are the constant's 2 + 2k and 3 + 2k: the high half of the 32 bits from its byte 2k
    word = b.load(b.gep(table, [index], source_etype=I16, inbounds=True), typ=I32, align=I16.width // 8)
    return b.bitcast(b.and_(word, ir.Constant(I32, _HIGH_HALF)), F32)


def _opaque(b: ir.IRBuilder, quad: ir.Value) -> ir.Value:
    """``quad`` (i64) through an empty ``asm``: no instruction, but LLVM cannot see through it, so the index
    arithmetic after it stays in general registers (on AVX-512 its combines make the lane pairs' shifts 512-bit
    ``vpermt2w`` + ``vpsrlvq`` + ``vpandq`` and then move every index out on its own: twice the moves)."""
    return b.call(ir.InlineAsm(ir.FunctionType(I64, [I64]), "", "=r,0", side_effect=False), [quad],
                  attrs=("readnone", "nounwind"))


def _read_lanes(b: ir.IRBuilder, table: ir.GlobalVariable, offsets: list[ir.Value]) -> ir.Value:
    """The float32 vector of the entries at byte ``offsets`` (one a lane), read as the high halves of 32 bits."""
    words = ir.Constant(ir.VectorType(I32, len(offsets)), None)
    for lane, offset in enumerate(offsets):
        word = b.load(b.gep(table, [offset], source_etype=ir.IntType(8), inbounds=True), typ=I32,
                      align=I16.width // 8)
        words = b.insert_element(words, word, ir.Constant(I32, lane))
    masked = b.and_(words, ir.Constant(ir.VectorType(I32, len(offsets)), [_HIGH_HALF] * len(offsets)))
    return b.bitcast(masked, ir.VectorType(F32, len(offsets)))


def _variant_function(module: ir.Module, symbol: str, argument: ir.Type) -> tuple[ir.Function, ir.IRBuilder]:
    """A vector variant of ``_PAIR_LANES`` lanes taking a vector of ``argument``, internal and always inlined,
    kept until the vectorizer has used it, and a builder at its entry."""
    vector = ir.VectorType(F32, _PAIR_LANES)
    fn = ir.Function(module, ir.FunctionType(vector, [ir.VectorType(argument, _PAIR_LANES)]), symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    keep_until_vectorized(module, fn)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _lane_pairs_variant(module: ir.Module, symbol: str, table: ir.GlobalVariable, opaque: bool = False) -> ir.Function:
    """The entries of 8 lanes, their indices taken out of the vector two lanes at a time: each 64-bit half-lane
    pair moved to a general register (``vmovq``/``vpextrq``), its two 16-bit indices (bits 16-31 and 48-63) made
    byte offsets by integer shifts and masks, the entries loaded and inserted as the scalar form's are; ``opaque``:
    each pair through :func:`_opaque` first."""
    fn, b = _variant_function(module, symbol, F32)
    quads = b.bitcast(fn.args[0], ir.VectorType(I64, _PAIR_LANES // 2))
    even_offset = ir.Constant(I64, 0x1FFFE)
    offsets = []
    for k in range(_PAIR_LANES // 2):
        quad = b.extract_element(quads, ir.Constant(I32, k))
        if opaque:
            quad = _opaque(b, quad)
        offsets += [b.and_(b.lshr(quad, ir.Constant(I64, 15)), even_offset),
                    b.and_(b.lshr(quad, ir.Constant(I64, 47)), even_offset)]
    b.ret(_read_lanes(b, table, offsets))
    return fn


def _operand(value: ir.Value | None, opname: str) -> ir.Value | None:
    """The first operand of LLVM instruction ``value`` where it is an ``opname``, else None."""
    return value.operands[0] if isinstance(value, ir.Instruction) and value.opname == opname else None


def _pair_word(value: ir.Value) -> tuple[ir.Value, int] | None:
    """(the loaded 32-bit word, 0 or 1) where ``value`` is a paired loop's even or odd bf16 element widened from the
    word it loads (``pairs.half_of``, then shifted into a float32's high half), else None."""
    value = _operand(_operand(_operand(_operand(value, "bitcast"), "shl"), "zext"), "trunc")
    if value is None:
        return None
    half = 0
    if isinstance(value, ir.Instruction) and value.opname == "lshr":
        value, shift = value.operands
        if not (isinstance(shift, ir.Constant) and shift.constant == 16):
            return None
        half = 1
    return (value, half) if isinstance(value, ir.LoadInstr) and value.type == I32 else None


def packed_word(b: ir.IRBuilder, even: ir.Value, odd: ir.Value) -> ir.Value:
    """The 32-bit word of bf16 values ``even`` and ``odd`` (float32s whose low halves are zero): ``even``'s bits
    in its low half, ``odd``'s in its high half, as a paired loop's loaded word holds its two elements."""
    odd_bits = b.and_(b.bitcast(odd, I32), ir.Constant(I32, _HIGH_HALF))
    return b.or_(b.lshr(b.bitcast(even, I32), ir.Constant(I32, 16)), odd_bits)


def _word_read(module: ir.Module, symbol: str, table: ir.GlobalVariable, half: int) -> ir.Function:
    """The read of ``table`` at the ``half`` (0: low, 1: high) element of a pair's word (loaded, or packed by
    :func:`packed_word`): a scalar function of the word with a vector variant of 8 words
    (:func:`_word_pairs_variant`)."""
    name = symbol.replace(_TABLE_SYMBOL, _PAIRS_SYMBOL) + f".word{half}"
    fn = module.globals.get(name)
    if fn is None:
        variant = _word_pairs_variant(module, name + ".v8", table, half)
        fn = scalar_with_variant(module, name, ir.FunctionType(F32, [I32]), _PAIR_LANES, variant)
        body = ir.IRBuilder(fn.append_basic_block("entry"))
        word = fn.args[0]
        index = body.lshr(word, ir.Constant(I32, 16)) if half else body.and_(word, ir.Constant(I32, 0xFFFF))
        entry = body.load(body.gep(table, [body.zext(index, I64)], source_etype=I16, inbounds=True), typ=I32,
                          align=I16.width // 8)
        body.ret(body.bitcast(body.and_(entry, ir.Constant(I32, _HIGH_HALF)), F32))
    return fn


def _word_pairs_variant(module: ir.Module, symbol: str, table: ir.GlobalVariable, half: int) -> ir.Function:
    """The entries of 8 words' ``half`` elements, four indices in each 64 bits of the words: each pair of words through
    :func:`_opaque` (loaded words: LLVM reads it from memory with a ``movq``, the loop's vector load of the words aside;
    packed ones: moved out by ``vmovq``/``vpextrq``, 4 moves per 16 elements), the even elements' byte offsets its bits
    0-15 and 32-47 shifted left by 1, the odd ones' its bits 16-31 and 48-63 shifted right by 15 and 47. The even and
    odd reads of a word take the same 64 bits."""
    fn, b = _variant_function(module, symbol, I32)
    quads = b.bitcast(fn.args[0], ir.VectorType(I64, _PAIR_LANES // 2))
    even_offset = ir.Constant(I64, 0x1FFFE)
    offsets = []
    for k in range(_PAIR_LANES // 2):
        quad = _opaque(b, b.extract_element(quads, ir.Constant(I32, k)))
        if half:
            shifted = b.lshr(quad, ir.Constant(I64, 15)), b.lshr(quad, ir.Constant(I64, 47))
        else:
            shifted = b.shl(quad, ir.Constant(I64, 1)), b.lshr(quad, ir.Constant(I64, 31))
        offsets += [b.and_(offset, even_offset) for offset in shifted]
    b.ret(_read_lanes(b, table, offsets))
    return fn
