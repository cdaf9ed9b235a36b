"""Element types in LLVM: storage vs. compute types, loads/stores, rounding and casts.

Storage (what buffers hold): f32 -> float, bf16 -> float holding bf16-representable values (the executable
boundary's convention; see docs/performance.md), f16 -> half, integers as themselves, bool -> i8 (0/1).
Compute (what registers hold): every float type computes in float, as PyTorch's CPU kernels do; bool is i1.
Every op producing a bf16/f16 value rounds to that precision (``round_to``), as the reference does per op.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
from llvmlite import ir

from neuroncc.errors import CodegenError
from neuroncc.ir.dtypes import DType, to_storage

F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
#: f32's significand bits: an integer below 2**24 converts to f32 exactly (an integer of at most this many bits
#: compares as floats without loss)
F32_EXACT_BITS = 24

_COMPUTE = {
    DType.f32: F32, DType.bf16: F32, DType.f16: F32, DType.i64: I64, DType.i32: I32, DType.i16: I16,
    DType.i8: I8, DType.u8: I8, DType.bool: I1,
}
_STORAGE = {**_COMPUTE, DType.f16: F16, DType.bool: I8}


def compute_type(dtype: DType) -> ir.Type:
    return _COMPUTE.get(dtype) or _no_llvm_type(dtype)


def storage_type(dtype: DType) -> ir.Type:
    return _STORAGE.get(dtype) or _no_llvm_type(dtype)


def _no_llvm_type(dtype: DType) -> ir.Type:
    if dtype.is_complex:  # kernels compute on real numbers; lower-complex (in the cpu pipeline) splits c64 values
        raise CodegenError(f"a {dtype.value} value reached LLVM code generation: complex values are lowered to "
                           f"float32 parts by the lower-complex pass first (add it to the pipeline, before fuse)")
    raise CodegenError(f"LLVM code generation has no type for {dtype.value} values")


def storage_itemsize(dtype: DType) -> int:
    """Bytes per element in buffers (bf16 is stored as float32)."""
    return 4 if dtype is DType.bf16 else dtype.itemsize


def is_unsigned(dtype: DType) -> bool:
    return dtype is DType.u8 or dtype is DType.bool


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """Declare (once) an LLVM intrinsic or C library function by its full name."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name)


def call(b: ir.IRBuilder, name: str, args: list[ir.Value], ret: ir.Type | None = None) -> ir.Value:
    fn = intrinsic(b.module, name, ret if ret is not None else args[0].type, [a.type for a in args])
    return b.call(fn, args)


def type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    return f"i{t.width}"


def constant(dtype: DType, value: float | int | bool) -> ir.Constant:
    """A compute-typed constant (float values are rounded to the dtype's precision like the reference)."""
    t = compute_type(dtype)
    if dtype.is_float:
        stored = to_storage(np.asarray([float(value)], dtype=np.float32), dtype)
        return ir.Constant(F32, float(np.float32(stored[0])))
    if dtype.is_bool:
        return ir.Constant(I1, int(bool(value)))
    bits = t.width
    number = int(value) & ((1 << bits) - 1)
    if number >= 1 << (bits - 1):
        number -= 1 << bits
    return ir.Constant(t, number)


def load(b: ir.IRBuilder, ptr: ir.Value, dtype: DType) -> ir.Value:
    value = b.load(ptr, typ=storage_type(dtype))
    if dtype is DType.f16:
        return b.fpext(value, F32)
    if dtype is DType.bool:
        return b.icmp_unsigned("!=", value, ir.Constant(I8, 0))
    return value


def store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, dtype: DType) -> ir.Instruction:
    if dtype is DType.f16:
        value = b.fptrunc(value, F16)
    elif dtype is DType.bool:
        value = b.zext(value, I8)
    return b.store(value, ptr)


class Rounding(NamedTuple):
    """What a bf16 rounding (:func:`round_to`) rounded."""

    value: ir.Value  # the float32 value
    nan_case: bool  # rounded with the NaN case
    op_result: bool  # an op's bf16 result (eager rounds after each op), not a cast's


#: A bf16 rounding's result (its float32, and the i16 bits of it: :func:`bf16_bits`) -> its :class:`Rounding`: a
#: paired loop's store packs two such halves from their float32 values (``bf16_words.rounded_word``) where the
#: target rounds in 16-bit lanes. Weak keys: instructions being emitted.
_ROUNDED_FROM: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def rounding_of(value: ir.Value) -> Rounding | None:
    """The :class:`Rounding` that made ``value`` (a :func:`round_to` result or its bits), else None."""
    return _ROUNDED_FROM.get(value) if isinstance(value, ir.Instruction) else None


def bf16_bits(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """The 16 bits of a bf16 value (a float32 whose low half is zero): its high half."""
    bits = b.trunc(b.lshr(b.bitcast(value, I32), ir.Constant(I32, 16)), I16)
    rounded = rounding_of(value)
    if rounded is not None:
        _ROUNDED_FROM[bits] = rounded
    return bits


#: The attribute of an ``ir.Module`` (its code for one target) set where the module's bf16 roundings or the kept
#: half's parity into the low half (``CpuTarget.rounds_bf16_parity_by_or``, :func:`round_parity_by_or`).
PARITY_BY_OR = "ncc_rounds_bf16_parity_by_or"


def round_parity_by_or(module: ir.Module, on: bool) -> None:
    """Make :func:`round_to`'s bf16 roundings in ``module`` or the kept half's parity into the low half (``on``)
    or add it (the same bits: ``CpuTarget.rounds_bf16_parity_by_or``)."""
    setattr(module, PARITY_BY_OR, on)


def round_to(b: ir.IRBuilder, value: ir.Value, dtype: DType, nan_case: bool = True,
             op_result: bool = False) -> ir.Value:
    """Round a float32 value to bf16/f16 precision (identity for other types). Without ``nan_case``, a NaN
    ``value`` must be quiet with a zero low half (``nan_payloads.py``): it is left as it is. ``op_result``: the
    rounding is an op's bf16 result, not a cast's (recorded for ``bf16_words.rounded_word``).

    bf16 rounds to nearest even in integer arithmetic on every CPU, as torch does (``c10::BFloat16``, ATen's
    vectorized ``cvtfp32_bf16``). Not ``fptrunc float to bfloat``: on CPUs with AVX-512 BF16 LLVM makes it
    ``vcvtneps2bf16``, which treats subnormal inputs as zero (Intel SDM; on Zen 4 every subnormal float32 with a
    nonzero rounding came out a signed zero), where torch rounds them (``tests/codegen/test_bf16_rounding.py``).
    (Paired outputs on Intel's AVX-512 cores use it where no input is subnormal: ``bf16_words.py``.)"""
    if dtype is DType.f16:
        return b.fpext(b.fptrunc(value, F16), F32)
    if dtype is not DType.bf16:
        return value
    bits = b.bitcast(value, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    if getattr(b.module, PARITY_BY_OR, False):
        # the parity or'ed into the low half instead of added (low + parity > 0x8000 exactly when low | parity
        # is: the same carry into the kept half): AVX-512's vpternlogd takes the and and the or (4 instructions)
        carried = b.add(b.or_(bits, lsb), ir.Constant(I32, 0x7FFF))
    else:
        carried = b.add(bits, b.add(lsb, ir.Constant(I32, 0x7FFF)))
    if nan_case:
        # the quiet bit set before the low half is cleared: one clearing serves both cases (a vector and
        # fewer per rounding than clearing each case's low half on its own)
        is_nan = b.fcmp_unordered("uno", value, value)
        carried = b.select(is_nan, b.or_(bits, ir.Constant(I32, 0x00400000)), carried)
    result = b.bitcast(b.and_(carried, ir.Constant(I32, 0xFFFF0000 - (1 << 32))), F32)
    _ROUNDED_FROM[result] = Rounding(value, nan_case, op_result)
    return result


def convert(b: ir.IRBuilder, value: ir.Value, src: DType, dst: DType, nan_case: bool = True) -> ir.Value:
    """The ``cast`` op: float->int truncates toward zero (NaN/out of range: the host's minimum, never poison),
    ->bool tests != 0; float->bf16 rounds (``nan_case``: see :func:`round_to`)."""
    if src is dst:
        return value
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("!=", value, ir.Constant(F32, 0.0))
        return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    target = compute_type(dst)
    if src.is_float and dst.is_float:
        return round_to(b, value, dst, nan_case)
    if src.is_float:
        # NaN and out-of-range values are undefined in C++ (and so in PyTorch); the host's conversion (x86's
        # cvtt*2si), which eager and the reference interpreter use, gives the "integer indefinite" minimum. Same
        # here, never poison (the unchosen fptosi result may be poison; select does not propagate it). Narrow
        # types go through int64 as PyTorch does. (Was saturating: found by the fuzzer, sum of NaN/inf as int64.)
        wide = I32 if target is I32 else I64
        limit = ir.Constant(F32, float(2 ** (wide.width - 1)))
        in_range = b.fcmp_ordered("<", call(b, "llvm.fabs.f32", [value]), limit)
        converted = b.select(in_range, b.fptosi(value, wide), ir.Constant(wide, -(2 ** (wide.width - 1))))
        return converted if target is wide else b.trunc(converted, target)
    if dst.is_float:
        as_float = b.uitofp(value, F32) if is_unsigned(src) else b.sitofp(value, F32)
        return round_to(b, as_float, dst)
    if target.width == value.type.width:
        return value
    if target.width < value.type.width:
        return b.trunc(value, target)
    return b.zext(value, target) if is_unsigned(src) else b.sext(value, target)


def to_index(b: ir.IRBuilder, value: ir.Value, dtype: DType) -> ir.Value:
    """An integer index value widened to i64."""
    if value.type == I64:
        return value
    return b.zext(value, I64) if is_unsigned(dtype) else b.sext(value, I64)


def to_f32(b: ir.IRBuilder, value: ir.Value, dtype: DType) -> ir.Value:
    if dtype.is_float:
        return value
    return b.uitofp(value, F32) if is_unsigned(dtype) else b.sitofp(value, F32)
