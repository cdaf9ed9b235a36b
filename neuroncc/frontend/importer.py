"""FX (aten, after AOTAutograd) -> neuroncc IR.

One pass over the graph in order: placeholders become typed parameters (exact shapes, dtypes and strides
from ``node.meta["val"]``), ``get_attr`` tensors become ``constant`` ops, each ``call_function`` goes through
its entry in :data:`LOWERINGS` (one small function per aten op), and the output node decides, for each graph
output, whether it is computed by the IR function, is a graph input handed back unchanged, or is ``None``
(a gradient that does not exist); nested output tuples are flattened. A lowered value whose shape or dtype disagrees with what PyTorch computed
is a neuroncc bug and is reported as one.

The result, :class:`~neuroncc.frontend.imported.ImportedGraph`, is a description;
:mod:`neuroncc.frontend.compiled` runs it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.multiprocessing.reductions import StorageWeakRef

from neuroncc.errors import TypeInferenceError, UnsupportedOpError
from neuroncc.frontend.convert import TensorSpec, to_numpy
from neuroncc.frontend.lowering.coverage import COVERAGE_LOWERINGS
from neuroncc.frontend.diagnostics import NO_LOWERING, NO_LOWERING_REASONS, op_name, unsupported_op
from neuroncc.frontend.imported import ComputedOutput, ConstantOutput, GraphOutput, ImportedGraph, InputOutput
from neuroncc.frontend.lowering.attention import ATTENTION_LOWERINGS
from neuroncc.frontend.lowering.complex import COMPLEX_LOWERINGS
from neuroncc.frontend.lowering.context import LoweringBug, LoweringContext, ir_dtype, meta_value
from neuroncc.frontend.lowering.elementwise import ELEMENTWISE_LOWERINGS
from neuroncc.frontend.lowering.library import LIBRARY_LOWERINGS
from neuroncc.frontend.lowering.movement import MOVEMENT_LOWERINGS
from neuroncc.frontend.lowering.random import RANDOM_LOWERINGS, GraphRandomness
from neuroncc.frontend.lowering.reductions import REDUCTION_LOWERINGS
from neuroncc.ir import Builder, DenseAttr, DType, TensorType, Value

#: aten op -> lowering. One entry per op; the tables live next to their lowerings.
LOWERINGS: Mapping[Any, Callable[..., Any]] = {
    **ELEMENTWISE_LOWERINGS, **REDUCTION_LOWERINGS, **MOVEMENT_LOWERINGS, **COVERAGE_LOWERINGS,
    **LIBRARY_LOWERINGS, **ATTENTION_LOWERINGS, **RANDOM_LOWERINGS,
    **COMPLEX_LOWERINGS,  # complex abs overrides the real one
}


def unsupported_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The call nodes that have no lowering at all (cheap pre-check; arguments can still be refused later)."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
            and n.target not in LOWERINGS and n.target is not torch.ops.aten.copy_.default]


def import_graph(gm: fx.GraphModule, name: str, bf16_bits: bool = False,
                 host_devices: tuple[str, ...] = ("cpu",), donate: bool = False) -> ImportedGraph:
    """Translate an aten-level FX graph to an IR function (raises UnsupportedOpError naming the op). ``gm``: a
    GraphModule, or any object with its ``graph`` (the eager device's directly built graphs: ``get_attr`` nodes,
    which those have none of, read the object's attributes).

    ``bf16_bits``: bf16 tensors cross the boundary as their 16-bit patterns (i16 parameters and outputs, the
    tensors' own memory, no copy) and the function converts them to and from bf16 values itself (a few
    integer instructions that fuse into the first and last kernels). Without it a bf16 tensor crosses as a
    float32 copy (numpy has no bfloat16): a conversion pass over every bf16 input and output, which made a
    bf16 softmax move 4.5 times the bytes of its data (the cpu target's torch backend turns it on).
    ``host_devices``: the device types whose tensors the graph may hold (all in host memory).
    ``donate``: the caller writes each mutated input's new value into the input tensor it passed (the
    ``copy_`` at the end of the graph), so the function's metadata donates that input's buffer to the output
    (``donated``, see :class:`neuroncc.ir.Function`), for an input that shares storage with no other input:
    the executable may then compute it in place (the optimizer step's parameters and moments)."""
    missing = unsupported_nodes(gm)
    if missing:
        reason = NO_LOWERING_REASONS.get(missing[0].target, NO_LOWERING)
        raise unsupported_op(missing[0], reason, (op_name(n) for n in missing[1:]))
    return _Importer(gm, name, bf16_bits, host_devices, donate).run()


class _Importer:
    def __init__(self, gm: fx.GraphModule, name: str, bf16_bits: bool = False,
                 host_devices: tuple[str, ...] = ("cpu",), donate: bool = False):
        self.gm = gm
        self.ctx = LoweringContext(Builder(name), host_devices)
        self.ctx.randomness = GraphRandomness(self.ctx.builder)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.mutations: list[tuple[int, Value]] = []
        self.bf16_bits = bf16_bits
        self.donate = donate

    def run(self) -> ImportedGraph:
        params = [self._param(node) for node in self.placeholders]
        self.ctx.env.update(zip(self.placeholders, (self._from_bits(p, n) for p, n in zip(params, self.placeholders))))
        outputs: tuple[GraphOutput, ...] = ()
        ir_outputs: list[Value] = []
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                self.ctx.env[node] = self._constant(node)
            elif node.op == "call_function":
                self.ctx.env[node] = self._call(node)
            elif node.op == "output":
                outputs = self._outputs(node, ir_outputs)
            elif node.op != "placeholder":
                raise unsupported_op(node, f"FX '{node.op}' nodes are not aten ops")
        mutations = []
        for position, value in self.mutations:
            mutations.append((position, len(ir_outputs)))
            ir_outputs.append(value)
        ir_outputs = [self._to_bits(value) for value in ir_outputs]
        builder = self.ctx.builder
        used = {v for op in builder.ops for v in op.operands} | set(ir_outputs)
        positions = tuple(p for p, value in enumerate(params) if value in used)  # unused inputs are not passed
        key = self.ctx.randomness.key
        builder.params = [params[p] for p in positions] + ([key] if key is not None else [])
        if self.donate:
            donated = self._donated(mutations, positions, params, ir_outputs)
            if donated:
                builder.metadata = builder.metadata.replace(donated=donated)
        return ImportedGraph(builder.build(ir_outputs), positions, outputs, tuple(mutations), self.bf16_bits,
                             key is not None)

    def _donated(self, mutations: list[tuple[int, int]], positions: tuple[int, ...], params: list[Value],
                 ir_outputs: list[Value]) -> tuple[tuple[int, int], ...]:
        """``(IR output, IR parameter)`` for each mutated input whose buffer the output may take: an input the
        function reads (a parameter), of the output's shape and dtype, sharing storage with no other input
        (AOTAutograd gives aliased mutated inputs a synthetic base, but a view passed beside its base is
        still two inputs over one storage)."""
        storages = [StorageWeakRef(m.untyped_storage()) if isinstance(m := meta_value(n), torch.Tensor) else None
                    for n in self.placeholders]
        donated = []
        for position, index in mutations:
            if position not in positions or storages[position] is None or \
                    storages.count(storages[position]) != 1:
                continue
            param, value = params[position], ir_outputs[index]
            if (param.type.shape, param.type.dtype) == (value.type.shape, value.type.dtype):
                donated.append((index, positions.index(position)))
        return tuple(donated)

    def _param(self, node: fx.Node) -> Value:
        meta = meta_value(node)
        if not isinstance(meta, torch.Tensor):
            raise unsupported_op(node, f"graph input of type {type(meta).__name__} (only tensors are supported)")
        shape = tuple(int(s) for s in meta.shape)
        strides = tuple(int(s) for s in meta.stride())
        dtype = ir_dtype(meta.dtype)
        if self.bf16_bits and dtype is DType.bf16:
            dtype = DType.i16  # the tensor's bits (see import_graph)
        return self.ctx.builder.param(TensorType(shape, dtype, strides), hint=node.name)

    def _from_bits(self, param: Value, node: fx.Node) -> Value:
        """A bf16 input's value from its i16 bits (exact: the bits are the high half of its float32). An int16
        input is an i16 parameter too, and its own value (read as bf16 bits, int16 ops returned zeros)."""
        if not (self.bf16_bits and param.type.dtype is DType.i16 and meta_value(node).dtype is torch.bfloat16):
            return param
        return self.ctx.emit("bitcast", param, dtype=DType.bf16)

    def _to_bits(self, value: Value) -> Value:
        """A bf16 result's i16 bits (every op producing bf16 rounds to it: the float32's low half is zero)."""
        if not (self.bf16_bits and value.type.dtype is DType.bf16):
            return value
        return self.ctx.emit("bitcast", value, dtype=DType.i16)

    def _constant(self, node: fx.Node) -> Value:
        tensor = getattr(self.gm, str(node.target))
        if not isinstance(tensor, torch.Tensor):
            raise unsupported_op(node, f"attribute '{node.target}' is a {type(tensor).__name__}, not a tensor")
        dtype = ir_dtype(tensor.dtype)
        with unset_fake_temporarily():  # AOTAutograd calls compilers under its fake mode; this tensor is real
            if dtype.is_complex:  # constants hold real numbers: the (re, im) pairs, viewed as complex
                pairs = to_numpy(torch.view_as_real(tensor.detach().cpu().resolve_conj().to(torch.complex64))
                                 .contiguous())
                return self.ctx.emit("view_as_complex", self.ctx.emit("constant", value=DenseAttr(pairs, DType.f32)))
            array = to_numpy(tensor.detach().cpu().contiguous())  # (a device tensor's values come to CPU)
        return self.ctx.emit("constant", value=DenseAttr(array, dtype))

    def _call(self, node: fx.Node) -> Any:
        if node.target is operator.getitem:
            container, index = node.args
            return self.ctx.env[container][index]
        if node.target is torch.ops.aten.copy_.default and node.args[0] in self.placeholders:
            return self._mutate_input(node)
        try:
            result = LOWERINGS[node.target](self.ctx, node, *node.args, **node.kwargs)
        except UnsupportedOpError as error:
            raise unsupported_op(node, str(error)) from error
        except TypeInferenceError as error:  # the IR op refused these operands (a case it does not cover)
            raise unsupported_op(node, f"the IR refused it: {error}") from error
        self._check(node, result)
        return result

    def _mutate_input(self, node: fx.Node) -> Value:
        """``copy_(input, new)``: the functional value is ``new``; it is written back to the input after the call."""
        target, src = node.args[0], node.args[1]
        value = self.ctx.operand(src, self.ctx.env[target].type.dtype)
        if value.type.shape != self.ctx.env[target].type.shape:
            value = self.ctx.emit("expand", value, shape=self.ctx.env[target].type.shape)
        self.mutations.append((self.placeholders.index(target), value))
        return value

    def _check(self, node: fx.Node, result: Any) -> None:
        metas = meta_value(node)
        results = result if isinstance(result, tuple) else (result,)
        metas = tuple(metas) if isinstance(metas, list | tuple) else (metas,)
        if len(results) != len(metas):
            raise LoweringBug(f"{op_name(node)} lowered to {len(results)} values, PyTorch produced {len(metas)}")
        for value, meta in zip(results, metas):
            if value is None or not isinstance(meta, torch.Tensor):
                continue
            want = (tuple(int(s) for s in meta.shape), ir_dtype(meta.dtype))
            if (value.type.shape, value.type.dtype) != want:
                raise LoweringBug(f"{op_name(node)} lowered to {value.type}, PyTorch computed "
                                  f"{list(want[0])} {want[1]} (node {node.name})")

    def _aliased_input(self, node: fx.Node, value: Value) -> int | None:
        """The graph input an output node is, when it is a view of that input covering it exactly (``detach``,
        ``alias``, a same-shape ``view``): eager returns the input's own memory, so the output is the input
        tensor, not a copy the kernels write (cross-entropy's ``logits.detach()`` copied 64 MB per step).
        ``clone`` or ``contiguous`` results lower to the same IR value but own their storage: still computed."""
        for position, placeholder in enumerate(self.placeholders):
            if self.ctx.env.get(placeholder) is value and _same_view(meta_value(node), meta_value(placeholder)):
                return position
        return None

    def _outputs(self, node: fx.Node, ir_outputs: list[Value]) -> tuple[GraphOutput, ...]:
        (returned,) = node.args
        returned = _flatten(returned)
        index_of: dict[Value, int] = {}
        outputs: list[GraphOutput] = []
        for item in returned:
            if not isinstance(item, fx.Node):
                outputs.append(ConstantOutput(item))
            elif item.op == "placeholder":
                outputs.append(InputOutput(self.placeholders.index(item)))
            else:
                value = self.ctx.env[item]
                if not isinstance(value, Value):
                    outputs.append(ConstantOutput(value))
                    continue
                position = self._aliased_input(item, value)
                if position is not None:
                    outputs.append(InputOutput(position))
                    continue
                if value not in index_of:
                    index_of[value] = len(ir_outputs)
                    ir_outputs.append(value)
                outputs.append(ComputedOutput(index_of[value], TensorSpec.of(meta_value(item))))
        return tuple(outputs)


def _same_view(a: Any, b: Any) -> bool:
    """Whether two (fake) tensors are the same view of the same storage: same dtype, shape, strides, offset."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset()
            and StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage()))


def _flatten(returned: Any) -> list[Any]:
    """The graph's outputs as one flat list (AOTAutograd's graphs already return one; make_fx's may nest)."""
    if not isinstance(returned, list | tuple):
        return [returned]
    return [leaf for item in returned for leaf in _flatten(item)]
