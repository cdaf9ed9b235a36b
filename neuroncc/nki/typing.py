"""``nki.typing``: tensor annotations for kernel signatures (``a: nt.tensor``, ``out: nt.mutable_tensor``).

``nt.tensor[128, 512]`` / ``nt.tensor[[128, 512], nl.float32]`` make annotations that document a shape (and
dtype); they are not checked. ``isinstance(x, nt.tensor)`` is true for every simulator tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuroncc.nki.tensor import Tensor


@dataclass(frozen=True)
class TensorAnnotation:
    """``nt.tensor[...]``: the subscript as written, and whether the kernel may write the argument."""

    spec: Any
    mutable: bool = False


class _TensorKind(type):
    def __instancecheck__(cls, value: object) -> bool:
        return isinstance(value, Tensor)

    def __getitem__(cls, spec: Any) -> TensorAnnotation:
        return TensorAnnotation(spec, cls.mutable)  # type: ignore[attr-defined]


class tensor(metaclass=_TensorKind):  # noqa: N801 - spelled as in NKI
    """Annotation of a kernel tensor argument or value (``nt.tensor``, ``nt.tensor[shape]``)."""

    mutable = False


class mutable_tensor(metaclass=_TensorKind):  # noqa: N801 - spelled as in NKI
    """Annotation of a kernel argument the kernel writes (``nt.mutable_tensor``)."""

    mutable = True


__all__ = ["TensorAnnotation", "mutable_tensor", "tensor"]
