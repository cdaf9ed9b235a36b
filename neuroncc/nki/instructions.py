"""What every ISA instruction does the same way: record itself in the trace, read and write tile values.

An instruction implementation (``isa_*`` modules) validates its operands, calls ``emit`` to append an
``Instruction`` to the trace, and then - only when the launch computes values - reads its inputs with
``read``, computes with numpy and stores with ``write``, which casts to the destination dtype (rounding to
bfloat16 where needed) and marks PSUM elements written.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np

from neuroncc.nki import trace as tr
from neuroncc.nki.context import SimulationContext, current
from neuroncc.nki.dtypes import DType, cast, float32, values_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer, Tensor


class engine(enum.Enum):  # noqa: N801 - spelled as in NKI (``nisa.engine.vector``)
    """Engine selection for instructions that can run on more than one engine."""

    unknown = "unknown"
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    sync = "sync"
    activation = "scalar"  # NKI 0.2+'s name for ScalarE (an alias of scalar)
    dma = "dma"


# NKI 0.1's module-level engine constants (``nisa.vector_engine`` ...), the same values as ``nisa.engine.*``.
unknown_engine = engine.unknown
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd


class reduce_cmd(enum.Enum):  # noqa: N801 - spelled as in NKI
    """How activation's reduction combines with the ScalarE reduction registers (see ``activation``)."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


ENGINE_OF = {
    engine.tensor: tr.Engine.TENSOR,
    engine.vector: tr.Engine.VECTOR,
    engine.scalar: tr.Engine.SCALAR,
    engine.gpsimd: tr.Engine.GPSIMD,
}


def pick_engine(requested: object, default: tr.Engine, allowed: tuple[tr.Engine, ...], op: str) -> tr.Engine:
    """The engine an instruction runs on: ``requested`` unless it is ``unknown``/None."""
    if requested is None or requested is engine.unknown:
        return default
    chosen = ENGINE_OF.get(requested) if isinstance(requested, engine) else None
    if chosen is None or chosen not in allowed:
        names = ", ".join(f"nisa.engine.{e.value}" for e in allowed)
        raise NKISimulationError(f"{op} cannot run on engine {requested!r}; allowed: {names}")
    return chosen


def operand(role: str, value: Tensor, access: str, dma: bool = False) -> tr.Operand:
    """The trace record of one tensor argument, with its contiguous run length (what DMA efficiency needs;
    kept for every operand, since ``forwarding`` may turn a copy's destination into a DMA's)."""
    return tr.Operand(
        role=role, tile=value.storage.id, buffer=value.buffer.value, access=access, shape=value.shape,
        dtype=value.dtype.name, itemsize=value.dtype.itemsize, region=value.region(), layout=value.layout,
        contiguous_bytes=value.contiguous_bytes(),
    )


def emit(context: SimulationContext, opcode: str, unit: tr.Engine, operands: Iterable[tr.Operand], /,
         **params: object) -> tr.Instruction:
    """Append one instruction to the trace; ``params`` become its sorted ``(name, value)`` pairs."""
    return context.emit(opcode, unit, tuple(operands), tuple(sorted(params.items())))


def compute_type(*values: Tensor | float | int | None) -> np.dtype:
    """int64 when every operand (tiles and numbers) is integral, else float32, as the engines compute."""
    for value in values:
        if isinstance(value, Tensor) and value.dtype.is_float:
            return np.dtype(np.float32)
        if isinstance(value, (float, np.floating)):
            return np.dtype(np.float32)
    return np.dtype(np.int64)


def read(value: Tensor, as_type: np.dtype) -> np.ndarray:
    """The tensor's values as ``as_type`` (float32 or int64); e8m0 scale codes read as powers of two."""
    return values_of(value.array(), value.dtype).astype(as_type, copy=False)


def scalar_or_vector(value: Tensor | float | int, partitions: int, as_type: np.dtype) -> np.ndarray:
    """A scalar operand as an array that broadcasts over a ``(partitions, free...)`` tile."""
    if isinstance(value, Tensor):
        return read(value, as_type).reshape(partitions, 1)
    return np.asarray(value, dtype=as_type)


def write(dst: Tensor, values: np.ndarray) -> None:
    """Store computed values into ``dst`` (cast to its dtype); PSUM elements become 'written'.

    Under a non-rectangular NKI 0.1 mask (``context.write_mask``, shaped like the instruction's dst) only the
    selected elements change.
    """
    target = dst.array()
    values = np.asarray(values)
    if values.shape != target.shape:
        values = np.broadcast_to(values, target.shape) if values.size != target.size else values.reshape(target.shape)
    keep = current().write_mask
    converted = cast(values, dst.dtype)
    if keep is not None and keep.shape == target.shape:
        target[...] = np.where(keep, converted, target)
        if dst.buffer is Buffer.PSUM:
            dst.written_mask()[...] |= keep
        return
    target[...] = converted
    if dst.buffer is Buffer.PSUM:
        dst.written_mask()[...] = True


def new_result(shape: tuple[int, ...], dtype: DType | None, buffer: Buffer = Buffer.SBUF) -> Tensor:
    """A fresh (transient) tile for NKI 0.1-style calls that return their result instead of taking ``dst``."""
    shape = tuple(shape)
    if len(shape) < 2:
        shape = (shape[0] if shape else 1, 1)
    return current().new_tensor(shape, dtype or float32, buffer, transient=True)
