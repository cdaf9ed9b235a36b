"""The CPU launch planner: ``plan_launch(fn)`` makes a compiled graph's launch plan (``launch_plan.py``).

It decides where every top-level value lives (a user input, a fresh output array, a slot in the reused arena, a
constant, or a strided view of one of those), plans each kernel's loop nests and emits its LLVM IR. An output
computed into a donated input's buffer (the function's ``donated`` metadata) lives in that input: ``in_place``
lists those (output, parameter) pairs, which a caller then need not copy. The plan is what an artifact stores
(``plan.json``, no pickle) beside the object code: loading it rebuilds the launcher without recompiling.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from neuroncc.codegen.llvm.views import Layout, view_layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.in_place import writes_in_place
from neuroncc.codegen.llvm.kernel_names import PLACEHOLDER, name_by_content
from neuroncc.codegen.llvm.kernel_plan import ChunkedRows, ExtraKind, ReduceStage, RowLoop
from neuroncc.codegen.llvm.launch_cost import launch_work
from neuroncc.codegen.llvm.launch_plan import (
    ALIGN, BufferKind, BufferSpec, CpuLaunchPlan, CpuSlot, ExternSpec, PhaseSpec, SlotKind, StepKind, StepSpec,
    ValueSpec, function_hash,
)
from neuroncc.codegen.llvm.scalars import storage_itemsize
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.small_matmul import emit_small_matmul, plan_small_matmul
from neuroncc.errors import CodegenError
from neuroncc.hardware.host import target_cpu
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Function, Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import contiguous_strides
from neuroncc.codegen.llvm.extern_layouts import same_layout, supplied_strides
from neuroncc.ir.strides import aliases_operand
from neuroncc.passes.plan_memory import plan as plan_memory
from neuroncc.passes.tile import tile_kernel


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _layout_spec(layout: Layout) -> ValueSpec:
    return ValueSpec(layout.arg, layout.offset, layout.shape, layout.strides, layout.dtype.value)


@dataclass(frozen=True)
class _KernelPlanned:
    """A kernel's loop plan (None: the interpreter runs it, ``error`` says why) for the layouts it was made for."""

    layouts: tuple[Layout, ...]
    tiled: Any
    kplan: Any
    error: CodegenError | None


@dataclass(frozen=True)
class _KernelToEmit:
    """A kernel step whose code the walk has planned (its layouts, slots and buffers decided) and left to emit:
    ``plan.steps[index]`` is ``step`` until then."""

    index: int
    op: Any
    step: StepSpec
    tiled: Any
    kplan: Any


def _reduces_rows(kplan: Any) -> bool:
    """Whether a phase of ``kplan`` reduces along its rows: such a sum vectorizes only reassociated, so its module
    compiles at the optimized tier (``jit.tier_independent``), ~10x a quick module's LLVM time. A guess (the math
    library's fast-math flags are not seen here), used only for the order of emission."""
    rows = [phase.rows if isinstance(phase, ChunkedRows) else phase for phase in kplan.phases]
    return any(isinstance(stage, ReduceStage) for loop in rows if isinstance(loop, RowLoop) for stage in loop.stages)


class _LaunchPlanner:
    """``dry``: lay values out and plan kernels only (no code, no arena placement): the kernels' plans answer
    the memory plan's in-place question (:meth:`may_write_over`), and a second planner reuses them."""

    def __init__(self, fn: Function, cpu: str, features: str, memory_plan: Any,
                 on_kernel: Callable[[str], None] | None = None, dry: bool = False,
                 kernel_plans: dict[int, _KernelPlanned] | None = None):
        self.fn = fn
        self.on_kernel = on_kernel
        self.dry = dry
        self.kernel_plans: dict[int, _KernelPlanned] = {} if kernel_plans is None else kernel_plans
        self.plan = CpuLaunchPlan("" if dry else function_hash(fn), cpu, features)  # (a dry plan is dropped)
        self.ids: dict[Value, int] = {}
        self.memory_offsets: Mapping[Any, int] = getattr(memory_plan, "offsets", None) or {}
        self.memory_sizes: Mapping[Any, int] = getattr(memory_plan, "sizes", None) or {}
        # values the plan does not place (or that do not fit its slot) go after the planned arena
        self.arena_end = int(getattr(memory_plan, "arena_bytes", 0) or 0)
        if self.memory_offsets and not self.arena_end:
            self.arena_end = max(self.memory_offsets.values()) + max(self.memory_sizes.values(), default=0)
        self.scratch_bytes = 0
        self.unclaimed_outputs: dict[Value, int] = {}
        for position, value in enumerate(fn.outputs):
            self.unclaimed_outputs.setdefault(value, position)
        self.ir_texts: list[str] = []  # in the plan's order (run() orders them)
        self.module_symbols: dict[str, str] = {}  # symbol -> its module's text (each module added once)
        #: symbol -> (index of the first step calling it, order added): the modules' order in the plan
        self.module_places: dict[str, tuple[int, int]] = {}
        self.to_emit: list[_KernelToEmit] = []
        #: output position -> the param whose buffer it may take (the function's ``donated`` metadata)
        self.donated: dict[int, int] = dict(fn.metadata.get("donated", ()))
        self.last_read = _last_reads(fn)

    def define(self, value: Value, spec: ValueSpec) -> int:
        self.ids[value] = len(self.plan.values)
        self.plan.values.append(spec)
        return self.ids[value]

    def add_buffer(self, kind: BufferKind, index: int, extent: int, dtype: DType, supplied: bool = False) -> int:
        self.plan.buffers.append(BufferSpec(kind, index, extent, dtype.value, supplied))
        return len(self.plan.buffers) - 1

    def own_buffer(self, value: Value, avoid: tuple[Value, ...] = (), shares: tuple[Value, ...] = ()) -> int:
        """A buffer for an op result: the fresh output array of its first output position, else the arena.

        A memory plan's slot is used unless it overlaps the arena storage of ``avoid`` (the op's operands):
        kernels assume their outputs never alias their inputs. It may be exactly the slot of one of ``shares``
        (the plan's in-place reuse of a dying operand): the caller then checks the kernel's plan
        (:meth:`_keep_in_place`).
        """
        t = value.type
        position = self.unclaimed_outputs.pop(value, None)
        if position is not None:
            strides = t.layout_strides
            extent = Layout(0, 0, t.shape, strides, t.dtype).extent
            buffer = self.add_buffer(BufferKind.OUTPUT, position, extent, t.dtype)
            return self.define(value, ValueSpec(buffer, 0, t.shape, strides, t.dtype.value))
        nbytes = t.numel * storage_itemsize(t.dtype)
        offset = _align(self.arena_end)
        number = len(self.plan.values)  # the memory planner names values by the same numbering
        key = value if value in self.memory_offsets else number
        # a plan's views have their root's offset but no slot (sizes): a view copied into a buffer of its own
        if key in self.memory_offsets and (key in self.memory_sizes or not self.memory_sizes):
            planned = self.memory_offsets[key]
            fits = nbytes <= self.memory_sizes.get(key, nbytes)  # bf16 is stored in 4 bytes, not 2
            if fits and planned % ALIGN == 0 and not any(self._overlaps(planned, nbytes, v) for v in avoid) \
                    and not any(self._overlaps(planned, nbytes, v) and self._arena_offset(v) != planned
                                for v in shares):
                offset = planned
        self.arena_end = max(self.arena_end, offset + _align(max(nbytes, 1)))
        buffer = self.add_buffer(BufferKind.ARENA, offset, t.numel, t.dtype)
        return self.define(value, ValueSpec(buffer, 0, t.shape, contiguous_strides(t.shape), t.dtype.value))

    def supplied_buffer(self, value: Value, strides: tuple[int, ...]) -> bool:
        """Lay ``value`` out with ``strides`` in a buffer its extern step supplies each call (ATen's result
        adopted: executors/cpu/adopt.py). False where it cannot: an output whose type asks for another layout."""
        t = value.type
        position = self.unclaimed_outputs.get(value)
        if position is not None:
            if not same_layout(t.shape, strides, t.layout_strides):
                return False
            strides = t.layout_strides  # returned arrays carry their type's strides exactly
            del self.unclaimed_outputs[value]
        extent = Layout(0, 0, t.shape, strides, t.dtype).extent
        if position is None:
            buffer = self.add_buffer(BufferKind.CALL, len(self.plan.values), extent, t.dtype, supplied=True)
        else:
            buffer = self.add_buffer(BufferKind.OUTPUT, position, extent, t.dtype, supplied=True)
        self.define(value, ValueSpec(buffer, 0, t.shape, strides, t.dtype.value))
        return True

    def _arena_offset(self, value: Value) -> int | None:
        """The arena offset ``value`` starts at, when it is the whole start of an arena buffer."""
        spec = self.plan.values[self.ids[value]]
        buffer = self.plan.buffers[spec.buffer]
        return buffer.index if buffer.kind == BufferKind.ARENA and spec.offset == 0 else None

    def _fresh_slot(self, value: Value) -> None:
        """Move arena value ``value`` (in the same layout) to a slot of its own after the arena's end."""
        spec = self.plan.values[self.ids[value]]
        buffer = self.plan.buffers[spec.buffer]
        offset = _align(self.arena_end)
        self.arena_end = offset + _align(max(buffer.extent * storage_itemsize(DType(buffer.dtype)), 1))
        number = self.add_buffer(BufferKind.ARENA, offset, buffer.extent, DType(buffer.dtype))
        self.plan.values[self.ids[value]] = spec._replace(buffer=number)

    def _keep_in_place(self, op_index: int, op: Any, kplan: Any) -> None:
        """Results of kernel ``op`` that a memory plan put in a dying operand's slot (a value, not a view, read
        by no later step or output) stay there only where the kernel's plan reads each element of that operand
        before writing it (``in_place.writes_in_place``; no plan: the interpreter runs it); the others move to fresh slots, in the same layout (the plan stands)."""
        for number, result in enumerate(op.results):
            offset = self._arena_offset(result)
            if offset is None:
                continue
            donors = [i for i, v in enumerate(op.operands) if self._arena_offset(v) == offset]
            if donors and (kplan is None or len(donors) > 1 or not writes_in_place(kplan, donors[0], number)
                           or self.last_read.get(op.operands[donors[0]], len(self.fn.ops)) > op_index):
                self._fresh_slot(result)

    def _overlaps(self, offset: int, nbytes: int, value: Value) -> bool:
        spec = self.plan.values[self.ids[value]]
        buffer = self.plan.buffers[spec.buffer]
        if buffer.kind != BufferKind.ARENA:
            return False
        size = buffer.extent * storage_itemsize(DType(buffer.dtype))  # bf16 is stored in 4 bytes
        return offset < buffer.index + max(size, 1) and buffer.index < offset + max(nbytes, 1)

    def layout(self, value: Value, slot: int) -> Layout:
        spec = self.plan.values[self.ids[value]]
        return Layout(slot, 0, spec.shape, spec.strides, DType(spec.dtype))

    def run(self) -> CpuLaunchPlan:
        for position, param in enumerate(self.fn.params):
            t = param.type
            strides = t.layout_strides
            buffer = self.add_buffer(BufferKind.INPUT, position, Layout(0, 0, t.shape, strides, t.dtype).extent, t.dtype)
            self.define(param, ValueSpec(buffer, 0, t.shape, strides, t.dtype.value))
        for op_index, op in enumerate(self.fn.ops):
            category = REGISTRY.get(op.name).category
            if op.has(Trait.STORED):
                t = op.result.type
                buffer = self.add_buffer(BufferKind.CONSTANT, op_index, t.numel, t.dtype)
                self.define(op.result, ValueSpec(buffer, 0, t.shape, contiguous_strides(t.shape), t.dtype.value))
            elif aliases_operand(op):
                self.view(op_index, op)
            elif category is Category.KERNEL:
                self.kernel(op_index, op)
            elif category in (Category.MATMUL, Category.EXTERN):  # one ATen call each
                layouts = supplied_strides(op, [self.plan.values[self.ids[v]] for v in op.operands])
                for number, (result, strides) in enumerate(zip(op.results, layouts)):
                    if strides is None or not self.supplied_buffer(result, strides):
                        self.own_buffer(result, avoid=op.operands + op.results[:number])
                step = StepSpec(StepKind.EXTERN, op_index, self._ids(op.operands), self._ids(op.results))
                self.plan.steps.append((None if self.dry else self.generated_matmul(step, op)) or step)
            else:
                raise CodegenError(f"op '{op.name}' must be inside a kernel at the top level of a CPU graph")
        self.plan.outputs = [self.ids[v] for v in self.fn.outputs]
        if self.dry:
            return self.plan
        # the kernels whose modules compile optimized first: the compile waits for those, so they start as early
        # as the planner can hand them over (session 24 order24); the plan and the module texts are the same
        for kernel in sorted(self.to_emit, key=lambda k: (not _reduces_rows(k.kplan), k.index)):
            self.emit(kernel)
        self.ir_texts = [self.module_symbols[s] for s in sorted(self.module_places, key=self.module_places.get)]
        self._return_views_of_intermediates()
        self._close_arena_gaps()
        self.plan.arena_bytes = _align(self.arena_end) + self.scratch_bytes
        return self.plan

    def _return_views_of_intermediates(self) -> None:
        """Give an output that is a view of an intermediate (``%o = reshape %k``, %k also read by other
        steps) the storage of that intermediate: %k's arena (or per-call) buffer becomes the output's fresh
        per-call buffer, so the call returns the view instead of copying it out of the arena.

        Only where the view is all of %k's storage in the layout the output's type asks for (a call
        returns outputs in their type's layout) and no other output already returned that storage (outputs
        never alias each other). %k's arena slot stays unused: values sharing it are unaffected.
        """
        for position, value in enumerate(self.fn.outputs):  # a second view of the same storage: copied
            spec = self.plan.values[self.ids[value]]
            buffer = self.plan.buffers[spec.buffer]
            t = value.type
            nbytes = Layout(0, 0, t.shape, t.layout_strides, t.dtype).extent * t.dtype.numpy.itemsize
            if buffer.kind not in (BufferKind.ARENA, BufferKind.CALL) or spec.offset != 0 \
                    or spec.strides != t.layout_strides or nbytes != buffer.extent * DType(buffer.dtype).numpy.itemsize:
                continue
            self.plan.buffers[spec.buffer] = buffer._replace(kind=BufferKind.OUTPUT, index=position)

    def _close_arena_gaps(self) -> None:
        """Shift arena buffers down over the ranges no arena buffer uses (the slots of values returned in
        the end: ``_return_views_of_intermediates``), by multiples of the alignment: every two buffers
        overlap after it exactly when they did before, and the kernels' plans do not depend on offsets."""
        arena = sorted((b.index, n) for n, b in enumerate(self.plan.buffers) if b.kind == BufferKind.ARENA)
        removed, covered = 0, 0
        for start, number in arena:
            buffer = self.plan.buffers[number]
            if start >= _align(covered):
                removed += start - _align(covered)
            covered = max(covered, start + max(buffer.extent * storage_itemsize(DType(buffer.dtype)), 1))
            self.plan.buffers[number] = buffer._replace(index=start - removed)
        self.arena_end = _align(covered) - removed

    def _ids(self, values: tuple[Value, ...]) -> tuple[int, ...]:
        return tuple(self.ids[v] for v in values)

    def view(self, op_index: int, op: Any) -> None:
        source = self.plan.values[self.ids[op.operands[0]]]
        layout = Layout(source.buffer, source.offset, source.shape, source.strides, DType(source.dtype))
        viewed = view_layout(op, layout)
        if viewed is not None:
            self.define(op.result, _layout_spec(viewed))
            return
        self.own_buffer(op.result, avoid=op.operands)  # a reshape that no strides express: copy
        self.plan.steps.append(StepSpec(StepKind.VIEW_COPY, op_index, self._ids(op.operands), self._ids(op.results)))

    def add_module(self, text: str, symbol: str, step_index: int) -> str:
        """Phase function ``symbol``'s module (emitted under ``kernel_names.PLACEHOLDER``) named by its code; added
        to the plan's native code (compiled as soon as the caller asks) unless a module of the same code is
        there already: both kernels' steps call that one function (the module placed at the first step,
        ``step_index``, whatever the order of emission). Returns the function's name."""
        text, symbol = name_by_content(text, symbol)
        place = (step_index, len(self.module_places))
        known = self.module_symbols.get(symbol)
        if known is not None:  # the same code under the same name: the function is in the plan already
            if known != text:
                raise CodegenError(f"two different kernel modules have the same digest name '{symbol}'")
            self.module_places[symbol] = min(self.module_places[symbol], place)
            return symbol
        self.module_symbols[symbol] = text
        self.module_places[symbol] = place
        if self.on_kernel is not None:
            self.on_kernel(text)
        return symbol

    def matmul_phase(self, op: Any, operands: tuple[Layout, ...], result: Layout, symbol: str,
                     n_args: int, step_index: int) -> PhaseSpec | None:
        """The phase running matmul ``op`` as generated code (``small_matmul.py`` decides), its module added;
        None where BLAS or ATen runs it."""
        matmul = plan_small_matmul(op, operands, result, target_cpu())
        if matmul is None:
            return None
        symbol = self.add_module(emit_small_matmul(matmul, symbol, n_args), symbol, step_index)
        return PhaseSpec(symbol, matmul.batch, matmul.work, False)

    def generated_matmul(self, step: StepSpec, op: Any) -> StepSpec | None:
        """Top-level extern ``step`` of ``op`` as a native kernel step of one generated matmul phase (slots:
        the operands, the result, the error flag), or None where it stays an extern."""
        if not op.has(Trait.MATRIX_PRODUCT) or len(op.results) != 1 or \
                self.plan.buffers[self.plan.values[self.ids[op.result]].buffer].supplied:
            return None
        values = (*op.operands, op.result)
        layouts = [self.layout(v, slot) for slot, v in enumerate(values)]
        phase = self.matmul_phase(op, tuple(layouts[:-1]), layouts[-1], f"{PLACEHOLDER}_mm", len(values) + 1,
                                  len(self.plan.steps))
        if phase is None:
            return None
        slots = (*(CpuSlot(SlotKind.VALUE, self.ids[v]) for v in values), CpuSlot(SlotKind.ERROR, 0))
        return step._replace(kind=StepKind.KERNEL, native=True, phases=(phase,), slots=slots)

    def _keep_donations(self, op: Any, candidates: dict[int, int], kept: dict[int, int]) -> None:
        """Results in ``kept`` stay in their param's buffer (recorded in ``plan.in_place``); the other
        candidates get their own output buffer, in the same layout (so the kernel's plan stands)."""
        for number, param in candidates.items():
            result = op.results[number]
            position = self.unclaimed_outputs.pop(result)
            if number in kept:
                self.plan.in_place.append((position, param))
                continue
            t = result.type
            extent = Layout(0, 0, t.shape, t.layout_strides, t.dtype).extent
            buffer = self.add_buffer(BufferKind.OUTPUT, position, extent, t.dtype)
            self.plan.values[self.ids[result]] = ValueSpec(buffer, 0, t.shape, t.layout_strides, t.dtype.value)

    def _overwriting_slots(self, op: Any) -> list[int]:
        """The argument slots of ``op``'s results that start where one of its operands does (kept in place over
        it: a donated parameter, or the arena slot of a dying operand)."""
        starts = {self._storage_start(v) for v in op.operands} - {None}
        return [len(op.operands) + number for number, result in enumerate(op.results)
                if self._storage_start(result) in starts]

    def _storage_start(self, value: Value) -> tuple[Any, ...] | None:
        """Where ``value``'s storage starts, when it is the whole start of a buffer: (input position) or
        (arena offset); None otherwise."""
        spec = self.plan.values[self.ids[value]]
        buffer = self.plan.buffers[spec.buffer]
        if spec.offset != 0 or buffer.kind not in (BufferKind.INPUT, BufferKind.ARENA):
            return None
        return buffer.kind, buffer.index

    def _aligned_slots(self, op: Any, kplan: Any) -> list[int]:
        slots = []
        for i, result in enumerate(op.results):
            spec = self.plan.values[self.ids[result]]
            if spec.offset == 0 and _aligned_buffer(self.plan.buffers[spec.buffer]):
                slots.append(len(op.operands) + i)
        first_extra = len(op.operands) + len(op.results)
        slots += [first_extra + i for i, extra in enumerate(kplan.extra) if extra.kind == ExtraKind.SCRATCH]
        return slots

    def donation_candidates(self, op_index: int, op: Any) -> dict[int, int]:
        """Result number -> param position, for the results of kernel ``op`` that may be computed in a donated
        param's buffer as far as the launch can tell (the kernel's own plan decides the rest): the result is
        that output's first position; the param has its layout, does not overlap itself, is read by this
        kernel once, directly and through no view, and by no later step or output."""
        found: dict[int, int] = {}
        for number, result in enumerate(op.results):
            position = self.unclaimed_outputs.get(result)
            param_position = self.donated.get(position) if position is not None else None
            if param_position is None or param_position in found.values():
                continue
            param = self.fn.params[param_position]
            spec, t = self.plan.values[self.ids[param]], result.type
            if (spec.shape, spec.strides, spec.dtype) != (t.shape, t.layout_strides, t.dtype.value) or \
                    not _non_overlapping(spec.shape, spec.strides) or self.last_read.get(param, -1) > op_index or \
                    op.operands.count(param) != 1:
                continue
            if any(v is not param and self.plan.values[self.ids[v]].buffer == spec.buffer for v in op.operands):
                continue
            found[number] = param_position
        return found

    def _kernel_plan(self, op_index: int, op: Any, params: list[Layout], outputs: list[Layout]) -> _KernelPlanned:
        """Kernel ``op``'s loop plan for these layouts (the dry planner's, when it made it for the same)."""
        layouts = (*params, *outputs)
        planned = self.kernel_plans.get(op_index)
        if planned is not None and planned.layouts == layouts:
            return planned
        tiled = tile_kernel(op, "cpu")  # the tile pass's decisions (made here for a kernel compiled without it)
        try:
            kplan = plan_kernel(op.regions[0], params, outputs, block=tiled.attrs["inner_block"],
                                vector_width=tiled.attrs["vector_width"])
            planned = _KernelPlanned(layouts, tiled, kplan, None)
        except CodegenError as exc:
            planned = _KernelPlanned(layouts, tiled, None, exc)
        self.kernel_plans[op_index] = planned
        return planned

    def may_write_over(self, op_index: int, result: int, operand: int) -> bool:
        """The memory plan's in-place question (``plan_memory.plan``'s ``may_write_over``), answered from the
        kernel's plan: only where it reads each element of the operand before writing the result there, and
        only over an operand the arena holds (an extern step's result adopted from ATen is a per-call buffer
        with no arena slot for the result to take: whether a product is generated or adopted depends on the
        host, so the plan asks here rather than assuming)."""
        planned = self.kernel_plans.get(op_index)
        if planned is None or planned.kplan is None:
            return False
        held = self.plan.values[self.ids[self.fn.ops[op_index].operands[operand]]]
        return self.plan.buffers[held.buffer].kind == BufferKind.ARENA and \
            writes_in_place(planned.kplan, operand, result)

    def outside_arena(self) -> frozenset[Value]:
        """Op results this plan keeps in no arena slot whatever the memory plan says: ATen results adopted per
        call (``supplied_buffer``) and constants. (Outputs are the caller's in the memory plan already; a
        result in a donated input's buffer may still move to the arena, so it is not listed.) Before, the
        memory plan reserved slots for them that stayed empty: the transformer block's backward had an arena
        of 32.25 MiB where its arena values need 20.25 (docs/performance-history.md, session 18 arena)."""
        outside = (BufferKind.CALL, BufferKind.CONSTANT)
        return frozenset(value for value, number in self.ids.items() if value not in self.fn.params
                         and self.plan.buffers[self.plan.values[number].buffer].kind in outside)

    def kernel(self, op_index: int, op: Any) -> None:
        candidates = self.donation_candidates(op_index, op) if self.donated else {}
        for number, result in enumerate(op.results):
            if number in candidates:  # in the param's buffer for now: the kernel's plan decides below
                param = self.fn.params[candidates[number]]
                self.define(result, self.plan.values[self.ids[param]])
            else:
                self.own_buffer(result, avoid=op.results[:number], shares=op.operands)
        params = [self.layout(v, i) for i, v in enumerate(op.operands)]
        outputs = [self.layout(v, len(params) + i) for i, v in enumerate(op.results)]
        step = StepSpec(StepKind.KERNEL, op_index, self._ids(op.operands), self._ids(op.results))
        planned = self._kernel_plan(op_index, op, params, outputs)
        if self.dry:
            return
        tiled, kplan = planned.tiled, planned.kplan
        if kplan is None:
            self._keep_donations(op, candidates, {})
            self._keep_in_place(op_index, op, None)
            self.plan.steps.append(step._replace(reason=str(planned.error)))
            return
        self._keep_in_place(op_index, op, kplan)
        self._keep_donations(op, candidates, {number: param for number, param in candidates.items() if
                                              writes_in_place(kplan, op.operands.index(self.fn.params[param]),
                                                              number)})
        try:
            kplan = replace(kplan, aligned_args=frozenset(self._aligned_slots(op, kplan)),
                            overwrites=frozenset(self._overwriting_slots(op)))
        except CodegenError as exc:
            self.plan.steps.append(step._replace(reason=str(exc)))
            return
        self.to_emit.append(_KernelToEmit(len(self.plan.steps), op, step, tiled, kplan))
        self.plan.steps.append(step)

    def emit(self, kernel: _KernelToEmit) -> None:
        """Emit ``kernel``'s modules (handed to ``on_kernel``) and make its step: native, or with the reason."""
        index, op, step, tiled, kplan = kernel.index, kernel.op, kernel.step, kernel.tiled, kernel.kplan
        try:
            texts, symbols = emit_kernel(kplan, PLACEHOLDER)
        except CodegenError as exc:
            self.plan.steps[index] = step._replace(reason=str(exc))
            return
        symbols = [self.add_module(text, symbol, index) for text, symbol in zip(texts, symbols)]
        slots = [CpuSlot(SlotKind.VALUE, self.ids[v]) for v in op.operands + op.results]
        scratch_cursor = 0
        for extra in kplan.extra:
            if extra.kind == ExtraKind.SCRATCH:
                slots.append(CpuSlot(SlotKind.SCRATCH, scratch_cursor))
                scratch_cursor += _align(extra.nbytes)
            else:
                slots.append(CpuSlot(SlotKind.CONSTANT, extra.op_index))
        slots.append(CpuSlot(SlotKind.ERROR, 0))
        self.scratch_bytes = max(self.scratch_bytes, scratch_cursor)
        phases = tuple(PhaseSpec(sym, ph.n_outer, launch_work(kplan, ph), ph.serial)
                       for sym, ph in zip(symbols, kplan.phases))
        extern = None
        if kplan.extern is not None:
            # a small product runs as the kernel's first phase, else the launcher calls BLAS or ATen before the
            # phases; not where the tile pass's matmul_tile runs product and epilogue in blocks of rows
            matmul = None if _row_block(kplan, tiled) else self.matmul_phase(
                op.regions[0].ops[kplan.extern.op_index], kplan.extern.operands, kplan.extern.results[0],
                f"{PLACEHOLDER}_mm", kplan.n_args, index)
            if matmul is not None:
                phases = (matmul, *phases)
            else:
                extern = ExternSpec(kplan.extern.op_index, tuple(_layout_spec(a) for a in kplan.extern.operands),
                                    tuple(_layout_spec(a) for a in kplan.extern.results))
        self.plan.steps[index] = step._replace(native=True, phases=phases, slots=tuple(slots), extern=extern,
                                               may_fail=kplan.may_fail,
                                               row_block=_row_block(kplan, tiled) if extern is not None else 0)


def _last_reads(fn: Function) -> dict[Value, int]:
    """The last top-level op reading each buffer-owning value, directly or through views (len(ops): a
    function output reads it, i.e. the caller does after the call)."""
    root: dict[Value, Value] = {}
    last: dict[Value, int] = {}
    for index, op in enumerate(fn.ops):
        for v in op.operands:
            last[root.get(v, v)] = index
        if aliases_operand(op):
            for result in op.results:
                root[result] = root.get(op.operands[0], op.operands[0])
    for v in fn.outputs:
        last[root.get(v, v)] = len(fn.ops)
    return last


def _non_overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """No two elements of the layout share memory (a kernel writing it in place writes each once)."""
    span = 1
    for size, stride in sorted(((n, st) for n, st in zip(shape, strides) if n > 1), key=lambda pair: pair[1]):
        if stride < span:
            return False
        span += (size - 1) * stride
    return True


def _row_block(kplan: Any, kernel: Any) -> int:
    """Rows per block of the kernel's matmul and epilogue (its ``matmul_tile`` decision), when its phases can
    run block by block; 0 for one block."""
    tile = kernel.attrs["matmul_tile"]
    if not kplan.row_blocked or not tile or kplan.extern is None:
        return 0
    return tile[0] if 0 < tile[0] < kplan.extern.results[0].shape[0] else 0


def _aligned_buffer(buffer: BufferSpec) -> bool:
    """Output arrays and the arena are allocated 64-byte aligned; arena slots are aligned unless a memory
    plan placed them otherwise."""
    return buffer.kind == BufferKind.OUTPUT or (buffer.kind == BufferKind.ARENA and buffer.index % ALIGN == 0)


def plan_launch(fn: Function, cpu: str, features: str, memory_plan: Any = None,
                on_kernel: Callable[[str], None] | None = None) -> tuple[CpuLaunchPlan, list[str]]:
    """The launch plan of ``fn`` (already in top-level form) and the LLVM IR of its native kernels.

    ``on_kernel(text)`` is called with each LLVM module (one per kernel phase) as soon as it is generated (the
    launcher starts compiling it while the next kernel is emitted): the kernels that reduce along rows first (their
    modules compile at the optimized tier, the ones the compile waits for), after a walk that plans every kernel;
    the texts returned are in the plan's order either way.

    ``memory_plan`` (``neuroncc.passes.plan_memory.MemoryPlan`` or anything with ``offsets`` keyed by value
    number or Value, optionally ``sizes`` and ``arena_bytes``) places arena values; by default the plan-memory
    pass's plan of ``fn``, so intermediates that are never live together share arena space (without one every
    intermediate had a slot of its own: arenas of the naive size, and as many fresh pages on a first call).
    A planned slot is not used
    when the value's storage does not fit it (bf16 is stored as float32) or when it overlaps the same op's
    operands (kernels recompute shared values from their inputs, so an output may not overwrite an input),
    except a kernel result in exactly the slot of a dying operand that the kernel's plan reads element by
    element before writing (the plan's in-place reuse, ``in_place.writes_in_place``); such values, and values
    the plan omits, get fresh slots after the planned arena.
    Scratch buffers of kernels share one region after the values (kernels run one at a time).
    """
    kernel_plans = None
    if memory_plan is None:
        memory_plan, kernel_plans = _memory_plan(fn, cpu, features)
    planner = _LaunchPlanner(fn, cpu, features, memory_plan, on_kernel, kernel_plans=kernel_plans)
    plan = planner.run()
    # scratch offsets are relative to the scratch region, which starts after the values
    base = _align(planner.arena_end)
    plan.steps = [s._replace(slots=tuple(CpuSlot(x.kind, x.ref + base) if x.kind == SlotKind.SCRATCH else x
                                          for x in s.slots)) for s in plan.steps]
    return plan, planner.ir_texts



def _memory_plan(fn: Function, cpu: str, features: str) -> tuple[Any, dict[int, _KernelPlanned]]:
    """The plan-memory pass's plan of ``fn``, its in-place pairs asked of the kernels' loop plans (made by a
    dry planner, and returned for the launch planner to reuse)."""
    dry = _LaunchPlanner(fn, cpu, features, None, dry=True)
    dry.run()
    return plan_memory(fn, dry.may_write_over, dry.outside_arena()), dry.kernel_plans


def memory_plan_for_launch(fn: Function, cpu: str, features: str) -> Any:
    """The memory plan :func:`plan_launch` places ``fn``'s arena values by when given none."""
    return _memory_plan(fn, cpu, features)[0]
