"""Allocating tensors from kernel code: the checks every ``nl`` creation function shares.

Shapes may carry NKI 0.1's ``nl.par_dim(n)`` marker. On chip, dimensions before it are block dimensions: the
tensor is a ``BlockedTensor`` of separately allocated tiles. In HBM the marker means nothing and is dropped.
``buffer=`` takes ``nl.sbuf`` / ``nl.psum`` / ``nl.hbm`` / ``nl.shared_hbm`` or an allocation hint of
``nki.compiler`` (``ncc.sbuf.mod_alloc(...)``), which is checked and then allocated like its buffer.
"""

from __future__ import annotations

from typing import Any

from neuroncc.nki import isa_movement
from neuroncc.nki.blocked import BlockedTensor
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import DType, dtype_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer, Tensor


class ParDim(int):
    """``nl.par_dim(n)``: marks the partition dimension of an on-chip tensor's shape (an int of value n)."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


def par_dim(size: int) -> ParDim:
    """Mark ``size`` as the partition dimension in a shape (NKI 0.1); the default is the first dimension."""
    return ParDim(int(size))


def buffer_of(buffer: object) -> Buffer:
    """The memory region named by a ``buffer=`` argument; None means SBUF."""
    if buffer is None:
        return Buffer.SBUF
    if isinstance(buffer, Buffer):
        return buffer
    hinted = getattr(buffer, "nki_buffer", None)
    if isinstance(hinted, Buffer):
        return hinted
    raise NKISimulationError(f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, got {buffer!r}")


def allocate(op: str, shape: object, dtype: object, buffer: object, name: str = "", fill: object = None,
             transient: bool = False) -> Any:
    """A new tensor for creation function ``op``; on-chip tiles must be at least 2-D.

    As in AWS's simulator, a tile with more than 128 partitions can be allocated; the first instruction
    that uses it reports the limit, naming itself and the operand.
    """
    raw = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    dims = tuple(int(n) for n in raw)  # type: ignore[call-overload]
    kind = dtype_of(dtype)
    where = buffer_of(buffer)
    if any(n <= 0 for n in dims):
        raise NKISimulationError(f"{op} shape {dims} must have positive dimensions")
    marked = [i for i, n in enumerate(raw) if isinstance(n, ParDim)]
    if len(marked) > 1:
        raise NKISimulationError(f"{op} shape {raw} marks more than one partition dimension")
    check = getattr(buffer, "check", None)
    if callable(check):
        check(op, dims, kind, marked[0] if marked else 0)
    if where.on_chip and marked and marked[0] > 0:
        return _blocked(op, dims, marked[0], kind, where, name, fill)
    if where.on_chip and len(dims) < 2:
        raise NKISimulationError(
            f"{op} {where.value} tile must have at least 2 dimensions (partition, free), got shape {dims}")
    return _tile(dims, kind, where, name, fill, transient)


def _tile(dims: tuple[int, ...], kind: DType, where: Buffer, name: str, fill: object, transient: bool) -> Tensor:
    context = current()
    if where.on_chip and fill is not None:
        # On-chip tiles are filled by an instruction (a memset), which costs engine time; HBM tensors are
        # initialised by the host before launch.
        return isa_movement.memset(context.new_tensor(dims, kind, where, name, transient=transient), fill)
    return context.new_tensor(dims, kind, where, name, fill=fill, transient=transient)


def _blocked(op: str, dims: tuple[int, ...], partition_axis: int, kind: DType, where: Buffer, name: str,
             fill: object) -> BlockedTensor:
    block_shape, tile_shape = dims[:partition_axis], dims[partition_axis:]
    if len(tile_shape) < 2:
        raise NKISimulationError(
            f"{op} {where.value} tensor {dims}: each block tile needs a free dimension after the partition dimension")
    label = name or f"{where.value}_blocks"

    def make_block(index: tuple[int, ...]) -> Tensor:
        block_name = f"{label}[{', '.join(map(str, index))}]"
        return _tile(tile_shape, kind, where, block_name, fill, False)
    return BlockedTensor(block_shape, tile_shape, kind, where, label, make_block)
