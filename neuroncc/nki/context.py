"""The state of one simulated kernel launch: target, mode, allocations, trace and grid position.

NKI's API is module-level functions (``nl.ndarray``, ``nisa.nc_matmul``) with no context argument, so the
running launch has to be found somewhere: ``simulate`` activates a ``SimulationContext`` for the duration
of the kernel and the API functions look it up with ``current()``. That is the only ambient state; the
context itself is an ordinary object built from explicit arguments (the target is resolved before it
exists).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator

import numpy as np

from neuroncc.nki import trace as tr
from neuroncc.nki.dtypes import DType, uninitialised_fill
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.memory import footprint
from neuroncc.nki.target import Target
from neuroncc.nki.tensor import Buffer, Storage, Tensor, TileOperators

_ACTIVE: contextvars.ContextVar[SimulationContext | None] = contextvars.ContextVar("nki_simulation", default=None)


class SimulationContext:
    """One kernel launch (all programs of its grid): allocations, the trace and the grid position."""

    def __init__(self, target: Target, numerics: bool, operators: TileOperators, grid: tuple[int, ...] = ()):
        self.target = target
        self.operators = operators  # what Python operators on this launch's tiles do (nki.language)
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

    # ----------------------------------------------------------------------------- grid
    def begin_program(self, program_id: tuple[int, ...]) -> None:
        self.program_id = program_id
        self._shared_ordinal = 0

    # ----------------------------------------------------------------------------- allocation
    def new_tensor(self, shape: tuple[int, ...], dtype: DType, buffer: Buffer, name: str = "",
                   fill: object = None, data: np.ndarray | None = None) -> Tensor:
        """Allocate a storage and return a view of all of it.

        ``fill`` initialises the values (default: the uninitialised pattern, NaN for floats); ``data``
        adopts an existing array instead (kernel inputs). Both are ignored in cost-only mode.
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
        storage = Storage(storage_id, buffer, dtype, shape, name, array, self.operators)
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
            self.events.append(tr.Allocate(storage_id, buffer.value, name, shape, dtype.name, 0, size))
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
        return instruction


def current() -> SimulationContext:
    """The launch being simulated; NKI API calls outside a kernel launch are an error."""
    context = _ACTIVE.get()
    if context is None:
        raise NKISimulationError(
            "NKI language and ISA calls must run inside a kernel launched with nki.simulate / nki.benchmark "
            "(or a call of an @nki.jit kernel)")
    return context


def active() -> SimulationContext | None:
    return _ACTIVE.get()


@contextlib.contextmanager
def activate(context: SimulationContext) -> Iterator[SimulationContext]:
    token = _ACTIVE.set(context)
    try:
        yield context
    finally:
        _ACTIVE.reset(token)
