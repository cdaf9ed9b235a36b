"""Planning one kernel region for NKI: which ops run together in which loop nest.

A region becomes a sequence of *steps*: device segments (one ``@nki.jit`` kernel each) and host steps (ops
with data-dependent addressing, see :data:`HOST_OPS`). A device segment is a list of *stages*, each one loop
nest over its own iteration domain:

* ``tile`` stages hold elementwise ops and reductions whose iteration shapes attach to the domain
  (:func:`neuroncc.codegen.nki.shapes.find_grouping`); every value lives in SBUF tiles of the domain's blocks;
* ``matmul`` stages hold a matmul (TensorE) and the elementwise epilogue applied to its output tiles;
* ``transfer`` stages are data movement between HBM tensors (cat, pad, flip, scatter into slices, repeat).

Ops join the latest stage that can hold them (in program order); otherwise they open a new one. A value read
by another stage, a later step or the caller is written to HBM (a scratch tensor inside the kernel, or a
kernel output); every read from HBM goes through an :class:`~neuroncc.codegen.nki.shapes.AffineMap`, so
views (reshape, permute, slice, expand...) cost nothing but a different DMA pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neuroncc.codegen.nki.host_ops import HOST_OPS, INT64_HOST_OPS, INT_DIVISION_HOST_OPS
from neuroncc.codegen.nki.normalize import normalize_region
from neuroncc.codegen.nki.philox_keys import key_schedule, on_device
from neuroncc.codegen.nki.shapes import (
    AffineMap, DimGroup, Grouping, find_grouping, map_through_window, operand_grouping, row_major_map, view_window,
)
from neuroncc.errors import CodegenError
from neuroncc.ir import REGISTRY, Category, Function, Op, Trait, Value
from neuroncc.ir.dtypes import DType

INT32_RANGE = (-(2 ** 31), 2 ** 31 - 1)


def is_transfer(op: Op) -> bool:
    """Data movement that is neither a strided view nor a copy (cat, pad, flip, scatter into slices, repeat,
    as_strided) runs as DMA transfers between HBM tensors (normalization rewrote splits into slices). Views that
    reinterpret the element type never reach a kernel (they stay at the top level)."""
    return op.opdef.category is Category.MOVEMENT and not op.has(Trait.STRIDED_VIEW) \
        and not op.has(Trait.POINTWISE) and not op.has(Trait.REINTERPRET)


@dataclass(frozen=True)
class Home:
    """Where a (non-view) value lives: a region param, a host-supplied constant, an immediate number, a
    stage's tiles or a host step's output."""

    kind: str  # "param" | "constant" | "immediate" | "stage" | "host"
    index: int = -1
    number: float | int | bool | None = None


@dataclass
class Stage:
    """One loop nest (see the module docstring)."""

    index: int
    kind: str  # "tile" | "matmul" | "transfer"
    domain: tuple[int, ...]
    ops: list[Op] = field(default_factory=list)
    groupings: dict[Op, Grouping] = field(default_factory=dict)
    placements: dict[Value, AffineMap] = field(default_factory=dict)  # values computed here, on chip
    reduced: set[int] = field(default_factory=set)

    def candidates(self, reduced: set[int]) -> list[int]:
        return [d for d, n in enumerate(self.domain) if n > 1 and d not in reduced]


@dataclass
class DeviceSegment:
    """One NKI kernel: its stages, the HBM tensors it reads (arguments) and writes (results)."""

    stages: list[Stage] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    scratch: list[Value] = field(default_factory=list)


@dataclass
class HostStep:
    """A host op: its operands are roots in HBM read through the view chains ``views[i]``; ``prologue`` ops
    run before it on the host (a random op's key schedule: its last op is ``op``)."""

    op: Op
    roots: list[Value]
    views: list[list[Op]]
    prologue: list[Op] = field(default_factory=list)


@dataclass
class RegionPlan:
    region: Function
    steps: list[DeviceSegment | HostStep]
    homes: dict[Value, Home]
    producers: dict[Value, Op]


def _reduces(op: Op) -> bool:
    return op.opdef.category is Category.REDUCTION


def iteration_shape(op: Op) -> tuple[int, ...]:
    return op.operands[0].type.shape if _reduces(op) else op.results[0].type.shape


class _NestPlanner:
    def __init__(self, region: Function, kernel_domain: tuple[int, ...], name: str):
        self.region = region
        self.name = name
        self.kernel_domain = kernel_domain
        self.producers = region.producers()
        self.homes: dict[Value, Home] = {p: Home("param", i) for i, p in enumerate(region.params)}
        self.stages: list[Stage] = []
        self.steps: list[DeviceSegment | HostStep] = []

    def on_host(self, op: Op) -> bool:
        """Whether ``op`` runs on the host: data-dependent addressing (:data:`HOST_OPS`), integer matmuls
        (TensorE multiplies floats), int64 arithmetic (:data:`INT64_HOST_OPS`) or an int64 result of float
        operands (a cast), int64 constants beyond int32, or an integer division (:data:`INT_DIVISION_HOST_OPS`:
        a zero divisor raises)."""
        if op.name in HOST_OPS or (op.name in INT_DIVISION_HOST_OPS and op.operands[1].type.dtype.is_int):
            return True
        if REGISTRY.get(op.name).category is Category.RANDOM:
            return not on_device(op)
        if REGISTRY.get(op.name).category is Category.MATMUL:
            return not op.results[0].type.dtype.is_float
        if any(r.type.dtype is DType.i64 for r in op.results) and \
                (op.name in INT64_HOST_OPS or any(v.type.dtype.is_float for v in op.operands)):
            return True
        for value in op.operands:
            found = view_window(value, self.producers)
            home = self.homes.get(found[0]) if found is not None else None
            if home is not None and home.kind == "immediate" and value.type.dtype is DType.i64 and \
                    not INT32_RANGE[0] <= int(home.number) <= INT32_RANGE[1]:
                return True
        return False

    def fail(self, op: Op, why: str) -> CodegenError:
        return CodegenError(f"nki: kernel '{self.name}': op '{op.name}' {why}")

    # ---- where values live ---------------------------------------------------------------------------

    def root(self, value: Value, op: Op) -> tuple[Value, AffineMap | None, Home]:
        found = view_window(value, self.producers)
        if found is None:
            raise self.fail(op, "reads a view that needs a copy (normalization should have inserted one)")
        root, window = found
        return root, window, self.homes[root]

    @property
    def segment(self) -> DeviceSegment:
        if not self.steps or isinstance(self.steps[-1], HostStep):
            self.steps.append(DeviceSegment())
        last = self.steps[-1]
        assert isinstance(last, DeviceSegment)
        return last

    def new_stage(self, kind: str, domain: tuple[int, ...]) -> Stage:
        stage = Stage(len(self.stages), kind, domain)
        self.stages.append(stage)
        self.segment.stages.append(stage)
        return stage

    # ---- the walk ------------------------------------------------------------------------------------

    def run(self) -> RegionPlan:
        for op in self.region.ops:
            category = REGISTRY.get(op.name).category
            if op.has(Trait.STRIDED_VIEW):
                continue
            if category is Category.CONSTANT:
                number = op.opdef.splat_value(op.attrs)  # the one number every element holds, if any
                self.homes[op.result] = Home("immediate", number=number) if number is not None else Home("constant")
            elif self.on_host(op):
                self.steps.append(self.host_step(op))
            elif is_transfer(op):
                stage = self.new_stage("transfer", op.result.type.shape)
                stage.ops.append(op)
                self.homes[op.result] = Home("stage", stage.index)
            elif category is Category.MATMUL:
                self.add_matmul(op)
            elif category is Category.RANDOM:
                self.add_compute(self.add_key_schedule(op))
            elif op.has(Trait.POINTWISE) or category is Category.REDUCTION:
                self.add_compute(op)
            else:
                raise self.fail(op, "is not supported by the NKI emitter")
        self.assign_tensors()
        return RegionPlan(self.region, self.steps, self.homes, self.producers)

    def add_key_schedule(self, op: Op) -> Op:
        """A host step computing random op ``op``'s key schedule from its seed and offset (NKI holds no 64-bit
        integers; :mod:`neuroncc.codegen.nki.philox`), and the op as the device computes it: reading the key
        schedule (its only operand) instead of the seed and offset."""
        ops, words = key_schedule(*op.operands)
        step = self.host_step(ops[-1], operands=op.operands)
        step.prologue = ops[:-1]
        self.steps.append(step)
        return Op(op.name, (words,), op.results, op.attrs)

    def host_step(self, op: Op, operands: tuple[Value, ...] | None = None) -> HostStep:
        """The host step running ``op``; ``operands``: the region values it reads (default: ``op``'s)."""
        roots, views = [], []
        for value in op.operands if operands is None else operands:
            chain = []
            while (producer := self.producers.get(value)) is not None and producer.has(Trait.STRIDED_VIEW):
                chain.append(producer)
                value = producer.operands[0]
            roots.append(value)
            views.append(list(reversed(chain)))
        step = HostStep(op, roots, views)
        for result in op.results:
            self.homes[result] = Home("host", len(self.steps))
        return step

    def add_matmul(self, op: Op) -> None:
        if not op.has(Trait.MATRIX_PRODUCT):
            raise self.fail(op, "(a convolution) is not emitted for NKI; compile it for the cpu target")
        if not op.result.type.dtype.is_float:
            raise self.fail(op, f"on {op.result.type.dtype.value} operands: TensorE multiplies floats only")
        domain = op.result.type.shape
        stage = self.new_stage("matmul", domain)
        stage.ops.append(op)
        grouping = tuple(DimGroup((d,), True) for d in range(len(domain)))
        stage.groupings[op] = grouping
        stage.placements[op.result] = row_major_map(grouping, domain, domain)
        self.homes[op.result] = Home("stage", stage.index)

    def add_compute(self, op: Op) -> None:
        for stage in reversed(self.segment.stages):
            joined = self.try_join(stage, op)
            if joined is not None:
                self.join(stage, op, *joined)
                return
        shape = iteration_shape(op)
        domain = self.kernel_domain if find_grouping(shape, self.kernel_domain) is not None else shape
        stage = self.new_stage("tile", domain)
        joined = self.try_join(stage, op)
        if joined is None:
            raise self.fail(op, f"cannot be placed in a loop nest over {list(domain)}")
        self.join(stage, op, *joined)

    def try_join(self, stage: Stage, op: Op) -> tuple[Grouping, set[int]] | None:
        if stage.kind == "transfer":
            return None
        if stage.kind == "matmul" and not op.has(Trait.POINTWISE):
            return None
        shape = iteration_shape(op)
        grouping = find_grouping(shape, stage.domain)
        if grouping is None:
            return None
        for value in op.operands:
            root, window, home = self.root(value, op)
            if home.kind != "stage":
                continue
            if home.index > stage.index:
                return None  # produced by a later loop nest
            if home.index == stage.index:
                wanted = map_through_window(operand_grouping(grouping, shape, value.type.shape), stage.domain, window)
                if wanted != stage.placements[root]:
                    return None  # read in another arrangement than the tile holds it
        reduced = set(stage.reduced)
        if _reduces(op):
            for d in op.attrs["dims"]:
                if grouping[d].full:
                    reduced.update(grouping[d].dims)
            busy = sum(1 for n in stage.domain if n > 1)
            if stage.ops and stage.candidates(stage.reduced) and not stage.candidates(reduced) and busy >= 2:
                return None  # keep a dim for the partitions
        return grouping, reduced

    def join(self, stage: Stage, op: Op, grouping: Grouping, reduced: set[int]) -> None:
        stage.ops.append(op)
        stage.groupings[op] = grouping
        stage.reduced = reduced
        result = op.result
        if _reduces(op):
            dims = set(op.attrs["dims"])
            keep = op.attrs["keepdim"]
            groups = [DimGroup(g.dims, False) if j in dims else g for j, g in enumerate(grouping) if keep or j not in dims]
            stage.placements[result] = row_major_map(tuple(groups), stage.domain, result.type.shape)
        else:
            stage.placements[result] = row_major_map(grouping, stage.domain, result.type.shape)
        self.homes[result] = Home("stage", stage.index)

    # ---- HBM tensors of each segment ----------------------------------------------------------------

    def assign_tensors(self) -> None:
        """Decide which stage values go to HBM, and each segment's arguments and results."""
        stage_segment: dict[int, int] = {}
        for number, step in enumerate(self.steps):
            if isinstance(step, DeviceSegment):
                for stage in step.stages:
                    stage_segment[stage.index] = number
        readers: dict[Value, set[tuple[int, int]]] = {}  # root -> {(step, stage or -1)}

        def read(root: Value, step: int, stage: int) -> None:
            if self.homes[root].kind != "immediate":
                readers.setdefault(root, set()).add((step, stage))

        for number, step in enumerate(self.steps):
            if isinstance(step, HostStep):
                for root in step.roots:
                    read(root, number, -1)
                continue
            for stage in step.stages:
                for op in stage.ops:
                    for value in op.operands:
                        root, _, _ = self.root(value, op)
                        if root not in stage.placements or stage.kind == "transfer" or op.has(Trait.MATRIX_PRODUCT):
                            read(root, number, stage.index)
        outputs = set(self.region.outputs)
        for number, step in enumerate(self.steps):
            if isinstance(step, HostStep):
                continue
            for root, uses in readers.items():
                home = self.homes[root]
                origin = stage_segment.get(home.index) if home.kind == "stage" else None
                if any(s == number for s, _ in uses) and origin != number and root not in step.inputs:
                    step.inputs.append(root)
            for stage in step.stages:
                in_hbm = [op.result for op in stage.ops] if stage.kind == "transfer" else []
                for value in list(stage.placements) + in_hbm:
                    later = any(s != number for s, _ in readers.get(value, ()))
                    if value in outputs or later:
                        if value not in step.outputs:
                            step.outputs.append(value)
                    elif (value in in_hbm or any(t != stage.index for _, t in readers.get(value, ()))) \
                            and value not in step.scratch:
                        step.scratch.append(value)


def stage_maps(plan: RegionPlan, stage: Stage) -> list[AffineMap]:
    """Every map a tile stage's loop body uses: each operand read and each result, over its domain."""
    maps = []
    for op in stage.ops:
        grouping = stage.groupings[op]
        shape = iteration_shape(op)
        for value in op.operands if REGISTRY.get(op.name).category is not Category.RANDOM else ():
            found = view_window(value, plan.producers)
            if found is None or plan.homes[found[0]].kind == "immediate":
                continue
            maps.append(map_through_window(operand_grouping(grouping, shape, value.type.shape), stage.domain,
                                           found[1]))
        maps.append(stage.placements[op.result])
    return maps


def plan_region(region: Function, name: str, kernel_domain: tuple[int, ...]) -> RegionPlan:
    """Plan ``region`` (the body of kernel ``name``, whose iteration space is ``kernel_domain``) for NKI; see
    the module docstring."""
    return _NestPlanner(normalize_region(region), tuple(kernel_domain), name).run()
