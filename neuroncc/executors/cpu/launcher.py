"""The host launcher: ``build_cpu_executable(fn, options)`` -> a callable running native kernels in order.

Build: wrap leftover top-level ops in kernels, plan buffers and loop nests (:mod:`launch_plan`), compile each
kernel phase (O3, host CPU) on ``compile_threads`` LLVM workers while the planner emits the next, link the
objects into one shared library and load it (or, without a linker, load the objects into MCJIT:
:mod:`neuroncc.codegen.llvm.native_library`). Loading an artifact of a shared library needs no LLVM. Call: check and place inputs, allocate fresh output arrays, then for each step patch the few
argument slots that change per call (inputs, outputs) into a prebuilt ctypes argument array and call the phase
functions, across the thread pool when the work is big enough. Intermediates live in one arena reused by every
call; returned arrays never alias it. Extern results ATen returns as fresh tensors are adopted instead of
copied: their buffers are supplied per call by their step (:mod:`neuroncc.executors.cpu.adopt`).

Options (all optional): ``threads`` (default: torch's thread count if torch is loaded, else the CPU count; without
the option, torch.compile's calls follow torch's count of the moment: ``CpuExecutable.for_threads``),
``compile_threads`` (LLVM compile workers; default: ``threads``), ``threading`` (``openmp``, the default:
ATen's own OpenMP team through torch's libgomp, so neuroncc's kernels and ATen's matmuls share one set of
threads; ``python``: a persistent pool of Python threads, used when libgomp is not found, and better on a
machine oversubscribed by other processes, where OpenMP's spinning barriers degrade badly),
``memory_plan`` (``neuroncc.passes.plan_memory.plan(fn)``'s MemoryPlan, or any object with ``offsets`` by value
number or Value; see :func:`neuroncc.codegen.llvm.program.plan_launch`), ``quick_first`` (False; True for a
caller that waits on the compile, the eager device: kernels start at LLVM's quick tier when
:mod:`neuroncc.executors.cpu.tiers` says so, and ``executable.optimized`` brings the optimized code;
``"modules"``, torch.compile's graphs: the decision is made per module, see that module; such a build also
returns before LLVM has finished: the last workers, the link and the load run on a thread of their own
(:mod:`neuroncc.executors.cpu.deferred_code`), and the executable binds its native steps to the code when it is
first needed, ``CpuExecutable.bind_code``, at the latest at its first call). The options are read in
:mod:`neuroncc.executors.cpu.build_options`.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from neuroncc.codegen.llvm.fork_safety import renew_in_child
from neuroncc.codegen.llvm.native_library import code_form
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.errors import ArtifactError, InputError
from neuroncc.ir.graph import Function
from neuroncc.ir.opdef import Trait
from neuroncc.ir.types import contiguous_strides
from neuroncc.executors.cpu.adopt import SuppliedExtern
from neuroncc.executors.cpu import arena_reserve
from neuroncc.executors.cpu.array_call import array_call
from neuroncc.executors.cpu.code_files import CODE_FILES, IR_FILE, PLAN_FILE, CodeFiles, load_code, stored_code
from neuroncc.executors.cpu.buffers import copy_layouts, returned_strides
from neuroncc.executors.cpu.buffers import data_address as _data_address
from neuroncc.executors.cpu.buffers import flat_view as _flat
from neuroncc.executors.cpu.buffers import placed_empty as _placed_empty
from neuroncc.executors.cpu.buffers import storage_dtype as _storage_dtype
from neuroncc.executors.cpu.buffers import strided_view as _view
from neuroncc.executors.cpu.extern import run_extern
from neuroncc.executors.cpu.extern_library import LIBRARY_CALLS, run_library
from neuroncc.executors.cpu.build_options import QUICK_MODULES, compile_workers, memory_plan, quick_first, \
    threading_mode, thread_count, threads_fixed
from neuroncc.executors.cpu.deferred_code import finish_in_background
from neuroncc.executors.cpu.helper_start import HELPERS, load_helpers
from neuroncc.executors.cpu.helpers import RUNTIME_FILE, offer, runtime_json, wants_offers
from neuroncc.executors.cpu.native_sequence import sequence_calls
from neuroncc.executors.cpu.tiers import GRAPH_QUIET_SECONDS, OPTIMIZER, quick_tier_applies
from neuroncc.codegen.llvm.launch_plan import (
    ALIGN, BufferKind, CpuLaunchPlan, StepKind, StepSpec, ValueSpec, function_hash,
)
from neuroncc.executors.cpu.step_host import ErrorFlag
from neuroncc.executors.cpu.step_names import graph_info, step_infos
from neuroncc.errors import KernelIndexError
from neuroncc.executors.cpu.steps import BlasStep, NativeKernel, prepare_blas
from neuroncc.executors.cpu.threads import get_pool, get_team
from neuroncc.executors import tracing
from neuroncc.executors.tracing import active_tracer, traced_steps
from neuroncc.ir.interpreter import run_op
from neuroncc.ir.dtypes import to_storage
from neuroncc.hardware.host import target_cpu


def _runs_code(step: StepSpec) -> bool:
    """Whether ``step`` runs the kernels' native code (:meth:`CpuExecutable._runner` makes a NativeKernel)."""
    return step.kind not in (StepKind.EXTERN, StepKind.VIEW_COPY) and step.native


def _output_shaping(spec: ValueSpec, buffer: Any) -> ValueSpec | tuple[int, ...]:
    """How a call turns an output buffer into the returned array: its shape (a reshape) when the value is the
    whole contiguous buffer in the buffer's own element type, else its spec (a strided view, dearer)."""
    if spec.offset == 0 and spec.strides == contiguous_strides(spec.shape) and spec.dtype == buffer.dtype:
        return tuple(spec.shape)
    return spec


class CpuExecutable:
    """The ``cpu`` target's executable: ``exe(*arrays) -> list of arrays``; see the module docstring."""

    def __init__(self, function: Function, plan: CpuLaunchPlan, module: Any, threads: int,
                 compile_seconds: float = 0.0, threading_mode: str = "openmp", arena_of: CpuExecutable | None = None,
                 fixed_threads: bool = False):
        self.function = function  # the top-level form actually run (kernels wrapped)
        self.plan = plan
        self.module = module  # jit.LoadedCode or None: the kernels' code, kept mapped while this runs
        self.threads, self.threading_mode = threads, threading_mode
        #: whether the ``threads`` option fixed the count (else :meth:`for_threads` follows torch's count)
        self.fixed_threads = fixed_threads
        #: thread count -> this executable on that many threads (one dict shared by all of them: for_threads)
        self._by_threads: dict[int, CpuExecutable] = {threads: self}
        self.pool = get_pool(threads)
        self.team = get_team(threads) if threading_mode == "openmp" else None
        #: the team's schedule (``CpuTarget.team_guided_chunks``: 0, chunks of one length; G, guided)
        self.team_guided_chunks = target_cpu().team_guided_chunks
        if arena_of is not None and arena_of._arena_buffer.nbytes >= plan.arena_bytes:
            # another executable's arena, whose pages its calls touch (or have touched) already: the optimized
            # build of a quick executable (tiers.py), or one whose calls follow the other's (sharing_arena);
            # one lock, so their calls never overlap in it
            self._lock, self._arena_buffer = arena_of._lock, arena_of._arena_buffer
        else:
            # renewed in a forked child (codegen/llvm/fork_safety.py): a call another thread was making at the
            # fork leaves nothing the child's own calls read (they write their intermediates before reading them)
            self._lock = renew_in_child(threading.Lock())
            #: the arena's whole memory (its capacity): the process's arena reserve when it fits, whose pages are
            #: in already (arena_reserve.py), else fresh
            self._arena_buffer = arena_reserve.take(plan.arena_bytes)
            if self._arena_buffer is None:
                raw = np.empty(plan.arena_bytes + ALIGN, dtype=np.uint8)
                shift = (-raw.ctypes.data) % ALIGN
                self._arena_buffer = raw[shift:shift + plan.arena_bytes]
        self._arena = self._arena_buffer[:plan.arena_bytes]
        self.error = ErrorFlag()
        self._static_flats: dict[int, np.ndarray] = {}
        self._constants: dict[tuple[int, int], np.ndarray] = {}
        for number, buffer in enumerate(plan.buffers):
            dtype = _storage_dtype(buffer.dtype)
            if buffer.kind == BufferKind.ARENA:
                self._static_flats[number] = self._arena[buffer.index:buffer.index + buffer.extent * dtype.itemsize] \
                    .view(dtype)
            elif buffer.kind == BufferKind.CONSTANT:
                array = np.array(function.ops[buffer.index].attrs["value"].array, copy=True, order="C")
                self._static_flats[number] = array.reshape(-1)
        self._static_views: dict[int, np.ndarray] = {}  # value id -> its view over an arena/constant buffer
        # per call: lists indexed by buffer number (static entries prefilled) and the buffers to place
        self._flat_list: list[Any] = [self._static_flats.get(n) for n in range(len(plan.buffers))]
        self._address_list: list[int] = [self._address(n, self._static_flats) if n in self._static_flats else 0
                                         for n in range(len(plan.buffers))]
        # param position -> (shape, numpy dtype, byte strides of its layout, whether that layout is contiguous)
        self._params = [(p.type.shape, p.type.dtype.numpy,
                         tuple(st * p.type.dtype.numpy.itemsize for st in p.type.layout_strides),
                         p.type.layout_strides == contiguous_strides(p.type.shape)) for p in function.params]
        self._call_buffers = [(n, b, _storage_dtype(b.dtype), _output_shaping(plan.values[plan.outputs[b.index]], b)
                               if b.kind == BufferKind.OUTPUT else None)
                              for n, b in enumerate(plan.buffers) if b.kind in (BufferKind.INPUT, BufferKind.OUTPUT) and not b.supplied]
        self._call_buffers.sort(key=lambda entry: entry[3] is not None)  # inputs first: outputs are placed by them
        # (output position, buffer number, shaping) of the outputs whose storage a step supplies (adopt.py)
        self._supplied_outputs = [(b.index, n, _output_shaping(plan.values[plan.outputs[b.index]], b))
                                  for n, b in enumerate(plan.buffers) if b.kind == BufferKind.OUTPUT and b.supplied]
        # output position -> None (a C-order copy) or (extent, shape, strides) of the strided type it returns
        self._copy_layouts = copy_layouts(function)
        self.output_strides = returned_strides(plan, self._copy_layouts)
        #: output position -> param position: outputs the kernels wrote into a donated input's storage (the
        #: function's ``donated`` metadata, where the launch plan allowed it); a call returns them as views of
        #: the input's storage as passed (the caller's array, or the converted copy the call made of it)
        self.in_place: dict[int, int] = dict(plan.in_place)
        #: None, or while the kernels' code is being finished in the background (``deferred_code.py``): its
        #: future. The native steps are bound to the code when something first needs it (:meth:`bind_code`:
        #: the first call, a traced call, saving, sharing an arena); until then they are None here.
        self.code_pending: Future | None = module if isinstance(module, Future) else None
        if self.code_pending is not None:
            self.module = None
        self._bind_lock = renew_in_child(threading.Lock())  # (a bind another thread made is made again whole)
        self._runners: list[Any] = [None if self.code_pending is not None and _runs_code(step) else self._runner(step)
                                    for step in plan.steps]
        if self.code_pending is None:
            self._bind_calls()
        else:  # the first call binds, then runs the real calls (no check on later calls' path)
            self._step_calls, self._calls = [], [self._first_run]
        self._traced: tuple[Any, list[Any], Any] | None = None  # (tracer, its wrapped calls, graph info)
        #: None, or while this executable runs LLVM's quick-tier code: the future of the same executable with
        #: optimized code (executors/cpu/tiers.py); saving waits for it
        self.optimized: Any = None
        self.stats = self._stats(compile_seconds)
        self.stats["blas_calls"] = self._blas_calls()
        #: the common call on numpy arrays, decided once (array_call.py), or None: every call takes ``_call``
        self._array_call = array_call(self)

    def _bind_calls(self) -> None:
        # what a call runs: step by step (traced calls wrap these), and with runs of native steps as one native
        # call each (native_sequence.py), the untraced path
        self._step_calls = [getattr(r, "fast", None) or r for r in self._runners]
        self._calls = sequence_calls(self._runners, self._step_calls, len(self.plan.buffers))

    def _blas_calls(self) -> int:
        """Steps that call BLAS (native steps count once bound: their BLAS call is prepared with them)."""
        return sum(getattr(r, "blas", None) is not None for r in self._runners)

    def bind_code(self) -> None:
        """Wait for the kernels' code if it is being finished in the background, and bind the native steps to
        it. Raises the build's own error (``CodegenError``, ...) when it failed, here and on every later call
        that needs the code."""
        if self.code_pending is None:
            return
        with self._bind_lock:
            pending = self.code_pending
            if pending is None:  # another thread bound it meanwhile
                return
            module = pending.result()
            arena_reserve.release()  # the compile's builds are made: a reserve none took is let go
            record_code(self.plan, module)
            self.module = module
            self._runners = [runner if runner is not None else self._runner(step)
                             for runner, step in zip(self._runners, self.plan.steps)]
            self._bind_calls()
            self.stats["blas_calls"] = self._blas_calls()
            self.code_pending = None

    def _first_run(self, flats: list[Any], addresses: list[int]) -> None:
        """The call list of an executable whose code is pending: bind it, then run the real calls."""
        self.bind_code()
        for run in self._calls:
            run(flats, addresses)

    def sharing_arena(self, other: Any) -> tuple[CpuExecutable, Any]:
        """``(self, other)`` with one arena: the one of the two whose arena holds less rebuilt over the other's
        (and its lock), when ``other`` is a cpu executable too; else both unchanged.

        For executables whose calls follow one another, a training graph's forward and backward (the front
        end's ``CompiledGraph.share_arena_with``, on a compile and a graph-cache hit alike): the process keeps
        one arena instead of two (21 MB less for the transformer block's training step). Their calls then
        take turns (one lock), as calls of one executable from two threads do. Shared from the backward's build
        on, with code still pending (the rebuilt executable binds the same future) and quick-tier code waiting
        for its optimized build (made over the arena it was built with: the front end shares again when it
        takes it): the backward's first call then runs in the pages the forward's touched, or the arena
        reserve's (arena_reserve.py), which holds both the transformer block's arenas; a backward larger than
        the forward's arena moves the forward to the backward's arena instead (session 13: a first step's
        faults are not fewer then)."""
        if not isinstance(other, CpuExecutable) or other is self or self._lock is other._lock:
            return self, other
        if self._arena_buffer.nbytes >= other._arena_buffer.nbytes:
            return self, other._over_arena_of(self)
        return self._over_arena_of(other), other

    def _over_arena_of(self, other: CpuExecutable) -> CpuExecutable:
        """This executable rebuilt over ``other``'s arena (the same plan, code or pending code, options and
        optimized build to come)."""
        rebuilt = CpuExecutable(self.function, self.plan, self.code_pending or self.module, self.threads,
                                self.stats["compile_seconds"], self.threading_mode, arena_of=other,
                                fixed_threads=self.fixed_threads)
        rebuilt.optimized = self.optimized
        return rebuilt

    def for_threads(self, threads: int) -> CpuExecutable:
        """This executable on ``threads`` threads (same plan, code, arena and lock; made once per count), or self
        when the ``threads`` option fixed the count or the code is pending. The front end asks with torch's count
        before each call (``CompiledGraph``): the caches hand one executable to later compiles whatever
        ``torch.set_num_threads`` says by then (docs/performance-history.md, session 18 threads)."""
        if threads == self.threads or self.fixed_threads or self.code_pending is not None:
            return self
        other = self._by_threads.get(threads)
        if other is None:
            other = CpuExecutable(self.function, self.plan, self.module, threads, self.stats["compile_seconds"],
                                  self.threading_mode, arena_of=self)
            other._by_threads = self._by_threads
            self._by_threads[threads] = other
        return other

    def follows_threads(self) -> bool:
        """Whether a call on another thread count runs differently: the count is not fixed and some phase would
        split across a team of two (at one thread every phase runs inline, and a phase too small to split runs
        inline at any count). The eager device asks once per kernel and checks the calling thread's count per
        call only for these (device/thread_count.py); ATen steps follow the calling thread by themselves."""
        if self.fixed_threads:
            return False
        runner = (get_team(2) if self.threading_mode == "openmp" else None) or get_pool(2)
        return any(not phase.serial and not runner.runs_inline(phase.n_outer, phase.work)
                   for step in self.plan.steps for phase in step.phases)

    # ---- build (the StepHost interface of step_host.py, for the step runners) --------------------------------

    def _address(self, buffer: int, flats: dict[int, np.ndarray]) -> int:
        return flats[buffer].__array_interface__["data"][0]

    def static_address(self, buffer: int) -> int | None:
        """The address of buffer ``buffer`` when it is the same on every call (arena, constant), else None."""
        return self._address(buffer, self._static_flats) if buffer in self._static_flats else None

    def scratch_address(self, offset: int) -> int:
        """The address of arena byte ``offset`` (kernels' scratch slots)."""
        return self._arena.ctypes.data + offset

    def region_constant(self, op_index: int, ref: int) -> np.ndarray:
        """The data of constant op ``ref`` of the region of kernel op ``op_index``, kept alive here."""
        region = self.function.ops[op_index].regions[0]
        array = np.array(region.ops[ref].attrs["value"].array, copy=True, order="C")
        self._constants[(op_index, ref)] = array
        return array

    def _runner(self, step: StepSpec) -> Any:
        if step.kind == StepKind.EXTERN:
            if any(self.plan.buffers[self.plan.values[r].buffer].supplied for r in step.results):
                return SuppliedExtern(self, step)
            direct = self._direct_extern(step)
            if direct is not None:
                return direct
            return lambda flats, addresses: self.run_extern(step, flats)
        if not _runs_code(step):
            return lambda flats, addresses: self._run_interpreted(step, flats)
        return NativeKernel(self, step)

    def _direct_extern(self, step: StepSpec) -> Any:
        """A runner calling BLAS directly for a top-level float32 mm/addmm/bmm (see :mod:`blas`), or None."""
        op = self.function.ops[step.op_index]
        if not op.has(Trait.MATRIX_PRODUCT):
            return None
        specs = [self.plan.values[i] for i in (*step.operands, *step.results)]
        call = prepare_blas(op, specs)
        if call is None:
            return None
        return BlasStep(self, step, call, [(s.buffer, s.offset * _storage_dtype(s.dtype).itemsize) for s in specs])

    def _stats(self, compile_seconds: float) -> dict[str, Any]:
        interpreted_ops: dict[str, int] = {}
        native = interpreted = externs = 0
        for step in self.plan.steps:
            if step.kind == StepKind.EXTERN or (step.native and step.extern is not None):
                externs += 1
            if step.kind != StepKind.KERNEL:
                continue
            if step.native:
                native += 1
                continue
            interpreted += 1
            for op in self.function.ops[step.op_index].regions[0].ops:
                interpreted_ops[op.name] = interpreted_ops.get(op.name, 0) + 1
        return {"native_kernels": native, "interpreted_kernels": interpreted, "interpreted_ops": interpreted_ops,
                "extern_calls": externs, "compile_seconds": compile_seconds,
                "interpreted_reasons": [s.reason for s in self.plan.steps if s.kind == StepKind.KERNEL and not s.native]}

    # ---- run -----------------------------------------------------------------------------------------------

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        # None unless a profiler or recorder is watching (see executors/tracing.py: the first check is ~50 ns)
        tracer = active_tracer() if tracing.watching() else None
        if tracer is None:
            common = self._array_call
            if common is not None:
                results = common(self, inputs)
                if results is not None:  # None: not the common case (a conversion, a copy, an error to raise)
                    return results
            return self._call(inputs, self._calls)
        calls, graph = self.traced_calls(tracer)
        with tracer.step(graph):
            return self._call(inputs, calls)

    def traced_calls(self, tracer: Any) -> tuple[list[Any], Any]:
        """The step calls wrapped in ``tracer``'s ranges, and the graph's StepInfo (built once per tracer)."""
        self.bind_code()
        if self._traced is None or self._traced[0] is not tracer:
            self._traced = (tracer, traced_steps(tracer, self._step_calls, step_infos(self.function, self.plan)),
                            graph_info(self.function))
        return self._traced[1], self._traced[2]

    def _call(self, inputs: tuple[Any, ...], calls: list[Any]) -> list[np.ndarray]:
        plan = self.plan
        if len(inputs) != len(self.function.params):
            raise InputError(f"func @{self.function.name} takes {len(self.function.params)} inputs, got {len(inputs)}")
        with self._lock:
            # buffer number -> flat array and its data address; arena and constant entries are prefilled
            flats, addresses = self._flat_list.copy(), self._address_list.copy()
            returned: dict[int, np.ndarray] = {}
            near: list[int] = []  # the inputs' data addresses, then the placed outputs' (buffers.placed_empty)
            for number, buffer, dtype, spec in self._call_buffers:  # inputs first
                if spec is None:
                    flats[number], addresses[number] = self._input(buffer.index, inputs[buffer.index], buffer.extent)
                    near.append(addresses[number])
                else:
                    storage, addresses[number] = _placed_empty(buffer.extent, dtype, near)
                    flats[number] = storage
                    returned[buffer.index] = storage.reshape(spec) if type(spec) is tuple else _view(storage, spec)
            for run in calls:
                run(flats, addresses)
            for position, number, spec in self._supplied_outputs:
                storage = flats[number]
                returned[position] = storage.reshape(spec) if type(spec) is tuple else _view(storage, spec)
            results = []
            for position, value_id in enumerate(plan.outputs):
                if position in returned:
                    results.append(returned[position])
                elif position in self.in_place:  # computed in its donated input's storage: returned there
                    results.append(self.arrays((value_id,), flats)[0])
                else:  # a view of an input, the arena or a constant, or an output repeated: copied
                    results.append(self._fresh_copy(position, self.arrays((value_id,), flats)[0]))
            return results

    def _input(self, position: int, array: Any, extent: int) -> tuple[np.ndarray, int]:
        """The flat storage of input ``position`` in the graph's dtype and layout (the caller's memory when it
        already is), and its data address."""
        shape, dtype, strides, contiguous = self._params[position]
        if type(array) is not np.ndarray:
            array = np.asarray(array)
        if array.shape != shape:
            raise InputError(f"input #{position} has shape {list(array.shape)}, the graph expects {list(shape)}")
        if array.dtype != dtype:
            array = to_storage(array, self.function.params[position].type.dtype)
        if array.strides != strides and any(n > 1 and have != want
                                            for n, have, want in zip(shape, array.strides, strides)):
            storage = np.empty(extent, dtype=dtype)
            view = np.lib.stride_tricks.as_strided(storage, shape, strides)
            np.copyto(view, array)
            return storage, _data_address(storage)
        if extent == 0:
            storage = np.empty(0, dtype=dtype)
            return storage, _data_address(storage)
        address = _data_address(array)
        if contiguous:
            return array.reshape(-1), address  # a view (the layout is contiguous), cheaper than as_strided
        return _flat(array, extent), address

    def _fresh_copy(self, position: int, view: np.ndarray) -> np.ndarray:
        layout = self._copy_layouts[position]
        if layout is None:
            return view.copy(order="C")
        extent, shape, strides = layout
        storage = np.empty(extent, dtype=view.dtype)
        out = np.lib.stride_tricks.as_strided(storage, shape, tuple(s * view.dtype.itemsize for s in strides))
        np.copyto(out, view)
        return out

    def arrays(self, ids: tuple[int, ...], flats: list[Any]) -> list[np.ndarray]:
        """Views of values ``ids`` over this call's buffers. Views of arena and constant buffers are the same
        on every call and built once; views of inputs and outputs are not kept (they would keep the caller's
        arrays alive after the call)."""
        views = []
        for i in ids:
            view = self._static_views.get(i)
            if view is None:
                spec = self.plan.values[i]
                view = _view(flats[spec.buffer], spec)
                if spec.buffer in self._static_flats:
                    self._static_views[i] = view
            views.append(view)
        return views

    def run_extern(self, step: StepSpec, flats: list[Any]) -> None:
        """Run top-level extern step ``step`` through ATen into its result buffers."""
        op = self.function.ops[step.op_index]
        operands, results = self.arrays(step.operands, flats), self.arrays(step.results, flats)
        if op.name in LIBRARY_CALLS:
            run_library(op.name, op.attrs, operands, results, [r.type.dtype for r in op.results])
        else:
            run_extern(op.name, op.attrs, operands, results, op.results[0].type.dtype)

    def _run_interpreted(self, step: StepSpec, flats: list[Any]) -> None:
        op = self.function.ops[step.op_index]
        outs = run_op(op, self.arrays(step.operands, flats))
        for out, target in zip(outs, self.arrays(step.results, flats)):
            np.copyto(target, out)

    # ---- artifacts -----------------------------------------------------------------------------------------

    def final(self) -> CpuExecutable:
        """The executable with the best code available now: the optimized one once it is built, else this."""
        optimized = self.optimized
        if optimized is not None and optimized.done() and optimized.exception() is None:
            return optimized.result()
        return self

    def save(self, directory: str | Path) -> list[str]:
        """Write plan.json, kernels.ll, kernels.so (or kernels.a) and runtime.json (the helpers' code, helpers.py)
        into ``directory``; returns the file names (relative to ``directory``) written. The graph itself is not written: the artifact layer stores it. A quick-tier
        executable saves its optimized executable (waiting for it): artifacts hold optimized code only."""
        if self.optimized is not None:
            return self.optimized.result().save(directory)
        self.bind_code()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / PLAN_FILE).write_text(self.plan.to_json(), encoding="utf-8")
        files = [PLAN_FILE]
        if self.module is not None:
            modules = (m if m.endswith("\n") else m + "\n" for m in self.module.llvm_ir)
            (directory / IR_FILE).write_text("".join(modules), encoding="utf-8")
            code_file = CODE_FILES[self.module.form]
            (directory / code_file).write_bytes(stored_code(self.module))
            # the process-wide helpers' code, so a process that loads this needs not compile them (helpers.py)
            (directory / RUNTIME_FILE).write_text(runtime_json(HELPERS), encoding="utf-8")
            files += [IR_FILE, code_file, RUNTIME_FILE]
        return files


def build_cpu_executable(fn: Function, options: Mapping[str, Any] | None = None) -> CpuExecutable:
    """Compile ``fn`` (after the pass pipeline) to native code; see the module docstring."""
    # the planner, the kernel emitters and the passes they use: a build's only (loading an artifact needs none)
    import neuroncc.codegen.llvm.jit as jit
    from neuroncc.codegen.llvm.program import plan_launch

    options = options or {}
    start = time.perf_counter()
    top = wrap_remaining_ops(fn)
    cpu, features = jit.host_cpu()
    workers = compile_workers(options)
    if quick_first(options) is True:
        plan, texts = plan_launch(top, cpu, features, memory_plan(options))
        if quick_tier_applies(plan, texts):
            quick = _executable(top, plan, jit.compile_ir(texts, workers, jit.Tier.QUICK, code_form(stored=False)),
                                options, start)
            quick.optimized = OPTIMIZER.submit(lambda: _executable(
                top, copy.copy(plan), jit.compile_ir(texts, 1), options, time.perf_counter(), arena_of=quick))
            return quick
        return _executable(top, plan, jit.compile_ir(texts, workers) if texts else None, options, start)
    graph_build = quick_first(options) == QUICK_MODULES
    compiler = jit.KernelCompiler(workers, quick_when_independent=graph_build)
    try:
        plan, texts = plan_launch(top, cpu, features, memory_plan(options), on_kernel=compiler.submit)
        compiler.follow(texts)  # the plan's order: submitted optimized-tier kernels first (program.py)
    except BaseException:
        compiler.close()
        raise
    if graph_build and compiler.texts:
        # torch.compile's graph: returned before LLVM's tail is done, which runs beside AOTAutograd's work until
        # the first call binds the code (deferred_code.py); its helpers load there too
        code: Any = finish_in_background(compiler.finish, then=load_helpers)
    else:
        code = compiler.finish()
    executable = _executable(top, plan, code, options, start)
    if compiler.texts and jit.Tier.QUICK in compiler.tiers:
        tiers = compiler.tiers
        executable.optimized = OPTIMIZER.submit(lambda: _executable(
            top, copy.copy(plan), jit.reoptimize(_loaded(code), tiers), options, time.perf_counter(),
            arena_of=executable), quiet=GRAPH_QUIET_SECONDS)
    return executable


def _loaded(code: Any) -> Any:
    """The loaded code of a build: ``code`` itself, or what its pending future gives (waiting for it)."""
    return code.result() if isinstance(code, Future) else code


def record_code(plan: CpuLaunchPlan, module: Any) -> None:
    """Record in ``plan`` the form of ``module``'s code and the checksum of what an artifact stores of it."""
    if module is not None:
        plan.code_form = module.form.value
        plan.object_sha256 = hashlib.sha256(stored_code(module)).hexdigest()


def _executable(top: Function, plan: CpuLaunchPlan, module: Any, options: Mapping[str, Any],
                start: float, arena_of: CpuExecutable | None = None) -> CpuExecutable:
    """The executable of ``plan`` running ``module``'s code (``jit.LoadedCode``, or the future of it: bound at
    the first call; ``plan`` records its form and the checksum of what an artifact stores of it); the optimized build of a quick executable shares its arena
    (``arena_of``)."""
    if not isinstance(module, Future):
        record_code(plan, module)
    return CpuExecutable(top, plan, module, thread_count(options), time.perf_counter() - start, threading_mode(options),
                         arena_of, threads_fixed(options))


def load_cpu_executable(directory: str | Path, fn: Function, options: Mapping[str, Any] | None = None, *,
                        graph_checked: bool = False, files: Mapping[str, bytes] | None = None) -> CpuExecutable:
    """Load an executable saved by :meth:`CpuExecutable.save` for ``fn`` without recompiling.

    Raises ArtifactError when the files are missing or corrupt, or were built for another graph or CPU.
    ``graph_checked``: the caller read ``fn`` and the plan from one artifact whose files it checked against
    their recorded sha256 (:func:`neuroncc.driver.artifact.read_artifact`), so the plan's ``function_hash``
    is the hash of ``fn``'s text as it was saved, and is not computed again (printing the graph and hashing it,
    ~1-1.5 ms per graph of a warm start). ``files``: the artifact's files' bytes by name as that check read
    them, used instead of reading the files again (a file missing there is read from ``directory``).
    """
    options = options or {}
    directory = Path(directory)
    files = CodeFiles(directory, files)
    try:
        plan = CpuLaunchPlan.from_json(files.text(PLAN_FILE))
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"cannot read {directory / PLAN_FILE}: {exc}") from None
    top = wrap_remaining_ops(fn)
    if not (graph_checked and top is fn) and plan.function_hash != function_hash(top):
        raise ArtifactError(f"{directory}: the saved executable was compiled for a different graph")
    target = target_cpu()  # the host's, or the one NEURONCC_CPU names (checked: the host runs its code)
    if (plan.cpu, plan.features) != (target.name, target.features):
        raise ArtifactError(f"{directory}: compiled for CPU '{plan.cpu}', this process compiles for "
                            f"'{target.name}'{' (NEURONCC_CPU)' if target.named else ''}")
    module = None
    if any(step.native for step in plan.steps):
        module = load_code(files, plan)
        if wants_offers(tuple(HELPERS)):
            try:
                offer(files.text(RUNTIME_FILE))
            except (OSError, UnicodeDecodeError):
                pass  # an artifact without the helpers (older, or none written): they are compiled when needed
    return CpuExecutable(top, plan, module, thread_count(options), threading_mode=threading_mode(options),
                         fixed_threads=threads_fixed(options))


__all__ = ["CODE_FILES", "CpuExecutable", "KernelIndexError", "build_cpu_executable", "load_cpu_executable", "stored_code"]
