"""Allocating tensors from kernel code: the checks every ``nl`` creation function shares."""

from __future__ import annotations

from neuroncc.nki.context import current
from neuroncc.nki.dtypes import dtype_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer, Tensor


def buffer_of(buffer: object) -> Buffer:
    """The memory region named by a ``buffer=`` argument; None means SBUF."""
    if buffer is None:
        return Buffer.SBUF
    if isinstance(buffer, Buffer):
        return buffer
    raise NKISimulationError(f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, got {buffer!r}")


def allocate(op: str, shape: object, dtype: object, buffer: object, name: str = "", fill: object = None) -> Tensor:
    """A new tensor for creation function ``op``; on-chip tiles must be at least 2-D.

    As in AWS's simulator, a tile with more than 128 partitions can be allocated; the first instruction
    that uses it reports the limit, naming itself and the operand.
    """
    dims = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))  # type: ignore[union-attr]
    kind = dtype_of(dtype)
    where = buffer_of(buffer)
    if any(n <= 0 for n in dims):
        raise NKISimulationError(f"{op} shape {dims} must have positive dimensions")
    if where.on_chip:
        if len(dims) < 2:
            raise NKISimulationError(
                f"{op} {where.value} tile must have at least 2 dimensions (partition, free), got shape {dims}")
    return current().new_tensor(dims, kind, where, name, fill=fill)
