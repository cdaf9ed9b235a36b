"""Attribute values: the static parameters of an op (dims, shapes, scalars, dtypes, dense constants).

Allowed attribute values are ``int``, ``float``, ``bool``, ``str``, ``None``, :class:`DType`, tuples of those,
and :class:`DenseAttr`. All are immutable and hashable, so ops can be compared and cached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from neuroncc.ir.dtypes import DType, dtype_from_numpy, to_storage
from neuroncc.ir.types import TensorType

#: Dense constants with at most this many elements are printed inline; larger ones become resources.
INLINE_ELEMENT_LIMIT = 64


class DenseAttr:
    """An immutable constant tensor used as an attribute (the payload of the ``constant`` op)."""

    __slots__ = ("array", "dtype", "_digest")

    def __init__(self, array: np.ndarray, dtype: DType | None = None):
        dtype = dtype if dtype is not None else dtype_from_numpy(np.asarray(array).dtype)
        stored = np.array(to_storage(np.asarray(array), dtype), copy=True, order="C")
        stored.setflags(write=False)
        self.array: np.ndarray = stored
        self.dtype: DType = dtype
        self._digest: str | None = None

    @property
    def type(self) -> TensorType:
        return TensorType(tuple(self.array.shape), self.dtype)

    @property
    def digest(self) -> str:
        """sha256 of dtype, shape and bytes: the constant's identity in hashes and resource names."""
        if self._digest is None:
            h = hashlib.sha256(f"{self.dtype.value}{self.array.shape}".encode())
            h.update(self.array.tobytes())
            self._digest = h.hexdigest()
        return self._digest

    @property
    def is_inline(self) -> bool:
        return self.array.size <= INLINE_ELEMENT_LIMIT

    @property
    def resource_name(self) -> str:
        return f"c_{self.digest[:16]}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DenseAttr) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"DenseAttr({self.type})"


AttrValue = Any  # int | float | bool | str | None | DType | DenseAttr | tuple[AttrValue, ...]


def freeze_attr(value: Any) -> AttrValue:
    """Normalise a Python value to an attribute value (lists become tuples, numpy scalars Python ones)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, (str, DType, DenseAttr)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(freeze_attr(v) for v in value)
    raise TypeError(f"unsupported attribute value {value!r} of type {type(value).__name__}")


class Attrs(Mapping[str, AttrValue]):
    """An immutable, hashable, key-sorted mapping of attribute names to values."""

    __slots__ = ("_items", "_dict")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any):
        merged = dict(items or {}, **kwargs)
        self._items = tuple(sorted((k, freeze_attr(v)) for k, v in merged.items()))
        self._dict = dict(self._items)

    def __getitem__(self, key: str) -> AttrValue:
        return self._dict[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        return isinstance(other, Mapping) and self._dict == dict(other)

    def replace(self, **changes: Any) -> Attrs:
        return Attrs(self._dict, **changes)

    def __repr__(self) -> str:
        return f"Attrs({self._dict!r})"


EMPTY_ATTRS = Attrs()
