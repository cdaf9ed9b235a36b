"""The state one FX -> IR import carries, and the helpers every per-op lowering uses.

A lowering is a small function ``(ctx, node, *args, **kwargs) -> Value | tuple`` where ``args``/``kwargs`` are
the FX node's arguments as they are (``fx.Node`` for tensors, Python values otherwise), with parameter names
that mirror the aten schema so positional and keyword spellings bind the same way. Helpers here turn
arguments into IR values: tensors are looked up, Python scalars become 0-dim ``full`` constants of the right
dtype, and ``cast`` ops are inserted so an op sees one element type, as PyTorch's type promotion decides
(read from ``node.meta["val"]``, which holds the dtype eager PyTorch computes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from neuroncc.errors import UnsupportedOpError
from neuroncc.ir import Builder, DType, Value

#: torch dtypes that have an IR element type (float64 and complex128 are handled by demotion, see ``ir_dtype``).
TORCH_TO_IR: dict[torch.dtype, DType] = {
    torch.float32: DType.f32, torch.bfloat16: DType.bf16, torch.float16: DType.f16, torch.int64: DType.i64,
    torch.int32: DType.i32, torch.int16: DType.i16, torch.int8: DType.i8, torch.uint8: DType.u8,
    torch.bool: DType.bool, torch.complex64: DType.c64,
}
#: Double-precision dtypes computed in single precision (the backend warns once per graph).
DEMOTED = {torch.float64: DType.f32, torch.complex128: DType.c64}


class LoweringBug(RuntimeError):
    """A lowering produced a value that disagrees with the shape/dtype PyTorch computed: a neuroncc bug."""


def ir_dtype(dtype: torch.dtype, *, demote_float64: bool = True) -> DType:
    """The IR element type for a torch dtype; float64 computes as float32 and complex128 as complex64 (the
    backend warns once)."""
    if dtype in DEMOTED and demote_float64:
        return DEMOTED[dtype]
    try:
        return TORCH_TO_IR[dtype]
    except KeyError:
        raise UnsupportedOpError(f"dtype {dtype} has no neuroncc element type "
                                 f"(supported: {', '.join(str(d) for d in TORCH_TO_IR)}, float64 as float32, "
                                 "complex128 as complex64)") from None


def meta_value(node: fx.Node) -> Any:
    """What PyTorch computed for ``node`` at trace time: a FakeTensor, a tuple of them, or a Python value."""
    if "val" in node.meta:
        return node.meta["val"]
    return node.meta.get("example_value")


class LoweringContext:
    """Builder + the map from FX nodes to IR values for one graph."""

    def __init__(self, builder: Builder, host_devices: tuple[str, ...] = ("cpu",)):
        self.builder = builder
        self.env: dict[fx.Node, Any] = {}
        self.randomness: Any = None  # the graph's GraphRandomness (frontend/lowering/random.py), set by the importer
        #: device types whose tensors live in host memory: a copy between them is only a dtype cast
        self.host_devices = host_devices

    # ---- types -----------------------------------------------------------------------------------------

    def out_meta(self, node: fx.Node) -> torch.Tensor:
        meta = meta_value(node)
        if not isinstance(meta, torch.Tensor):
            raise LoweringBug(f"node {node.name} ({node.target}) has no tensor metadata")
        return meta

    def out_dtype(self, node: fx.Node) -> DType:
        return ir_dtype(self.out_meta(node).dtype)

    def out_shape(self, node: fx.Node) -> tuple[int, ...]:
        return tuple(int(s) for s in self.out_meta(node).shape)

    def promoted_dtype(self, *args: Any, kind: str = "DEFAULT") -> DType:
        """PyTorch's elementwise type promotion of tensors (FX nodes) and Python scalars."""
        metas = [self.out_meta(a) if isinstance(a, fx.Node) else a for a in args if a is not None]
        _, result = elementwise_dtypes(*metas, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND[kind])
        return ir_dtype(result)

    # ---- values ----------------------------------------------------------------------------------------

    def value(self, arg: Any) -> Value:
        """The IR value of a tensor argument."""
        if not isinstance(arg, fx.Node):
            raise LoweringBug(f"expected a tensor argument, got {arg!r}")
        value = self.env[arg]
        if not isinstance(value, Value):
            raise LoweringBug(f"argument {arg.name} is {type(value).__name__}, not a tensor")
        return value

    def operand(self, arg: Any, dtype: DType) -> Value:
        """A tensor argument (or an IR value a lowering already made) cast to ``dtype``, or a Python scalar as
        a 0-dim constant of ``dtype``."""
        if isinstance(arg, fx.Node):
            return self.cast(self.value(arg), dtype)
        if isinstance(arg, Value):  # e.g. add's alpha * other, computed before the add
            return self.cast(arg, dtype)
        return self.scalar(arg, dtype)

    def scalar(self, value: Any, dtype: DType) -> Value:
        """A Python scalar as a 0-dim constant of ``dtype``."""
        return self.full((), dtype, value)

    def full(self, shape: tuple[int, ...], dtype: DType, value: Any) -> Value:
        """A tensor of ``shape`` filled with the Python scalar ``value`` (a complex one: its two parts)."""
        if dtype.is_complex and isinstance(value, complex) and value.imag != 0:
            rank = len(shape)
            parts = [self.emit("unsqueeze", self.emit("full", shape=shape, dtype=DType.f32, value=part), dim=rank)
                     for part in (float(value.real), float(value.imag))]
            return self.emit("view_as_complex", self.emit("cat", *parts, dim=rank))
        return self.emit("full", shape=shape, dtype=dtype, value=self.python_scalar(value, dtype))

    @staticmethod
    def python_scalar(value: Any, dtype: DType) -> int | float:
        """``value`` converted as PyTorch converts a scalar argument to a tensor of ``dtype``."""
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise UnsupportedOpError("a symbolic scalar reached the importer; compile with dynamic=False")
        if isinstance(value, complex) and dtype.is_complex and value.imag == 0:
            value = value.real
        if not isinstance(value, bool | int | float):
            raise UnsupportedOpError(f"scalar argument {value!r} of type {type(value).__name__}")
        if dtype.is_float or dtype.is_complex:
            return float(value)
        return int(bool(value)) if dtype.is_bool else int(value)

    def cast(self, value: Value, dtype: DType) -> Value:
        return value if value.type.dtype is dtype else self.emit("cast", value, dtype=dtype)

    def emit(self, name: str, *operands: Value, **attrs: Any) -> Any:
        return self.builder.op(name, *operands, **attrs)

    def tensors(self, args: Sequence[Any], dtype: DType) -> list[Value]:
        return [self.operand(a, dtype) for a in args]


def normalize_dim(dim: int, rank: int) -> int:
    """A non-negative dimension index (PyTorch lets 0-dim tensors use dim 0 and -1)."""
    bound = max(rank, 1)
    if not -bound <= dim < bound:
        raise UnsupportedOpError(f"dimension {dim} is out of range for a tensor of rank {rank}")
    return dim % bound


def normalize_dims(dims: Any, rank: int) -> tuple[int, ...]:
    """Sorted non-negative dims; ``None`` or an empty list means every dim (aten's reduction convention)."""
    if rank == 0:
        return ()  # a 0-dim tensor has no dims to name; any of dim=0/-1/[] reduces "all" of it
    if dims is None or (isinstance(dims, Sequence) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({normalize_dim(d, rank) for d in dims}))
