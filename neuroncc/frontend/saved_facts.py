"""What the forward graph's ops say about the activations it saves, handed to the backward graph as facts about
its parameters (``ir/signs.py``).

AOTAutograd splits a training step into two graphs; the backward reads the forward's saved activations as plain
parameters, so what the forward's ops showed about them is lost. Cross-entropy's backward computes
exp(x - amax - log) from log-softmax's saved max and log-sum: the forward shows that amax bounds x from above and
that log >= 0, so the argument is <= 0 and the cheaper non-positive exp applies (9% of the backward kernel's
time, session 14); the backward alone cannot know. Both the torch backend (``aot_compile.py``) and the ``.pt2``
training path (``exported.py``) compile through these two calls:

    facts = forward_facts(gm, imported)               # forward: what its outputs are, by FX node name
    imported = with_saved_facts(imported, gm, facts)  # backward: its parameters' facts, before it compiles

The two graphs are matched by node name: the partitioner makes each saved value a backward placeholder named as
the forward node (or placeholder) it is, and names are unique in the joint graph both are cut from. A fact is
only handed over where the backward parameter's type is the forward value's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch.fx as fx

from neuroncc.frontend.imported import ComputedOutput, ImportedGraph
from neuroncc.ir import DType, Function, Value
from neuroncc.ir.signs import NONNEGATIVE, UPPER_BOUNDS, Signs, fact_errors, with_facts


@dataclass(frozen=True)
class SavedFacts:
    """Facts about a forward graph's values by FX node name, with each value's IR shape and dtype."""

    nonnegative: frozenset[str] = frozenset()
    upper_bounds: frozenset[tuple[str, str]] = frozenset()  # (bound, bounded)
    types: tuple[tuple[str, tuple[tuple[int, ...], DType]], ...] = ()


def forward_facts(gm: fx.GraphModule, imported: ImportedGraph) -> SavedFacts:
    """What ``imported``'s ops say about the outputs of the forward graph ``gm``: which are >= 0, and which bound
    which of its inputs from above (a keepdim max of it)."""
    fn = imported.function
    placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
    (output,) = (node for node in gm.graph.nodes if node.op == "output")
    returned = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    names: dict[Value, str] = {p: placeholders[position] for p, position in zip(fn.params, imported.param_positions)}
    for node, how in zip(returned, imported.outputs):
        if isinstance(node, fx.Node) and isinstance(how, ComputedOutput):
            names.setdefault(fn.outputs[how.index], node.name)
    signs = Signs(fn)
    computed = [v for v in dict.fromkeys(fn.outputs) if v in names]
    nonnegative = frozenset(names[v] for v in computed if signs.at_least_zero(v))
    upper_bounds = frozenset((names[m], names[x]) for m in computed for x in fn.params
                             if x in names and _could_bound(m, x) and signs.bounds_above(m, x))
    return SavedFacts(nonnegative, upper_bounds, tuple((names[v], _shape_and_dtype(v)) for v in [*fn.params, *computed]
                                                       if v in names))


def with_saved_facts(imported: ImportedGraph, gm: fx.GraphModule, facts: SavedFacts) -> ImportedGraph:
    """The backward graph ``imported`` (of ``gm``) with the facts ``facts`` holds about its parameters."""
    placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
    fn = imported.function
    forward_types = dict(facts.types)
    position: dict[str, int] = {}
    for index, (param, graph_input) in enumerate(zip(fn.params, imported.param_positions)):
        name = placeholders[graph_input]
        if forward_types.get(name) == _shape_and_dtype(param):
            position.setdefault(name, index)
    nonnegative = tuple(sorted(position[n] for n in facts.nonnegative if n in position))
    upper_bounds = tuple(sorted((position[m], position[x]) for m, x in facts.upper_bounds
                                if m in position and x in position))
    found = {key: value for key, value in ((NONNEGATIVE, nonnegative), (UPPER_BOUNDS, upper_bounds)) if value}
    if not found:
        return imported
    annotated = Function(fn.name, fn.params, fn.ops, fn.outputs, with_facts(fn.metadata, found))
    if fact_errors(annotated):  # (types matched, so this is not expected; then the facts are left out)
        return imported
    return replace(imported, function=annotated)


def _could_bound(bound: Value, value: Value) -> bool:
    """Whether ``bound``'s shape is that of a keepdim max of ``value`` (a cheap filter before the analysis)."""
    b, v = bound.type.shape, value.type.shape
    return len(b) == len(v) and all(i in (1, j) for i, j in zip(b, v)) and bound.type.dtype.is_float


def _shape_and_dtype(value: Value) -> tuple[tuple[int, ...], DType]:
    return value.type.shape, value.type.dtype
