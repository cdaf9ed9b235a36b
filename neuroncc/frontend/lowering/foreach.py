"""``aten._foreach_*`` (the multi-tensor ops of torch.optim's foreach paths) as one aten call per tensor.

``torch._foreach_mul(exp_avgs, beta1)`` is ``[aten.mul(t, beta1) for t in exp_avgs]``: the decomposition below
calls the per-tensor op for each index, taking the i-th element of every list argument (``Tensor[]``,
``Scalar[]``) and passing scalars and single tensors to every call. The IR then holds one independent
elementwise chain per parameter; the fusion pass groups chains of the same shape horizontally into one kernel
(see :mod:`neuroncc.passes.fusion_groups`), which is what a fused multi-tensor kernel buys in eager.

AOTAutograd functionalizes the in-place forms (``_foreach_add_``) into these functional ones plus write-backs
of the inputs, so only the functional overloads are decomposed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: foreach op -> the per-tensor aten op it applies (same name unless listed here).
_PER_TENSOR_NAMES = {"norm": "linalg_vector_norm", "zero": "zeros_like"}
#: aten.maximum / minimum take two tensors; their foreach forms with a scalar bound are clamps.
_SCALAR_BOUNDS = {"maximum": "clamp_min", "minimum": "clamp_max"}

#: Every functional foreach op decomposed (``_foreach_<name>``): elementwise math, binary ops with a list, a
#: scalar, a scalar list or one tensor, the optimizers' addcmul/addcdiv/lerp, copies and norms.
FOREACH_NAMES = (
    "abs", "acos", "add", "addcdiv", "addcmul", "asin", "atan", "ceil", "clamp_max", "clamp_min", "clone", "copy",
    "cos", "cosh", "div", "erf", "erfc", "exp", "expm1", "floor", "frac", "lerp", "lgamma", "log", "log10",
    "log1p", "log2", "maximum", "minimum", "mul", "neg", "norm", "pow", "reciprocal", "round", "rsqrt",
    "sigmoid", "sign", "sin", "sinh", "sqrt", "sub", "tan", "tanh", "trunc", "zero",
)

#: The optimizers' fused multiply/divide-adds: their per-tensor op takes the scalar as keyword ``value``.
_VALUE_OPS = ("addcmul", "addcdiv")


def foreach_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """Every functional overload of :data:`FOREACH_NAMES` -> its per-tensor decomposition."""
    table: dict[torch._ops.OpOverload, Callable[..., Any]] = {}
    for name in FOREACH_NAMES:
        packet = getattr(aten, f"_foreach_{name}")
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            if overload_name.endswith("out") or overload._schema.is_mutable:
                continue
            table[overload] = _per_tensor(name, overload)
    return table


def _per_tensor(name: str, overload: torch._ops.OpOverload) -> Callable[..., Any]:
    schema = overload._schema
    per_tensor = getattr(aten, _PER_TENSOR_NAMES.get(name, name))
    if name in _SCALAR_BOUNDS and overload._overloadname in ("Scalar", "ScalarList"):
        per_tensor = getattr(aten, _SCALAR_BOUNDS[name])
    listed = [str(a.type) in ("List[Tensor]", "List[number]", "Tensor[]", "Scalar[]") for a in schema.arguments]
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    scalar_tensor = name in _VALUE_OPS and overload._overloadname == "Tensor"  # one value per tensor, as a tensor

    def decomposition(*args: Any, **kwargs: Any) -> list[Any]:
        bound = dict(zip(positional, args)) | kwargs
        lists = [bound[a.name] for a, is_list in zip(schema.arguments, listed) if is_list and a.name in bound]
        count = len(lists[0])
        results = []
        for i in range(count):
            call_args: list[Any] = []
            call_kwargs: dict[str, Any] = {}
            for argument, is_list in zip(schema.arguments, listed):
                if argument.name not in bound:
                    continue
                value = bound[argument.name][i] if is_list else bound[argument.name]
                if name in _VALUE_OPS and argument.name in ("value", "scalars"):
                    if scalar_tensor:
                        value = value[i]
                    call_kwargs["value"] = value
                elif argument.kwarg_only or argument.name == "dtype":  # norm's dtype is keyword-only per tensor
                    call_kwargs[argument.name] = value
                else:
                    call_args.append(value)
            if scalar_tensor:  # addcmul/addcdiv with a tensor of values: self + value_i * (t1 op t2)
                self_, t1, t2 = call_args
                combined = aten.mul(t1, t2) if name == "addcmul" else aten.div(t1, t2)
                results.append(aten.add(self_, aten.mul(combined, call_kwargs["value"])))
            else:
                results.append(per_tensor(*call_args, **call_kwargs))
        return results

    decomposition.__name__ = f"foreach_{name}_{overload._overloadname}"
    return decomposition
