"""AOTAutograd's joint graph with its common subexpressions merged, for the min-cut partitioner, by the rules of
AOTAutograd's own pass but without its import of Inductor.

    partition_joint(joint, joint_inputs, **kwargs)   the min-cut partitioner over merge_common_subexpressions(joint)

AOTAutograd's min-cut partitioner starts by running ``torch._functorch.compile_utils.fx_graph_cse`` on the joint
graph (``torch._functorch.config.cse``). That function imports ``torch._inductor.pattern_matcher`` for two helpers
(a node's mutation region) and with it ~100 of Inductor's modules: 0.55-0.6 s of a cold first call on a 2-core
Zen 3 (row f2, 2026-12-05), where the merging itself takes a few ms. neuroncc never runs Inductor, so its
partitioner turns the option off and merges the joint graph here first, by the same rules (the tests compare
the two passes' graphs on joint graphs), so the partitioner decides the same saved set and recomputations.

The rules, as torch 2.13's: placeholders, outputs, get_attr, random ops, ``aten.empty``, nodes whose storage an
output returns and unbacked symbols are never merged; two calls merge when their targets and their arguments
(after earlier merges, with each argument's type, so 1 and 1.0 differ) are equal and no mutating op lies between
them (a mutation region is the nodes after one mutating op up to the next).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch._functorch.compile_utils import get_aten_target, rand_ops
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._higher_order_ops.auto_functionalize import AutoFunctionalized
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

#: a Python-level call whose name says it mutates (``add_``, ``foo_.default``, ``set_*``, ``*_seed``...): the
#: rule Inductor's pattern matcher applies to targets without a schema
_MUTATING_NAME = re.compile(r"(?<!_)(_$|_[.]|(\b|_)(set|enter|exit|seed)(\b|_))(?!_)")


def partition_joint(joint: fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``min_cut_rematerialization_partition(joint, ...)`` over ``joint`` with its common subexpressions merged
    here instead of by AOTAutograd's pass (the module docstring says why)."""
    joint.graph.eliminate_dead_code()
    joint.graph = merge_common_subexpressions(joint.graph)  # the setter recompiles the module
    # a process-wide option, set for this call only: TorchDynamo compiles under its compile lock, one at a time
    with functorch_config.patch(cse=False):
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def merge_common_subexpressions(graph: fx.Graph) -> fx.Graph:
    """A new graph: ``graph`` with every call that repeats an earlier one (same target, same arguments, same
    mutation region) replaced by the earlier one, by ``fx_graph_cse``'s rules (module docstring)."""
    new_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}  # a node of ``graph`` -> its node in the new graph
    first_of: dict[tuple[Any, int], fx.Node] = {}  # (target, the arguments' hash) -> the new graph's node
    token_of: dict[tuple[Any, int], tuple[Any, ...]] = {}  # the same key -> the arguments that made it
    _mark_mutation_regions(graph)
    keep_apart = _aliases_of_outputs(graph)
    for node in graph.nodes:
        if _never_merged(node, keep_apart):
            env[node] = new_graph.node_copy(node, env.__getitem__)
            continue
        args, args_spec = _substituted(node.args, env)
        kwargs, kwargs_spec = _substituted(node.kwargs, env)
        token = (node.target, args, args_spec, kwargs, kwargs_spec)
        key = (node.target, hash((tuple((a, type(a)) for a in args), tuple((a, type(a)) for a in kwargs))))
        seen = key in first_of
        after_mutation = False
        if seen and token_of[key] == token:
            earlier = first_of[key]
            if earlier.meta["mutation_region_id"] == node.meta["mutation_region_id"]:
                env[node] = earlier
                continue
            after_mutation = True  # later repeats merge into this one, not the one before the mutation
        env[node] = new_graph.node_copy(node, env.__getitem__)
        if after_mutation or not seen:
            first_of[key] = env[node]
            token_of[key] = token
    return new_graph


def _mark_mutation_regions(graph: fx.Graph) -> None:
    """Each node's ``meta["mutation_region_id"]``: how many mutating ops come before it (itself included), as
    Inductor's ``compute_mutation_region_ids`` numbers them."""
    region = 0
    for node in graph.nodes:
        if _mutates(node):
            region += 1
        node.meta["mutation_region_id"] = region


def _mutates(node: fx.Node) -> bool:
    """Inductor's ``is_mutation_op``: an op's schema says so; else a Python-level name does, or an ``out=``."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and not (target.namespace == "inductor"
                                                          and target is _resize_storage_bytes()):
        return target._schema.is_mutable
    if isinstance(target, AutoFunctionalized):
        return False
    if node.op == "call_function" and _MUTATING_NAME.search(target.__name__):  # type: ignore[union-attr]
        return True
    if node.op == "call_method" and _MUTATING_NAME.search(str(target)):
        return True
    return node.kwargs.get("out") is not None


def _resize_storage_bytes() -> Any:
    """Inductor's op whose schema wrongly says it does not mutate (``fixme_incorrect_inductor_schema_op``)."""
    return getattr(getattr(torch.ops.inductor, "resize_storage_bytes_", None), "default", None)


def _aliases_of_outputs(graph: fx.Graph) -> set[fx.Node]:
    """The nodes whose storage an output returns: separate tensors in eager, never merged into one."""
    output = graph.output_node()
    storages = {_storage(node) for node in output.all_input_nodes} - {None}
    return {node for node in graph.nodes if (storage := _storage(node)) is not None and storage in storages}


def _storage(node: fx.Node) -> StorageWeakRef | None:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except NotImplementedError:  # a tensor without storage (sparse, some subclasses)
        return None


def _never_merged(node: fx.Node, keep_apart: set[fx.Node]) -> bool:
    if node.op in ("placeholder", "output", "get_attr") or node in keep_apart:
        return True
    target = get_aten_target(node)
    if target in rand_ops or target is torch.ops.aten.empty:
        return True
    value = node.meta.get("val")
    # a merged _local_scalar_dense would leave its users' unbacked-symbol metadata stale (torch's note)
    return isinstance(value, sympy.Symbol) and bool(free_unbacked_symbols(value))


def _substituted(arguments: Any, env: dict[fx.Node, fx.Node]) -> tuple[tuple[Any, ...], Any]:
    """The flattened arguments with each node replaced by its node in the new graph (symbolic ints by their
    node), and the tree spec that rebuilds them."""
    leaves, spec = tree_flatten(arguments)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, fx.Node) and leaf in env:
            leaves[i] = env[leaf]
        if isinstance(leaf, (torch.SymBool, torch.SymInt, torch.SymFloat)):
            leaves[i] = leaf.node
    return tuple(leaves), spec
