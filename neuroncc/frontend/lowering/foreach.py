"""``torch._foreach_*`` ops (the multi-tensor paths of PyTorch's optimizers: Adam, AdamW, SGD, ... with
``foreach=True``, their default on CPU tensors) as one ordinary op per tensor.

A compiled optimizer step (``torch.compile(optimizer.step)``) traces to foreach ops over the parameter lists;
AOTAutograd decomposes each into the same op on every tensor of its lists, and fusion then makes one kernel
per parameter that reads the parameter, its gradient and its state once and writes the new values: the
multi-tensor update, without the per-op passes over memory that eager's foreach kernels make. In-place
variants (``_foreach_add_``) are functionalized to these before decomposition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: foreach op name -> the per-tensor function (torch's, which takes the same scalar/tensor arguments).
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
          "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
          "sinh", "sqrt", "tan", "tanh", "trunc")
_PER_TENSOR: dict[str, Callable[..., torch.Tensor]] = {
    **{name: getattr(torch, name) for name in _UNARY},
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "lerp": torch.lerp,
    "addcdiv": lambda x, t1, t2, value=1: torch.addcdiv(x, t1, t2, value=value),  # value: keyword-only there
    "addcmul": lambda x, t1, t2, value=1: torch.addcmul(x, t1, t2, value=value),
    "clamp_min": torch.clamp_min,
    "clamp_max": torch.clamp_max,
    "maximum": lambda x, other: torch.maximum(x, other) if isinstance(other, torch.Tensor) else torch.clamp_min(x, other),
    "minimum": lambda x, other: torch.minimum(x, other) if isinstance(other, torch.Tensor) else torch.clamp_max(x, other),
    "clone": lambda x, memory_format=None: torch.clone(x, memory_format=memory_format),
    "zero": torch.zeros_like,
    "copy": lambda x, src, non_blocking=False: aten.copy.default(x, src),
    "norm": lambda x, ord=2, dtype=None: torch.linalg.vector_norm(x, ord, dtype=dtype),
    "max": torch.amax,
}
#: Overloads whose ``Tensor scalars`` argument holds one value per list position (a 1-d tensor).
_PER_POSITION_TENSOR = {("addcdiv", "Tensor"), ("addcmul", "Tensor")}


def _per_tensor(name: str, overload: str, schema: Any) -> Callable[..., list[torch.Tensor]]:
    """The decomposition of ``_foreach_{name}.{overload}``: ``name`` on each position of its list arguments."""
    function = _PER_TENSOR[name]
    per_position = [isinstance(argument.type, torch.ListType) or ((name, overload) in _PER_POSITION_TENSOR and
                                                          argument.name == "scalars")
                    for argument in schema.arguments]
    names = [argument.name for argument in schema.arguments]

    def decomposition(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
        given = dict(zip(names, args))
        given.update(kwargs)
        count = min(len(given[n]) for n, listed in zip(names, per_position) if listed and n in given)
        results = []
        for k in range(count):
            picked = {n: given[n][k] if listed else given[n] for n, listed in zip(names, per_position) if n in given}
            if (name, overload) in _PER_POSITION_TENSOR:
                x, t1, t2, scalar = (picked[n] for n in names)
                results.append(x + scalar * (t1 / t2 if name == "addcdiv" else t1 * t2))
                continue
            results.append(function(*(picked[n] for n in names[: len(args)]), **{n: picked[n] for n in kwargs}))
        return results

    return decomposition


def foreach_decompositions() -> dict[torch._ops.OperatorBase, Callable[..., list[torch.Tensor]]]:
    """Every out-of-place ``_foreach_*`` overload with a per-tensor equivalent -> its decomposition."""
    table: dict[torch._ops.OperatorBase, Callable[..., list[torch.Tensor]]] = {}
    for schema in torch._C._jit_get_all_schemas():
        qualified = schema.name
        if not qualified.startswith("aten::_foreach_") or qualified.endswith("_"):
            continue
        if schema.overload_name == "out" or schema.overload_name.endswith("_out"):
            continue
        name = qualified[len("aten::_foreach_"):]
        if name not in _PER_TENSOR:
            continue
        packet = getattr(aten, f"_foreach_{name}")
        overload = schema.overload_name or "default"
        table[getattr(packet, overload)] = _per_tensor(name, overload, schema)
    return table
