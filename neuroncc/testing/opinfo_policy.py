"""What the OpInfo sweep compares, and how strictly: the data the sweep engine reads.

Every entry says why it is there. Ops listed here are still compiled (a refusal must still be a clean
``UnsupportedOpError``); only the value comparison changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Ops whose output values are random draws: compiled and run, but only shapes and dtypes are compared
#: (neuroncc's RNG is not PyTorch's Philox/MT stream, so equal values cannot be expected). They are left
#: out of the pass-rate denominator.
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


def metadata_only_reason(key: str) -> str | None:
    """Why ``key`` ("name" or "name:variant") is compared by shape/dtype only, or None.

    A table entry without a variant covers every variant of that name.
    """
    name = key.split(":", 1)[0]
    for table in (RANDOM_OPS, UNINITIALIZED_OPS):
        reason = table.get(key) or table.get(name)
        if reason:
            return reason
    return None


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
