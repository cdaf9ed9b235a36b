"""``plan-memory``: place the top-level function's intermediate buffers in one arena, reusing dead space.

:func:`plan` is the analysis the launcher calls; the pass only records its summary in the function metadata
(``peak_bytes``, ``arena_bytes``, ``naive_bytes``) and prints nothing.

* Values are numbered in definition order, parameters first (:func:`value_indices`), so a plan is plain
  JSON-serializable data that an artifact can store next to the IR.
* Buffers: results of top-level ops that are not pure views. A view reads its root's buffer (``aliases``)
  and keeps that buffer alive. Parameters, and buffers a function output reads (directly or through views),
  live outside the arena: the caller owns them. So do the values a target says it keeps elsewhere
  (:func:`plan`'s ``elsewhere``: the cpu launch's ATen results adopted per call, and constants): a slot
  reserved for them would stay empty and push the values planned around it up the arena.
* A buffer lives from the op defining it to its last reader (op indices, inclusive).
* In place: a pointwise kernel's result may take the buffer of an operand that dies at that kernel when both
  have the same size: every op writes element i (row-major linear index) from elements i of what it reads
  (broadcast operands are parameters or constants; reshapes keep indices; reductions only terminal), and
  the operand is read only elementwise by ops that come no later than the first op writing an output of its
  size. So each element is read before it is overwritten whether codegen runs the region as one loop or
  as one loop per op in region order. Matmul kernels never run in place (the matmul may write its output
  before the epilogue reads the operand). That is what the region says; whether the code a target generates
  for the kernel keeps that order is the target's to say: :func:`plan`'s ``may_write_over`` asks it of each
  pair the region allows (the cpu launch planner answers from the kernel's loop plan, ``codegen/llvm/
  in_place.py``), and a refused result gets a buffer of its own. The launch then places every value where
  the plan does: the decision is made here, once.
* Placement: greedy by size, largest first; each buffer goes in the smallest gap (best fit) between the
  buffers already placed whose lifetimes overlap its own, or after them. Offsets and sizes are multiples of
  a cache line (64 bytes: generated code reads and writes buffers with aligned vector accesses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir import REGISTRY, Attrs, Category, Function, Op, Trait, Value
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.ir.strides import aliases_operand

ALIGNMENT = CACHE_LINE_BYTES


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def value_indices(fn: Function) -> dict[Value, int]:
    """Every top-level value's number: parameters first, then op results in definition order."""
    values = list(fn.params) + [r for op in fn.ops for r in op.results]
    return {v: i for i, v in enumerate(values)}


@dataclass(frozen=True)
class MemoryPlan:
    """Where each intermediate value of a function lives in one arena (values named by their index)."""

    offsets: Mapping[int, int]  # value -> byte offset of its buffer (views: of the buffer they read)
    sizes: Mapping[int, int]  # buffer-owning value -> bytes reserved (64-byte aligned)
    lifetimes: Mapping[int, tuple[int, int]]  # buffer-owning value -> (defining op, last reading op)
    aliases: Mapping[int, int]  # view value -> the value whose buffer it reads
    in_place: tuple[tuple[int, int], ...]  # (result, operand): the result overwrites the dying operand
    arena_bytes: int  # size of the arena
    peak_bytes: int  # the most bytes of buffers live at one op
    naive_bytes: int  # bytes if every intermediate had a buffer of its own
    external: tuple[int, ...] = field(default=())  # values outside the arena: parameters, outputs, their views

    def to_json(self) -> dict[str, Any]:
        return {
            "offsets": {str(k): v for k, v in sorted(self.offsets.items())},
            "sizes": {str(k): v for k, v in sorted(self.sizes.items())},
            "lifetimes": {str(k): list(v) for k, v in sorted(self.lifetimes.items())},
            "aliases": {str(k): v for k, v in sorted(self.aliases.items())},
            "in_place": [list(pair) for pair in self.in_place],
            "arena_bytes": self.arena_bytes, "peak_bytes": self.peak_bytes, "naive_bytes": self.naive_bytes,
            "external": list(self.external),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> MemoryPlan:
        return MemoryPlan(
            offsets={int(k): int(v) for k, v in data["offsets"].items()},
            sizes={int(k): int(v) for k, v in data["sizes"].items()},
            lifetimes={int(k): (int(v[0]), int(v[1])) for k, v in data["lifetimes"].items()},
            aliases={int(k): int(v) for k, v in data["aliases"].items()},
            in_place=tuple((int(a), int(b)) for a, b in data["in_place"]),
            arena_bytes=int(data["arena_bytes"]), peak_bytes=int(data["peak_bytes"]),
            naive_bytes=int(data["naive_bytes"]), external=tuple(int(v) for v in data["external"]),
        )


@dataclass
class _Slot:
    """One arena buffer, shared by a chain of in-place values."""

    size: int
    start: int
    end: int
    owners: list[Value]
    offset: int = 0

    def overlaps(self, other: _Slot) -> bool:
        return self.start <= other.end and other.start <= self.end


#: ``may_write_over(op_position, result_number, operand_number)``: may that kernel's result be computed into
#: the buffer of that operand (which dies at the op)? The target's answer (see the module docstring).
WriteOver = Callable[[int, int, int], bool]


def _region_only(op_position: int, result_number: int, operand_number: int) -> bool:
    return True


def plan(fn: Function, may_write_over: WriteOver = _region_only, elsewhere: frozenset[Value] = frozenset()) \
        -> MemoryPlan:
    """Plan the arena for ``fn``'s top-level intermediate buffers (see the module docstring); a kernel result
    takes a dying operand's buffer where the region allows it and ``may_write_over`` agrees. ``elsewhere``:
    op results the target stores outside the arena (no slot for them, nor for a result over them)."""
    index = value_indices(fn)
    root_of = _view_roots(fn)
    external = _external_roots(fn, root_of) | elsewhere
    last_read: dict[Value, int] = {}
    for position, op in enumerate(fn.ops):
        for v in op.operands:
            last_read[root_of.get(v, v)] = position
    slot_of: dict[Value, _Slot] = {}
    in_place: list[tuple[int, int]] = []
    for position, op in enumerate(fn.ops):
        if aliases_operand(op):
            continue
        reusable = _in_place_candidates(op, position, root_of, last_read, slot_of, external)
        for number, result in enumerate(op.results):
            if result in external:
                continue
            end = max(last_read.get(result, position), position)
            donor = next((d for d in reusable if _same_footprint(d, result)
                          and may_write_over(position, number, op.operands.index(d))), None)
            if donor is not None:
                reusable.remove(donor)
                slot = slot_of[donor]
                slot.end, slot.owners = max(slot.end, end), slot.owners + [result]
                in_place.append((index[result], index[donor]))
            else:
                slot = _Slot(aligned(result.type.nbytes), position, end, [result])
            slot_of[result] = slot
    slots = list({id(s): s for s in slot_of.values()}.values())
    arena = _place(slots)
    offsets = {index[v]: s.offset for v, s in slot_of.items()}
    offsets.update({index[v]: slot_of[r].offset for v, r in root_of.items() if r in slot_of})
    return MemoryPlan(
        offsets=offsets,
        sizes={index[v]: aligned(v.type.nbytes) for v in slot_of},
        lifetimes={index[v]: (s.start, s.end) for v, s in slot_of.items()},
        aliases={index[v]: index[r] for v, r in root_of.items()},
        in_place=tuple(in_place),
        arena_bytes=arena,
        peak_bytes=_peak(slots, len(fn.ops)),
        naive_bytes=sum(aligned(v.type.nbytes) for v in slot_of),
        external=tuple(sorted(index[v] for v in index if v in external or root_of.get(v) in external)),
    )


def _view_roots(fn: Function) -> dict[Value, Value]:
    """Each top-level view's root: the non-view value whose buffer it reads."""
    roots: dict[Value, Value] = {}
    for op in fn.ops:
        if aliases_operand(op):
            source = op.operands[0]
            roots[op.result] = roots.get(source, source)
    return roots


def _external_roots(fn: Function, root_of: Mapping[Value, Value]) -> set[Value]:
    """Buffers the caller owns: parameters and whatever a function output reads."""
    return set(fn.params) | {root_of.get(v, v) for v in fn.outputs}


def _same_footprint(donor: Value, result: Value) -> bool:
    return donor.type.numel == result.type.numel and donor.type.dtype.itemsize == result.type.dtype.itemsize


def _in_place_candidates(op: Op, position: int, root_of, last_read, slot_of, external) -> list[Value]:
    """Operands of a pointwise kernel whose buffers die at this op and may take one of its results."""
    if op.opdef.category is not Category.KERNEL or not op.results:
        return []
    (region,) = op.regions
    numel = max(r.type.numel for r in op.results)
    if not _is_pointwise_region(region, numel):
        return []
    found = []
    for operand, param in zip(op.operands, region.params):
        owned = operand in slot_of and operand not in root_of and operand not in external
        if owned and operand.type.numel == numel and last_read.get(operand) == position \
                and op.operands.count(operand) == 1 and _read_pointwise(region, param) and operand not in found:
            found.append(operand)
    return found


def _is_pointwise_region(region: Function, numel: int) -> bool:
    """Does every op of the region write element i (by row-major linear index) from elements i of what it
    reads, except broadcast parameters and constants? Reshapes keep linear indices; reductions may only be
    terminal (their results are not read again in the region)."""
    producers, params = region.producers(), set(region.params)
    read = {v for o in region.ops for v in o.operands}

    def broadcast_source(v: Value) -> bool:
        """A parameter or constant, possibly reshaped or expanded: never a value computed from the donor."""
        source = producers.get(v)
        while source is not None and (source.has(Trait.BROADCAST) or source.has(Trait.RESHAPE)):
            v, source = source.operands[0], producers.get(source.operands[0])
        return v in params or (source is not None and REGISTRY.get(source.name).category is Category.CONSTANT)

    for o in region.ops:
        category = REGISTRY.get(o.name).category
        if category is Category.CONSTANT or o.has(Trait.RESHAPE):
            continue
        if o.has(Trait.BROADCAST) and broadcast_source(o.operands[0]):
            continue
        if category is Category.REDUCTION and not any(r in read for r in o.results):
            continue
        if category is not Category.ELEMENTWISE:
            return False
        if o.result.type.numel != numel and not all(broadcast_source(v) for v in o.operands):
            return False
        if any(v.type.numel != numel and not broadcast_source(v) for v in o.operands):
            return False
    return True


def _read_pointwise(region: Function, param: Value) -> bool:
    """Is ``param`` read only elementwise (or through reshapes), and never after the region writes an output
    of its size? Then its buffer may hold that output: every element is read before it is overwritten,
    whether codegen runs the region as one loop or one loop per op (in region order)."""
    index = {o: i for i, o in enumerate(region.ops)}
    producers = region.producers()
    readers, stack = [], [param]
    while stack:
        value = stack.pop()
        for o in region.ops:
            if value in o.operands:
                readers.append(o)
                if o.has(Trait.RESHAPE):
                    stack.append(o.result)
    if not readers or param in region.outputs:
        return False
    if not all(REGISTRY.get(o.name).category is Category.ELEMENTWISE or o.has(Trait.RESHAPE) for o in readers):
        return False
    same_size = [v for v in region.outputs if v.type.numel == param.type.numel]
    if any(v not in producers for v in same_size):
        return False  # an output passed straight through from a parameter: when it is copied is not known
    writes = [index[producers[v]] for v in same_size]
    return bool(writes) and max(index[o] for o in readers) <= min(writes)


def _place(slots: list[_Slot]) -> int:
    """Greedy by size with best fit; returns the arena size."""
    placed: list[_Slot] = []
    for slot in sorted(slots, key=lambda s: (-s.size, s.start)):
        if slot.size == 0:
            continue
        busy = sorted((p for p in placed if p.overlaps(slot)), key=lambda p: p.offset)
        best_offset, best_gap, cursor = None, None, 0
        for other in busy:
            gap = other.offset - cursor
            if gap >= slot.size and (best_gap is None or gap < best_gap):
                best_offset, best_gap = cursor, gap
            cursor = max(cursor, other.offset + other.size)
        slot.offset = best_offset if best_offset is not None else cursor
        placed.append(slot)
    return max((s.offset + s.size for s in placed), default=0)


def _peak(slots: list[_Slot], op_count: int) -> int:
    live = [0] * (op_count + 1)
    for s in slots:
        for position in range(s.start, min(s.end, op_count) + 1):
            live[position] += s.size
    return max(live, default=0)


@dataclass(frozen=True)
class PlanMemory(Pass):
    """Record the memory plan's summary (peak_bytes, arena_bytes, naive_bytes) in the function metadata: the
    region's answer to the in-place question (no target asked), an upper bound on the reuse a launch plan makes."""

    name: ClassVar[str] = "plan-memory"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        result = plan(fn)
        metadata = Attrs(dict(fn.metadata), peak_bytes=result.peak_bytes, arena_bytes=result.arena_bytes,
                         naive_bytes=result.naive_bytes)
        return Function(fn.name, fn.params, fn.ops, fn.outputs, metadata)
