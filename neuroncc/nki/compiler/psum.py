"""``nki.compiler.psum``: PSUM allocation hints (NKI 0.1 direct allocation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuroncc.nki.compiler.hints import AllocationHint
from neuroncc.nki.tensor import Buffer


def mod_alloc(*, base_bank: int, base_addr: int = 0, base_partition: int = 0, num_bank_tiles: tuple[int, ...] = (),
              num_par_tiles: tuple[int, ...] = (), num_free_tiles: tuple[int, ...] = ()) -> AllocationHint:
    """Place block ``i`` of a tensor in bank ``base_bank + i % num_bank_tiles`` (checked; placement stays
    automatic)."""
    return AllocationHint(Buffer.PSUM, "mod_alloc", {
        "base_bank": base_bank, "base_addr": base_addr, "base_partition": base_partition,
        "num_bank_tiles": num_bank_tiles, "num_par_tiles": num_par_tiles, "num_free_tiles": num_free_tiles})


def alloc(func: Callable[..., Any]) -> AllocationHint:
    """Place each block where ``func(index, pdim_size, fdim_size) -> (bank_id, start_partition, byte_addr)`` says."""
    return AllocationHint(Buffer.PSUM, "alloc", {}, func)


def auto_alloc() -> Buffer:
    """Automatic allocation: the same as ``nl.psum``."""
    return Buffer.PSUM
