"""``nki.compiler.sbuf``: SBUF allocation hints (NKI 0.1 direct allocation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuroncc.nki.compiler.hints import AllocationHint
from neuroncc.nki.tensor import Buffer


def mod_alloc(*, base_addr: int, base_partition: int = 0, num_par_tiles: tuple[int, ...] = (),
              num_free_tiles: tuple[int, ...] = ()) -> AllocationHint:
    """Place block ``i`` of a tensor at ``base_addr + (i % num_free_tiles) * tile_bytes`` (checked; placement
    stays automatic)."""
    return AllocationHint(Buffer.SBUF, "mod_alloc", {"base_addr": base_addr, "base_partition": base_partition,
                                                     "num_par_tiles": num_par_tiles, "num_free_tiles": num_free_tiles})


def alloc(func: Callable[..., Any]) -> AllocationHint:
    """Place each block where ``func(index, pdim_size, fdim_size) -> (start_partition, byte_addr)`` says."""
    return AllocationHint(Buffer.SBUF, "alloc", {}, func)


def auto_alloc() -> Buffer:
    """Automatic allocation: the same as ``nl.sbuf``."""
    return Buffer.SBUF
