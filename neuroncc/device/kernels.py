"""Running an executable on neuron tensors where they are, and the eager path's compiled kernel entry.

:class:`Binding` is one executable call over the device's memory. It passes the executable the data address
of each input tensor (device memory is host memory; CPU 0-d tensors are host memory too) and each lifted
float as a 0-d buffer, allocates each new result from the device's allocator with the strides wanted (eager's)
and lets the executable write it in place when its output layout is those strides (the common case), else
through a temporary. Results the call writes into existing tensors (``add_``, ``out=``, a compiled graph's
input mutations) come back in a temporary and are copied in (or, for a whole storage, exchange memory with
it; small ones use the entry's own scratch memory, cheaper than a fresh block per call): the executable's
outputs must not alias its inputs (the kernels' pointers are ``noalias``). The eager programs and compiled
graphs take bfloat16 tensors as their bits (i16 parameters and outputs, ``programs._program`` and
``frontend/aten_compiler.py``): read and written in place, like float16. Dtypes an executable stores
differently (bf16 parameters of a function imported without ``bf16_bits`` travel as float32, see
neuroncc.executors.executable; float64 computes as float32) are converted on the way.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_unflatten

from neuroncc.device import memory
from neuroncc.device.allocator import scratch_block
from neuroncc.device.fallback import check_error_on_host
from neuroncc.device.op_forms import OpForm, argument
from neuroncc.device.programs import Program
from neuroncc.device.thread_count import following_runner
from neuroncc.frontend.imported import ComputedOutput, InputOutput
from neuroncc.ir import DType
from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.errors import RuntimeCheckError
from neuroncc.codegen.llvm.fork_safety import renew_in_child

_STORAGE = {DType.f32: torch.float32, DType.bf16: torch.float32, DType.f16: torch.float16, DType.i64: torch.int64,
            DType.i32: torch.int32, DType.i16: torch.int16, DType.i8: torch.int8, DType.u8: torch.uint8,
            DType.bool: torch.bool, DType.c64: torch.complex64}
#: what a float64 result is on the device
_ON_DEVICE = {torch.float64: torch.float32}


def _same_layout(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    return all(size == 1 or x == y for size, x, y in zip(shape, a, b))


def _holds(shape: Sequence[int], strides: Sequence[int], exec_shape: Sequence[int], exec_strides: Sequence[int]
           ) -> bool:
    """Whether the executable's output (``exec_shape``, ``exec_strides``) is the bytes of a tensor of ``shape``
    and ``strides``: the same layout, or (a program built over its tensors in memory order:
    layouts.memory_order_shapes, the only programs whose outputs have another shape than their results) a
    contiguous output of a dense result's elements in memory order."""
    if tuple(shape) == tuple(exec_shape):
        return _same_layout(shape, strides, exec_strides)
    return memory.numel(tuple(shape)) == memory.numel(tuple(exec_shape)) and memory.dense_strides(shape, strides) \
        and tuple(exec_strides) == memory.bare_strides(tuple(exec_shape))


def _in_memory_order(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A dense ``tensor`` seen as a contiguous tensor of ``shape`` over its elements in memory order (its own
    view when the shapes agree)."""
    if tuple(tensor.shape) == tuple(shape):
        return tensor
    order = sorted(range(tensor.dim()), key=lambda d: -tensor.stride(d))
    return tensor.permute(order).reshape(-1).view(tuple(shape))


def _scalar_maker(dtype: DType) -> Any:
    """A lifted float -> a 0-d buffer of the parameter's storage type (fresh per call: thread safe)."""
    if dtype is DType.f32:
        return ctypes.c_float
    if dtype is DType.bf16:  # bf16 travels as float32 holding a bf16 value
        return lambda value: ctypes.c_float(float(torch.tensor(value, dtype=torch.bfloat16)))
    if dtype is DType.f16:  # through float32, as eager converts a Python float (c10::Half(double) takes a float):
        # 1 + 2**-11 + 2**-40 is float16's 1.0 there, not the nearest float16 of the double, 1.0009765625
        return _float16_scalar
    storage = dtype.numpy
    return lambda value: np.array(value, dtype=storage)


def _float16_scalar(value: float) -> np.ndarray:
    with np.errstate(over="ignore"):  # (beyond float32's range: inf, as c10's conversion gives)
        return np.array(np.float32(value), dtype=np.float16)


def _addresses_lifting_floats(tensors: list[torch.Tensor], floats: list[float], sources: Sequence[int],
                              floats_at: Sequence[int]) -> tuple[list[int], list[ctypes.c_float]]:
    """A kernel call's argument addresses: ``tensors[s]``'s data for each source ``s >= 0``, and for each negative
    one the address of a float32 buffer holding the lifted Python float (``floats[k]``, ``k`` from ``floats_at``
    in order). The buffers are returned too: the caller keeps them alive until the kernel has run."""
    buffers = [ctypes.c_float(floats[k]) for k in floats_at]
    lifted = iter(buffers)
    return [tensors[s].data_ptr() if s >= 0 else ctypes.addressof(next(lifted)) for s in sources], buffers


def _address(buffer: Any) -> int:
    return ctypes.addressof(buffer) if isinstance(buffer, ctypes._SimpleCData) else buffer.ctypes.data


_NEW, _NEW_VIA_CPU, _WRITE, _WRITE_VIA_CPU, _UNUSED = "new", "new via cpu", "write", "write via cpu", "unused"
#: a write the executable computes in its input's own memory (a donated input, ``executable.in_place``)
_DONATED = "donated"


class Binding:
    """One executable over neuron tensors (see the module docstring).

    ``inputs[i]`` says what feeds parameter ``i``: the torch dtype of the tensor passed (``"float"`` for a
    Python float). ``results`` maps IR output index -> (shape, strides, torch dtype) of a new tensor;
    ``writes`` maps IR output index -> (shape, strides, torch dtype) of the existing tensor it is written
    into. ``binding(values, index, targets)`` takes one value per parameter, the device index for new
    tensors and the write targets (by output index), and returns the new tensors by output index.

    A written value goes to fresh device memory first (an executable's outputs must not alias its inputs).
    When the target is the whole of its storage, that storage then takes the fresh memory (its data pointer
    and the block behind it are exchanged, O(1): every view of the storage sees the new values); otherwise
    the bytes are copied in.
    """

    def __init__(self, executable: Any, inputs: Sequence[torch.dtype | str],
                 results: dict[int, tuple[tuple[int, ...], tuple[int, ...], torch.dtype]],
                 writes: dict[int, tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]):
        self.executable = executable  # what this binding runs (a compiled graph's is rebound when it changes)
        self.run = AddressCall(executable).runner()
        follows = getattr(executable, "follows_threads", None)
        if follows is not None and follows():  # a phase splits: the calling thread's count, per call
            self.run = following_runner(executable, self.run)
        function = executable.function
        layouts = executable.output_strides
        self.convert: list[Any] = []  # per parameter: None (address as is), "float32", or a scalar maker
        for param, given in zip(function.params, inputs):
            if given == "float":
                self.convert.append(_scalar_maker(param.type.dtype))
            elif param.type.dtype is DType.bf16 or given is torch.float64:
                self.convert.append("float32")
            else:
                self.convert.append(None)
        self.plain_inputs = all(c is None for c in self.convert)
        # tensors read in place and floats passed as buffers (no conversion): what the fast call handles
        self.direct_inputs = all(c is None or c is ctypes.c_float for c in self.convert)
        # per IR output: (how, (bytes, shape, strides, dtype, bare-contiguous), the executable's layout)
        self.outputs: list[tuple[str, tuple[Any, ...], tuple[Any, ...]]] = []
        donated = getattr(executable, "in_place", None) or {}
        for position, value in enumerate(function.outputs):
            storage = _STORAGE[value.type.dtype]
            exec_layout = (tuple(value.type.shape), tuple(layouts[position]), storage)
            wanted = results.get(position) or writes.get(position)
            if wanted is None:
                self.outputs.append((_UNUSED, (), exec_layout))
                continue
            if position in donated and position in writes:
                self.outputs.append((_DONATED, (), exec_layout))
                continue
            shape, strides, dtype = tuple(wanted[0]), tuple(wanted[1]), _ON_DEVICE.get(wanted[2], wanted[2])
            if storage is torch.int16 and dtype is torch.bfloat16:  # a bf16 result's bits (importer's bf16_bits)
                exec_layout = exec_layout[:2] + (dtype,)
            in_place = value.type.dtype is not DType.bf16 and dtype == exec_layout[2] and \
                _holds(shape, strides, exec_layout[0], exec_layout[1])
            spec = (memory.extent_bytes(shape, strides, dtype.itemsize), shape, strides, dtype,
                    strides == memory.bare_strides(shape))
            if position in results:
                self.outputs.append((_NEW if in_place else _NEW_VIA_CPU, spec, exec_layout))
            else:
                dense = memory.dense_strides(shape, strides)
                self.outputs.append((_WRITE if in_place and dense else _WRITE_VIA_CPU, spec, exec_layout))
        #: every output computed in its input's own memory, the inputs tensors or float32 buffers
        self.donated_only = self.direct_inputs and bool(self.outputs) and \
            all(how == _DONATED for how, _, _ in self.outputs)
        self.no_outputs = [0] * len(self.outputs)
        #: the common call: no conversion, every output a new tensor written in place
        self.fast = [spec for _, spec, _ in self.outputs] if self.direct_inputs and \
            all(how == _NEW for how, _, _ in self.outputs) else None

    def __call__(self, values: Sequence[Any], index: int, targets: dict[int, torch.Tensor] | None = None
                 ) -> dict[int, torch.Tensor]:
        if self.fast is not None:
            return dict(enumerate(self.call_fast(values, index)))
        keep: list[Any] = []  # temporaries alive until the kernel has run
        addresses = []
        for value, convert in zip(values, self.convert):
            if convert is None:
                addresses.append(value.data_ptr())
            elif convert == "float32":
                # the span of memory the view reads, converted whole: the kernel reads it in the view's own
                # strides, which it was compiled for (``to`` makes a view that is not dense, such as a slice of
                # each row, contiguous: the kernel then read past its rows)
                span = memory.extent_bytes(value.shape, value.stride(), 1)
                converted = memory.host_view(value).as_strided((span,), (1,)).to(torch.float32)
                keep.append(converted)
                addresses.append(converted.data_ptr())
            else:
                buffer = convert(value)
                keep.append(buffer)
                addresses.append(_address(buffer))
        new = memory.new_tensor
        buffers: list[torch.Tensor] = []
        for how, spec, (shape, exec_strides, storage) in self.outputs:
            if how == _DONATED:
                buffers.append(None)
            elif how in (_NEW, _WRITE):
                nbytes, wanted_shape, strides, dtype, contiguous = spec
                buffers.append(new(nbytes, wanted_shape, strides, dtype, index, contiguous))
            else:
                buffers.append(torch.empty_strided(shape, exec_strides, dtype=storage))
        self.run(addresses, [b.data_ptr() if b is not None else 0 for b in buffers])
        made: dict[int, torch.Tensor] = {}
        for position, ((how, spec, _), buffer) in enumerate(zip(self.outputs, buffers)):
            if how == _NEW:
                made[position] = buffer
            elif how == _NEW_VIA_CPU:
                made[position] = memory.new_tensor(*spec[:4], index)
                _in_memory_order(memory.host_view(made[position]), buffer.shape).copy_(buffer)
            elif how == _WRITE:
                memory.commit(targets[position], buffer, spec[0])
            elif how == _WRITE_VIA_CPU:
                _in_memory_order(memory.host_view(targets[position]), buffer.shape).copy_(buffer)
        return made

    def call_fast(self, values: Sequence[Any], index: int) -> list[torch.Tensor]:
        """The common call (``self.fast`` is set): the new tensors in output order."""
        new = memory.new_tensor
        made = [new(nbytes, shape, strides, dtype, index, contiguous)
                for nbytes, shape, strides, dtype, contiguous in self.fast]
        if self.plain_inputs:
            self.run([v.data_ptr() for v in values], [t.data_ptr() for t in made])
            return made
        floats = [ctypes.c_float(v) if c is not None else v for v, c in zip(values, self.convert)]  # kept alive
        addressof = ctypes.addressof
        self.run([v.data_ptr() if c is None else addressof(v) for v, c in zip(floats, self.convert)],
                 [t.data_ptr() for t in made])
        return made


#: In-place calls writing at most this many bytes in all write through a scratch buffer and a copy
SMALL_WRITE_BYTES = 16 << 10


class CompiledKernel:
    """The eager entry of a compiled op program: ``kernel(args, kwargs, tensors, floats)`` -> the op's result.

    An executable built at LLVM's quick tier first (``executable.optimized``, see
    neuroncc.executors.cpu.tiers) is swapped for its optimized build when that is done: the optimizer's thread
    rebinds the kernel (a new binding and call, each assigned whole, so a call under way finishes on the code
    it started with). Both compute the same bits."""

    holds_kernel = True

    def __init__(self, form: OpForm, program: Program, executable: Any, device_index: int,
                 tensors: list[torch.Tensor], state: Any):
        self.form, self.program, self.state = form, program, state
        self.index = device_index
        self.tick = 0
        self.sources = program.inputs  # per parameter: call tensor index, or -1 - k for float k
        inputs = [tensors[s].dtype if s >= 0 else "float" for s in program.inputs]
        results = {o.index: (o.spec.shape, o.spec.stride, o.spec.dtype) for o in program.outputs
                   if isinstance(o, ComputedOutput)}
        self.writes = {output: tensor for tensor, output in program.writes}
        writes = {output: (tuple(tensors[t].shape), tuple(tensors[t].stride()), tensors[t].dtype)
                  for output, t in self.writes.items()}
        self._layouts = (inputs, results, writes)
        self.tensor_only = all(s >= 0 for s in self.sources)
        self.call_tensors = len(tensors)
        #: what other entries built from this kernel's binding: each is run again once it is rebound
        self.rebound: list[Any] = []
        final = getattr(executable, "final", None)
        self._bind(final() if final is not None else executable)
        pending = getattr(executable, "optimized", None)
        if pending is not None and self.executable is executable:  # still the quick code: swapped when done
            pending.add_done_callback(self._swap_in)

    def _bind(self, executable: Any) -> None:
        binding = Binding(executable, *self._layouts)
        form, program = self.form, self.program
        # one new tensor returned as it is (most ops): the call needs no result assembly
        self.single = (not form.writes and binding.fast is not None
                       and len(program.outputs) == 1 and isinstance(program.outputs[0], ComputedOutput)
                       and program.result_tree.is_leaf())
        self.executable, self.binding = executable, binding
        #: tensors in, one new tensor out, every input read where it is: most ops (their own closure)
        self.one_result = self.single and self.tensor_only and binding.plain_inputs and len(binding.fast) == 1
        if self.one_result:
            self.call = self._one_tensor_in_one_out()  # type: ignore[method-assign]
        elif self._writes_in_place(form, program):
            self.call = self._in_place()  # type: ignore[method-assign]
        elif self._new_results_only(form, program):
            self.call = self._new_results()  # type: ignore[method-assign]

    def _swap_in(self, optimized: Any) -> None:
        """The optimized executable is built (on the optimizer's thread): run it from the next call on. If its
        build failed, the quick code stays (the same results, slower; saving the executable reports the error)."""
        if optimized.exception() is None:
            # a call of the quick code under way may still be writing its scratch memory: kept with the entry
            self._quick_scratch = getattr(self, "_scratch", None)
            self._bind(optimized.result())
            for rebuild in self.rebound:
                rebuild()

    def _writes_in_place(self, form: OpForm, program: Program) -> bool:
        """An in-place or out= op at its commonest: it returns only the arguments it writes (positionally
        passed or by keyword), every output is written straight into its argument's fresh memory, and the
        inputs are tensors or floats passed as float32 buffers."""
        binding = self.binding
        kinds = {how for how, _, _ in binding.outputs}
        return (form.writes and not program.outputs and all(r is not None for r in form.returns)
                and binding.direct_inputs and bool(binding.outputs) and (kinds == {_WRITE} or kinds == {_DONATED}))

    def _in_place(self, feed: Sequence[tuple[int, int, Any]] | None = None) -> Any:
        """The in-place call as one closure (``x.add_(y, alpha=a)``, an optimizer's update): the kernel writes
        fresh blocks, each then becomes (or is copied into) its argument, and the written arguments are
        returned as the op returns them. With ``feed`` (:meth:`fed_by_numbers`) the closure serves the call
        whose Python numbers this signature's 0-d tensors stand for (``x.mul_(0.5)``)."""
        binding, form = self.binding, self.form
        run, index, state, commit = binding.run, self.index, self.state, memory.commit
        sources = tuple(self.sources)
        floats_at = tuple(-1 - s for s in sources if s < 0)
        params = None if feed is None else tuple(feed[s] for s in sources)
        # each written argument's place among the call's tensors (through the feed: the numbers' call's)
        writes = self.writes if feed is None else {output: feed[t][0] for output, t in self.writes.items()}
        # every write computed in its argument's own memory (fused_optimizers.py's programs): no output memory
        donated = binding.outputs[0][0] == _DONATED
        no_outputs = [0] * len(binding.outputs)
        outputs = () if donated else \
            tuple((spec, writes[position]) for position, (_, spec, _) in enumerate(binding.outputs))
        makers = tuple(memory.tensor_maker(*spec[:4], index, spec[4]) for spec, _ in outputs)
        op = form.op
        positions = {a.name: p for p, a in enumerate(op._schema.arguments)}
        returned = tuple((positions[name], name) for name in form.returns)
        memmove = ctypes.memmove
        # small results (a bias's optimizer update, a step counter): through this entry's scratch memory
        scratch, scratch_blocks, scratch_lock = None, (), renew_in_child(threading.Lock())
        if outputs and sum(spec[0] for spec, _ in outputs) <= SMALL_WRITE_BYTES:
            # (memory, address) pairs, alive with this closure (a fed closure has its own beside the entry's)
            scratch_blocks = [scratch_block(spec[0]) for spec, _ in outputs]
            self._scratch = [m for m, _ in scratch_blocks]
            scratch = [address for _, address in scratch_blocks]
        addressof = ctypes.addressof

        def call(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> Any:
            state.device_calls += 1
            if params is not None:  # the numbers in buffers of their 0-d tensors' bytes, alive until the run
                numbers = [number_type(args[position]) for _, position, number_type in params
                           if number_type is not None]
                held = iter(numbers)
                addresses = [tensors[t].data_ptr() if number_type is None else addressof(next(held))
                             for t, _, number_type in params]
            elif floats_at:
                addresses, buffers = _addresses_lifting_floats(tensors, floats, sources, floats_at)  # (kept alive)
            else:
                addresses = [tensors[s].data_ptr() for s in sources]
            if donated:
                try:
                    run(addresses, no_outputs)
                except RuntimeCheckError as kernel_error:
                    return check_error_on_host(form, args, kwargs, index, kernel_error)
            elif scratch is not None:
                with scratch_lock:
                    try:
                        run(addresses, scratch)
                    except RuntimeCheckError as kernel_error:
                        return check_error_on_host(form, args, kwargs, index, kernel_error)
                    for ((nbytes, *_), target), (_, address) in zip(outputs, scratch_blocks):
                        memmove(tensors[target].data_ptr(), address, nbytes)
            else:
                fresh = [make() for make in makers]
                try:
                    run(addresses, [t.data_ptr() for t in fresh])
                except RuntimeCheckError as kernel_error:
                    return check_error_on_host(form, args, kwargs, index, kernel_error)
                for (spec, target), made in zip(outputs, fresh):
                    commit(tensors[target], made, spec[0])
            if not returned:
                return None
            values = [args[p] if p < len(args) else argument(op, name, args, kwargs) for p, name in returned]
            return values[0] if len(values) == 1 else tuple(values)

        return call

    def _new_results_only(self, form: OpForm, program: Program) -> bool:
        """An op returning only new tensors, one or a tuple of them (``native_layer_norm``'s output, mean and
        rstd; ``add(x, y, alpha=0.5)``), each written in place into fresh memory, the inputs tensors or floats
        passed as float32 buffers: the general call's result assembly (a dict, the outputs' kinds, the pytree)
        settled once."""
        tree = program.result_tree
        flat = tree.is_leaf() or (tree.type is tuple and all(child.is_leaf() for child in tree.children()))
        return (not form.writes and self.binding.fast is not None and flat and len(program.outputs) > 0
                and tree.num_leaves == len(program.outputs)
                and all(isinstance(output, ComputedOutput) for output in program.outputs))

    def _new_results(self) -> Any:
        """:meth:`_new_results_only`'s call as one closure: a prebound maker per result, the lifted floats in
        float32 buffers, one kernel call, the results returned as the op returns them."""
        binding, form, index, state = self.binding, self.form, self.index, self.state
        run = binding.run
        makers = tuple(memory.tensor_maker(*spec[:4], index, spec[4]) for spec in binding.fast)
        order = tuple(output.index for output in self.program.outputs)
        leaf = self.program.result_tree.is_leaf()
        sources = tuple(self.sources)
        floats_at = tuple(-1 - s for s in sources if s < 0)
        data_ptr = torch.Tensor.data_ptr

        def call(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> Any:
            state.device_calls += 1
            made = [make() for make in makers]
            if floats_at:
                addresses, buffers = _addresses_lifting_floats(tensors, floats, sources, floats_at)  # (kept alive)
            else:
                addresses = [tensors[s].data_ptr() for s in sources]
            try:
                run(addresses, list(map(data_ptr, made)))
            except RuntimeCheckError as kernel_error:
                return check_error_on_host(form, args, kwargs, index, kernel_error)
            if leaf:
                return made[order[0]]
            return tuple([made[i] for i in order])

        return call

    def run_donated(self, addresses: Sequence[int], floats: Sequence[float]) -> bool:
        """Run a program that computes every write in its tensor's own memory (a multi-tensor step's:
        fused_optimizers.compile_step) over the call's tensors at ``addresses`` (read by the caller, which also
        checked they do not overlap) and its lifted ``floats``; False (nothing run) when this kernel's writes go
        through fresh memory or its inputs need converting (the caller then uses :meth:`call`)."""
        binding = self.binding  # read once: the optimizer's thread may rebind it
        if not binding.donated_only:
            return False
        buffers = [ctypes.c_float(value) for value in floats]  # alive until the kernel has run
        addressof = ctypes.addressof
        self.state.device_calls += 1
        binding.run([addresses[s] if s >= 0 else addressof(buffers[-1 - s]) for s in self.sources],
                    binding.no_outputs)
        return True

    def _one_tensor_in_one_out(self) -> Any:
        """The commonest call as one closure: tensors in, one new tensor out (instance attribute lookups and
        the general path's branches cost more than the rest of the call)."""
        make = memory.tensor_maker(*self.binding.fast[0][:4], self.index, self.binding.fast[0][4])
        run, sources, index, state = self.binding.run, self.sources, self.index, self.state
        data_ptr = torch.Tensor.data_ptr
        in_order = list(sources) == list(range(self.call_tensors))  # the call's tensors are the parameters

        def call(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> torch.Tensor:
            state.device_calls += 1
            out = make()
            try:
                run(list(map(data_ptr, tensors)) if in_order else [tensors[s].data_ptr() for s in sources],
                    [out.data_ptr()])
            except RuntimeCheckError as kernel_error:
                return check_error_on_host(self.form, args, kwargs, index, kernel_error)
            return out

        return call

    def fed_by_numbers(self, feed: Sequence[tuple[int, int, Any]]) -> Any:
        """This kernel's call for another signature of its op, one whose Python numbers stand for some of this
        signature's tensors (entries.WrapNumbers: ``x * 0.5`` reaches the device with 0.5, which eager wraps
        into a 0-d tensor). ``feed[i]`` says where this signature's call tensor ``i`` comes from:
        ``(j, -1, None)`` the other call's tensor ``j``, ``(-1, p, ctype)`` the number at argument position
        ``p``, passed in a ctypes buffer holding the 0-d tensor's bytes (no tensor made). For the one-result
        kind of kernel (``one_result``) and the in-place kind (``x.mul_(0.5)``: :meth:`_in_place`, numbers
        never written); None otherwise."""
        if not self.one_result:
            if (self.tensor_only and self._writes_in_place(self.form, self.program)
                    and all(feed[t][0] >= 0 for t in self.writes.values())):  # x.mul_(0.5): numbers never written
                return self._in_place(feed)
            return None
        make = memory.tensor_maker(*self.binding.fast[0][:4], self.index, self.binding.fast[0][4])
        run, index, state, form = self.binding.run, self.index, self.state, self.form
        params = tuple(feed[s] for s in self.sources)
        addressof = ctypes.addressof
        if len(params) == 2 and params[0][2] is None and params[1][2] is not None:  # x * 0.5: one tensor, one number
            (tensor, _, _), (_, position, number_type) = params

            def tensor_and_number(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                                  floats: list[float]) -> torch.Tensor:
                state.device_calls += 1
                number = number_type(args[position])
                out = make()
                try:
                    run([tensors[tensor].data_ptr(), addressof(number)], [out.data_ptr()])
                except RuntimeCheckError as kernel_error:
                    return check_error_on_host(form, args, kwargs, index, kernel_error)
                return out

            return tensor_and_number

        def call(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> torch.Tensor:
            state.device_calls += 1
            numbers = []  # alive until the kernel has run
            addresses = []
            for tensor, position, number_type in params:
                if number_type is None:
                    addresses.append(tensors[tensor].data_ptr())
                else:
                    numbers.append(number_type(args[position]))
                    addresses.append(addressof(numbers[-1]))
            out = make()
            try:
                run(addresses, [out.data_ptr()])
            except RuntimeCheckError as kernel_error:
                return check_error_on_host(form, args, kwargs, index, kernel_error)
            return out

        return call

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
             floats: list[float]) -> Any:
        self.state.device_calls += 1
        if self.single:
            if self.tensor_only:
                values = [tensors[s] for s in self.sources]
            else:
                values = [tensors[s] if s >= 0 else floats[-1 - s] for s in self.sources]
            try:
                return self.binding.call_fast(values, self.index)[0]
            except RuntimeCheckError as kernel_error:
                return check_error_on_host(self.form, args, kwargs, self.index, kernel_error)
        if self.tensor_only:
            values = [tensors[s] for s in self.sources]
        else:
            values = [tensors[s] if s >= 0 else floats[-1 - s] for s in self.sources]
        targets = {output: tensors[tensor] for output, tensor in self.writes.items()} if self.writes else None
        try:
            made = self.binding(values, self.index, targets)
        except RuntimeCheckError as kernel_error:  # a failed check: CPU's kernel raises eager's own error for it
            return check_error_on_host(self.form, args, kwargs, self.index, kernel_error)
        new = []  # the program's results, in order
        for output in self.program.outputs:
            if isinstance(output, ComputedOutput):
                new.append(made[output.index])
            elif isinstance(output, InputOutput):  # a new result equal to an input: still a new tensor
                new.append(memory.to_device(memory.host_view(tensors[output.position]), self.index))
            else:
                new.append(output.value)
        form = self.form
        if not form.writes:
            return tree_unflatten(new, self.program.result_tree)
        # The op writes arguments: each of its returns is a written argument or, in order, a new result
        # (native_batch_norm returns new tensors and updates the running statistics).
        fresh = iter(new)
        returns = [argument(form.op, name, args, kwargs) if name is not None else next(fresh) for name in form.returns]
        if not returns:
            return None
        return returns[0] if len(returns) == 1 else tuple(returns)
