"""One loop body of a stage: where each domain dim is in the tiles, loads, stores and operand plumbing.

A :class:`StageLayout` says how a stage's domain maps onto tiles: one dim on the partitions (blocks of the
kernel's ``tile`` partitions, at most 128), the *tile dims* (every reduced dim, whole, plus the innermost other
dim, in blocks of the kernel's free tile that fit its SBUF budget) on the free axes in domain order, and every
other dim looped one index at a time. A value's tile has the block's extent on each axis the value varies along and 1 elsewhere, so broadcasting a row
statistic over a row is just a ``(P, 1)`` operand. Tiles are allocated at their full block size; a partial
last block only moves fewer rows in its DMAs (the rows past the end are computed and never stored).

:class:`Body` collects the :class:`~neuroncc.codegen.nki.instructions.Instr` records of one iteration: the
op rules call :meth:`Body.operand` (which loads from HBM or reuses a tile computed here) and the helpers
:meth:`Body.binary`, :meth:`Body.activation`, :meth:`Body.reduce`, :meth:`Body.select`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from neuroncc.codegen.nki.access import HbmSide, Index, TileSide, transfer
from neuroncc.codegen.nki.instructions import Instr, Operand, Ref
from neuroncc.codegen.nki.plan import RegionPlan, Stage, iteration_shape
from neuroncc.codegen.nki.shapes import AffineMap, map_through_window, operand_grouping, view_window
from neuroncc.codegen.nki.source import Names, SourceWriter, nki_dtype
from neuroncc.errors import CodegenError
from neuroncc.hardware.neuron import NeuronCore
from neuroncc.ir import Op, Value
from neuroncc.ir.dtypes import DType
from neuroncc.passes.tile_nki import MatmulBlocks

FLOAT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Tiling:
    """The ``tile`` pass's decisions for one kernel (docs/passes.md), which every loop nest obeys.

    ``partitions``: rows on the partitions per block, in every loop nest; ``free``: elements of the innermost
    free dim per tile in the loop nests over the kernel's ``domain`` (0: not split); ``sbuf_budget``: SBUF
    bytes per partition one iteration's tiles may take; ``matmul``: the tiles and blocks of the kernel's own
    matmul (None: a matmul the pass did not see, e.g. one a convolution becomes, is blocked by the pass's
    rule here)."""

    domain: tuple[int, ...]
    partition_dim: int | None
    partitions: int
    free: int
    sbuf_budget: int
    matmul: MatmulBlocks | None = None

    @staticmethod
    def of(kernel: Op) -> Tiling:
        """The decisions recorded on a tiled ``kernel`` op."""
        a = kernel.attrs
        partitions, free = a["tile"] or (0, 0)
        matmul = MatmulBlocks(*a["matmul_tile"], *a["matmul_blocks"], max(a["matmul_k_group"], 1)) \
            if a["matmul_blocks"] else None
        return Tiling(tuple(a["domain"]), a["partition_dim"], partitions, free, a["sbuf_budget"], matmul)


@dataclass
class KernelContext:
    """What every stage of one emitted kernel shares: names, the HBM tensor of each value, the target and the
    tile pass's decisions."""

    name: str
    plan: RegionPlan
    names: Names
    core: NeuronCore
    tiling: Tiling
    hbm: dict[Value, str] = field(default_factory=dict)
    fills: dict[Value, float | int] = field(default_factory=dict)  # outputs allocated pre-filled (padding)

    def fail(self, message: str) -> CodegenError:
        return CodegenError(f"nki: kernel '{self.name}': {message}")

    def hbm_name(self, root: Value) -> str:
        if root not in self.hbm:
            raise self.fail(f"value {root!r} is read from HBM but has no HBM tensor")
        return self.hbm[root]


@dataclass
class StageLayout:
    """How a stage's domain maps onto loops and tile axes (see the module docstring).

    The layout's ``domain`` may merge runs of the stage's domain dims (``groups``) that every value steps
    through contiguously: a ``[2, 8, 16]`` stage is laid out as ``[16, 16]``. :meth:`lift` turns a map over
    the stage's domain into one over the layout's.
    """

    domain: tuple[int, ...]
    partition: int | None
    tile_dims: tuple[int, ...]
    bounds: dict[int, int]  # tile extent of the partition dim and of each tile dim
    indexes: tuple[Index, ...]  # per domain dim, in terms of the loop variables
    varying: frozenset[int]  # domain dims whose index changes between iterations
    limits: dict[int, str]  # dims whose last block is partial -> the per-iteration size variable
    groups: tuple[tuple[int, ...], ...] = ()  # stage domain dims of each layout dim (empty: the same dims)
    stage_domain: tuple[int, ...] = ()
    partition_reduce: bool = False  # sums over the partition dim accumulate on TensorE across row blocks

    def lift(self, amap: AffineMap) -> AffineMap:
        """A map over the stage's domain as a map over this layout's (merged) domain."""
        if not self.groups:
            return amap
        coeffs = []
        for group in self.groups:
            steps = [amap.coeffs[d] for d in group if self.stage_domain[d] > 1]
            coeffs.append(steps[-1] if steps else 0)
        return AffineMap(amap.offset, tuple(coeffs)).normalized(self.domain)

    def layout_dim(self, dim: int) -> int:
        """The layout dim holding stage domain dim ``dim``."""
        if not self.groups:
            return dim
        return next(i for i, group in enumerate(self.groups) if dim in group)

    def tile_shape(self, amap: AffineMap) -> tuple[int, ...]:
        rows = self.bounds[self.partition] if self.partition is not None and amap.coeffs[self.partition] else 1
        free = [self.bounds[d] if amap.coeffs[d] else 1 for d in self.tile_dims] or [1]
        return (rows, *free)

    def axes(self) -> tuple[int | None, ...]:
        return (self.partition, *self.tile_dims) if self.tile_dims else (self.partition, None)

    def tile_side(self, name: str, amap: AffineMap) -> TileSide:
        axes = self.axes()
        varies = tuple(d is not None and amap.coeffs[d] != 0 for d in axes)
        return TileSide(name, axes, varies, tuple(self.limits.get(d) if d is not None else None for d in axes))

    def loop_free(self, amap: AffineMap) -> bool:
        return not any(amap.coeffs[d] for d in self.varying)

    def axis_of(self, dim: int) -> int:
        return 1 + self.tile_dims.index(dim)


class Body:
    """The instruction records of one iteration of a stage (see the module docstring)."""

    def __init__(self, ctx: KernelContext, stage: Stage, layout: StageLayout):
        self.ctx, self.stage, self.layout = ctx, stage, layout
        self.instrs: list[Instr] = []
        self.values: dict[Value, Operand] = {}
        self.loads: dict[tuple[Value, AffineMap], Ref] = {}
        self.cache: dict[tuple, Ref] = {}  # common subexpressions (row sums shared by mean and var)

    # ---- tiles ---------------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        return self.ctx.names.fresh(base)

    def new(self, base: str, shape: tuple[int, ...], dtype: str, buffer: str = "sbuf") -> Ref:
        return Ref(self.fresh(base), tuple(shape), dtype, buffer)

    def result(self, op: Op, dtype: str | None = None) -> Ref:
        value = op.results[0]
        shape = self.layout.tile_shape(self.layout.lift(self.stage.placements[value]))
        return self.new(value.hint or op.name, shape, dtype or nki_dtype(value.type.dtype))

    def add(self, kind: str, dst: Ref | None, **args: object) -> Ref | None:
        self.instrs.append(Instr(kind, dst, {k: v for k, v in args.items() if v is not None}))
        return dst

    # ---- operands ------------------------------------------------------------------------------------

    def operand(self, op: Op, position: int) -> Operand:
        """Operand ``position`` of ``op`` as a tile of this iteration (or a number)."""
        value = op.operands[position]
        found = view_window(value, self.ctx.plan.producers)
        if found is None:
            raise self.ctx.fail(f"op '{op.name}' reads a view that needs a copy")
        root, window = found
        home = self.ctx.plan.homes[root]
        if home.kind == "immediate":
            return typed_number(home.number, value.type.dtype)
        if root in self.values:
            return self.values[root]
        grouping = operand_grouping(self.stage.groupings[op], iteration_shape(op), value.type.shape)
        return self.load(root, self.layout.lift(map_through_window(grouping, self.stage.domain, window)))

    def load(self, root: Value, amap: AffineMap) -> Ref:
        key = (root, amap)
        if key in self.loads:
            return self.loads[key]
        ref = self.new(f"{root.hint or 'in'}_tile", self.layout.tile_shape(amap), nki_dtype(root.type.dtype))
        side = HbmSide(self.ctx.hbm_name(root), root.type.shape, amap, self.layout.indexes)
        tile = self.layout.tile_side(ref.tile, amap)
        indexes = self.layout.indexes

        def render(writer: SourceWriter, names: Names) -> None:
            transfer(writer, names, tile, side, indexes)

        self.instrs.append(Instr("dma", ref, {"hbm_side": side}, render=render, stores=False))
        self.instrs[-1].args["loop_free"] = self.layout.loop_free(amap)
        self.loads[key] = ref
        return ref

    def store(self, value: Value, source: Ref) -> None:
        amap = self.layout.lift(self.stage.placements[value])
        side = HbmSide(self.ctx.hbm_name(value), value.type.shape, amap, self.layout.indexes)
        tile = self.layout.tile_side(source.tile, amap)
        indexes = self.layout.indexes
        if source.view:
            raise self.ctx.fail(f"cannot store a view of tile {source.tile}")

        def render(writer: SourceWriter, names: Names) -> None:
            transfer(writer, names, side, tile, indexes)

        self.instrs.append(Instr("dma", None, {"src": source, "loop_free": self.layout.loop_free(amap),
                                               "hbm_side": side},
                                 fresh=False, render=render, stores=True))

    def broadcast(self, value: Operand, shape: tuple[int, ...], dtype: str | None = None) -> Operand:
        """``value`` repeated to ``shape`` (a copy on VectorE); numbers and tiles of that shape unchanged."""
        if not isinstance(value, Ref) or value.shape == tuple(shape):
            return value
        if len(value.shape) != len(shape) or any(a not in (1, b) for a, b in zip(value.shape, shape)):
            raise self.ctx.fail(f"cannot broadcast tile {value.tile} of shape {value.shape} to {shape}")
        key = ("broadcast", value.expr, tuple(shape))
        if key not in self.cache:
            self.cache[key] = self.add("broadcast", self.new(f"{value.tile}_b", shape, dtype or value.dtype),
                                       src=value)
        return self.cache[key]

    def column(self, value: Operand, partitions: int) -> Operand:
        """A per-partition scalar operand: a number, or a ``(partitions, 1)`` tile."""
        if not isinstance(value, Ref):
            return value
        if value.partitions != partitions:
            return self.broadcast(value, (partitions,) + value.shape[1:])
        return value

    # ---- instruction helpers -------------------------------------------------------------------------

    def binary(self, alu: str, a: Operand, b: Operand, dst: Ref) -> Ref:
        """``dst = a <alu> b`` with numpy broadcasting: tensor_scalar for a number or a per-partition
        column, tensor_tensor otherwise (broadcasting the smaller operand first)."""
        shape = dst.shape
        if not isinstance(a, Ref) and not isinstance(b, Ref):
            raise self.ctx.fail(f"{alu} of two numbers should have been folded")
        if not isinstance(b, Ref):
            return self.add("tensor_scalar", dst, data=self.broadcast(a, shape), op0=alu, operand0=b)
        if not isinstance(a, Ref):
            return self.add("tensor_scalar", dst, data=self.broadcast(b, shape), op0=alu, operand0=a, reverse0=True)
        if a.shape == shape and b.shape == shape:
            return self.add("tensor_tensor", dst, data1=a, data2=b, op=alu)
        if a.shape == shape and b.is_column:
            return self.add("tensor_scalar", dst, data=a, op0=alu, operand0=self.column(b, shape[0]))
        if b.shape == shape and a.is_column:
            return self.add("tensor_scalar", dst, data=b, op0=alu, operand0=self.column(a, shape[0]), reverse0=True)
        return self.add("tensor_tensor", dst, data1=self.broadcast(a, shape), data2=self.broadcast(b, shape), op=alu)

    def activation(self, function: str, a: Operand, dst: Ref, scale: float | None = None,
                   bias: Operand | None = None) -> Ref:
        data = self.materialize(a, dst.shape, dst.dtype)
        return self.add("activation", dst, op=function, data=data, scale=scale,
                        bias=self.column(bias, dst.partitions) if bias is not None else None)

    def materialize(self, value: Operand, shape: tuple[int, ...], dtype: str) -> Ref:
        """``value`` as a tile of ``shape`` (numbers are written with a memset)."""
        if isinstance(value, Ref):
            return self.broadcast(value, shape)
        tile = self.new("const", shape, dtype)
        self.add("memset", tile, value=value)
        return tile

    def copy(self, a: Operand, dst: Ref) -> Ref:
        if not isinstance(a, Ref):
            return self.add("memset", dst, value=a)
        return self.add("tensor_copy", dst, src=self.broadcast(a, dst.shape))

    def select(self, condition: Operand, a: Operand, b: Operand, dst: Ref) -> Ref:
        """``where(condition, a, b)``: write ``b``, then copy ``a`` over it where the condition holds."""
        if not isinstance(condition, Ref):
            return self.copy(a if condition else b, dst)
        self.copy(b, dst)
        predicate = self.broadcast(condition, dst.shape)
        source = a if not isinstance(a, Ref) else self.broadcast(a, dst.shape)
        self.instrs.append(Instr("predicated", dst, {"src": source, "predicate": predicate}, fresh=False))
        return dst

    def reduce(self, alu: str, data: Operand, dims: set[int], dst: Ref, negate: bool = False) -> Ref:
        """``dst = reduce(alu)`` of ``data`` over the stage domain dims ``dims`` (tile dims of this layout)."""
        layout_dims = {self.layout.layout_dim(d) for d in dims}
        if self.layout.partition_reduce and self.layout.partition in layout_dims:
            return self._partition_sum(data, dst)
        axes = sorted(self.layout.axis_of(d) for d in layout_dims if self.layout.domain[d] > 1)
        if not axes:
            return self.copy(data, dst)
        bounds = (None, *self.layout.tile_dims)
        required = tuple(self.layout.bounds[bounds[a]] if a in axes else n for a, n in enumerate(dst.shape))
        source = self.materialize(data, required, data.dtype if isinstance(data, Ref) else dst.dtype)
        key = ("reduce", alu, source.expr, tuple(axes), negate, dst.dtype)
        if key in self.cache:
            return self.cache[key]
        rank = len(source.shape)
        if tuple(axes) == tuple(range(rank - len(axes), rank)):
            self.add("tensor_reduce", dst, op=alu, data=source, axis=tuple(axes), negate=negate or None,
                     keepdims=True)
        else:
            self._reduce_inner(alu, source, axes, dst, negate)
        self.cache[key] = dst
        return dst

    def _partition_sum(self, data: Operand, dst: Ref) -> Ref:
        """A sum over the partition dim: TensorE multiplies each row block by a ones column, accumulating the
        blocks in PSUM (allocated before the row loop, copied out after it)."""
        rows = self.layout.bounds[self.layout.partition]
        shape = (rows, *dst.shape[1:])
        source = self.materialize(data, shape, dst.dtype if not isinstance(data, Ref) else data.dtype)
        operand_dtype = "float32" if source.dtype == "float32" else source.dtype
        key = ("ones", operand_dtype)
        if key not in self.cache:
            self.cache[key] = self.add("memset", self.new("ones", (rows, 1), operand_dtype), value=1.0)
        ones = self.cache[key]
        limit = self.layout.limits.get(self.layout.partition)
        view = f"[0:{limit}]" if limit else ""
        acc = self.new(f"{dst.tile}_acc", (1, *dst.shape[1:]), "float32", buffer="psum")
        self.instrs.append(Instr("alloc", acc, {}, render=lambda writer, names: None, phase="pre"))
        self.instrs.append(Instr("matmul", acc, {"stationary": Ref(ones.tile, ones.shape, ones.dtype, view=view),
                                                 "moving": Ref(source.tile, source.shape, source.dtype, view=view)},
                                 fresh=False))
        self.instrs.append(Instr("tensor_copy", dst, {"src": acc}, phase="post"))
        return dst

    def _reduce_inner(self, alu: str, source: Ref, axes: list[int], dst: Ref, negate: bool) -> None:
        """Reduce non-trailing axes: one tensor_reduce per index of the kept axes behind the first reduced one
        (indexing them away makes the reduced axes trailing)."""
        rank = len(source.shape)
        kept = [a for a in range(axes[0] + 1, rank) if a not in axes]
        loop_vars = {a: self.fresh(f"k{a}") for a in kept if source.shape[a] > 1}
        keys = [loop_vars.get(a, "0") if a in kept else ":" for a in range(rank)]
        view = f"[{', '.join(keys)}]"
        remaining = [a for a in range(rank) if a not in kept]
        axis_text = tuple(remaining.index(a) for a in axes)
        flag = ", negate=True" if negate else ""

        def render(writer: SourceWriter, names: Names) -> None:
            for axis, var in loop_vars.items():
                writer.open(f"for {var} in nl.affine_range({source.shape[axis]}):")
            writer.line(f"nisa.tensor_reduce(dst={dst.tile}{view}, op={alu}, data={source.tile}{view}, "
                        f"axis={axis_text}{flag}, keepdims=True)")
            for _ in loop_vars:
                writer.close()

        self.instrs.append(Instr("reduce_loop", dst, {"data": source}, render=render))


def typed_number(number: float | int | bool | None, dtype: DType) -> float | int:
    if number is None:
        raise CodegenError("nki: an immediate without a value")
    if dtype.is_float:
        return float(number)
    return int(number)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def prod(values: tuple[int, ...] | list[int]) -> int:
    return math.prod(values)


__all__ = ["Body", "FLOAT_DTYPES", "KernelContext", "StageLayout", "Tiling", "ceil_div", "prod", "typed_number"]
