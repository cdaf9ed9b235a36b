"""The callable AOTAutograd runs: tensors in, executable, tensors out.

It follows AOTAutograd's boxed calling convention (one list argument, cleared once read so inputs can be
freed early) and builds every graph output the way :class:`~neuroncc.frontend.imported.ImportedGraph` says:
computed outputs get eager's dtype and strides, inputs returned unchanged are the same tensor objects, and
missing gradients are ``None``. In-place updates of inputs are written back before returning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from neuroncc.errors import RuntimeCheckError
from neuroncc.frontend.boundary import HostDevice
from neuroncc.frontend.direct_call import DirectCall
from neuroncc.frontend.convert import ParameterViews, TensorSpec, numpy_layout, to_torch, wrap_result
from neuroncc.frontend.profiling import ensure_installed
from neuroncc.frontend.run_errors import located_run_error
from neuroncc.frontend.imported import ComputedOutput, ImportedGraph, InputOutput, draw_key
from neuroncc.ir.ops.library_linalg import LinalgInputError
from neuroncc.executors.executable import Executable


class CompiledGraph:
    """An imported graph bound to its executable.

    ``free_layouts`` are graph output positions that need not have eager's strides (the activations a forward
    graph saves for its backward, which only our backward graph reads): they keep the layout the executable
    returns them in, when it says which (``executable.output_strides``) and it is a dense one, instead of being
    copied into eager's. ``output_strides`` lists every output's strides (None for non-computed outputs), for
    AOTAutograd, which compiles the backward graph for them (as it does for Inductor's layouts).
    ``outputs`` pairs each graph output with its numpy layout (for computed ones); ``device`` runs the call
    instead when the graph's tensors live on a host-memory device. ``source``: the aten graph ``graph`` was
    imported from, when known: an index out of range at run time is located in it (run_errors.py).
    """

    def __init__(self, graph: ImportedGraph, executable: Executable, free_layouts: frozenset[int] = frozenset(),
                 device: HostDevice | None = None, artifact_key: str | None = None, source: Any = None):
        self.graph = graph
        self.source = source
        self.artifact_key = artifact_key  # the compile cache's key of the executable (None: compiled uncached)
        # An executable with quick-tier code (executors/cpu/tiers.py) brings its optimized build as a future:
        # a call takes that build once it is done (on the caller's thread: a call under way keeps the code it
        # started with). Both compute the same bits, and have the same plan, so outputs and strides stay.
        final = getattr(executable, "final", None)
        self.executable = final() if final is not None else executable
        #: the thread count the executable runs on (None: not known yet): checked against torch's before calls
        self._threads: int | None = getattr(self.executable, "threads", None)
        self._pending = getattr(self.executable, "optimized", None)
        # An executable whose kernels' code is still being finished in the background (the cpu launcher's
        # deferred_code.py) binds it at its first call, which waits for it (and raises the build's own error if
        # that failed, on every call) and then makes the direct call
        self._code_pending = getattr(self.executable, "code_pending", None) is not None
        self.device = device  # a host-memory device whose tensors this graph reads and returns (boundary.py)
        ensure_installed()  # torch.profiler sees the executable's kernels (frontend/profiling.py)
        # AOTAutograd passes the arguments as one list that we may clear. An instance attribute, not a class
        # one: TorchDynamo's disable() wrapper around the backward copies the instance __dict__ only.
        self._boxed_call = True
        self._parameters = ParameterViews(len(graph.param_positions), graph.bf16_bits)
        # per graph output: how to build it (computed outputs with the result layout that needs no conversion)
        returned = getattr(executable, "output_strides", None)
        self.outputs: list[tuple[Any, Any]] = []
        self.output_strides: list[tuple[int, ...] | None] = []
        for position, output in enumerate(graph.outputs):
            if not isinstance(output, ComputedOutput):
                self.outputs.append((output, None))
                self.output_strides.append(None)
                continue
            if position in free_layouts and returned is not None:
                output = ComputedOutput(output.index, _own_layout(output.spec, returned[output.index]))
            self.outputs.append((output, numpy_layout(output.spec)))
            self.output_strides.append(output.spec.stride)
        # the common CPU call on data pointers, when no tensor of this graph needs converting (direct_call.py)
        self._direct = DirectCall.of(self.executable, graph, self.outputs) \
            if device is None and not self._code_pending else None
        #: IR outputs of mutations the executable computes in the mutated input's own storage (the function's
        #: ``donated`` metadata, where its launch plan allowed it): no write-back when the input was passed
        #: as it is (the direct call always; the numpy path unless the input crossed as a converted copy)
        in_place = getattr(executable, "in_place", None) or {}
        self.in_place = frozenset(index for position, index in graph.mutations
                                  if index in in_place and graph.param_positions[in_place[index]] == position)
        self._direct_copies = self._copies_after_direct_calls()
        #: the IR output of each graph output, when every one is computed (the direct call's list, made directly)
        self._computed_only = tuple(output.index for output, _ in self.outputs) \
            if all(isinstance(output, ComputedOutput) for output, _ in self.outputs) else None
        self._arena_partner: CompiledGraph | None = None
        #: the lean call's one-frame form once the code is final (:meth:`_settled_call`), None until then
        self._fast: Any = None

    def share_arena_with(self, other: CompiledGraph) -> None:
        """A training graph's forward and backward, whose calls follow one another, keep one arena (the cpu
        launcher's ``sharing_arena``: the process holds the larger of the two, not both). The one rule of a
        compile (``aot_compile.AtenCompilers``) and a graph-cache hit alike. Shared from the backward's build
        on, code pending or not, so its first call runs in pages the forward's touched (or the arena
        reserve's); an optimized build is made over the arena its quick code was built with, and shared again
        when taken (:meth:`_take_optimized`), before it runs."""
        self._arena_partner, other._arena_partner = other, self
        self._share_arena()

    def _share_arena(self) -> None:
        partner = self._arena_partner
        share = getattr(self.executable, "sharing_arena", None)
        if partner is None or share is None:
            return
        mine, theirs = share(partner.executable)
        self._run(mine)
        partner._run(theirs)

    def _run(self, executable: Executable) -> None:
        """Call ``executable`` from now on (the same plan and code: outputs and strides stay)."""
        if executable is self.executable:
            return
        self.executable = executable
        self._threads = getattr(executable, "threads", None)
        if self._direct is not None:
            self._direct = DirectCall.of(self.executable, self.graph, self.outputs)
            self._direct_copies = self._copies_after_direct_calls()
            self._fast = None

    def __call__(self, args: list[Any]) -> list[Any]:
        self._take_final_code()
        if self.device is not None:
            try:
                outputs = self.device.run(self, args)
            except RuntimeCheckError as error:
                raise located_run_error(error, self.source, args) from error
            args.clear()
            return outputs
        graph = self.graph
        if self._direct is not None:
            outputs = self._call_direct(args)
            if outputs is not None:
                return outputs
        arrays = self._parameters.arrays(args, graph.param_positions)
        if graph.rng_key:  # a fresh key from PyTorch's generator: manual_seed / get_rng_state govern it
            arrays = [*arrays, np.array(draw_key(), dtype=np.int64)]
        try:
            results = self.executable(*arrays)
        except LinalgInputError as error:
            # The cpu target's ATen call raises torch's own error; the numpy references (interp, nki-sim) raise
            # the IR's. Users catch what eager raises, whatever the target: the IR's error stays the cause.
            raise torch.linalg.LinAlgError(str(error)) from error
        except RuntimeCheckError as error:
            raise located_run_error(error, self.source, args) from error
        outputs = self.graph_outputs(args, lambda output, layout: wrap_result(results[output.index], output.spec,
                                                                             layout))
        if graph.mutations:
            self._write_back(args, results)
        args.clear()
        return outputs

    @property
    def direct(self) -> DirectCall | None:
        """The call on data pointers of this graph's final executable, or None: some tensor crosses converted,
        the executable is not the cpu target's, or its optimized build is still to come."""
        return self._direct if self._pending is None else None

    @property
    def lean_call(self) -> Any:
        """``call(args) -> outputs or None``: this graph's direct call and its outputs, nothing else (no list
        cleared, no numpy path: None when a tensor of this call does not cross as it is); None when the graph
        has no direct call. For lean_call.py, which decides when AOTAutograd's wrappers may be left out. A graph
        whose code is still pending (deferred_code.py) gets its direct call when the code is bound, at its first
        call: until then the lean call is offered, and that first call binds the code."""
        has_direct = self._direct is not None or (self._code_pending and self.device is None)
        return self._lean if has_direct else None

    def lean_entry(self, prefix: tuple[Any, ...], declined: Any) -> Any:
        """``entry(*args)``: :attr:`lean_call` on ``(*prefix, *args)``, and ``declined(*args)`` when that call
        declines (lean_call.py: the parameters AOTAutograd prepends, and its runtime). The settled check of
        :meth:`_lean` is made here, in the frame TorchDynamo calls: one Python frame fewer per call, on the
        caches a roofline row's kernel leaves (benchmarks/bench_call_path.py --gap: ~5-15 us a frame there)."""
        graph, lean, get_threads = self, self._lean, torch.get_num_threads

        def entry(*args: Any) -> Any:
            full = (*prefix, *args) if prefix else args
            fast = graph._fast
            if fast is not None and graph._threads == get_threads():
                try:
                    outputs = fast(full)
                except LinalgInputError as error:
                    raise torch.linalg.LinAlgError(str(error)) from error
                except RuntimeCheckError as error:
                    raise located_run_error(error, graph.source, full) from error
            else:
                outputs = lean(full)
            return declined(*args) if outputs is None else outputs

        return entry

    def _lean(self, args: Sequence[Any]) -> list[Any] | None:
        # Once the code is final, one check per call (the thread count: torch's may change between calls), then
        # the direct call's one-frame form: what :meth:`_take_final_code` and :meth:`_direct_outputs` decide is
        # decided once, in :meth:`_settled_call` (after a large kernel each frame and statement costs 5-15 us)
        fast = self._fast
        if fast is not None and self._threads == torch.get_num_threads():
            try:
                return fast(args)
            except LinalgInputError as error:
                raise torch.linalg.LinAlgError(str(error)) from error
            except RuntimeCheckError as error:
                raise located_run_error(error, self.source, args) from error
        self._take_final_code()
        self._fast = self._settled_call()
        return None if self._direct is None else self._direct_outputs(args)

    def _settled_call(self) -> Any:
        """The direct call's ``outputs_call`` when it gives this graph's outputs as :meth:`_direct_outputs` would:
        the code final (none pending, no optimized build to come), no input update left to a ``copy_``; else
        None."""
        direct = self._direct
        if direct is None or self._code_pending or self._pending is not None or self._direct_copies:
            return None
        return direct.outputs_call

    def _take_final_code(self) -> None:
        """Before a call: bind code still pending (deferred_code.py), switch to an optimized build once done, and
        run on torch's thread count of the moment."""
        if self._code_pending:
            self._bind_code()
        if self._pending is not None and self._pending.done():
            self._take_optimized()
        if self._threads != torch.get_num_threads():
            self._follow_threads()

    def _follow_threads(self) -> None:
        """Run the executable on torch's current thread count: it was built (or loaded) with the count of that
        moment, and the caches give it to later compiles too (``CpuExecutable.for_threads``; an executable
        whose ``threads`` option fixed the count, or of another target, stays as it is)."""
        threads = torch.get_num_threads()
        for_threads = getattr(self.executable, "for_threads", None)
        if for_threads is not None and not self._code_pending:
            self._run(for_threads(threads))
        self._threads = threads

    def _bind_code(self) -> None:
        """At the first call of an executable whose code was pending: wait for the code and bind it (raising the
        build's error, then and on every later call, if it failed), then make the direct call and share the
        arena with the partner graph if both are ready."""
        self.executable.bind_code()
        self._code_pending = False
        if self.device is None:
            self._direct = DirectCall.of(self.executable, self.graph, self.outputs)
            self._direct_copies = self._copies_after_direct_calls()
            self._fast = None
        self._share_arena()

    def _take_optimized(self) -> None:
        """Run the optimized build from now on (if it failed, the quick code stays: the same results, slower;
        saving the executable reports the error)."""
        pending, self._pending = self._pending, None
        if pending.exception() is None:
            self._run(pending.result())
        self._share_arena()

    def _copies_after_direct_calls(self) -> list[tuple[int, int]]:
        """(graph input, IR output) of the input updates a direct call leaves to a ``copy_``: neither computed
        in the input's memory nor moved there by the call (a list made once: an optimizer step updates dozens)."""
        if self._direct is None:
            return []
        moved = {index for index, *_ in self._direct.moved}
        return [(position, index) for position, index in self.graph.mutations
                if index not in self.in_place and index not in moved]

    def graph_outputs(self, args: list[Any], computed: Any) -> list[Any]:
        """The graph's outputs in order: ``computed(output, numpy layout)`` for computed ones, the input tensor
        itself for inputs returned unchanged, the constant for the rest (every calling convention shares this)."""
        outputs: list[Any] = []
        for output, layout in self.outputs:
            if isinstance(output, ComputedOutput):
                outputs.append(computed(output, layout))
            elif isinstance(output, InputOutput):
                outputs.append(args[output.position])
            else:
                outputs.append(output.value)
        return outputs

    def _call_direct(self, args: list[Any]) -> list[Any] | None:
        """The call on data pointers (direct_call.py), or None when this call's tensors do not qualify."""
        outputs = self._direct_outputs(args)
        if outputs is not None:
            args.clear()
        return outputs

    def _direct_outputs(self, args: Sequence[Any]) -> list[Any] | None:
        """The direct call's outputs, inputs updated (the one body of :meth:`_call_direct` and the lean call)."""
        try:
            made = self._direct(args)
        except LinalgInputError as error:
            raise torch.linalg.LinAlgError(str(error)) from error
        except RuntimeCheckError as error:
            raise located_run_error(error, self.source, args) from error
        if made is None:
            return None
        if self._direct_copies:
            with torch.no_grad():
                for position, index in self._direct_copies:
                    args[position].copy_(made[index])
        if self._computed_only is not None:
            return [made[index] for index in self._computed_only]
        return self.graph_outputs(args, lambda output, _: made[output.index])

    def _write_back(self, args: list[Any], results: list[Any]) -> None:
        """In-place updates of inputs, copied into the caller's tensors."""
        with torch.no_grad():
            for position, index in self.graph.mutations:
                if index in self.in_place and _in_memory_of(results[index], args[position]):
                    continue  # the kernels wrote it there
                args[position].copy_(to_torch(results[index], TensorSpec.of(args[position])))


def _in_memory_of(array: Any, tensor: torch.Tensor) -> bool:
    """Whether an executable's result is a view starting at ``tensor``'s data (the input crossed as itself)."""
    return isinstance(array, np.ndarray) and array.__array_interface__["data"][0] == tensor.data_ptr()


def _own_layout(spec: TensorSpec, strides: tuple[int, ...]) -> TensorSpec:
    """``spec`` with the executable's ``strides`` when they lay the tensor out densely without overlap (a
    permutation of a contiguous layout) and its dtype crosses without conversion, else ``spec`` unchanged."""
    if numpy_layout(spec) is None or len(strides) != len(spec.shape):
        return spec
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(spec.shape, strides) if n != 1), key=lambda pair: pair[1]):
        if stride != expected:
            return spec
        expected *= size
    return TensorSpec(spec.shape, tuple(strides), spec.dtype)
