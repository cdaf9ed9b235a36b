"""Fallback mode (``options={"fallback": "cpu"}``): compile what neuroncc supports, run the rest on eager ATen.

The aten graph is split with PyTorch's :class:`CapabilityBasedPartitioner`: maximal groups of supported nodes
become submodules compiled by neuroncc, and the nodes left outside run as ordinary FX code on CPU. A node is
supported when it lowers on its own (tried in isolation, so an op refused only for some arguments, such as a
3-d convolution, falls back too). Each fallen-back op is counted in ``neuroncc.get_fallback_ops()`` and warns
the first time it is counted (once per op until ``neuroncc.reset_stats()``).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from neuroncc.errors import TypeInferenceError, UnsupportedOpError
from neuroncc.frontend import stats
from neuroncc.frontend.diagnostics import describe_call, op_name, user_location
from neuroncc.frontend.importer import LOWERINGS
from neuroncc.frontend.lowering_context import LoweringContext, ir_dtype, meta_value
from neuroncc.ir import Builder, TensorType

class FallbackWarning(UserWarning):
    """An aten op runs on eager PyTorch because neuroncc cannot compile it (fallback mode)."""


def lowers_in_isolation(node: fx.Node) -> bool:
    """True if ``node`` lowers to IR given only its inputs' metadata."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    lowering = LOWERINGS.get(node.target)
    if lowering is None:
        return False
    ctx = LoweringContext(Builder("probe"))
    try:
        for arg in node.all_input_nodes:
            meta = meta_value(arg)
            if isinstance(meta, torch.Tensor):
                ctx.env[arg] = ctx.builder.param(TensorType(tuple(meta.shape), ir_dtype(meta.dtype)))
            else:
                return False  # a tuple-producing input: only getitem may read it
        lowering(ctx, node, *node.args, **node.kwargs)
    except (UnsupportedOpError, TypeInferenceError):
        return False
    return True


class _NeuronccSupport(OperatorSupportBase):
    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        return lowers_in_isolation(node)


def partition_and_compile(gm: fx.GraphModule, compile_partition: Callable[[fx.GraphModule, str], Any],
                          name: str) -> fx.GraphModule:
    """``gm`` with each supported partition replaced by ``compile_partition(submodule, name)``'s callable."""
    partitioner = CapabilityBasedPartitioner(gm, _NeuronccSupport(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for index, node in enumerate([n for n in fused.graph.nodes if n.op == "call_module"]):
        submodule = fused.get_submodule(str(node.target))
        _fill_placeholder_meta(submodule, node)
        compiled = compile_partition(submodule, f"{name}_part{index}")
        stats.increment("fallback_partitions")
        (returned,) = next(n for n in submodule.graph.nodes if n.op == "output").args
        single = not isinstance(returned, list | tuple)
        with fused.graph.inserting_before(node):
            call = fused.graph.call_function(_call_boxed, (compiled, single, *node.args))
        call.meta = dict(node.meta)
        node.replace_all_uses_with(call)
        fused.graph.erase_node(node)
        delattr(fused, str(node.target))
    for node in fused.graph.nodes:
        if node.op == "call_function" and node.target not in (operator.getitem, _call_boxed):
            _record_fallback(node)
    fused.recompile()
    return fused


def _call_boxed(compiled: Callable[[list[Any]], list[Any]], single: bool, *args: Any) -> Any:
    """Call a compiled partition from FX code (which passes arguments unboxed)."""
    outputs = compiled(list(args))
    return outputs[0] if single else tuple(outputs)


def _fill_placeholder_meta(submodule: fx.GraphModule, call: fx.Node) -> None:
    """Partition inputs are new placeholders: give them the metadata of the values they receive."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    for placeholder, arg in zip(placeholders, call.args):
        if "val" not in placeholder.meta and isinstance(arg, fx.Node):
            placeholder.meta["val"] = meta_value(arg)


def _record_fallback(node: fx.Node) -> None:
    if stats.record_fallback_op(op_name(node)):
        where = user_location(node)
        warnings.warn(f"neuroncc: {describe_call(node)}{f' at {where}' if where else ''} runs on eager PyTorch "
                      "(fallback='cpu'); it is not compiled", FallbackWarning, stacklevel=2)
