"""gcd and lcm of integer tensors, as PyTorch's CPU kernels compute them, from the IR's elementwise ops.

ATen's ``calc_gcd`` is Euclid's loop on the magnitudes (``while a != 0: a, b = b % a, a``); the number of its
steps is bounded by the dtype (Lamé: a pair of magnitudes below 2**k takes at most log_phi(sqrt(5) 2**k) divisions,
plus one when the first step only swaps), so the loop unrolls into that many guarded steps: a finished element
keeps its value through the steps left. Division by zero never happens (a guarded divisor is 1). Bool and float
tensors decline (PyTorch refuses them too).
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten

_PHI = (1 + math.sqrt(5)) / 2


def _euclid_steps(dtype: torch.dtype) -> int:
    """The most steps Euclid's loop takes on magnitudes of ``dtype`` (signed: up to 2**(bits - 1), the wrapped
    |min|), with one step for the first swap and one to spare."""
    info = torch.iinfo(dtype)
    magnitude_bits = info.bits if info.min == 0 else info.bits - 1
    return math.ceil(math.log(math.sqrt(5) * 2.0 ** magnitude_bits, _PHI)) + 2


def _integer_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    dtype = torch.result_type(a, b)
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return None
    return torch.broadcast_tensors(a.to(dtype), b.to(dtype))


def _gcd(a: torch.Tensor, b: torch.Tensor) -> Any:
    operands = _integer_operands(a, b)
    if operands is None:
        return NotImplemented
    a, b = (torch.abs(x) for x in operands)  # |min| wraps to min, as std::abs does
    for _ in range(_euclid_steps(a.dtype)):
        running = a != 0
        divisor = torch.where(running, a, torch.ones_like(a))
        a, b = torch.where(running, torch.fmod(b, divisor), a), torch.where(running, a, b)  # C's % is fmod
    return b


def _lcm(a: torch.Tensor, b: torch.Tensor) -> Any:
    """``g == 0 ? 0 : |a / g * b|`` in C's arithmetic: the narrow types compute in int (and wrap when stored)."""
    operands = _integer_operands(a, b)
    if operands is None:
        return NotImplemented
    a, b = operands
    dtype = a.dtype
    g = _gcd(a, b)
    compute = torch.int32 if dtype.itemsize < 4 else dtype
    divisor = torch.where(g == 0, torch.ones_like(g), g).to(compute)
    product = torch.abs(torch.div(a.to(compute), divisor, rounding_mode="trunc") * b.to(compute))
    return torch.where(g == 0, torch.zeros_like(g), product.to(dtype))


INTEGER_FORMULAS: dict[Any, Any] = {
    aten.gcd.default: _gcd,  # Euclid's loop, unrolled to the dtype's bound
    aten.lcm.default: _lcm,  # |a / gcd * b|
}
