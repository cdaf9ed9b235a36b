"""Direct-allocation hints (``buffer=ncc.sbuf.mod_alloc(...)``) and the checks NKI 0.1 documents for them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neuroncc.hardware.neuron import SBUF_ALIGNMENT, SBUF_COMPILER_RESERVED, allowed_partition_starts
from neuroncc.nki.active import current
from neuroncc.nki.dtypes import DType
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer

SBUF_ALIGN = SBUF_ALIGNMENT


@dataclass(frozen=True)
class AllocationHint:
    """A ``buffer=`` value naming a memory and how NKI's compiler should place a tensor's tiles there.

    ``allocate`` calls ``check`` with the tensor's shape; placement itself stays automatic.
    """

    nki_buffer: Buffer
    kind: str  # "mod_alloc" | "alloc"
    options: dict[str, Any] = field(default_factory=dict)
    func: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"ncc.{self.nki_buffer.value}.{self.kind}({args})"

    def check(self, op: str, dims: tuple[int, ...], dtype: DType, partition_axis: int) -> None:
        blocks, tile = dims[:partition_axis], dims[partition_axis:]
        partitions = tile[0]
        tile_bytes = math.prod(tile[1:]) * dtype.itemsize
        where = f"{op} with buffer={self!r}"
        if self.kind == "mod_alloc":
            for name in ("num_par_tiles", "num_free_tiles", "num_bank_tiles"):
                value = tuple(self.options.get(name, ()))
                # NKI's docs ask for one entry per block dimension, but its compiler takes e.g. (2,) for a
                # block-less tensor (the attention tutorial's allocated kernels): a warning, not an error.
                if value and len(value) != len(blocks):
                    current().warn(f"{name}-length", f"{where}: {name} {value} has {len(value)} entries for "
                                                      f"{len(blocks)} block dimensions (NKI's docs: one per block)")
            if self.options.get("base_partition", 0) != 0:
                raise NKISimulationError(f"{where}: base_partition must be 0 in the current NKI release")
        if self.nki_buffer is Buffer.PSUM:
            bank_bytes = current().target.psum_bank_bytes
            if tile_bytes > bank_bytes:
                raise NKISimulationError(
                    f"{where}: a PSUM tile of {tile_bytes} bytes per partition exceeds one {bank_bytes}-byte bank")
            if self.kind == "mod_alloc":
                banks = current().target.psum_banks
                base = int(self.options["base_bank"])
                used = math.prod(self.options.get("num_bank_tiles", ()) or (1,))
                if self.options.get("base_addr", 0) != 0:
                    raise NKISimulationError(f"{where}: base_addr must be 0 in the current NKI release")
                if not 0 <= base < banks or base + used > banks:
                    raise NKISimulationError(f"{where}: banks {base}..{base + used - 1} are outside PSUM's {banks}")
        else:
            limit = current().target.sbuf_partition_bytes - SBUF_COMPILER_RESERVED
            if self.kind == "mod_alloc":
                base = int(self.options["base_addr"])
                copies = math.prod(self.options.get("num_free_tiles", ()) or (1,))
                if base % SBUF_ALIGN:
                    # NKI names an alignment (sbuf_min_align) without a value; its attention tutorial uses
                    # 4-byte aligned addresses. The simulator places tiles on 64-byte boundaries: a warning.
                    current().warn("sbuf-align", f"{where}: base_addr {base} is not {SBUF_ALIGN}-byte aligned")
                if not 0 <= base or base + copies * tile_bytes > limit:
                    raise NKISimulationError(
                        f"{where}: bytes [{base}, {base + copies * tile_bytes}) per partition exceed the "
                        f"{limit} bytes NKI leaves to kernels")
        if self.kind == "alloc" and self.func is not None:
            self._check_func(where, blocks, partitions, tile_bytes)

    def _check_func(self, where: str, blocks: tuple[int, ...], partitions: int, tile_bytes: int) -> None:
        for index in _indices(blocks):
            place = tuple(self.func(index, partitions, tile_bytes))  # type: ignore[misc]
            if self.nki_buffer is Buffer.PSUM:
                bank, start, address = place
                if start != 0 or address != 0:
                    raise NKISimulationError(f"{where}: start_partition and byte_addr must be 0 (block {index})")
                if not 0 <= bank < current().target.psum_banks:
                    raise NKISimulationError(f"{where}: bank {bank} of block {index} does not exist")
            else:
                start, address = place
                allowed = allowed_partition_starts(partitions)
                if start not in allowed:
                    raise NKISimulationError(
                        f"{where}: block {index} of {partitions} partitions must start at partition "
                        f"{' or '.join(map(str, allowed))}, not {start}")
                if address % SBUF_ALIGN:
                    raise NKISimulationError(f"{where}: byte_addr {address} of block {index} is not aligned")


def _indices(blocks: tuple[int, ...]) -> list[tuple[int, ...]]:
    result: list[tuple[int, ...]] = [()]
    for n in blocks:
        result = [i + (k,) for i in result for k in range(n)]
    return result
