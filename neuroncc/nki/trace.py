"""The instruction trace: what the functional simulator emits and the cost model consumes.

A trace is a flat, ordered list of plain-data events (frozen dataclasses of ints, strings and tuples; no
references to live tensors or numpy arrays), in program order:

``Allocate(tile, buffer, name, shape, dtype, offset, size, transient)``
    A tensor came to life. ``tile`` is a storage id, unique within the trace. For SBUF / PSUM, ``size`` is
    the bytes it occupies on every partition (PSUM: whole 2 KiB banks) and ``offset`` where they start.
    HBM tensors have both 0. ``transient`` marks the result tile of a value-returning call
    (``y = nl.exp(x)``, NKI 0.1's ``nisa.nc_matmul(a, b)``); ``forwarding`` lets its producer write straight
    into the tensor it is assigned to.
``Release(tile)``
    An on-chip tile's bytes are free again.

The simulator records ``Allocate`` when the kernel allocates (offset 0). ``memory.place`` then turns
that raw trace into the placed trace every consumer sees (``nki.benchmark``, ``nki.trace_kernel``):
each on-chip tile's ``Allocate`` moves to just before its first use and carries its placement, and a
``Release`` follows its last use.

``Instruction(index, op, engine, operands, params)``
    One executed ISA instruction. ``engine`` is one of ``Engine``. ``operands`` are ``Operand`` records:

    ``Operand(role, tile, buffer, access, shape, dtype, region, layout, contiguous_bytes)``
        ``role`` names the argument (``"dst"``, ``"data"``, ``"stationary"``, ...); ``access`` is ``"r"``,
        ``"w"`` or ``"rw"`` (a PSUM accumulation reads and writes ``dst``); ``shape``/``dtype`` are the
        view's; ``region`` is the half-open box ``((lo, hi), ...)`` the view touches in the coordinates of
        ``layout`` (the storage's shape, or its reshaped shape); ``contiguous_bytes`` is the longest run
        of consecutive bytes accessed (per partition on chip), which sets DMA efficiency.

    ``params`` is a sorted tuple of ``(name, value)`` pairs for everything else the cost model may need
    (``("reduce", True)`` on an activation that also reduces, the ALU op names, ...).

Dependencies are not stored as edges: an instruction depends on every earlier instruction whose operand
boxes overlap its own (read-after-write, write-after-read, write-after-write) and on the last users of any
dead tile whose bytes its tiles reuse. ``neuroncc.nki.scheduler`` derives them while scheduling.

``format_trace(events)`` prints a trace one event per line, for debugging and golden tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union


class Engine(enum.Enum):
    """The NeuronCore engines an instruction can run on."""

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"


@dataclass(frozen=True, slots=True)
class Operand:
    """One tensor argument of an instruction (see the module docstring)."""

    role: str
    tile: int
    buffer: str
    access: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    region: tuple[tuple[int, int], ...]
    layout: tuple[int, ...]
    contiguous_bytes: int

    @property
    def reads(self) -> bool:
        return "r" in self.access

    @property
    def writes(self) -> bool:
        return "w" in self.access

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def free_size(self) -> int:
        size = 1
        for n in self.shape[1:]:
            size *= n
        return size

    @property
    def nbytes(self) -> int:
        size = self.itemsize
        for n in self.shape:
            size *= n
        return size


@dataclass(frozen=True, slots=True)
class Instruction:
    """One executed ISA instruction (see the module docstring)."""

    index: int
    op: str
    engine: Engine
    operands: tuple[Operand, ...]
    params: tuple[tuple[str, object], ...] = ()

    def operand(self, role: str) -> Operand:
        for operand in self.operands:
            if operand.role == role:
                return operand
        raise KeyError(f"{self.op} has no operand {role!r}")

    def has_operand(self, role: str) -> bool:
        return any(operand.role == role for operand in self.operands)

    def param(self, name: str, default: object = None) -> object:
        for key, value in self.params:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class Allocate:
    """A tile came to life (see the module docstring)."""

    tile: int
    buffer: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int = 0
    size: int = 0
    transient: bool = False


@dataclass(frozen=True, slots=True)
class Release:
    """The kernel dropped its last reference to a tile."""

    tile: int


Event = Union[Allocate, Release, Instruction]


def format_event(event: Event) -> str:
    if isinstance(event, Allocate):
        where = f" @ bytes [{event.offset}, {event.offset + event.size})" if event.size else ""
        return f"alloc   t{event.tile} {event.buffer} {event.name} {list(event.shape)} {event.dtype}{where}"
    if isinstance(event, Release):
        return f"release t{event.tile}"
    operands = ", ".join(
        f"{o.role}{'+' if o.access == 'rw' else ''}=t{o.tile}{_format_region(o.region)}" for o in event.operands)
    params = "".join(f" {key}={value}" for key, value in event.params)
    return f"{event.index:5d} {event.engine.value:6s} {event.op}({operands}){params}"


def _format_region(region: tuple[tuple[int, int], ...]) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in region) + "]"


def format_trace(events: list[Event] | tuple[Event, ...]) -> str:
    """One line per event, in program order."""
    return "\n".join(format_event(event) for event in events)


def instructions(events: list[Event] | tuple[Event, ...]) -> list[Instruction]:
    """Just the instructions of a trace."""
    return [event for event in events if isinstance(event, Instruction)]
