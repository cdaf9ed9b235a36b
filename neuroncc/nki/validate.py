"""Operand checks shared by the ISA instructions, with AWS-simulator-style messages.

Every message names the instruction, the operand and the limit, e.g.
``tensor_tensor data1 partition dimension 256 exceeds maximum 128`` or
``Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in 'sbuf' instead.``
These run on every instruction, also in cost-only mode, so they avoid building strings on the happy path.
"""

from __future__ import annotations

from neuroncc.hardware.neuron import PARTITIONS, allowed_partition_starts
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Buffer, Tensor

PMAX = PARTITIONS

HBM = (Buffer.HBM, Buffer.SHARED_HBM)
SBUF = (Buffer.SBUF,)
PSUM = (Buffer.PSUM,)
ON_CHIP = (Buffer.SBUF, Buffer.PSUM)
DMA_SPACES = (Buffer.HBM, Buffer.SHARED_HBM, Buffer.SBUF)  # DMA engines cannot reach PSUM


def _space_names(allowed: tuple[Buffer, ...]) -> str:
    # shared_hbm is HBM as far as an address-space rule is concerned; name it once.
    names = []
    for buffer in allowed:
        name = "hbm" if buffer.is_hbm else buffer.value
        if name not in names:
            names.append(name)
    return " or ".join(f"'{name}'" for name in names)


def tensor(op: str, role: str, value: object) -> Tensor:
    """``value`` must be a tensor (not a Python number or array)."""
    if not isinstance(value, Tensor):
        raise NKISimulationError(f"Expected operand '{role}' of '{op}' to be a tensor, but got {type(value).__name__}")
    return value


def space(op: str, role: str, value: Tensor, allowed: tuple[Buffer, ...], why: str = "") -> None:
    """``value`` must live in one of the ``allowed`` memory regions."""
    if value.buffer not in allowed:
        reason = f" ({why})" if why else ""
        raise NKISimulationError(
            f"Expected operand '{role}' of '{op}' to be in address space {_space_names(allowed)}, "
            f"but got a tile in '{value.buffer.value}' instead.{reason}")


def tile(op: str, role: str, value: Tensor, aligned: bool = True) -> None:
    """An on-chip operand: at least 2-D, dimension 0 is the partition dim, <= 128 partitions, aligned start.

    ``aligned`` applies the engines' partition-start rule (DMA does not have it): an access of more than
    64 partitions starts at partition 0, of 33-64 partitions at 0 or 64, of at most 32 at 0/32/64/96.
    """
    shape = value.shape
    if len(shape) < 1 or (len(shape) < 2 and not value.keeps_partition_dim):
        raise NKISimulationError(
            f"{op} {role} must have at least 2 dimensions (partition, free), got shape {shape}")
    # A column picked with an integer (``t[:, j]``, NKI 0.1 tutorials) keeps the partition dimension and is a
    # (P, 1) operand.
    if not value.keeps_partition_dim:
        raise NKISimulationError(
            f"{op} {role} indexes away the partition dimension of tile '{value.name}'; keep dimension 0 as a slice")
    partitions = shape[0]
    if partitions > PMAX:
        raise NKISimulationError(f"{op} {role} partition dimension {partitions} exceeds maximum {PMAX}")
    if aligned:
        start = value.partition_start
        if start != 0 and not _aligned_start(start, partitions):
            raise NKISimulationError(
                f"{op} {role} starts at partition {start}; an access of {partitions} partitions must start at "
                f"partition {_allowed_starts(partitions)}")


def _aligned_start(start: int, partitions: int) -> bool:
    return start in allowed_partition_starts(partitions)


def _allowed_starts(partitions: int) -> str:
    starts = [str(start) for start in allowed_partition_starts(partitions)]
    return starts[0] if len(starts) == 1 else ", ".join(starts[:-1]) + " or " + starts[-1]


def same_shape(op: str, role: str, value: Tensor, expected: tuple[int, ...], what: str) -> None:
    """``value`` (usually ``dst``) must have exactly the shape of the result."""
    if value.shape != expected:
        raise NKISimulationError(f"{op} {role} shape {value.shape} does not match {what} shape {expected}")


def same_free_size(op: str, role: str, value: Tensor, expected: tuple[int, ...], what: str) -> None:
    """Same partition count and elements per partition (NKI lets free dims be shaped differently)."""
    if value.shape[0] != expected[0] or value.free_size != _free(expected):
        raise NKISimulationError(f"{op} {role} shape {value.shape} does not match {what} shape {expected}")


def _free(shape: tuple[int, ...]) -> int:
    size = 1
    for n in shape[1:]:
        size *= n
    return size


def vector_operand(op: str, role: str, value: Tensor, partitions: int) -> None:
    """A per-partition scalar operand: a tile of shape ``(partitions, 1)``."""
    if value.shape[0] != partitions or value.free_size != 1:
        raise NKISimulationError(
            f"{op} {role} must be a scalar or a tile of shape ({partitions}, 1), got shape {value.shape}")
