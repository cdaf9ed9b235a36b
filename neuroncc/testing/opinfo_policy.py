"""What the OpInfo sweep compares, and how strictly: the data the sweep engine reads.

Every entry says why it is there. Ops listed here are still compiled (a refusal must still be a clean
``UnsupportedOpError``); only the value comparison changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Ops whose output values are random draws: neuroncc's generator (Philox 4x32-10) is not eager's stream
#: (mt19937), so values cannot be equal. They are judged by distribution instead: shapes and dtypes as
#: eager's, and the draws of many calls (outputs and gradients, pooled per result) against eager's with a
#: two-sample Kolmogorov-Smirnov test (:func:`distribution_difference`).
RANDOM_OPS: dict[str, str] = {
    "bernoulli": "draws from torch's RNG",
    "cauchy": "draws from torch's RNG",
    "exponential": "draws from torch's RNG",
    "geometric": "draws from torch's RNG",
    "log_normal": "draws from torch's RNG",
    "multinomial": "draws from torch's RNG",
    "normal": "draws from torch's RNG (all variants)",
    "uniform": "draws from torch's RNG",
    "rand_like": "draws from torch's RNG",
    "randn": "draws from torch's RNG",
    "randn_like": "draws from torch's RNG",
    "randint": "draws from torch's RNG",
    "randint_like": "draws from torch's RNG",
    "nn.functional.dropout": "random mask",
    "nn.functional.dropout2d": "random mask",
    "nn.functional.dropout3d": "random mask",
    "nn.functional.alpha_dropout": "random mask",
    "nn.functional.feature_alpha_dropout:with_train": "random mask (the without_train variant is compared)",
    "nn.functional.rrelu": "random slopes in training mode (OpInfo: skip_correctness_check_compile_vs_eager)",
    "nn.functional.fractional_max_pool2d": "random pooling windows (torch.rand draws the samples)",
    "nn.functional.fractional_max_pool3d": "random pooling windows (torch.rand draws the samples)",
}

#: Ops that return uninitialized memory: only shapes and dtypes are meaningful.
UNINITIALIZED_OPS: dict[str, str] = {
    "empty": "uninitialized memory",
    "empty_like": "uninitialized memory",
    "empty_strided": "uninitialized memory",
    "empty_permuted": "uninitialized memory",
    "new_empty": "uninitialized memory",
    "new_empty_strided": "uninitialized memory",
}


def _reason(table: dict[str, str], key: str) -> str | None:
    """The entry of ``table`` for ``key`` ("name" or "name:variant"); one without a variant covers them all."""
    return table.get(key) or table.get(key.split(":", 1)[0])


def metadata_only_reason(key: str) -> str | None:
    """Why ``key``'s values mean nothing (uninitialized memory), so only shapes and dtypes are compared."""
    return _reason(UNINITIALIZED_OPS, key)


def random_reason(key: str) -> str | None:
    """Why ``key``'s values are random draws, judged by distribution, or None."""
    return _reason(RANDOM_OPS, key)


#: Calls each side makes for the distribution test (with the same sequence of seeds).
RANDOM_CALLS = 1000
#: The test's false-alarm rate per result (fixed seeds make each verdict reproducible).
RANDOM_ALPHA = 1e-4


@dataclass(frozen=True, slots=True)
class Tolerance:
    rtol: float
    atol: float


#: Default tolerances per dtype. neuroncc's reference semantics compute floats in float32 (the interpreter
#: accumulates reductions in float64), so float32 results differ from eager's by summation order only.
DEFAULT_TOLERANCE: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1e-4, atol=1e-5),
    # bf16 has 8 significant bits: one rounding step is 2**-8 relative; a fused graph that keeps an
    # intermediate in float32 where eager rounds it differs by about one step.
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-2),
}

#: Per-op overrides: (key, dtype) -> tolerance, each with the reason.
TOLERANCE_OVERRIDES: dict[tuple[str, torch.dtype], tuple[Tolerance, str]] = {
    ("div:trunc_rounding", torch.bfloat16): (
        Tolerance(rtol=1.6e-2, atol=1.0),
        "eager itself disagrees by one: its vectorized bf16 kernel truncates the quotient after rounding it to "
        "bf16 (17.95 -> 18), its scalar kernel (0-dim, size 1, broadcast operands) truncates the float32 "
        "quotient (17); which kernel runs depends on shapes and strides",
    ),
}


def tolerance_for(key: str, dtype: torch.dtype) -> Tolerance:
    override = TOLERANCE_OVERRIDES.get((key, dtype))
    return override[0] if override else DEFAULT_TOLERANCE[dtype]


#: OpInfo classes whose ops form the bf16 sweep: the elementwise and reduction set neuroncc claims bf16
#: support for (plus the ops listed in BF16_EXTRA_OPS).
BF16_OPINFO_CLASSES = ("UnaryUfuncInfo", "BinaryUfuncInfo", "ReductionOpInfo")

#: Non-ufunc ops also swept in bf16: the building blocks of transformer blocks.
BF16_EXTRA_OPS = frozenset({
    "nn.functional.softmax", "softmax", "log_softmax", "nn.functional.log_softmax", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.layer_norm", "nn.functional.linear", "matmul", "mm", "bmm",
    "addmm", "nn.functional.relu", "clamp", "where", "cat", "nn.functional.embedding", "transpose",
    "permute", "reshape", "view", "expand", "sum", "mean", "amax", "amin",
})
