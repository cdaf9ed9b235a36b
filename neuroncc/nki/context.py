"""The state of one simulated kernel launch: target, mode, allocations, trace and grid position.

NKI's API is module-level functions (``nl.ndarray``, ``nisa.nc_matmul``) with no context argument, so the
running launch has to be found somewhere: ``simulate`` activates a ``SimulationContext`` for the duration
of the kernel and the API functions look it up with ``current()`` (``active``). That is the only ambient
state; the context itself is an ordinary object built from explicit arguments (the target is resolved
before it exists).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np

from neuroncc.nki import trace as tr
from neuroncc.nki.active import activate, active, current
from neuroncc.nki.dtypes import DType, uninitialised_fill
from neuroncc.nki.errors import NKIRuleWarning, NKISimulationError
from neuroncc.nki.memory import footprint
from neuroncc.nki.target import Target
from neuroncc.nki.tensor import Buffer, Storage, Tensor

__all__ = ["SimulationContext", "activate", "active", "current"]


class SimulationContext:
    """One kernel launch (all programs of its grid): allocations, the trace and the grid position."""

    def __init__(self, target: Target, numerics: bool, grid: tuple[int, ...] = (), api: Any = None):
        self.target = target
        self.api = api  # the nki.language module: what tensor operators (`a + b`, `t[...] = v`) call
        self.numerics = numerics
        self.grid = grid
        self.program_id: tuple[int, ...] = tuple(0 for _ in grid)
        self.events: list[tr.Event] = []
        self._ids = itertools.count()
        # Shared HBM is shared by every program of the grid: the k-th shared_hbm ndarray of each program is
        # the same tensor (that is how every program writes its part of one output).
        self._shared_outputs: list[Storage] = []
        self._shared_ordinal = 0
        self.instruction_count = 0
        # The op that last wrote each tile (how `psum += nisa.nc_matmul(...)` knows it accumulates a matmul).
        self.producers: dict[int, str] = {}
        # NKI 0.1 masks that are not rectangles: which elements of the current instruction's dst are written.
        self.write_mask: np.ndarray | None = None
        # Rules NKI does not enforce but a careful kernel should follow: reported once each, never raised.
        self.warned: set[str] = set()

    # ----------------------------------------------------------------------------- grid
    def begin_program(self, program_id: tuple[int, ...]) -> None:
        self.program_id = program_id
        self._shared_ordinal = 0

    # ----------------------------------------------------------------------------- allocation
    def new_tensor(self, shape: tuple[int, ...], dtype: DType, buffer: Buffer, name: str = "",
                   fill: object = None, data: np.ndarray | None = None, transient: bool = False) -> Tensor:
        """Allocate a storage and return a view of all of it.

        ``fill`` initialises the values (default: the uninitialised pattern, NaN for floats); ``data``
        adopts an existing array instead (kernel inputs). Both are ignored in cost-only mode. ``transient``
        marks the result tile of a value-returning call (see ``forwarding``).
        """
        if buffer is Buffer.SHARED_HBM:
            reused = self._reuse_shared(shape, dtype, name)
            if reused is not None:
                return reused
        storage_id = next(self._ids)
        name = name or f"{buffer.value}{storage_id}"
        array = None
        if self.numerics:
            if data is not None:
                array = data
            else:
                array = np.full(shape, uninitialised_fill(dtype) if fill is None else fill, dtype=dtype.storage)
        storage = Storage(storage_id, buffer, dtype, shape, name, array)
        storage.transient = transient
        if buffer.on_chip:
            # Where the tile lives is decided after the launch, from its live range (memory.place).
            size = footprint(buffer.value, storage.bytes_per_partition, self.target)
            if buffer is Buffer.PSUM and size > self.target.psum_partition_bytes:
                raise NKISimulationError(
                    f"psum tile '{name}' {shape} {dtype.name} needs {storage.bytes_per_partition} bytes per "
                    f"partition, more than PSUM's {self.target.psum_partition_bytes} "
                    f"({self.target.psum_banks} banks of {self.target.psum_bank_bytes} bytes)")
            if buffer is Buffer.SBUF and size > self.target.sbuf_partition_bytes:
                raise NKISimulationError(
                    f"sbuf tile '{name}' {shape} {dtype.name} needs {storage.bytes_per_partition} bytes per "
                    f"partition, more than SBUF's {self.target.sbuf_partition_bytes} on {self.target.name}")
            self.events.append(tr.Allocate(storage_id, buffer.value, name, shape, dtype.name, 0, size, transient))
        else:
            self.events.append(tr.Allocate(storage_id, buffer.value, name, shape, dtype.name))
        if buffer is Buffer.SHARED_HBM:
            self._shared_outputs.append(storage)
            self._shared_ordinal += 1
        return Tensor.whole(storage)

    def _reuse_shared(self, shape: tuple[int, ...], dtype: DType, name: str) -> Tensor | None:
        if self._shared_ordinal >= len(self._shared_outputs):
            return None
        storage = self._shared_outputs[self._shared_ordinal]
        if storage.shape != shape or storage.dtype != dtype:
            raise NKISimulationError(
                f"shared_hbm tensor #{self._shared_ordinal} of program {self.program_id} is {shape} "
                f"{dtype.name}, but program 0 allocated it as {storage.shape} {storage.dtype.name}; every "
                f"program of a grid must allocate the same shared outputs in the same order")
        self._shared_ordinal += 1
        return Tensor.whole(storage)

    # ----------------------------------------------------------------------------- instructions
    def emit(self, op: str, engine: tr.Engine, operands: tuple[tr.Operand, ...],
             params: tuple[tuple[str, object], ...] = ()) -> tr.Instruction:
        instruction = tr.Instruction(self.instruction_count, op, engine, operands, params)
        self.instruction_count += 1
        self.events.append(instruction)
        for operand in operands:
            if operand.writes:
                self.producers[operand.tile] = op
        return instruction

    def warn(self, rule: str, message: str) -> None:
        """Report a rule NKI itself does not enforce (once per rule and launch), as a ``NKIRuleWarning``."""
        if rule in self.warned:
            return
        self.warned.add(rule)
        warnings.warn(NKIRuleWarning(message), stacklevel=3)
