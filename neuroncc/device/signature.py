"""The signature of an op call: what a compiled kernel is specialized for, and what it takes at run time.

:func:`describe` walks a call's arguments once and returns

* the *key*: every tensor's dtype, shape, strides and device index, every non-float argument's value, and a
  :data:`FLOAT` marker where a Python float is (its value is not in the key: see below);
* the call's tensors, in walk order (the kernel reads their memory);
* the call's floats, in walk order.

Floats are kept out of the key because they are what changes from call to call in a training loop (the
learning rate, Adam's step size and bias corrections, ``alpha``): the compiler lifts them into kernel
arguments when it can prove the kernel does not depend on their value (dispatch.py), so a new learning rate
is a new argument, not a new kernel. A 0-d CPU float64 tensor is a float here too: that is how PyTorch passes
a Python number to an op's ``Tensor`` argument (``x * 0.5``), and how a user's ``lr`` reaches ``mul``.
:func:`rebuild` puts substitutes for the tensors and floats back into the same places.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


FLOAT = _Marker("FLOAT")
_TRUE, _FALSE = _Marker("True"), _Marker("False")
_LIST = _Marker("[")


class _GeneratorMarker:
    """Where a ``Generator`` is: random ops draw from the one passed at call time, so which one is no part of
    what the entry is made for (its object in the key kept one entry, and the generator, alive per generator
    ever used). Not a :class:`_Marker`: signature_index still finds such a signature unindexable."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Generator"


GENERATOR = _GeneratorMarker()
_Generator = torch._C.Generator
_Tensor = torch.Tensor
_float64 = torch.float64


def describe(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], list[torch.Tensor], list[float]]:
    """(key, tensors, floats) of a call; see the module docstring."""
    key: list[Any] = []
    tensors: list[torch.Tensor] = []
    floats: list[float] = []
    for value in args:
        kind = type(value)
        if kind is _Tensor:  # the commonest arguments inline (the rest of _walk's tensor and float cases)
            device = value.get_device()
            if device >= 0 or value.dim() != 0 or value.dtype is not _float64:
                tensors.append(value)
                key.append((value.dtype, value.shape, value.stride(), device))
                continue
        elif kind is float:
            floats.append(value)
            key.append(FLOAT)
            continue
        elif kind is list and _all_ints(value):  # sizes, dims (layer_norm's normalized_shape)
            key.append(tuple(value))
            continue
        _walk(value, key, tensors, floats)
    if kwargs:
        for name, value in kwargs.items():
            key.append(name)
            if type(value) is float:  # alpha=, lr=
                floats.append(value)
                key.append(FLOAT)
            else:
                _walk(value, key, tensors, floats)
    return tuple(key), tensors, floats


def _all_ints(items: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every item is an ``int`` (not a bool, not a SymInt), by C-level calls only."""
    return [*map(type, items)].count(int) == len(items)


def _walk(value: Any, key: list[Any], tensors: list[torch.Tensor], floats: list[float]) -> None:
    kind = type(value)
    if kind is float:
        floats.append(value)
        key.append(FLOAT)
    elif kind is _Tensor or isinstance(value, _Tensor):
        device = value.get_device()
        if device < 0 and value.dtype is _float64 and value.dim() == 0:
            floats.append(value.item())
            key.append(FLOAT)
            return
        tensors.append(value)
        key.append((value.dtype, value.shape, value.stride(), device))
    elif kind is bool:
        key.append(_TRUE if value else _FALSE)
    elif kind is list or kind is tuple:
        if _all_ints(value):
            key.append(tuple(value))
        else:
            key.append(_LIST)
            key.append(len(value))
            for item in value:
                _walk(item, key, tensors, floats)
    elif kind is _Generator:  # as the dispatcher passes one to a Python kernel (its own wrapper)
        key.append(GENERATOR)
    else:
        key.append(value)  # int, None, str, dtype, device, layout, memory format, complex


def rebuild(args: Sequence[Any], kwargs: dict[str, Any], tensor: Callable[[int, torch.Tensor], Any],
            floats: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """``args``/``kwargs`` with the ``i``-th tensor replaced by ``tensor(i, t)`` and the ``j``-th float by
    ``floats[j]`` (the same walk as :func:`describe`)."""
    counts = [0, 0]

    def sub(value: Any) -> Any:
        kind = type(value)
        if kind is float:
            counts[1] += 1
            return floats[counts[1] - 1]
        if kind is _Tensor or isinstance(value, _Tensor):
            if value.get_device() < 0 and value.dtype is _float64 and value.dim() == 0:
                counts[1] += 1
                return floats[counts[1] - 1]
            counts[0] += 1
            return tensor(counts[0] - 1, value)
        if kind is list or kind is tuple:
            if _all_ints(value):
                return value
            return [sub(item) for item in value]
        return value

    new_args = [sub(value) for value in args]
    new_kwargs = {name: sub(value) for name, value in kwargs.items()}
    return new_args, new_kwargs
