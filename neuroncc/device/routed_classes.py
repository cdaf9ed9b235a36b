"""PyTorch classes the device routes in place of its own (``torch.Event``, ``torch.Stream``, ``torch.Generator``):
the routed class is a subclass of PyTorch's whose metaclass makes every instance of PyTorch's class (those made in
C++ included) an instance of the routed one, so ``isinstance(x, torch.Event)`` and annotations keep working."""

from __future__ import annotations

from typing import Any


def instances_of(base: type) -> type:
    """The metaclass of a class routed in place of ``base``: instance and subclass checks answer for ``base``."""

    class _Any(type(base)):  # type: ignore[misc]
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, base)

    _Any.__name__ = f"_Any{base.__name__}"
    return _Any
