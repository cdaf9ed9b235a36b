"""The runners of a launch plan's native steps: a kernel's phase functions, and a direct BLAS matmul.

:class:`NativeKernel` runs one kernel step: a prebuilt ctypes argument array (the per-call slots patched in),
its extern matmul first (BLAS, oneDNN or ATen, all rows at once or block of rows by block of rows), then each
phase function across the executable's threads. :class:`BlasStep` runs a top-level float32 mm/addmm/bmm by a
prepared BLAS call. Both see their executable as a :class:`~neuroncc.executors.cpu.step_host.StepHost`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from neuroncc.codegen.llvm.launch_plan import SlotKind, StepSpec, ValueSpec
from neuroncc.executors.cpu import blas
from neuroncc.executors.cpu.adopt import ScratchProduct
from neuroncc.executors.cpu.buffers import storage_dtype as _storage_dtype
from neuroncc.executors.cpu.buffers import strided_view as _view
from neuroncc.executors.cpu.extern import run_extern
from neuroncc.executors.cpu.check_failure import kernel_check_error
from neuroncc.executors.cpu.step_host import StepHost
from neuroncc.hardware.host import target_cpu
from neuroncc.ir.opdef import Trait

PHASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class BlasStep:
    """A top-level extern mm/addmm/bmm step run by a prepared BLAS call on its buffers' addresses."""

    def __init__(self, exe: StepHost, step: StepSpec, call: blas.BlasMatmul, places: list[tuple[int, int]]):
        self.exe, self.step, self.blas, self.places = exe, step, call, places

    def __call__(self, flats: list[Any], addresses: list[int]) -> None:
        if not self.blas([addresses[buffer] + offset for buffer, offset in self.places]):
            self.exe.run_extern(self.step, flats)


class NativeKernel:
    """One native kernel step: a prebuilt argument array and its phase functions."""

    def __init__(self, exe: StepHost, step: StepSpec):
        self.exe, self.step = exe, step
        self.args = (ctypes.c_void_p * len(step.slots))()
        self.args_address = ctypes.addressof(self.args)
        self.dynamic: list[tuple[int, int, int]] = []  # (slot, buffer, byte offset)
        plan = exe.plan
        for slot, spec in enumerate(step.slots):
            if spec.kind == SlotKind.VALUE:
                value = plan.values[spec.ref]
                byte_offset = value.offset * _storage_dtype(value.dtype).itemsize
                address = exe.static_address(value.buffer)
                if address is not None:
                    self.args[slot] = address + byte_offset
                else:
                    self.dynamic.append((slot, value.buffer, byte_offset))
            elif spec.kind == SlotKind.SCRATCH:
                self.args[slot] = exe.scratch_address(spec.ref)
            elif spec.kind == SlotKind.CONSTANT:
                self.args[slot] = exe.region_constant(step.op_index, spec.ref).ctypes.data
            else:
                self.args[slot] = exe.error.address
        addresses = [exe.module.address(p.symbol) for p in step.phases]
        self.phases = [(PHASE_FN(address), address, p.n_outer, p.work, p.serial)
                       for address, p in zip(addresses, step.phases)]
        self._view_cache: dict[int, tuple[int, np.ndarray]] = {}  # extern layout -> (address, view)
        self.rows, self.row_block = 0, step.row_block  # the tile pass's matmul_tile (rows per block)
        if self.row_block:
            self.rows = step.extern.results[0].shape[0]
        # a float32 mm/addmm/bmm extern calls BLAS directly (pointers into this kernel's argument slots)
        self.blas = None
        if step.extern is not None and not self.row_block:
            op = exe.function.ops[step.op_index].regions[0].ops[step.extern.op_index]
            layouts = (*step.extern.operands, *step.extern.results)
            self.blas = prepare_blas(op, layouts)
            self.blas_places = [(layout.buffer, layout.offset * _storage_dtype(layout.dtype).itemsize)
                                for layout in layouts]
        # a product big enough for oneDNN: its tensor becomes the scratch slot's memory for the call
        self.scratch_product = None
        if self.blas is None and step.extern is not None and not self.row_block:
            op = exe.function.ops[step.op_index].regions[0].ops[step.extern.op_index]
            slot = ScratchProduct.slot_of(step, op)
            if slot is not None:
                self.scratch_product = ScratchProduct(self.args, slot, op, step.extern.results[0])
        # phases too small to split (or one thread): called straight, without the pool's bookkeeping
        self.serial_calls = None
        if all(_runs_inline(exe.team or exe.pool, n_outer, work, serial) for _, _, n_outer, work, serial in self.phases):
            self.serial_calls = [(fn, n_outer) for fn, _, n_outer, _, _ in self.phases if n_outer > 0]
        self.fast = self._fast_path()

    def _fast_path(self) -> Any:
        """The common step (no row blocks, phases called straight, no run-time check) as one closure over
        locals: the same work as :meth:`__call__` with fewer lookups per launch."""
        if self.row_block or self.serial_calls is None or self.step.may_fail:
            return None
        args, dynamic, calls, address = self.args, self.dynamic, self.serial_calls, self.args_address
        gemm, places, extern = self.blas, getattr(self, "blas_places", ()), self._extern
        needs_extern = self.step.extern is not None and gemm is None

        def run(flats: list[Any], addresses: list[int]) -> None:
            for slot, buffer, byte_offset in dynamic:
                args[slot] = addresses[buffer] + byte_offset
            product = None  # an adopted product: alive until the phases have read it
            if gemm is not None:
                if not gemm([args[slot] + offset for slot, offset in places]):
                    product = extern()
            elif needs_extern:
                product = extern()
            for fn, n_outer in calls:
                fn(address, 0, n_outer)
            del product
        return run

    def __call__(self, flats: list[Any], addresses: list[int]) -> None:
        args = self.args
        for slot, buffer, byte_offset in self.dynamic:
            args[slot] = addresses[buffer] + byte_offset
        product = None  # an adopted product: alive until the phases have read it
        if self.row_block:
            self._row_blocked()
        else:
            if self.blas is not None:
                if not self.blas([args[slot] + offset for slot, offset in self.blas_places]):
                    product = self._extern()
            elif self.step.extern is not None:
                product = self._extern()
            if self.serial_calls is not None:
                address = self.args_address
                for fn, n_outer in self.serial_calls:
                    fn(address, 0, n_outer)
            else:
                self._phases(0, None)
        del product  # the phases have read it
        if self.step.may_fail and (failed := self.exe.error.take()):
            raise kernel_check_error(self.exe, self.step, flats, addresses, failed)

    def _phases(self, row_start: int, row_end: int | None) -> None:
        """Run every phase, on all outer iterations or on those of rows [row_start, row_end)."""
        pool, team = self.exe.pool, self.exe.team
        for fn, address, n_outer, work, serial in self.phases:
            start, end = 0, n_outer
            if row_end is not None:
                per_row = n_outer // self.rows
                start, end = row_start * per_row, row_end * per_row
            if serial:
                fn(self.args_address, start, end)
            elif team is not None:
                team.run(fn, address, self.args_address, start, end, work, self.exe.team_guided_chunks)
            elif start == 0:
                pool.parallel_for(fn, self.args_address, end, work)
            else:
                pool.parallel_for(lambda a, s, e, fn=fn: fn(a, s + start, e + start), self.args_address,
                                  end - start, work)

    def _row_blocked(self) -> None:
        """mm/addmm a block of rows at a time, each block's epilogue right after (its output still cached)."""
        views = self._extern_views()
        for start in range(0, self.rows, self.row_block):
            end = min(start + self.row_block, self.rows)
            self._extern(start, end, views)
            self._phases(start, end)

    def _extern_views(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """numpy views of the extern's operands and results over this call's argument pointers.

        Building a view costs ~4 us of Python (ctypes array, as_strided) and most arguments (arena, scratch,
        constants) sit at the same address on every call, so each layout keeps its last view and reuses it
        while its argument pointer is unchanged: same address and layout is the same view."""
        spec = self.step.extern
        cache = self._view_cache

        def view(position: int, layout: ValueSpec) -> np.ndarray:
            base = self.args[layout.buffer]
            cached = cache.get(position)
            if cached is not None and cached[0] == base:
                return cached[1]
            dtype = _storage_dtype(layout.dtype)
            extent = 1 + layout.offset + sum((n - 1) * s for n, s in zip(layout.shape, layout.strides)) \
                if all(layout.shape) else 0
            # np.frombuffer, not np.ctypeslib.as_array: the same writable view, without importing numpy.ctypeslib
            # (~1-2 ms of a warm start's first call, the first time an extern inside a kernel runs)
            flat = np.frombuffer((ctypes.c_byte * (max(extent, 1) * dtype.itemsize)).from_address(base), np.int8) \
                .view(dtype)
            made = _view(flat, layout)
            cache[position] = (base, made)
            return made

        layouts = (*spec.operands, *spec.results)
        views = [view(position, layout) for position, layout in enumerate(layouts)]
        return views[:len(spec.operands)], views[len(spec.operands):]

    def _extern(self, row_start: int = 0, row_end: int | None = None, views: Any = None) -> Any:
        """Run the kernel's extern op (on rows [row_start, row_end) when given); returns what must stay alive
        until the phases ran (an adopted product), if anything."""
        region = self.exe.function.ops[self.step.op_index].regions[0]
        op = region.ops[self.step.extern.op_index]
        if self.scratch_product is not None:
            self.scratch_product.reset()
        operands, results = views if views is not None else self._extern_views()
        if self.scratch_product is not None:
            product = self.scratch_product.run(operands, results[0])
            if product is not None:
                return product
        operands, results = list(operands), list(results)
        if row_end is not None:
            rows = slice(row_start, row_end)
            # the product's rows are its first matrix's rows: a columns of the stored operand where the layout
            # pass stores it transposed (a bf16 Linear's weight gradient: x^T @ grad)
            first = 0 if len(operands) == 2 else 1  # mm, addmm
            by_columns = bool(op.attrs.get("transpose_a"))
            operands[first] = operands[first][:, rows] if by_columns else operands[first][rows]
            if first == 1 and operands[0].ndim == 2 and operands[0].shape[0] == self.rows > 1:
                operands[0] = operands[0][rows]  # addmm's bias [M, N] is sliced too; [N] and [1, N] broadcast
            results = [r[rows] for r in results]
        run_extern(op.name, op.attrs, operands, results, op.results[0].type.dtype)
        return None


def prepare_blas(op: Any, layouts: Any) -> blas.BlasMatmul | None:
    """The direct BLAS call of extern ``op`` over ``layouts`` (its operands' then its result's ValueSpecs), or
    None where ATen (or oneDNN, for big mm/addmm: see extern.py) runs it."""
    if not op.has(Trait.MATRIX_PRODUCT) or len(op.results) != 1:  # BLAS runs mm, addmm, bmm
        return None
    *operands, result = layouts
    batched = op.results[0].type.rank == 3  # bmm: oneDNN takes no batched products, so BLAS takes all sizes
    return blas.prepare(op.name, op.attrs, [(v.shape, v.strides) for v in operands], (result.shape, result.strides),
                        [v.dtype for v in layouts], onednn_takes=None if batched else target_cpu().onednn_takes)


def _runs_inline(runner: Any, n_outer: int, work: int, serial: bool) -> bool:
    """Whether the thread runner (OpenMP team or pool) would run this phase on the calling thread in one piece."""
    return serial or runner.runs_inline(n_outer, work)
