"""NKI 0.1 block dimensions: an on-chip tensor of several tiles (``nl.ndarray((4, nl.par_dim(128), 512))``)."""

from __future__ import annotations

from typing import Any

from neuroncc.nki.active import current
from neuroncc.nki.dtypes import DType
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer, Tensor, _is_int_index


class BlockedTensor:
    """An on-chip tensor with NKI 0.1 block dimensions before its partition dimension.

    ``nl.ndarray((2, 4, nl.par_dim(128), 512), buffer=nl.psum)`` is 2 x 4 logical tiles of ``[128, 512]``.
    Indexing the block dimensions with integers gives a tile (a Tensor); each block is its own allocation,
    made when it is first used, so a block's memory is live only while the kernel uses it - as NKI's
    compiler allocates logical tiles.
    """

    def __init__(self, block_shape: tuple[int, ...], tile_shape: tuple[int, ...], dtype: DType, buffer: Buffer,
                 name: str, make_block: Any, blocks: dict[tuple[int, ...], Tensor] | None = None,
                 prefix: tuple[int, ...] = ()):
        self.block_shape = block_shape
        self.tile_shape = tile_shape
        self.dtype = dtype
        self.buffer = buffer
        self.name = name
        self._make_block = make_block
        self._blocks = {} if blocks is None else blocks
        self._prefix = prefix

    @property
    def shape(self) -> tuple[int, ...]:
        return self.block_shape[len(self._prefix):] + self.tile_shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        return f"BlockedTensor({self.name!r}, {self.buffer.value}, blocks={self.block_shape}, tile={self.tile_shape})"

    def block(self, index: tuple[int, ...]) -> Tensor:
        if index not in self._blocks:
            self._blocks[index] = self._make_block(index)
        return self._blocks[index]

    def __getitem__(self, key: Any) -> Tensor | BlockedTensor:
        keys = key if isinstance(key, tuple) else (key,)
        remaining = len(self.block_shape) - len(self._prefix)
        picked = list(self._prefix)
        for position, k in enumerate(keys[:remaining]):
            size = self.block_shape[len(self._prefix) + position]
            if k is Ellipsis or not _is_int_index(k):
                raise NKISimulationError(
                    f"block dimension {len(self._prefix) + position} of tensor '{self.name}' must be indexed with an "
                    f"integer (got {k!r}); only the partition and free dimensions of a tile can be sliced")
            index = int(k) + size if int(k) < 0 else int(k)
            if not 0 <= index < size:
                raise NKISimulationError(
                    f"block index {k} is out of bounds for block dimension {len(self._prefix) + position} of size "
                    f"{size} in tensor '{self.name}'")
            picked.append(index)
        if len(picked) < len(self.block_shape):
            return BlockedTensor(self.block_shape, self.tile_shape, self.dtype, self.buffer, self.name,
                                 self._make_block, self._blocks, tuple(picked))
        tile = self.block(tuple(picked))
        rest = keys[remaining:]
        return tile[rest] if rest else tile

    def __setitem__(self, key: Any, value: Any) -> None:
        target = self[key]
        if isinstance(target, BlockedTensor):
            raise NKISimulationError(f"assign to one tile of '{self.name}' at a time: index every block dimension")
        current().api.assign(target, value)
