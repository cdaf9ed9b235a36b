"""Vectorizable float32 math written in LLVM IR: exp (and exp of non-positive arguments), exp2, log, log2, tanh,
sigmoid, erf, gelu.

LLVM lowers ``llvm.exp.f32`` and friends to scalar libm calls, which stops the loop vectorizer. These branch-
free polynomial versions (Cephes-style range reduction + minimax polynomials, selects instead of branches)
inline into loops and vectorize; exp/log/tanh/sigmoid are accurate to a few float32 ulps, erf to 5e-7
absolute: all well inside PyTorch's float32 tolerances (rtol 1.3e-6, atol 1e-5). Less common functions (sin,
cos, tan, atan, atan2, pow, expm1, log1p) call the C library: exact, but scalar.

Each function is defined once per module, on demand, as an internal ``alwaysinline`` function of one float.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from neuroncc.hardware.host import CpuTarget
from neuroncc.codegen.llvm.scalars import F32, I32, call
from neuroncc.codegen.llvm.vector_variants import scaled_by_float

FAST = ("contract",)  # allow fused multiply-add in polynomials: it only makes them more accurate
RECIP = ("arcp", "ninf", "contract")  # reciprocal estimate + Newton step (~1 ulp, in FMAs): operands finite


def _c(value: float) -> ir.Constant:
    return ir.Constant(F32, value)


def horner(b: ir.IRBuilder, x: ir.Value, coefficients: list[float]) -> ir.Value:
    """c[0]*x^(n-1) + ... + c[n-1], highest power first."""
    acc = _c(coefficients[0])
    for coefficient in coefficients[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=FAST), _c(coefficient), flags=FAST)
    return acc


def _is_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", x, x)


def _clamp_keeping_nan(b: ir.IRBuilder, x: ir.Value, low: float, high: float) -> ir.Value:
    """x clamped to [low, high], NaN kept: ``low > x ? low : x`` is x86's maxps(low, x) exactly (it returns
    its second operand when either is NaN), so this is one vmaxps and one vminps, and the NaN flows through
    the function to its result without a select at the end."""
    raised = _raised_keeping_nan(b, x, low)
    return b.select(b.fcmp_ordered("<", _c(high), raised), _c(high), raised)


def _raised_keeping_nan(b: ir.IRBuilder, x: ir.Value, low: float) -> ir.Value:
    """max(low, x), NaN kept: one vmaxps (see :func:`_clamp_keeping_nan`)."""
    return b.select(b.fcmp_ordered(">", _c(low), x), _c(low), x)


def _pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2**n for an i32 n in [-126, 127] (and +0 at -127: all exponent bits zero), built from the exponent bits (for
    n = round(...) by ``_ROUNDER``, LLVM shifts the rounded float's bits left by 23 and adds a constant: the
    rounder's own bits shift out)."""
    return b.bitcast(b.shl(b.add(n, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)


def _scale(b: ir.IRBuilder, p: ir.Value, n: ir.Value, target: CpuTarget) -> ir.Value:
    """p * 2**n for p in [0.5, 2) and an i32 n in [-253, 130], rounded once (overflow to inf and denormal
    underflow come out as ldexp's; at n = -253 the first power of two is +0, see :data:`EXP_FLOOR`).

    With AVX-512 this is ``llvm.ldexp``, one vscalefps. Elsewhere LLVM would call libm's scalar ``ldexpf``
    once per lane (eight calls per AVX2 vector: 4-5x the cost of the whole polynomial), so the scale is two
    powers of two built from exponent bits, each within the normal range: p * 2**h is exact, and the second
    product rounds once, as ldexp does."""
    if target.scalef:
        return call(b, "llvm.ldexp.f32.i32", [p, n], F32)
    half = b.ashr(n, ir.Constant(I32, 1))
    return b.fmul(b.fmul(p, _pow2(b, half)), _pow2(b, b.sub(n, half)))


#: 1.5 * 2**23: adding it to a float of magnitude below 2**22 rounds it to an integer (ties to even), which
#: then sits in the low bits of the sum (no vroundps, no float -> int conversion).
_ROUNDER = 12582912.0
_ROUNDER_BITS = 0x4B400000

#: e**r = 1 + r + c2 r**2 + ... + c6 r**6 on |r| <= ln(2)/2: a relative minimax fit (Lawson's iteration on
#: Chebyshev nodes), 3e-9 relative error; evaluated by Horner with FMAs in float32 it is within 0.72 ulp of
#: e**r over the whole range (checked over 200001 points), one degree and two instructions fewer than
#: Cephes' 1 + r + r**2 P5(r).
_EXP_POLY = [0.0013814539415761828, 0.00836874544620514, 0.04166838899254799, 0.1666652113199234,
             0.4999999403953552, 1.0, 1.0]


#: e**r of degree 5 (the same form: r**0's and r**1's coefficients 1), for exponentials whose only results are bf16
#: (:func:`_exp_nonpositive_for_bf16`): within 2.1 ulp of e**r on [-0.3471, 0.3471] in float32 arithmetic, where
#: :data:`_EXP_POLY`'s are within 0.72 (a minimax fit of the relative error with those two coefficients fixed).
_EXP_POLY_DEGREE_5 = [0.008312453515827656, 0.04189077764749527, 0.16667117178440094, 0.4999922811985016, 1.0, 1.0]


def _exp_reduced(b: ir.IRBuilder, r: ir.Value, poly: list[float] = _EXP_POLY) -> ir.Value:
    """e**r for |r| <= ln(2)/2 (a hair more where the rounding of x/ln 2 tied): six FMAs (``poly``: its
    coefficients, highest power first)."""
    return horner(b, r, poly)


def _round_to_integer(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(roundeven(x) as a float, the same as an i32) for |x| < 2**22 (or NaN: the integer is then some
    number, never poison, and the float NaN)."""
    shifted = b.fadd(x, _c(_ROUNDER), flags=FAST)
    return b.fsub(shifted, _c(_ROUNDER)), b.sub(b.bitcast(shifted, I32), ir.Constant(I32, _ROUNDER_BITS))


def _exp_in_range(b: ir.IRBuilder, xc: ir.Value, target: CpuTarget, poly: list[float] = _EXP_POLY) -> ir.Value:
    """e**xc for xc in [-104, 88.8] (without AVX-512 [-175.5, 88.8]) or NaN (callers clamp; NaN comes out as NaN):
    n = round(xc / ln 2) by the rounding constant (fused into the multiply), r = xc - n ln 2 in two FMAs
    (Cody-Waite: n * 0.693359375 is exact), e**r by the polynomial, times 2**n. With AVX-512 (VL) the scale is
    vscalefps by the float n itself (``vector_variants.scaled_by_float``: no integer n, no conversion back; the
    same bits)."""
    n, whole = _round_to_integer(b, b.fmul(xc, _c(1.4426950408889634), flags=FAST))
    r = b.fsub(xc, b.fmul(n, _c(0.693359375), flags=FAST), flags=FAST)
    r = b.fsub(r, b.fmul(n, _c(-2.12194440e-4), flags=FAST), flags=FAST)
    if target.scales_by_float_exponent:
        return scaled_by_float(b, _exp_reduced(b, r, poly), n)
    return _scale(b, _exp_reduced(b, r, poly), whole, target)


#: Where exp clamps its argument from below without AVX-512: at -175.5, n = round(x / ln 2) = -253 and the first
#: power of two of :func:`_scale`, 2**(n >> 1) = 2**-127, has all-zero bits: e**x is +0 from exact products, the
#: result e**x rounds to below -103.97 anyway. The clamp at -104 (n = -150) reached it through a product that
#: underflows, and an underflowing vector product costs Zen 3 a microcode assist: exp of -inf, -200 or -1e4 took
#: 1.35-1.4x the time of typical arguments (docs/performance-history.md, session 20 underflow). Arguments in
#: (-175.5, -87.3) still underflow a product: their results are denormal, or +0 by rounding. (Overflow costs
#: nothing measurable: the clamp at 88.8 stays, whose product overflows to inf.) With AVX-512 one vscalefps
#: scales by any n.
EXP_FLOOR = -175.5

#: Where sigmoid and gelu_tanh clamp the w of their 1 + e**w from below without AVX-512: e**-86 is a normal float
#: from normal products (n = -124), and 1 + e**w is exactly 1 below w = -16.7 either way, so their results are
#: those of the clamp at -104, whose scale underflowed a product (see :data:`EXP_FLOOR`): sigmoid of +200 or +inf
#: and gelu_tanh of 20 took 1.35-1.4x the time of typical arguments (Zen 3).
ONE_PLUS_EXP_FLOOR = -86.0


def _exp_clamped(b: ir.IRBuilder, x: ir.Value, target: CpuTarget, floor: float) -> ir.Value:
    """e**x for any x, clamped to [``floor``, 88.8] (with AVX-512 to [-104, 88.8]: vscalefps scales by any n)."""
    if _in_one_step(target, floor):
        return _exp_in_one_step(b, _clamp_keeping_nan(b, x, floor, 88.8), negated=False)
    return _exp_in_range(b, _clamp_keeping_nan(b, x, -104.0 if target.scalef else floor, 88.8), target)


def _in_one_step(target: CpuTarget, floor: float) -> bool:
    """Whether an exp clamped to [``floor``, 88.8] scales in one step (:func:`_exp_in_one_step`): where the target
    says so (``CpuTarget.scales_one_plus_exp_in_one_step``) and 2**(n - 1) is a normal float for every n = round(x /
    ln 2) of the range (n >= -125: the floor of sigmoid's and gelu_tanh's 1 + e**w, ``ONE_PLUS_EXP_FLOOR``)."""
    return target.scales_one_plus_exp_in_one_step and round(floor * 1.4426950408889634) >= -125


def _exp_in_one_step(b: ir.IRBuilder, xc: ir.Value, negated: bool) -> ir.Value:
    """e**xc (``negated``: e**-xc) for xc clamped as :func:`_in_one_step` allows (``negated``: its negative), or NaN:
    :func:`_exp_in_range`'s result bits in fewer instructions, without AVX-512. n = round(x / ln 2) and r = x - n ln 2
    as there (``negated``: -x's n from xc times -1/ln 2, which is the same product, and -r, by the same FMAs with
    their signs mirrored: rounding to nearest is symmetric, so each is the exact negative); e**r by the polynomial
    with its coefficients times 2 (``negated``: of -r, the odd powers' signs flipped: each Horner step is then
    exactly +-2 times exp's), so 2 e**r exactly; then one product with 2**(n - 1), a normal float for n in [-125,
    128], rounds it once, as _scale's two products do (the first of them is exact). The sign of xc leaves NaN's bits
    as they are: sigmoid no longer computes 0 - x. Per vector: _scale's shift, add, subtract, shift, add and
    product (6) and sigmoid's subtraction go."""
    assert len(_EXP_POLY) % 2 == 1  # (an even degree: the flipped polynomial's last step has exp's sign)
    sign = -1.0 if negated else 1.0
    n, whole = _round_to_integer(b, b.fmul(xc, _c(sign * 1.4426950408889634), flags=FAST))
    if negated:  # -r = n ln2_hi - (-xc), then + n ln2_lo (ln2_lo = 2.12194440e-4: exp subtracts n times its negative)
        r = b.fadd(xc, b.fmul(n, _c(0.693359375), flags=FAST), flags=FAST)
        r = b.fadd(r, b.fmul(n, _c(-2.12194440e-4), flags=FAST), flags=FAST)
    else:
        r = b.fsub(xc, b.fmul(n, _c(0.693359375), flags=FAST), flags=FAST)
        r = b.fsub(r, b.fmul(n, _c(-2.12194440e-4), flags=FAST), flags=FAST)
    twice = horner(b, r, [2.0 * coefficient * sign ** k for k, coefficient in enumerate(_EXP_POLY)])
    return b.fmul(twice, _pow2(b, b.sub(whole, ir.Constant(I32, 1))))


def _exp(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    return _exp_clamped(b, x, target, EXP_FLOOR)


#: The non-positive exp's polynomial is computed times 2**-EXP_NONPOSITIVE_SHIFT (see :func:`_exp_nonpositive`).
_EXP_NONPOSITIVE_SHIFT = 24

#: Where the non-positive exp clamps its argument without AVX-512: n = round(-104.5 / ln 2) = -151, whose scale
#: 2**(n + 24) has all exponent bits zero: +0 exactly, and so is the result, which e**x rounds to below -104.32
#: too. At -104 (n = -150) the product underflows to +0 instead, and an underflowing product costs Zen 3 a
#: microcode assist per vector: a causal attention softmax's masked -inf entries (47% of [128, 16, 16]) made it
#: take 2.4x the time of unmasked rows of that shape (docs/performance-history.md, session 20 shortrow).
EXP_NONPOSITIVE_FLOOR = -104.5


def _exp_nonpositive(b: ir.IRBuilder, x: ir.Value, target: CpuTarget, poly: list[float] = _EXP_POLY) -> ir.Value:
    """e**x for x <= 0 or NaN (x - max(x) in softmax and log-sum-exp; ``signs.at_most_zero`` decides where): exp's
    range reduction and polynomial without the upper clamp, and a one-step scale. For xc in [-104.5, 0]
    (:data:`EXP_NONPOSITIVE_FLOOR`), n = round(xc / ln 2) is in [-151, 0], so 2**n is not always a normal float but
    2**(n + 24) is, or +0 at n = -151: the polynomial is evaluated with its coefficients times 2**-24 (exact: a
    power of two, every intermediate normal), and one
    product with 2**(n + 24) rounds the result once, as exp's two products do; the bits are exp's for every
    x <= 0 (tests/codegen/test_exp_nonpositive.py checks all of them). 14 vector instructions per element
    against exp's 21 (no upper clamp, two integer ops instead of seven, one multiply instead of two), which also
    shortens each element's dependency chain: softmax [4096, 1024] ran 18-24% faster at 1 and 2 threads, cross-
    entropy's forward 19-21% (Zen 3, docs/performance-history.md, session 12). (The result is still exact up to
    x = 71: n + 24 stays a normal exponent.)"""
    if target.scalef:  # (one vscalefps scales by any n)
        return _exp_in_range(b, _raised_keeping_nan(b, x, -104.0), target, poly)
    return _exp_nonpositive_by_exponent_bits(b, x, poly, reduced_in_one_fma=False)


def _exp_nonpositive_by_exponent_bits(b: ir.IRBuilder, x: ir.Value, poly: list[float],
                                      reduced_in_one_fma: bool) -> ir.Value:
    """:func:`_exp_nonpositive` without vscalefps: x clamped at :data:`EXP_NONPOSITIVE_FLOOR`, ``poly``'s
    coefficients times 2**-24 and one product with 2**(n + 24) made from exponent bits. r = x - n ln 2 by ln 2 in two
    Cody-Waite parts (exp's bits), or ``reduced_in_one_fma`` by ln 2's float (:func:`_exp_nonpositive_for_bf16`)."""
    xc = _raised_keeping_nan(b, x, EXP_NONPOSITIVE_FLOOR)
    n, whole = _round_to_integer(b, b.fmul(xc, _c(1.4426950408889634), flags=FAST))
    if reduced_in_one_fma:
        r = b.fsub(xc, b.fmul(n, _c(0.6931471805599453), flags=FAST), flags=FAST)
    else:
        r = b.fsub(xc, b.fmul(n, _c(0.693359375), flags=FAST), flags=FAST)
        r = b.fsub(r, b.fmul(n, _c(-2.12194440e-4), flags=FAST), flags=FAST)
    scaled = horner(b, r, [c * 2.0 ** -_EXP_NONPOSITIVE_SHIFT for c in poly])
    return b.fmul(scaled, _pow2(b, b.add(whole, ir.Constant(I32, _EXP_NONPOSITIVE_SHIFT))))


def _exp_nonpositive_for_bf16(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    """:func:`_exp_nonpositive` for exponentials whose every result is rounded to bf16 through sums, products and
    quotients only (``elementwise.reaches_only_bf16``: bf16 softmax), where the target says so
    (``CpuTarget.evaluates_exp_for_bf16_results_in_degree_five``): a polynomial of degree 5
    (:data:`_EXP_POLY_DEGREE_5`) and r = x - n ln 2 in one FMA by ln 2's float (its error n times 1.9e-9): two FMAs
    fewer per element (without vscalefps, AVX2: scaled as :func:`_exp_nonpositive` scales). Within 2.7 ulp of e**x
    for x >= -20, 5 down to -87.3 (normal results; exp_nonpositive within ~1), where a bf16 result's rounding is
    2**-9. exp(0) is 1 exactly."""
    if not target.scalef:  # (AVX2: _exp_nonpositive's clamp and scale by 2**(n + 24))
        return _exp_nonpositive_by_exponent_bits(b, x, _EXP_POLY_DEGREE_5, reduced_in_one_fma=True)
    xc = _raised_keeping_nan(b, x, -104.0)
    n, _ = _round_to_integer(b, b.fmul(xc, _c(1.4426950408889634), flags=FAST))
    r = b.fsub(xc, b.fmul(n, _c(0.6931471805599453), flags=FAST), flags=FAST)
    return scaled_by_float(b, _exp_reduced(b, r, _EXP_POLY_DEGREE_5), n)


def _exp_nonpositive_times(b: ir.IRBuilder, x: ir.Value, s: ir.Value, target: CpuTarget) -> ir.Value:
    """e**x * s for x <= 0 or NaN and a loop-invariant s (a row's scale: the cross-entropy gradient's upstream
    gradient over the row's count), with AVX-512's vscalefps (``CpuTarget.folds_row_scale_into_exp``): s = m * 2**E
    with |m| in [1, 2) (a denormal s normalized first: exact), the polynomial's coefficients times m and the scale
    by n + E, so the product costs no multiply per element (the coefficients and E are the row's, hoisted out of
    the loop): one rounding of e**x * s where the plain product rounds e**x and then the product (the same bits
    where s is a power of two and nothing is denormal; tests/codegen/test_exp_times_row_scale.py). x is clamped
    where the result rounds to +-0 (-104 less (E + 1) ln 2 for E >= -1: the product's e**x rounds to 0 below -104).
    s = +-0: m = +-1 and E = -inf (vscalefps by -inf gives +-0, as the product); s NaN: m = s (NaN out); s = +-inf:
    m = +-1 and E = +inf, no clamp: +-inf for finite x, NaN for -inf or NaN, as the product, but +-inf also where
    the product's e**x underflowed to 0 (x < -104: inf times 0 is NaN there; the exact product is +-inf)."""
    assert target.scalef
    fabs = call(b, "llvm.fabs.f32", [s], F32)
    tiny = b.fcmp_ordered("<", fabs, _c(2.0 ** -100))
    bits = b.bitcast(b.select(tiny, b.fmul(s, _c(2.0 ** 64)), s), I32)  # (exact; zero stays zero)
    field = b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF))
    mantissa = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, -0x7F800001)), ir.Constant(I32, 0x3F800000)), F32)
    mantissa = b.select(b.fcmp_unordered("uno", s, s), s, mantissa)  # (+-0 and +-inf: +-1; NaN: s)
    exponent = b.fsub(b.sitofp(b.sub(field, ir.Constant(I32, 127)), F32), b.select(tiny, _c(64.0), _c(0.0)))
    exponent = b.select(b.fcmp_ordered("==", s, _c(0.0)), _c(-math.inf),
                        b.select(b.fcmp_ordered("==", fabs, _c(math.inf)), _c(math.inf), exponent))
    # the clamp where e**x * s rounds to +-0 (the product: e**x rounds to 0 below -104, and so does the product;
    # here s's exponent moves the underflow down: at x = -104 - (E + 1) ln 2 the result is below 2**-150)
    above = b.fadd(exponent, _c(1.0))
    low = b.fsub(_c(-104.0), b.fmul(b.select(b.fcmp_ordered(">", above, _c(0.0)), above, _c(0.0)),
                                    _c(0.6931471805599453)))
    xc = b.select(b.fcmp_ordered(">", low, x), low, x)  # (one vmaxps by the row's low, NaN kept)
    n, _ = _round_to_integer(b, b.fmul(xc, _c(1.4426950408889634), flags=FAST))
    r = b.fsub(xc, b.fmul(n, _c(0.693359375), flags=FAST), flags=FAST)
    r = b.fsub(r, b.fmul(n, _c(-2.12194440e-4), flags=FAST), flags=FAST)
    acc = b.fmul(_c(_EXP_POLY[0]), mantissa)
    for coefficient in _EXP_POLY[1:]:
        acc = b.fadd(b.fmul(acc, r, flags=FAST), b.fmul(_c(coefficient), mantissa), flags=FAST)
    return scaled_by_float(b, acc, b.fadd(n, exponent))


def _exp2(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    """2**x: n = round(x), e**((x - n) ln 2) by exp's polynomial, times 2**n; on AVX-512 (VL) by vscalefps of the
    float n, as :func:`_exp_in_range` (no integer n, no conversion back; the same bits)."""
    xc = _clamp_keeping_nan(b, x, -151.0, 129.0)
    n, whole = _round_to_integer(b, xc)
    r = b.fmul(b.fsub(xc, n), _c(math.log(2.0)))  # x - n is exact, so no Cody-Waite split is needed
    if target.scales_by_float_exponent:
        return scaled_by_float(b, _exp_reduced(b, r), n)
    return _scale(b, _exp_reduced(b, r), whole, target)


def _log(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    tiny = b.fcmp_ordered("<", x, _c(1.1754943508222875e-38))
    scaled = b.select(tiny, b.fmul(x, _c(8388608.0)), x)  # lift denormals into the normal range
    bits = b.bitcast(scaled, I32)
    exponent = b.sub(b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF)), ir.Constant(I32, 126))
    exponent = b.select(tiny, b.sub(exponent, ir.Constant(I32, 23)), exponent)
    mantissa = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, 0x807FFFFF - (1 << 32))),
                               ir.Constant(I32, 0x3F000000)), F32)  # in [0.5, 1)
    below = b.fcmp_ordered("<", mantissa, _c(0.707106781186547524))
    e = b.sitofp(b.select(below, b.sub(exponent, ir.Constant(I32, 1)), exponent), F32)
    m = b.fsub(b.select(below, b.fadd(mantissa, mantissa), mantissa), _c(1.0))
    z = b.fmul(m, m)
    poly = horner(b, m, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                         1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1])
    y = b.fmul(b.fmul(poly, m), z)
    y = b.fadd(y, b.fmul(e, _c(-2.12194440e-4)))
    y = b.fsub(y, b.fmul(z, _c(0.5)))
    result = b.fadd(b.fadd(m, y), b.fmul(e, _c(0.693359375)))
    result = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(-math.inf), result)
    result = b.select(b.fcmp_ordered("<", x, _c(0.0)), _c(math.nan), result)
    result = b.select(b.fcmp_ordered("==", x, _c(math.inf)), _c(math.inf), result)
    return b.select(_is_nan(b, x), x, result)


def _log2(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    return b.fmul(_log(b, x, target), _c(1.4426950408889634))


def _tanh(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    ax = call(b, "llvm.fabs.f32", [x])
    z = b.fmul(x, x)
    small = b.fadd(b.fmul(b.fmul(horner(b, z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                                1.33314422036e-1, -3.33332819422e-1]), z), x, flags=FAST), x)
    # tanh(10) is 1.0f; e stays finite (NaN is put back below)
    twice = b.fmul(call(b, "llvm.minnum.f32", [ax, _c(10.0)]), _c(2.0))
    # (2|x| in [0, 20]: n in [0, 29], one product scales, see :func:`_exp_in_one_step`)
    e = _exp_in_one_step(b, twice, negated=False) if _in_one_step(target, 0.0) else _exp_in_range(b, twice, target)
    large = call(b, "llvm.copysign.f32", [b.fsub(_c(1.0), b.fdiv(_c(2.0), b.fadd(e, _c(1.0)), flags=RECIP)), x])
    return b.select(_is_nan(b, x), x, b.select(b.fcmp_ordered("<", ax, _c(0.625)), small, large))


def _sigmoid(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    # exp(-x) overflows to inf below x = -88.72 as eager's does, so sigmoid is exactly 0 there (not 6e-39).
    # -x as 0 - x (the same for every x but NaN; exp(+-0) is 1): a NaN comes out as the same NaN, where fneg
    # flipped its sign, and x * sigmoid(x) (silu) then gave a NaN whose sign depended on which operand of the
    # multiply the register allocator put first (the quick and optimized tiers' bits differed)
    if _in_one_step(target, ONE_PLUS_EXP_FLOOR):  # (x clamped to [-88.8, -floor]: e**-x of -x clamped to [floor, 88.8])
        e = _exp_in_one_step(b, _clamp_keeping_nan(b, x, -88.8, -ONE_PLUS_EXP_FLOOR), negated=True)
    else:
        e = _exp_clamped(b, b.fsub(_c(0.0), x), target, ONE_PLUS_EXP_FLOOR)
    # A true division, not the reciprocal estimate: the estimate makes 1 / 1 0.99999994, so sigmoid(+inf)
    # and sigmoid(0) were off by an ulp and silu's gradient x * (1 - sigmoid(x)) at +inf was inf, not
    # eager's NaN (found by the fuzzer).
    return b.fdiv(_c(1.0), b.fadd(_c(1.0), e))


# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (outside, erf is +-1 in float32): the rational minimax
# approximation Eigen and TensorFlow use; absolute error below 5e-7, one division, no exp.
_ERF_P = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
_ERF_Q = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02]


def _erf_rational(b: ir.IRBuilder, x: ir.Value, scale: float = 1.0, over_sqrt2: bool = False,
                  divided: bool = False) -> ir.Value:
    """The rational function at x clamped to [-4, 4]: erf(x) within 5e-7, but an ulp short of +-1 past 4 (``scale``, a
    power of two: ``scale`` times it, exactly where the numerator stays normal, by P's coefficients times ``scale``).
    ``over_sqrt2``: erf(x / sqrt 2), the 1/sqrt 2 folded into the coefficients (x clamped to [-4 sqrt 2, 4 sqrt 2],
    P times sqrt(1/2) and both in powers of x**2 = 2 (x / sqrt 2)**2: one product fewer than dividing x first).
    ``divided``: the ratio by a true division, correctly rounded, instead of the reciprocal estimate and its Newton
    step (``RECIP``)."""
    bound = 4.0 * math.sqrt(2.0) if over_sqrt2 else 4.0

    def folded(coefficients: list[float], factor: float) -> list[float]:  # (highest power first)
        last = len(coefficients) - 1
        return [factor * c * (0.5 ** (last - i) if over_sqrt2 else 1.0) for i, c in enumerate(coefficients)]

    # ordered compares keep NaN in xc, and the rational function carries it to the result
    xc = b.select(b.fcmp_ordered("<", x, _c(-bound)), _c(-bound), x)
    xc = b.select(b.fcmp_ordered(">", xc, _c(bound)), _c(bound), xc)
    x2 = b.fmul(xc, xc)
    numerator = b.fmul(xc, horner(b, x2, folded(_ERF_P, scale * math.sqrt(0.5) if over_sqrt2 else scale)))
    return b.fdiv(numerator, horner(b, x2, folded(_ERF_Q, 1.0)), flags=() if divided else RECIP)


def _erf(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    rational = _erf_rational(b, x)
    # Exactly +-1 past |x| = 4 (erf rounds to 1.0f there; the rational function is an ulp off), so that
    # gelu(-inf) = -inf * (1 + erf(-inf)) = -inf * 0 is NaN as in PyTorch, not -inf.
    saturated = call(b, "llvm.copysign.f32", [_c(1.0), x])
    return b.select(b.fcmp_ordered(">=", call(b, "llvm.fabs.f32", [x]), _c(4.0)), saturated, rational)


def _gelu(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    # erf's saturation is not needed here: below -5.7 the select makes 1 + erf exactly 0, and above 4 sqrt 2
    # 1 + erf is 2 - an ulp or 2, within the tolerance of gelu(x) = x (NaN still flows through)
    half = target.halves_gelu_in_its_erf
    cdf = b.fadd(_c(0.5 if half else 1.0), _erf_rational(b, b.fmul(x, _c(math.sqrt(0.5))), 0.5 if half else 1.0))
    # Below -5.7, erf(x/sqrt2) rounds to -1 in float32, so PyTorch's 1 + erf is exactly 0: the result is -0,
    # and -inf * 0 is NaN. The polynomial erf stops a hair short of -1, so make that exact.
    cdf = b.select(b.fcmp_ordered("<", x, _c(-5.7)), _c(0.0), cdf)
    # (x/2) (1 + erf) as x ((1 + erf)/2): halving is exact but for |x| < 2**-125, where 1 + erf is exactly 1 (see
    # ``CpuTarget.halves_gelu_in_its_erf``)
    return b.fmul(x, cdf) if half else b.fmul(b.fmul(x, _c(0.5)), cdf)


def _gelu_divided(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    """gelu's erf form as x (1/2 + erf(x / sqrt 2)/2), erf by :func:`_erf_rational` over sqrt 2 and divided (a true
    division, the 1/sqrt 2 in its coefficients), for CPUs whose ``CpuTarget.divides_gelu_erf_ratio``: the division
    is 2 cycles of Zen 4's two FMA pipes (its divider's 6 beside them), the reciprocal estimate, its product and two
    FMAs 4. Its ratio passes -1 by an ulp at the clamp (x below -4 sqrt 2), where 1/2 + erf/2 is then below 0:
    raised to +0 (a vmaxps, on the add pipes; NaN kept) it is exactly 0 there, and x * 0 PyTorch's -0 (-inf * 0 its
    NaN), without the compare (on the FMA pipes) of :func:`_gelu`'s select. Results within 2**-21 |x| of
    :func:`_gelu`'s."""
    cdf = b.fadd(_c(0.5), _erf_rational(b, x, 0.5, over_sqrt2=True, divided=True))
    return b.fmul(x, _raised_keeping_nan(b, cdf, 0.0))


def _gelu_tanh(b: ir.IRBuilder, x: ir.Value, target: CpuTarget) -> ir.Value:
    """0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + e**-2u), u = sqrt(2/pi) (x + 0.044715 x**3): one exp and
    one division instead of tanh's polynomial, exp and division (2.5x fewer instructions), and no
    cancellation in 1 + tanh(u) for negative x. +-inf and NaN come out as eager's (-inf / inf is NaN)."""
    scale = -2.0 * math.sqrt(2.0 / math.pi)
    w = b.fmul(x, b.fadd(b.fmul(b.fmul(x, x), _c(scale * 0.044715), flags=FAST), _c(scale), flags=FAST))
    e = _exp_clamped(b, w, target, ONE_PLUS_EXP_FLOOR)
    return b.fdiv(x, b.fadd(_c(1.0), e))  # a true division: 1 + e may be inf


#: Polynomial functions of one float by name: each body builder takes the builder, its float argument and the CPU
#: target (what an op's lowering evaluates per element, a bf16 table holds and roofline.py measures).
POLYNOMIAL: dict[str, Callable[[ir.IRBuilder, ir.Value, CpuTarget], ir.Value]] = {
    "exp": _exp,
    "exp_nonpositive": _exp_nonpositive,
    "exp_nonpositive_for_bf16": _exp_nonpositive_for_bf16,
    "exp2": _exp2,
    "log": _log,
    "log2": _log2,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "gelu": _gelu,
    "gelu_divided": _gelu_divided,
    "gelu_tanh": _gelu_tanh,
}

#: Polynomial functions of an element and a loop-invariant float (a row's scale) by name: the body builder takes
#: the builder, both arguments and the CPU target (the elementwise ``mul`` lowering's fused forms).
SCALED_POLYNOMIAL: dict[str, Callable[[ir.IRBuilder, ir.Value, ir.Value, CpuTarget], ir.Value]] = {
    "exp_nonpositive_times": _exp_nonpositive_times,
}

#: C library functions (scalar, exact) for the rest.
LIBM: dict[str, str] = {
    "sin": "sinf", "cos": "cosf", "tan": "tanf", "atan": "atanf", "expm1": "expm1f", "log1p": "log1pf",
    "atan2": "atan2f", "pow": "powf", "fmod": "fmodf",
}


#: The C library's math functions read and write no memory we look at (errno aside, which nothing reads):
#: declared so, a call on loop-invariant operands is hoisted out of the loop (AdamW's bias corrections,
#: pow(beta, step) on 0-d tensors, ran once per element: 10M powf calls per optimizer step).
LIBM_ATTRIBUTES = ("nounwind", "willreturn", "memory(none)")


def math_call(b: ir.IRBuilder, name: str, *args: ir.Value, target: CpuTarget) -> ir.Value:
    """Call math function ``name`` on float32 arguments, defining it in the module on first use (a
    polynomial's body as ``target`` runs it best: a module's code is for one CPU)."""
    module = b.module
    if name in LIBM:
        symbol = LIBM[name]
        fn = module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(F32, [F32] * len(args)), symbol)
            for attribute in LIBM_ATTRIBUTES:  # raw strings: llvmlite's attribute set does not know memory(none)
                set.add(fn.attributes, attribute)
        return b.call(fn, list(args))
    symbol = f"ncc.math.{name}"
    fn = module.globals.get(symbol)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(F32, [F32] * len(args)), symbol)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        body = ir.IRBuilder(fn.append_basic_block("entry"))
        builder = POLYNOMIAL[name] if name in POLYNOMIAL else SCALED_POLYNOMIAL[name]
        body.ret(builder(body, *fn.args, target))
    return b.call(fn, list(args))
