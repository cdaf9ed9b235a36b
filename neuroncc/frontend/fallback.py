"""Fallback mode (``options={"fallback": "cpu"}``): compile what neuroncc supports, run the rest on eager ATen.

The aten graph is split with PyTorch's :class:`CapabilityBasedPartitioner`: maximal groups of supported nodes
become submodules compiled by neuroncc, and the nodes left outside run as ordinary FX code on CPU. A node is
supported when it lowers on its own (tried in isolation, so an op refused only for some arguments, such as a
3-d convolution, falls back too). Each fallen-back op is counted in ``neuroncc.get_fallback_ops()`` and warns
the first time it is counted (once per op until ``neuroncc.reset_stats()``); at run time it is called through
:func:`~neuroncc.frontend.profiling.fallback_call` (counted per call, a ``neuroncc::fallback::<op>`` range
under ``torch.profiler``).
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.operator_support import OperatorSupportBase

from neuroncc.errors import TypeInferenceError, UnsupportedOpError
from neuroncc.frontend import stats
from neuroncc.frontend.diagnostics import FALLBACK_HINT, describe_call, op_name, user_location
from neuroncc.frontend.importer import LOWERINGS
from neuroncc.frontend.profiling import fallback_call
from neuroncc.frontend.lowering.context import LoweringContext, ir_dtype, meta_value
from neuroncc.ir import Builder, TensorType

log = logging.getLogger("neuroncc.frontend")

#: Operator namespaces of communication (torch.distributed's functional collectives, what TorchDynamo traces
#: for ``dist`` calls and DTensor): never compiled, always run by PyTorch between compiled pieces, in any
#: fallback mode and without a fallback warning (they move bytes between processes, not compute).
COMMUNICATION_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d"})


def is_communication(node: fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace in COMMUNICATION_NAMESPACES)


def has_communication(gm: fx.GraphModule) -> bool:
    """True if ``gm`` calls a collective: it is then compiled in pieces split at the collectives."""
    return any(is_communication(node) for node in gm.graph.nodes)


def is_input_mutation(node: fx.Node) -> bool:
    """``copy_(input, new)``: AOTAutograd's write of a mutated graph input (the graph's last nodes). Partitioned
    graphs keep it as plain FX code, where it stands (after every read of the input's old value): it is not an
    op neuroncc computes, so neither a fallback nor unsupported."""
    return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
            and isinstance(node.args[0], fx.Node) and node.args[0].op == "placeholder")


class FallbackWarning(UserWarning):
    """An aten op runs on eager PyTorch because neuroncc cannot compile it (fallback mode)."""


def lowers_in_isolation(node: fx.Node) -> bool:
    """True if ``node`` lowers to IR given only its inputs' metadata."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # goes where the tuple it reads goes
        return isinstance(node.args[0], fx.Node) and lowers_in_isolation(node.args[0])
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
                          name: str, *, fallback: bool = True) -> fx.GraphModule:
    """``gm`` with each supported partition replaced by ``compile_partition(submodule, name)``'s callable.
    Without ``fallback`` only communication ops may stay outside the partitions (anything else unsupported
    fails the compile, as it does unpartitioned)."""
    # here, not at the top: a graph compiled whole (every cpu graph without fallback or collectives) never
    # partitions, and the partitioner's modules are ~2 ms of a cold first call's import (aot_eager loads neither)
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    if not fallback:
        _refuse_unsupported(gm)
    partitioner = CapabilityBasedPartitioner(gm, _NeuronccSupport(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    partition_calls = [n for n in fused.graph.nodes if n.op == "call_module"]
    for index, node in enumerate(partition_calls):
        submodule = fused.get_submodule(str(node.target))
        _fill_placeholder_meta(submodule, node)
        compiled = compile_partition(submodule, f"{name}_part{index}")
        stats.increment("fallback_partitions")
        (returned,) = next(n for n in submodule.graph.nodes if n.op == "output").args
        setattr(fused, str(node.target), CompiledPartition(compiled, single=not isinstance(returned, list | tuple)))
    for node in fused.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem and not is_communication(node) \
                and not is_input_mutation(node):
            _record_fallback(node, name)
            node.target = fallback_call(node.target, op_name(node), name)  # counted, and seen by profilers
    fused.recompile()
    return fused


def _refuse_unsupported(gm: fx.GraphModule) -> None:
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
                   and not is_communication(n) and not is_input_mutation(n) and not lowers_in_isolation(n)]
    if unsupported:
        node = unsupported[0]
        where = user_location(node)
        others = sorted({op_name(n) for n in unsupported[1:]} - {op_name(node)})
        raise UnsupportedOpError(f"neuroncc cannot compile {describe_call(node)}{f' at {where}' if where else ''}"
                                 + (f"\n  other unsupported ops in this graph: {', '.join(others)}" if others else "")
                                 + f"\n  {FALLBACK_HINT}")


class CompiledPartition(torch.nn.Module):
    """Stands in for a partition's submodule: calls its compiled graph from the FX code around it."""

    def __init__(self, compiled: Callable[[list[Any]], list[Any]], single: bool):
        super().__init__()
        self.compiled = compiled
        self.single = single  # the partition returns one value, not a tuple

    def forward(self, *args: Any) -> Any:
        outputs = self.compiled(list(args))
        return outputs[0] if self.single else tuple(outputs)


def _fill_placeholder_meta(submodule: fx.GraphModule, call: fx.Node) -> None:
    """Partition inputs are new placeholders: give them the metadata of the values they receive."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    for placeholder, arg in zip(placeholders, call.args):
        if "val" not in placeholder.meta and isinstance(arg, fx.Node):
            placeholder.meta["val"] = meta_value(arg)


def _record_fallback(node: fx.Node, graph: str) -> None:
    where = user_location(node)
    log.info("neuroncc: fallback in graph %s: %s%s runs on eager PyTorch (fallback='cpu')", graph,
             describe_call(node), f" at {where}" if where else "")
    if stats.record_fallback_op(op_name(node), str(where) if where else None):
        warnings.warn(f"neuroncc: {describe_call(node)}{f' at {where}' if where else ''} runs on eager PyTorch "
                      "(fallback='cpu'); it is not compiled", FallbackWarning, stacklevel=2)
