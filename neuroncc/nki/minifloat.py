"""Reference rounding for the 8- and 4-bit float formats NKI uses (fp8, fp4 and the MX scale type), in numpy.

numpy has none of these types, so the simulator rounds float32 values to each format itself: round to nearest,
ties to even, with subnormals, the way ``ml_dtypes`` (the library AWS's simulator stores them with) casts. A
format is its exponent and mantissa widths, its bias and how it spends the top exponent:

- ``ieee``: the top exponent encodes inf/NaN (float8_e5m2, and NKI's legacy float8_e4m3);
- ``fn``: finite only, the all-ones code is NaN, overflow saturates to the largest finite value when the cast
  saturates, else becomes NaN (float8_e4m3fn, OCP);
- ``fnu_all``: finite only and no NaN at all (float4_e2m1fn).

``encode`` gives the 8-bit codes (a 4-bit format in the low nibble) and ``decode`` the float32 values back, so
packed ``_x4`` tensors can keep their exact bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class MiniFloat:
    """A small binary float format: sign bit, ``exponent_bits``, ``mantissa_bits`` and ``bias``."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    special: str  # "ieee" | "fn" | "fnu_all"

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def max_exponent(self) -> int:
        """Largest unbiased exponent of a finite value."""
        top = (1 << self.exponent_bits) - 1
        return (top - 1 if self.special == "ieee" else top) - self.bias

    @property
    def max_finite(self) -> float:
        mantissa_codes = (1 << self.mantissa_bits)
        top_mantissa = mantissa_codes - 1
        if self.special == "fn":
            top_mantissa -= 1  # S.1111.111 is NaN
        return float((1 + top_mantissa / mantissa_codes) * 2.0 ** self.max_exponent)

    @property
    def min_normal_exponent(self) -> int:
        return 1 - self.bias


FLOAT8_E5M2 = MiniFloat("float8_e5m2", 5, 2, 15, "ieee")
FLOAT8_E4M3 = MiniFloat("float8_e4m3", 4, 3, 7, "ieee")  # Neuron's legacy fp8 (max 240, has inf)
FLOAT8_E4M3FN = MiniFloat("float8_e4m3fn", 4, 3, 7, "fn")  # OCP fp8 (max 448, no inf)
FLOAT4_E2M1FN = MiniFloat("float4_e2m1fn", 2, 1, 1, "fnu_all")  # OCP fp4 (max 6, no inf, no NaN)
TFLOAT32 = MiniFloat("tfloat32", 8, 10, 127, "ieee")  # fp32's range with a 10-bit mantissa


def round_to(values: np.ndarray, fmt: MiniFloat, saturate: bool = False) -> np.ndarray:
    """``values`` rounded to the nearest value of ``fmt`` (ties to even), as float32.

    Overflow gives inf for ``ieee`` formats and NaN for the finite-only ones, unless ``saturate`` clamps to the
    largest finite value (as the MX quantizer does). fp4 has no NaN: NaN and overflow saturate.
    """
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.where(np.isfinite(x), np.abs(x), 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
        exponent = np.maximum(exponent, fmt.min_normal_exponent)  # subnormals share the smallest exponent
        quantum = np.exp2(exponent - fmt.mantissa_bits)
        rounded = np.round(magnitude / quantum) * quantum  # np.round is ties-to-even
    limit = fmt.max_finite
    overflow = rounded > limit
    if fmt.special == "fnu_all" or saturate:
        rounded = np.where(overflow, limit, rounded)
    elif fmt.special == "ieee":
        # Values past the largest finite one round to inf only beyond the halfway point to the next binade step.
        halfway = limit + np.exp2(fmt.max_exponent - fmt.mantissa_bits - 1)
        rounded = np.where(overflow, np.where(magnitude >= halfway, np.inf, limit), rounded)
    else:
        halfway = limit + np.exp2(fmt.max_exponent - fmt.mantissa_bits - 1)
        rounded = np.where(overflow, np.where(magnitude >= halfway, np.nan, limit), rounded)
    result = np.copysign(rounded, x)
    nan, inf = np.isnan(x), np.isinf(x)
    if fmt.special == "fnu_all":
        # No inf and no NaN: infinities saturate, NaN becomes -0 (what ml_dtypes does).
        result = np.where(inf, np.copysign(limit, x), np.where(nan, -0.0, result))
    else:
        result = np.where(inf, np.copysign(np.inf if fmt.special == "ieee" else np.nan, x), result)
        result = np.where(nan, np.nan, result)
        if fmt.special == "fn" and not saturate:
            result = np.where(np.isinf(x), np.nan, result)
        if saturate:
            result = np.where(np.isinf(x), np.copysign(limit, x), result)
    return result.astype(np.float32)


def encode(values: np.ndarray, fmt: MiniFloat, saturate: bool = False) -> np.ndarray:
    """The ``fmt`` codes (uint8; 4-bit formats in the low nibble) of ``values`` rounded to ``fmt``."""
    rounded = round_to(values, fmt, saturate).astype(np.float64)
    sign = (np.signbit(rounded)).astype(np.uint8) << (fmt.bits - 1)
    magnitude = np.abs(rounded)
    codes = np.zeros(magnitude.shape, dtype=np.int64)
    finite = np.isfinite(magnitude)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(finite & (magnitude > 0), magnitude, 1.0)))
    normal = finite & (magnitude > 0) & (exponent >= fmt.min_normal_exponent)
    biased = (exponent + fmt.bias).astype(np.int64)
    mantissa_scale = 1 << fmt.mantissa_bits
    with np.errstate(invalid="ignore", over="ignore"):
        normal_mantissa = np.round((magnitude / np.exp2(exponent) - 1.0) * mantissa_scale).astype(np.int64)
        subnormal_mantissa = np.round(np.where(finite, magnitude, 0.0) / np.exp2(fmt.min_normal_exponent - fmt.mantissa_bits))
    normal_mantissa = np.where(normal, normal_mantissa, 0)
    codes = np.where(normal, (biased << fmt.mantissa_bits) | normal_mantissa, codes)
    subnormal = finite & (magnitude > 0) & ~normal
    codes = np.where(subnormal, subnormal_mantissa.astype(np.int64), codes)
    all_ones = (1 << (fmt.bits - 1)) - 1
    if fmt.special == "ieee":
        inf_code = ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits
        codes = np.where(np.isinf(magnitude), inf_code, codes)
        codes = np.where(np.isnan(magnitude), inf_code | (1 << (fmt.mantissa_bits - 1)), codes)
    elif fmt.special == "fn":
        codes = np.where(np.isnan(magnitude), all_ones, codes)
    return (codes.astype(np.uint8) | sign).astype(np.uint8)


def decode(codes: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    """float32 values of ``fmt`` codes (uint8; 4-bit formats read from the low nibble)."""
    c = np.asarray(codes).astype(np.int64) & ((1 << fmt.bits) - 1)
    sign = np.where((c >> (fmt.bits - 1)) & 1, -1.0, 1.0)
    exponent_field = (c >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = c & ((1 << fmt.mantissa_bits) - 1)
    scale = float(1 << fmt.mantissa_bits)
    normal = np.exp2(exponent_field - fmt.bias) * (1.0 + mantissa / scale)
    subnormal = np.exp2(fmt.min_normal_exponent) * (mantissa / scale)
    values = np.where(exponent_field == 0, subnormal, normal)
    top = (1 << fmt.exponent_bits) - 1
    if fmt.special == "ieee":
        values = np.where((exponent_field == top) & (mantissa == 0), np.inf, values)
        values = np.where((exponent_field == top) & (mantissa != 0), np.nan, values)
    elif fmt.special == "fn":
        values = np.where((exponent_field == top) & (mantissa == (1 << fmt.mantissa_bits) - 1), np.nan, values)
    return (sign * values).astype(np.float32)


def e8m0_decode(codes: np.ndarray) -> np.ndarray:
    """float8_e8m0fnu (the MX scale type): code ``c`` is ``2 ** (c - 127)``, 255 is NaN."""
    c = np.asarray(codes).astype(np.int64)
    return np.where(c == 255, np.nan, np.exp2(c - 127.0)).astype(np.float32)


def e8m0_encode(values: np.ndarray) -> np.ndarray:
    """The float8_e8m0fnu code of each value: its power-of-two exponent (rounded down), biased by 127."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(v > 0, v, 2.0 ** -127)))
    return np.where(np.isnan(v) | (v < 0), 255, np.clip(exponent + 127, 0, 254)).astype(np.uint8)
