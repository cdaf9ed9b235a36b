"""The CPU boundary's common call on data pointers: no numpy arrays made, outputs allocated as tensors.

:class:`~neuroncc.frontend.compiled.CompiledGraph` hands CPU tensors to its executable as numpy views and wraps
the executable's fresh numpy results as tensors (convert.py). For a graph whose tensors all cross as they are
(no dtype that crosses as another, each input already in its parameter's layout, each result wanted in the
layout the executable writes) that is pure overhead: a training step's graphs take and return dozens of
tensors, at 4-6 us of Python each. Such a graph is called the way the ``neuron`` device calls executables
(``executors/cpu/address_call.py``): parameter data pointers in, outputs made by ``torch.empty_strided`` and
written in place.

Whether a graph qualifies is decided once, from its executable and imported graph; every call still checks
that each input has the dtype, shape and strides the decision assumed, and takes the numpy path for that call
when one does not. That check in Python costs about 0.7 us a tensor: 55 us on a compiled optimizer step
over 15 parameters (75 tensors: parameters, gradients, two moments, step counts). So once a call has passed
it, later calls first ask TorchDynamo's C++ ``TensorGuards`` (0.1 us a tensor) whether their tensors match
that call's exactly (Python type, dispatch keys, dtype, device, requires_grad, sizes, strides); only when they
do not does the Python check run again.

An input update the executable could not compute in the input's own memory (the step count of an optimizer:
its kernel reads the old count after writing the new) is written to memory of its own, then copied into
the input. When no graph output returns that result, its memory is a slice of one allocation per call
and the copy a ``memmove`` (the two layouts are the same dense one): a tensor made and a ``copy_`` per
updated input cost 2-3 us each.
"""

from __future__ import annotations

import ctypes
from operator import itemgetter
from typing import Any

import torch

from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.frontend.convert import _NUMPY_DTYPES
from neuroncc.frontend.imported import ComputedOutput, ImportedGraph
from neuroncc.frontend.output_reuse import KEPT_OUTPUTS, OutputRing
from neuroncc.hardware import host
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, CACHE_LINE_BYTES, PLACED_OUTPUT_MIN_BYTES, placement_shift
from neuroncc.hardware import pages
from neuroncc.ir.dtypes import DType


def _dense_same(shape: tuple[int, ...], have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    return all(size == 1 or a == b for size, a, b in zip(shape, have, want, strict=True))


class DirectCall:
    """``call(args) -> outputs by IR output index`` or None (the numpy path must run this call)."""

    def __init__(self, executable: Any, graph: ImportedGraph, outputs: list[tuple[Any, Any]]):
        self.executable = executable  # the code :attr:`run` calls (a new build gets a new DirectCall)
        self.run = AddressCall(executable).runner()  # the leanest form of the call (one Python frame for most)
        params = executable.function.params
        #: per parameter: (graph input position, torch dtype (or the other it may have), shape, strides) the
        #: call's tensor must have
        self.inputs: list[tuple[int, torch.dtype, torch.dtype, tuple[int, ...], tuple[int, ...]]] = []
        for param, position in zip(params, graph.param_positions, strict=True):
            if param.type.dtype is DType.bf16:
                raise _NotDirect("a bf16 parameter crosses as float32")
            dtype = _TORCH_DTYPES[param.type.dtype.numpy]
            # with bf16_bits an i16 parameter holds an int16 tensor or a bf16 tensor's bits: the same bytes
            other = torch.bfloat16 if graph.bf16_bits and dtype is torch.int16 else dtype
            self.inputs.append((position, dtype, other, tuple(param.type.shape), tuple(param.type.layout_strides)))
        #: IR outputs the kernels write into their donated input's tensor: nothing is made for them
        self.in_place = frozenset(getattr(executable, "in_place", {}))
        #: per IR output: (shape, strides, dtype) of the tensor made for it
        self.results: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = []
        for value, strides in zip(executable.function.outputs, executable.output_strides, strict=True):
            self.results.append((tuple(value.type.shape), tuple(strides), _TORCH_DTYPES[value.type.dtype.numpy]))
        for output, _ in outputs:  # each computed graph output is its IR output's tensor as made
            if isinstance(output, ComputedOutput):
                shape, strides, dtype = self.results[output.index]
                if graph.bf16_bits and output.spec.dtype is torch.bfloat16 and dtype is torch.int16:
                    dtype = torch.bfloat16  # a bf16 result's bits (importer.py): the tensor is made as bf16
                    self.results[output.index] = (shape, strides, dtype)
                if output.spec.dtype is not dtype or output.spec.shape != shape or \
                        not _dense_same(shape, strides, output.spec.stride):
                    raise _NotDirect(f"output {output.index} is wanted in another layout or dtype")
        self._tensors = itemgetter(*[position for position, *_ in self.inputs]) if self.inputs else lambda a: ()
        self._seen: Any = None  # TensorGuards over the tensors of a call that passed the check in Python
        #: (IR output, its byte offset in the per-call block, parameter number of the input it updates, bytes)
        #: for input updates no graph output returns: written into one block, then moved into the input
        self.moved: list[tuple[int, int, int, int]] = []
        self._block_bytes = 0
        self._block: torch.Tensor | None = None  # the moved outputs' memory, kept between calls
        returned = {output.index for output, _ in outputs if isinstance(output, ComputedOutput)}
        number_of = {position: number for number, (position, *_) in enumerate(self.inputs)}
        for position, index in graph.mutations:
            number = number_of.get(position)
            if index in self.in_place or index in returned or number is None:
                continue
            shape, strides, dtype = self.results[index]
            _, param_dtype, _, param_shape, param_strides = self.inputs[number]
            if param_dtype.itemsize != dtype.itemsize or param_shape != shape or \
                    not _dense_same(shape, strides, param_strides) or not _dense(shape, strides):
                continue
            nbytes = _numel(shape) * dtype.itemsize
            self.moved.append((index, self._block_bytes, number, nbytes))
            self._block_bytes += -(-max(nbytes, 1) // CACHE_LINE_BYTES) * CACHE_LINE_BYTES  # each output starts on a cache line
        #: IR outputs :meth:`__call__` leaves None: computed in their input, or moved into it
        self.not_made = self.in_place | {index for index, *_ in self.moved}
        made = [(index, *result) for index, result in enumerate(self.results) if index not in self.not_made]
        #: outputs made by ``torch.empty_strided``, and the large ones placed off their inputs (:func:`_placed`)
        self._made = [entry for entry in made if _extent_bytes(*entry[1:]) < PLACED_OUTPUT_MIN_BYTES]
        #: (each with the ring of its last storages: used again once the caller has dropped them, output_reuse.py)
        self._placed = [(*entry, _extent_bytes(*entry[1:]), OutputRing()) for entry in made
                        if _extent_bytes(*entry[1:]) >= PLACED_OUTPUT_MIN_BYTES]
        #: the bytes of :attr:`outputs_call`'s output (0 without that call)
        self.one_output_bytes = 0
        #: ``call(args) -> the graph's outputs, or None`` in one Python frame, for the commonest graph (see
        #: :meth:`_one_output_call`), else None (the caller takes :meth:`__call__`)
        self.outputs_call = self._one_output_call(outputs)

    @staticmethod
    def of(executable: Any, graph: ImportedGraph, outputs: list[tuple[Any, Any]]) -> DirectCall | None:
        """The direct call of a CPU executable and its graph, or None when some tensor must be converted."""
        if getattr(executable, "plan", None) is None or not hasattr(executable, "_call_buffers"):
            return None  # not the cpu target's launcher (nki-sim, the interpreter)
        if graph.rng_key:
            return None
        computed = [o.index for o, _ in outputs if isinstance(o, ComputedOutput)]
        if len(set(computed)) != len(computed):
            return None  # one result returned twice: the numpy path gives each its own tensor object
        try:
            return DirectCall(executable, graph, outputs)
        except (_NotDirect, KeyError):  # KeyError: a dtype without a torch equivalent here
            return None

    def __call__(self, args: list[Any]) -> list[torch.Tensor | None] | None:
        """The outputs by IR output index (None for those in :attr:`not_made`: computed in their input's
        tensor, or moved into it here), or None when this call's tensors do not qualify."""
        tensors = self._tensors(args)
        if len(self.inputs) == 1:
            tensors = (tensors,)
        if self._seen is None or not self._seen.check(*tensors):
            if not self._qualify(tensors):
                return None
        return self.launch([tensor.data_ptr() for tensor in tensors])

    def launch(self, addresses: list[int]) -> list[torch.Tensor | None]:
        """The call on the data addresses of its parameters' tensors (in parameter order: :attr:`inputs`), which
        the caller has checked have the dtypes, shapes and strides the executable takes; the outputs as
        :meth:`__call__` returns them. ``addresses`` is read during the call only (placed outputs copy it)."""
        made: list[Any] = [None] * len(self.results)
        pointers = [0] * len(self.results)
        for index, shape, strides, dtype in self._made:
            made[index] = tensor = torch.empty_strided(shape, strides, dtype=dtype)
            pointers[index] = tensor.data_ptr()
        if self._placed:
            near = addresses.copy()  # (each placed output is appended: the next is placed off it too)
            for index, shape, strides, dtype, nbytes, ring in self._placed:
                made[index] = tensor = _kept_placed(ring, nbytes, shape, strides, dtype, near)
                pointers[index] = tensor.data_ptr()
        if self.moved:
            # the block of the last call, taken (one atomic swap: a call on another thread meanwhile makes its
            # own); torch's CPU allocations start on a cache line, as the launch plan assumes of output buffers
            block, self._block = self._block, None
            if block is None:
                block = torch.empty(self._block_bytes, dtype=torch.uint8)
            base = block.data_ptr()
            for index, offset, _, _ in self.moved:
                pointers[index] = base + offset
            self.run(addresses, pointers)
            for _, offset, number, nbytes in self.moved:
                ctypes.memmove(addresses[number], base + offset, nbytes)
            self._block = block
            return made
        self.run(addresses, pointers)
        return made

    def _one_output_call(self, outputs: list[tuple[Any, Any]]) -> Any:
        """For a graph whose one output is its executable's one output, made here (nothing computed in an input,
        no input update moved): :meth:`__call__`, :meth:`launch` and :func:`_placed` as one closure, the graph's
        output list made directly. Written for the caches a roofline row's kernel leaves (session 18 callfast:
        each statement and frame there is a miss, 5-15 us): the same checks, allocation and placement, fewer
        frames and lists; an output of PLACED_OUTPUT_MIN_BYTES or more in the memory of one the caller has dropped
        when there is one (:class:`~neuroncc.frontend.output_reuse.OutputRing`). None for any other graph."""
        if len(self.results) != 1 or self.not_made or len(outputs) != 1 or \
                not isinstance(outputs[0][0], ComputedOutput):
            return None
        shape, strides, dtype = self.results[0]
        self.one_output_bytes = nbytes = _extent_bytes(shape, strides, dtype)
        placed = nbytes >= PLACED_OUTPUT_MIN_BYTES  # as :meth:`launch` splits _made / _placed
        huge, advise, renew = nbytes >= pages.HUGE_OUTPUT_MIN_BYTES, pages.advise_fresh_huge_pages, \
            pages.renew_in_huge_pages
        touched = [0]  # the last output address found touched already: a heap block reused is not asked again
        period, aliased = ALIAS_PERIOD_BYTES, host.aliased_distances()  # (placement_shift's test, inline)
        tensors_of, one_input, run, qualify, owner = self._tensors, len(self.inputs) == 1, self.run, \
            self._qualify, self
        empty_strided = torch.empty_strided
        ring = OutputRing()  # the storages of its last outputs, used again once the caller has dropped them
        take, keep, drop = ring.take, ring.keep, ring.drop

        def call(args: Any) -> list[torch.Tensor] | None:
            tensors = tensors_of(args)
            if one_input:
                tensors = (tensors,)
            seen = owner._seen
            if seen is None or not seen.check(*tensors):
                if not qualify(tensors):
                    return None
            addresses = [tensor.data_ptr() for tensor in tensors]
            out = take() if placed else None  # the memory of an output the caller has dropped (output_reuse.py)
            if out is not None:
                base = out.data_ptr()
                for address in addresses:
                    if (base - address) % period in aliased:
                        drop(out)  # 4K-aliased with this call's inputs: a fresh output, placed (and kept instead)
                        out = None
                        break
            if out is None:
                out = empty_strided(shape, strides, dtype=dtype)
                base = out.data_ptr()
                if placed:  # _placed's check inline; its longer storage only when 4K-aliased with an input
                    for address in addresses:
                        if (base - address) % period in aliased:
                            out = _placed(nbytes, shape, strides, dtype, addresses.copy())
                            base = out.data_ptr()
                            break
                    keep(out)
                if huge and base != touched[0]:  # fresh memory (glibc maps 32 MiB and more anew each call)
                    if advise(base, nbytes):
                        touched[0] = 0
                    elif placed and ring.renewals < KEPT_OUTPUTS:
                        # kept in the ring and written again every call: memory the heap gave back in small pages
                        # renewed in huge ones, at most twice a ring (as ``_kept_placed`` does; session 44 serve44)
                        ring.renewals += 1
                        touched[0] = 0 if renew(base, nbytes) else base
                    else:
                        touched[0] = base
            run(addresses, [base])
            return [out]

        return call

    def _qualify(self, tensors: tuple[Any, ...]) -> bool:
        """Whether each tensor has the dtype, shape and strides the decision assumed, checked in Python; the
        first call that passes lets later calls be checked against it in C++ (``TensorGuards``)."""
        for tensor, (_, dtype, other, shape, strides) in zip(tensors, self.inputs):
            if type(tensor) is not torch.Tensor and not isinstance(tensor, torch.nn.Parameter):
                return False
            if (tensor.dtype is not dtype and tensor.dtype is not other) or tensor.shape != shape or \
                    (tensor.stride() != strides and not _dense_same(shape, tensor.stride(), strides)) or \
                    tensor.is_conj() or tensor.is_neg() or not tensor.is_cpu:
                return False
        if self._seen is None:
            self._seen = exact_match_guard(tensors)
        return True


def exact_match_guard(tensors: tuple[torch.Tensor, ...]) -> Any:
    """A C++ check that tensors have the Python type, dispatch keys, dtype, device, requires_grad, sizes and
    strides of ``tensors`` (TorchDynamo's own tensor guard), or None where this torch has none."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                            dynamic_dims_strides=[list(t.stride()) for t in tensors])
    except (ImportError, TypeError, RuntimeError):
        return None


def _placed(nbytes: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype,
            near: list[int]) -> torch.Tensor:
    """A new tensor for a large output that is not 4K-aliased with the memory at ``near`` (the call's inputs and
    the outputs placed before it; ``placement_shift``), to which its address is appended. Made as usual when it
    is not (~1 us to check); else in a storage one alias period longer, at the shift (3-5 us more; set_, not a
    view: the tensor has no base, and the caller may modify it in place as any fresh result). torch's CPU
    allocations start on a cache line."""
    tensor = torch.empty_strided(shape, strides, dtype=dtype)
    base = tensor.data_ptr()
    if placement_shift(base, near):
        # (the longer memory in the output's dtype, set_ over as a tensor: a Python storage object, once made,
        # would hold the storage for good, and the output ring would never find it dropped: output_reuse.py)
        raw = torch.empty((nbytes + ALIAS_PERIOD_BYTES) // dtype.itemsize, dtype=dtype)
        base = raw.data_ptr()
        shift = placement_shift(base, near)
        tensor = torch.empty(0, dtype=dtype).set_(raw, shift // dtype.itemsize, shape, strides)
        base += shift
    near.append(base)
    return tensor


def _kept_placed(ring: OutputRing, nbytes: int, shape: tuple[int, ...], strides: tuple[int, ...],
                 dtype: torch.dtype, near: list[int]) -> torch.Tensor:
    """A large output of a graph of several outputs (a training step's gradient), in the memory ``ring`` keeps for
    it: one alias period longer than the output, so that the output starts where it is not 4K-aliased with this
    call's inputs or the outputs placed before it (``near``, to which its address is appended) wherever they are.
    The call's small inputs (a row's maximum, the loss's scale) move from call to call and each makes a window of
    the period aliased (``host.aliased_distances``): memory of the output's own length, refused there, was dropped
    and fresh memory taken every few calls. Fresh memory of a huge output is asked for huge pages (``pages.py``),
    and where the heap gave it back already touched in small pages, renewed in huge ones: the kernels write it
    every call. At most ``KEPT_OUTPUTS`` renewals a ring: a caller that holds its outputs longer than the ring keeps
    them makes fresh memory every call, where a renewal (~8 ms of zeroed huge pages for a 65 MB gradient) would
    cost more than the small pages do (1.1-1.2x the backward's 3 ms)."""
    raw = ring.take()
    if raw is None:
        raw_bytes = nbytes + ALIAS_PERIOD_BYTES
        raw = torch.empty(raw_bytes // dtype.itemsize, dtype=dtype)
        ring.keep(raw)
        if raw_bytes >= pages.HUGE_OUTPUT_MIN_BYTES and not pages.advise_fresh_huge_pages(raw.data_ptr(), raw_bytes) \
                and ring.renewals < KEPT_OUTPUTS:
            ring.renewals += 1
            pages.renew_in_huge_pages(raw.data_ptr(), raw_bytes)
    base = raw.data_ptr()
    shift = placement_shift(base, near)
    near.append(base + shift)
    return raw.as_strided_(shape, strides, shift // dtype.itemsize)


def _extent_bytes(shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype) -> int:
    if 0 in shape:
        return 0
    return (1 + sum((size - 1) * stride for size, stride in zip(shape, strides))) * dtype.itemsize


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether ``strides`` lay ``shape`` out densely without overlap (a permutation of a contiguous layout)."""
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(shape, strides) if n != 1), key=lambda pair: pair[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


class _NotDirect(Exception):
    pass


_TORCH_DTYPES = {numpy: torch_dtype for torch_dtype, numpy in _NUMPY_DTYPES.items()}

__all__ = ["DirectCall"]
