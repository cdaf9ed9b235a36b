"""Bounding recompiles: pad variable-length inputs to a few bucket sizes.

neuroncc compiles static shapes, so every new sequence length is a new specialization (TorchDynamo recompiles,
neuroncc compiles again). Padding each length up to the smallest of a few bucket sizes bounds the number of
compiles by the number of buckets:

    model = torch.compile(model, backend="neuron", dynamic=False)
    run = neuroncc.bucketed(model, buckets=(16, 32, 64), dim=1)   # outside the compiled region
    logits = run(tokens)          # tokens [B, T], any T <= 64: at most 3 compiles; logits come back [B, T, V]

Right-padding is exact for causal models (position t never sees positions > t). Other models need a mask;
``bucketed(..., mask="attention_mask")`` passes one (True at real positions) as a keyword argument.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from neuroncc.errors import InputError


#: The bucket count of the :func:`bucketed` call running on this thread. A shape specialization inside it is one of
#: at most that many, so the recompile log does not suggest buckets to a caller already using them
#: (specializations.py: the third bucket of the docs' ``buckets=(16, 32, 64)`` warned "pad inputs to a few sizes").
_running = threading.local()


def running_buckets() -> int:
    """How many buckets the :func:`bucketed` call running on this thread pads to (0 outside one)."""
    return getattr(_running, "buckets", 0)


def bucket_size(size: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``size`` elements."""
    fitting = [b for b in buckets if b >= size]
    if not fitting:
        raise InputError(f"size {size} is larger than the largest bucket {max(buckets)} (buckets: {sorted(buckets)})")
    return min(fitting)


def pad_to_bucket(tensor: torch.Tensor, dim: int, buckets: Sequence[int], value: float = 0) -> torch.Tensor:
    """``tensor`` padded at the end of ``dim`` with ``value`` up to the smallest bucket that fits it."""
    dim = dim % tensor.dim()
    size = tensor.shape[dim]
    target = bucket_size(size, buckets)
    if target == size:
        return tensor
    # F.pad takes (before, after) pairs starting from the last dimension.
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [0, target - size]
    return F.pad(tensor, pad, value=value)


def bucketed(fn: Callable[..., Any] | None = None, *, buckets: Sequence[int], dim: int = 1,
             args: Sequence[int] = (0,), value: float = 0, mask: str | None = None,
             output_dim: int | None = None) -> Any:
    """Wrap ``fn`` so positional ``args`` are padded along ``dim`` to a bucket and outputs are cut back.

    Every tensor output whose size along ``output_dim`` (default ``dim``) equals the padded length is sliced
    back to the real length. With ``mask="name"``, ``fn`` also receives ``name=<bool tensor>`` of the first
    padded argument's shape up to ``dim``, True at real positions. Works as a decorator too:
    ``@neuroncc.bucketed(buckets=(16, 32))``. Apply it outside ``torch.compile``.
    """
    if not buckets or any(not isinstance(b, int) or b <= 0 for b in buckets):
        raise InputError(f"buckets must be positive ints, got {buckets!r}")
    if fn is None:
        return functools.partial(bucketed, buckets=buckets, dim=dim, args=args, value=value, mask=mask,
                                 output_dim=output_dim)
    out_dim = dim if output_dim is None else output_dim

    @functools.wraps(fn)
    def wrapper(*call_args: Any, **kwargs: Any) -> Any:
        padded = list(call_args)
        first = call_args[args[0]]
        length = first.shape[dim]
        for index in args:
            if call_args[index].shape[dim] != length:
                raise InputError(f"bucketed: argument {index} has size {call_args[index].shape[dim]} along dim "
                                 f"{dim}, argument {args[0]} has {length}")
            padded[index] = pad_to_bucket(call_args[index], dim, buckets, value)
        target = padded[args[0]].shape[dim]
        if mask is not None:
            shape = first.shape[: dim % first.dim() + 1]
            kwargs[mask] = (torch.arange(target, device=first.device) < length).expand(*shape[:-1], target)
        outer, _running.buckets = running_buckets(), len(set(buckets))
        try:
            result = fn(*padded, **kwargs)
        finally:
            _running.buckets = outer
        if target == length:
            return result

        def cut(out: Any) -> Any:
            if isinstance(out, torch.Tensor) and out.dim() > 0 and out.shape[out_dim] == target:
                return out.narrow(out_dim, 0, length)
            return out

        return pytree.tree_map(cut, result)

    return wrapper
