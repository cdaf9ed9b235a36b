"""Scalar calls the loop vectorizer replaces by explicit vector code, and the one such call of the math library.

Where a loop's best vector code has no scalar IR form the vectorizer would turn into it, the scalar code is a call:
the scalar function (for a loop's scalar remainder) carries a vector variant (``vector-function-abi-variant``),
which the vectorizer calls instead, and which ``jit._inline_vector_variants`` inlines after O3 (O3 inlines
alwaysinline functions only before the vectorizer; :func:`keep_until_vectorized` keeps the variant alive until
then). ``bf16_words.py`` packs bf16 pairs so; :func:`scaled_by_float` below is exp's scale.

**exp's scale by a float exponent** (``mathlib._exp_in_range`` on AVX-512, :attr:`CpuTarget.scales_by_float_exponent`). exp's
n = round(x / ln 2) is a float (the Cody-Waite reduction needs it as one) and vscalefps takes its exponent as a
float (it scales by 2**floor(n), n here already an integer). ``llvm.ldexp`` takes an i32, so the scale by it costs
the integer n (vpaddd on the rounded sum's bits) and its conversion back to float (vcvtdq2ps), 2 of the exp pass's
~20 vector instructions per 16 elements, which take the vector pipes the polynomial's FMAs need. The vector
variant here calls vscalefps on the float n itself. Its results are ldexp's bit for bit: the same instruction on
the same operands (a NaN p is src1 and wins over a NaN n, as it did over the converted integer)."""

from __future__ import annotations

from llvmlite import ir

from neuroncc.codegen.llvm.scalars import F32, I32, call
from neuroncc.errors import CodegenError

#: The symbol prefixes of functions with vector variants (``jit`` inlines the variants it finds after O3).
SYMBOLS: tuple[str, ...] = ("ncc.bf16.word", "ncc.scalef", "ncc.bf16_lookup")
#: The scale's symbol and its vector variants' lanes (128-, 256- and 512-bit vectors of float32).
SCALEF_SYMBOL, SCALEF_LANES = "ncc.scalef", (4, 8, 16)


def keep_until_vectorized(module: ir.Module, fn: ir.Function) -> None:
    """List ``fn`` in the module's ``llvm.compiler.used`` (one list per module, appended to): nothing calls a
    vector variant before the vectorizer, and O3 would drop it."""
    array = ir.ArrayType(ir.PointerType(), 1)
    used = module.globals.get("llvm.compiler.used")
    if used is None:
        used = ir.GlobalVariable(module, array, "llvm.compiler.used")
        used.linkage = "appending"
        used.section = "llvm.metadata"
        used.initializer = ir.Constant(array, [fn])
        return
    if not isinstance(used.initializer, ir.Constant) or not isinstance(used.value_type, ir.ArrayType):
        raise CodegenError("a kernel module's llvm.compiler.used is not a constant array")
    kept = list(used.initializer.constant) + [fn]
    used.value_type = ir.ArrayType(ir.PointerType(), len(kept))
    used.initializer = ir.Constant(used.value_type, kept)


def scalar_with_variant(module: ir.Module, symbol: str, fn_type: ir.FunctionType, lanes: int,
                        variant: ir.Function) -> ir.Function:
    """The scalar function ``symbol`` (body left to the caller), noinline until the vectorizer has replaced its
    calls by ``variant`` on ``lanes`` lanes (a call it vectorizes must not touch memory)."""
    return scalar_with_variants(module, symbol, fn_type, [(lanes, variant)])


def scalar_with_variants(module: ir.Module, symbol: str, fn_type: ir.FunctionType,
                         variants: list[tuple[int, ir.Function]]) -> ir.Function:
    """:func:`scalar_with_variant` with one or more ``variants`` (lanes, function): the vectorizer takes the one of
    its loop's lanes."""
    fn = ir.Function(module, fn_type, symbol)
    fn.linkage = "internal"
    set.add(fn.attributes, "noinline")
    _with_variants(fn, variants)
    return fn


def with_variants(fn: ir.Function, variants: list[tuple[int, ir.Function]]) -> None:
    """Name ``variants`` (lanes, function) as ``fn``'s vector variants in place of those it named."""
    for attribute in [a for a in fn.attributes if a.startswith('"vector-function-abi-variant"=')]:
        set.discard(fn.attributes, attribute)
    _with_variants(fn, variants)


def _with_variants(fn: ir.Function, variants: list[tuple[int, ir.Function]]) -> None:
    """Mark ``fn`` free of side effects and name its vector ``variants`` (lanes, function) for the vectorizer."""
    args = "v" * len(fn.function_type.args)
    names = ",".join(f"_ZGV_LLVM_N{lanes}{args}_{fn.name}({variant.name})" for lanes, variant in variants)
    for attribute in ("nounwind", "willreturn", "memory(none)", f'"vector-function-abi-variant"="{names}"'):
        set.add(fn.attributes, attribute)  # raw: llvmlite's attribute set knows neither memory(none) nor strings


def scaled_by_float(b: ir.IRBuilder, p: ir.Value, n: ir.Value) -> ir.Value:
    """p * 2**n for a float n holding an integer, rounded once: vscalefps (vector code: 4, 8 or 16 lanes, as the
    kernel's vector width has it) or vscalefss (scalar code) of p and n itself (AVX-512 with VL:
    ``CpuTarget.scales_by_float_exponent``; see the module docstring).

    The scalar function is only declared here, with its vector variants: a defined one would have to be noinline
    until the vectorizer is done, and stay a call in scalar code (cross-entropy's once-a-chunk rescale: every
    vector constant reloaded after it, 4% slower at 1 thread). ``jit`` links :data:`DEFINED_AFTER_O3`'s
    alwaysinline definition in after O3 and inlines it with the variants (whose own copies stay in the object, dead:
    ``llvm.compiler.used`` keeps them, as ``bf16_words``' variant)."""
    module = b.module
    fn = module.globals.get(SCALEF_SYMBOL)
    if fn is None:
        variants = []
        for lanes in SCALEF_LANES:
            bits = lanes * I32.width  # float32 lanes
            vector = ir.VectorType(F32, lanes)
            variant = ir.Function(module, ir.FunctionType(vector, [vector, vector]), f"{SCALEF_SYMBOL}.v{lanes}")
            variant.linkage = "internal"
            variant.attributes.add("alwaysinline")
            variant.attributes.add("nounwind")
            keep_until_vectorized(module, variant)
            body = ir.IRBuilder(variant.append_basic_block("entry"))
            mask = ir.Constant(ir.IntType(max(lanes, 8)), -1)
            rounding = [ir.Constant(I32, 4)] if lanes == SCALEF_LANES[-1] else []  # the widest's; MXCSR's
            body.ret(call(body, f"llvm.x86.avx512.mask.scalef.ps.{bits}",
                          [variant.args[0], variant.args[1], ir.Constant(vector, None), mask] + rounding, vector))
            variants.append((lanes, variant))
        fn = ir.Function(module, ir.FunctionType(F32, [F32, F32]), SCALEF_SYMBOL)
        _with_variants(fn, variants)
    return b.call(fn, [p, n])


#: Scalar functions declared in kernel modules and defined after O3 (``jit`` links each module's in): their
#: definitions' IR text (linkonce_odr and hidden: every module may hold one; none survives its inlining).
DEFINED_AFTER_O3: dict[str, str] = {SCALEF_SYMBOL: f"""
define linkonce_odr hidden float @"{SCALEF_SYMBOL}"(float %p, float %n) #0 {{
  %pv = insertelement <4 x float> poison, float %p, i32 0
  %nv = insertelement <4 x float> poison, float %n, i32 0
  %r = call <4 x float> @llvm.x86.avx512.mask.scalef.ss(<4 x float> %pv, <4 x float> %nv, <4 x float> poison, i8 -1,
                                                         i32 4)
  %s = extractelement <4 x float> %r, i32 0
  ret float %s
}}
declare <4 x float> @llvm.x86.avx512.mask.scalef.ss(<4 x float>, <4 x float>, <4 x float>, i8, i32)
attributes #0 = {{ alwaysinline nounwind willreturn memory(none) }}
"""}
